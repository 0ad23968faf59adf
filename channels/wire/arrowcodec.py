"""Arrow IPC encoding of channel batches: the fast path for flat record schemas.

A channel's records are declared with an Avro schema. When that schema is *flat* — a
record whose fields are all primitive (boolean, int, long, float, double, string, bytes),
each optionally nullable as ``["null", T]`` — a data message's value can instead be an
**Arrow IPC stream**: the schema message, one record-batch message per block, the
end-of-stream marker. Any consumer with pyarrow reads it with ``pyarrow.ipc.open_stream``
and needs no other knowledge. Such messages carry format version ``2`` (see
:mod:`spillway.channels.wire.envelope`), so a Spillway that reads only Avro refuses them clearly.

Why: on the records of the B1 benchmark, pyarrow builds and serializes a batch in
0.11–0.27 µs per record and reads one back in 0.20–0.40 µs, fastavro takes 0.84–1.55 µs
and 0.79–1.39 µs (``docs/benchmarks.md``): channel encoding was the largest per-record
cost of an operator after the user's own function.

Arrow checks less than Avro when it converts Python objects, so the encoder adds the
checks Avro makes: every record must be a dict, and a field that is not nullable must
be present and not ``None``. Fields with defaults, nested records, arrays, maps, enums,
fixed and logical types keep the Avro encoding (:func:`arrow_schema` returns ``None``).
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import pyarrow as pa

from spillway.channels.errors import SchemaMismatchError
from spillway.channels.wire.mismatch import describe

_PRIMITIVES: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "bytes": pa.binary(),
}
# The Python types each Arrow type takes from a record. pyarrow converts more than Avro
# does (1.5 into an int64 as 1, "é" into binary, b"x" into a string, True into a double):
# anything else is refused before pyarrow sees it, so nothing is changed silently.
_TAKES: dict[pa.DataType, frozenset[type]] = {
    pa.bool_(): frozenset({bool}),
    pa.int32(): frozenset({int}),
    pa.int64(): frozenset({int}),
    pa.float32(): frozenset({float, int}),
    pa.float64(): frozenset({float, int}),
    pa.string(): frozenset({str}),
    pa.binary(): frozenset({bytes}),
}


def short_repr(record: Any) -> str:
    """``repr(record)``, cut to 120 characters for error messages."""
    text = repr(record)
    return text if len(text) <= 120 else text[:117] + "..."


# What Arrow's IPC stream ends with (continuation marker, zero length).
_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"
_CONVERSION_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError)


def arrow_schema(avro: dict[str, Any]) -> pa.Schema | None:
    """The Arrow schema equivalent to a flat Avro record schema; ``None`` if it is not flat.

    Pure. A field is accepted when its type is a primitive, a primitive name wrapped in
    ``{"type": ...}``, or a two-branch union of ``"null"`` and a primitive; and it has no
    default (a default would be Avro's to fill in, not Arrow's) other than ``None`` on
    ``["null", T]``: a missing value is null in Arrow too (schemas made from Python types
    give every ``X | None`` field that default).
    """
    if not isinstance(avro, dict) or avro.get("type") != "record":
        return None
    fields = []
    for f in avro.get("fields", []):
        if not isinstance(f, dict) or ("default" in f and not _null_default(f)):
            return None
        typ, nullable = f.get("type"), False
        if isinstance(typ, list):
            branches = [t for t in typ if t != "null"]
            if len(typ) != 2 or len(branches) != 1:
                return None
            typ, nullable = branches[0], True
        if isinstance(typ, dict) and set(typ) == {"type"}:
            typ = typ["type"]
        if not isinstance(typ, str) or typ not in _PRIMITIVES:
            return None
        fields.append(pa.field(f["name"], _PRIMITIVES[typ], nullable=nullable))
    return pa.schema(fields) if fields else None


def _null_default(field: dict[str, Any]) -> bool:
    typ = field.get("type")
    return field["default"] is None and isinstance(typ, list) and typ[:1] == ["null"]


def _column(records: Sequence[dict[str, Any]], name: str, get: itemgetter[Any]) -> list[Any]:
    """Field ``name`` of every (plain dict) record, ``None`` where it is left out."""
    try:
        return list(map(get, records))
    except KeyError:  # left out: null (refused below unless the field is nullable)
        return [r.get(name) for r in records]


class ArrowCodec:
    """Encodes blocks of records as Arrow record batches and decodes whole messages."""

    def __init__(self, avro: dict[str, Any], schema: pa.Schema) -> None:
        self._avro = avro
        self._name = avro.get("name", "?")
        self._schema = schema
        self._header = schema.serialize().to_pybytes()
        self._required = [i for i, f in enumerate(schema) if not f.nullable]
        self._takes = [
            (f.name, _TAKES[f.type] | ({type(None)} if f.nullable else frozenset())) for f in schema
        ]
        self._getters = [itemgetter(f.name) for f in schema]
        # Room for the schema message and the end-of-stream marker in every message.
        self.overhead = len(self._header) + len(_EOS)

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of this channel's batches."""
        return self._schema

    def encode_block(self, records: Sequence[Any]) -> bytes:
        """One record-batch message of ``records``; :class:`SchemaMismatchError` naming the
        first record that does not fit the schema."""
        return self.batch(records).serialize().to_pybytes()  # type: ignore[no-any-return]

    def batch(self, records: Sequence[Any]) -> pa.RecordBatch:
        """``records`` as one record batch, checked as Avro would check them (for columnar
        sinks too); :class:`SchemaMismatchError` naming the first record that does not fit."""
        try:
            batch = self._batch(records)
        except _CONVERSION_ERRORS:
            for r in records:  # name the record that does not fit
                try:
                    self._batch([r])
                except _CONVERSION_ERRORS as e:
                    why = describe(self._avro, r) or e
                    raise SchemaMismatchError(
                        f"record {short_repr(r)} does not match schema {self._name!r}: {why}"
                    ) from e
            raise
        return batch

    def _batch(self, records: Sequence[Any]) -> pa.RecordBatch:
        # set(map(type)) runs in C; dict subclasses take the isinstance path.
        plain = not set(map(type, records)) - {dict}
        if not plain and not all(isinstance(r, dict) for r in records):
            raise TypeError("a record must be a dict")
        # Each column is taken out of the records once, checked and converted (from_pylist
        # would take it out a second time): C-level loops, no Python code per record.
        arrays = []
        for (name, takes), get, field in zip(self._takes, self._getters, self._schema, strict=True):
            column = _column(records, name, get) if plain else [r.get(name) for r in records]
            wrong = set(map(type, column)) - takes
            if wrong:
                got = ", ".join(sorted(t.__name__ for t in wrong))
                raise TypeError(f"field {name!r} holds {got}, not {field.type}")
            arrays.append(pa.array(column, type=field.type))
        batch = pa.RecordBatch.from_arrays(arrays, schema=self._schema)
        for i in self._required:
            if batch.column(i).null_count:
                raise ValueError(f"field {self._schema.field(i).name!r} is missing or None")
        return batch

    def frame(self, blocks: Sequence[bytes]) -> bytes:
        """A data message's value: an Arrow IPC stream of ``blocks``."""
        return b"".join([self._header, *blocks, _EOS])

    def decode_batch(self, value: bytes) -> list[Any]:
        """All records of a data message, in write order."""
        try:
            reader = pa.ipc.open_stream(value)
            if not reader.schema.equals(self._schema):
                raise ValueError(f"its schema is {reader.schema}, expected {self._schema}")
            out: list[Any] = []
            for batch in reader:
                out.extend(batch.to_pylist())
            return out
        except (pa.ArrowException, ValueError, OSError) as e:
            raise SchemaMismatchError(
                f"cannot decode an Arrow batch of {len(value)} bytes with schema "
                f"{self._name!r}: {e}"
            ) from e
