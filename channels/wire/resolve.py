"""Reading a channel message written with an older schema (Avro schema resolution). Pure.

After a restart with changed code (spillway.recovery.job.evolution), a channel may still hold
records
its writers wrote with the channel's old schema. A reader decodes each message with the
schema it was *written* with and resolves the records to its own (the reader's) schema,
by Avro's rules (https://avro.apache.org/docs/current/specification/#schema-resolution):
a reader field missing from the writer's records takes its default; a writer field the
reader dropped is left out; a field is matched by name or by one of the reader field's
aliases; a value is promoted int → long → float → double (int and long also to float
and double), string ↔ bytes; a union on the reader's side takes the first branch the
writer's type equals or promotes to.

* **Avro messages** (format 1): fastavro does the resolution,
  ``schemaless_reader(buf, writer_schema, reader_schema)`` (:class:`ResolvingDecoder`).
  The writer schema comes from the message's schema id (:mod:`spillway.channels.wire.schemaid`).
* **Arrow messages** (format 2) carry their own schema, flat by construction
  (:func:`spillway.channels.wire.arrowcodec.arrow_schema`): :func:`resolve_columns` applies the same
  rules column by column (a promotion is one Arrow cast), to rows for record operators
  (:func:`resolved_rows`) or to a batch of the reader's Arrow schema for batch operators
  (:func:`resolved_batch`).

Whether a change resolves at all is decided before a run starts (spillway.recovery.job.avrocompat,
naming the field); what fails here is a value the rules cannot carry that a schema check
cannot see: a null in a column the reader made non-nullable.
"""

from __future__ import annotations

import copy
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from fastavro import parse_schema, schemaless_reader

from spillway.channels.errors import SchemaMismatchError

# The Avro primitive of each Arrow type an Arrow channel message may hold.
_AVRO_OF: dict[pa.DataType, str] = {
    pa.bool_(): "boolean",
    pa.int32(): "int",
    pa.int64(): "long",
    pa.float32(): "float",
    pa.float64(): "double",
    pa.string(): "string",
    pa.binary(): "bytes",
}
_ARROW_OF = {v: k for k, v in _AVRO_OF.items()}
# Avro's promotions: writer type -> reader types it is read as.
PROMOTIONS: Mapping[str, frozenset[str]] = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}


class ResolvingDecoder:
    """Decodes Avro data messages (arrays of records) written with ``writer`` into
    records of ``reader`` (fastavro applies Avro's resolution rules)."""

    def __init__(self, writer: dict[str, Any], reader: dict[str, Any]) -> None:
        self._name = reader.get("name", "?")
        self._writer = parse_schema({"type": "array", "items": writer})
        self._reader = parse_schema({"type": "array", "items": reader})

    def decode_batch(self, value: bytes) -> list[Any]:
        """All records of a data message, in write order, as records of the reader's schema."""
        try:
            records = schemaless_reader(io.BytesIO(value), self._writer, self._reader)
        except Exception as e:  # fastavro raises many unrelated types
            raise SchemaMismatchError(
                f"cannot read a batch of {len(value)} bytes written with an older schema of "
                f"{self._name!r} as the current one: {e}"
            ) from e
        assert isinstance(records, list)
        return records


@dataclass(frozen=True)
class Filled:
    """A reader field the message does not have: every row takes ``default``."""

    default: Any


def _branches(avro_type: Any) -> tuple[list[str], bool]:
    """The primitive type names a reader field's type accepts, and whether it takes null."""
    types = avro_type if isinstance(avro_type, list) else [avro_type]
    names: list[str] = []
    for t in types:
        if isinstance(t, dict) and isinstance(t.get("type"), str):
            t = t["type"]  # {"type": "long"}, or a logical type over a primitive
        if isinstance(t, str):
            names.append(t)
    return [n for n in names if n != "null"], "null" in names


def _read_as(writer: str, reader: list[str]) -> str | None:
    """The reader branch a writer primitive resolves to: the first it equals or promotes
    to (Avro's rule for a reader union, as fastavro applies it to Avro messages)."""
    promoted = PROMOTIONS.get(writer, frozenset())
    return next((r for r in reader if r == writer or r in promoted), None)


def _default(field: Mapping[str, Any]) -> Any:
    """A field's default as a decoded value (Avro writes a bytes default as a string of
    code points 0-255)."""
    value = field["default"]
    first = _branches(field["type"])[0][:1]
    if first == ["bytes"] and isinstance(value, str):
        return value.encode("latin-1")
    return value


def resolve_columns(
    batch: pa.RecordBatch, reader: Mapping[str, Any], where: str = ""
) -> list[tuple[str, pa.Array | Filled]]:
    """The reader's fields in order, each as a column of ``batch`` (an Arrow channel
    message's, cast where Avro promotes) or as a default to fill in.

    :class:`SchemaMismatchError` naming the field when a reader field is missing from
    the message and has no default, when the message's type of it cannot be read as the
    reader's, or when it holds nulls the reader's type does not take."""
    at = f"{where}: " if where else ""
    names = batch.schema.names
    out: list[tuple[str, pa.Array | Filled]] = []
    for f in reader.get("fields", ()):
        name = str(f["name"])
        found = next((n for n in (name, *f.get("aliases", ())) if n in names), None)
        if found is None:
            if "default" not in f:
                raise SchemaMismatchError(
                    f"{at}field {name!r} is not in the message and has no default in schema "
                    f"{reader.get('name', '?')!r}; give it a default"
                )
            out.append((name, Filled(_default(f))))
            continue
        column = batch.column(names.index(found))
        wrote = _AVRO_OF.get(column.type)
        accepts, nullable = _branches(f["type"])
        target = _read_as(wrote, accepts) if wrote is not None else None
        if target is None:
            raise SchemaMismatchError(
                f"{at}field {name!r}: the message holds {column.type}, which schema "
                f"{reader.get('name', '?')!r} cannot read as {f['type']!r}"
            )
        if column.null_count and not nullable:
            raise SchemaMismatchError(
                f"{at}field {name!r}: the message holds nulls, and schema "
                f"{reader.get('name', '?')!r} made it non-nullable ({f['type']!r})"
            )
        if target != wrote:
            # Numeric promotions may round (as in Avro: a long read as a float); bytes
            # read as a string must be UTF-8, which a safe cast checks.
            column = column.cast(_ARROW_OF[target], safe=target in ("string", "bytes"))
        out.append((name, column))
    return out


def resolved_rows(batch: pa.RecordBatch, reader: Mapping[str, Any], where: str = "") -> list[Any]:
    """The rows of an Arrow channel message as records (dicts) of ``reader``."""
    columns = resolve_columns(batch, reader, where)
    n = batch.num_rows
    values: list[Sequence[Any]] = []
    for _, c in columns:
        if isinstance(c, Filled):
            mutable = isinstance(c.default, (dict, list))
            values.append(
                [copy.deepcopy(c.default) for _ in range(n)] if mutable else [c.default] * n
            )
        else:
            values.append(c.to_pylist())
    names = [name for name, _ in columns]
    return [dict(zip(names, row, strict=True)) for row in zip(*values, strict=True)]


def resolved_batch(
    batch: pa.RecordBatch, reader: Mapping[str, Any], schema: pa.Schema, where: str = ""
) -> pa.RecordBatch:
    """An Arrow channel message's batch as a batch of ``schema`` (the reader's Arrow
    schema, of flat ``reader``): promoted columns cast, missing ones filled."""
    arrays = []
    for (name, c), field in zip(resolve_columns(batch, reader, where), schema, strict=True):
        if isinstance(c, Filled):
            arrays.append(pa.array([c.default] * batch.num_rows, type=field.type))
        else:
            arrays.append(c if c.type == field.type else c.cast(field.type))
        assert name == field.name
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
