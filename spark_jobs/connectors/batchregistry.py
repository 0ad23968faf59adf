"""The batch path's decoder of registry-framed Avro values (the Confluent wire format)
into Arrow batches of the reader's flat schema.

A run of values is split by schema id (read from the 5-byte headers with numpy). Each id
is looked up once and planned once (cached per id): when its writer's schema is a flat
record (primitive fields, each optionally ``["null", T]``), its values are decoded column
by column by :class:`~spillway.spark_jobs.connectors.batchavro.AvroDecoder` under the
writer's schema, and the writer's columns are then resolved into the reader's by Avro's
rules, column at a time: a reader's field the writer lacks takes the reader's default (a
constant column), a writer's field the reader lacks is dropped, ``int`` → ``long`` →
``float`` → ``double`` are promoted with an Arrow cast, a nullable writer's field read
into a non-null reader's field rejects the rows that hold null. No Python object per
record. A writer's schema that is not flat (nested records, arrays, enums...), or a
``string``/``bytes`` swap, is decoded record by record with fastavro
(:class:`~spillway.spark_jobs.connectors.confluentavro.RegistryAvroRecords`), correct but
slower.

Bad values, each rejected alone (the caller dead-letters it with
``topic[partition]@offset``) while the rest of the run goes on: no Confluent header, an id
the registry does not know, a writer's schema that cannot be resolved into the reader's
(every value of that id), or a value that is not a datum of its writer's schema. Each
reason names the schema id.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spillway.channels.errors import PipelineDefinitionError
from spillway.channels.wire.arrowcodec import arrow_schema
from spillway.spark_jobs.connectors.batchavro import AvroDecoder, AvroField, AvroRun, avro_fields
from spillway.spark_jobs.connectors.confluentavro import (
    RegistryAvroRecords,
    SchemaSource,
    split_header,
)
from spillway.spark_jobs.connectors.registry import RegistryClient, RegistryConfig, SchemaId
from spillway.spark_jobs.connectors.subjectschema import HEADER_BYTES, MAGIC
from spillway.spark_jobs.records.lines import LineError

# Avro's promotions between the column decoder's numeric kinds (writer → reader).
_PROMOTE = {
    ("int", "long"),
    ("int", "float"),
    ("int", "double"),
    ("long", "float"),
    ("long", "double"),
    ("float", "double"),
}
_SWAPS = {("string", "bytes"), ("bytes", "string")}  # fastavro's to do: UTF-8 checks


def channel_schema(reader: dict[str, Any]) -> dict[str, Any]:
    """``reader`` without its fields' defaults, which only resolution reads: the schema
    of the batches (and of the channel they go to); pure."""
    return {**reader, "fields": [_no_default(f) for f in reader.get("fields", [])]}


def flat_reader(reader: dict[str, Any]) -> pa.Schema:
    """The Arrow schema of the batches a registry's values are read into by ``reader``
    (:func:`channel_schema`'s); ``PipelineDefinitionError`` if ``reader`` is not flat."""
    arrow = arrow_schema(channel_schema(reader))
    if arrow is None:
        raise PipelineDefinitionError(
            "read_kafka(batches=True) with a registry reads into a flat record schema "
            "(fields of boolean, int, long, float, double, string or bytes, each "
            f'optionally ["null", T]); got {reader!r}: read records (batches=False) instead'
        )
    return arrow


def _no_default(field: Any) -> Any:
    if not isinstance(field, dict) or "default" not in field:
        return field
    if field["default"] is None and isinstance(field.get("type"), list):
        return field  # ["null", T] with default null: flat as it is
    return {k: v for k, v in field.items() if k != "default"}


@dataclass(frozen=True)
class _Take:
    """A reader's column from the writer's column ``source`` (cast when promoted)."""

    source: str
    nulls_bad: bool  # the writer's field is nullable and the reader's is not


@dataclass(frozen=True)
class _Default:
    """A reader's column the writer lacks: its default, the same in every row."""

    value: Any


@dataclass(frozen=True)
class _Plan:
    """How the values of one schema id become reader's rows: column by column with
    ``decoder`` and ``columns``, or record by record (``decoder`` ``None``), or not at all
    (``error``: every value of the id is bad with that reason)."""

    decoder: AvroDecoder | None = None
    columns: tuple[_Take | _Default, ...] = ()
    error: str | None = None


class RegistryAvroBatches:
    """Decodes runs of registry-framed Avro values into Arrow batches of the flat
    ``schema`` (the reader's, defaults included); ``decode`` as
    :meth:`AvroDecoder.decode <spillway.spark_jobs.connectors.batchavro.AvroDecoder.decode>`.

    Picklable before its first :meth:`decode` (the registry client is made on first use,
    by ``connect``: :class:`RegistryClient` unless a test fakes it).
    """

    def __init__(
        self,
        schema: dict[str, Any],
        registry: RegistryConfig,
        connect: Callable[[RegistryConfig], SchemaSource] = RegistryClient,
    ) -> None:
        self.arrow = flat_reader(schema)
        self.schema = schema
        self.fields = avro_fields(channel_schema(schema))
        self._records = RegistryAvroRecords(schema, registry, connect)
        self._plans: dict[SchemaId, _Plan] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"records": self._records}

    def __setstate__(self, state: dict[str, Any]) -> None:
        records: RegistryAvroRecords = state["records"]
        self.__init__(records.schema, records.registry, records.connect)  # type: ignore[misc]

    def decode(self, values: Sequence[bytes | None]) -> AvroRun:
        """``values`` as one batch of the reader's schema, in their order, bad values left
        out with the reason (which names the schema id); ``RegistryUnavailableError`` if
        the registry cannot be asked about a new id."""
        n = len(values)
        ids, framed = _schema_ids(values)
        bad = [(i, _header_reason(values[i])) for i in np.nonzero(~framed)[0].tolist()]
        batches: list[pa.RecordBatch] = []
        kept: list[Any] = []
        for sid in np.unique(ids[framed]).tolist():
            rows = np.nonzero(framed & (ids == sid))[0]
            group = values if len(rows) == n else _pick(values, rows)
            try:
                plan = self._plan(SchemaId(sid))
            except LineError as e:  # an id the registry does not know: not cached
                bad += [(i, str(e)) for i in rows.tolist()]
                continue
            if plan.error is not None:
                bad += [(i, plan.error) for i in rows.tolist()]
                continue
            flat = plan.decoder is not None
            run = self._columns(plan, sid, group) if flat else self._one_by_one(group)
            batches.append(run.batch)
            kept.append(rows[np.asarray(run.kept, dtype=np.int64)])
            bad += [(int(rows[i]), why) for i, why in run.bad]
        if not batches:
            return AvroRun(_empty(self.arrow), [], sorted(bad))
        order = np.concatenate(kept)
        batch = batches[0] if len(batches) == 1 else pa.concat_batches(batches)
        if len(batches) > 1 or bad:
            sort = np.argsort(order, kind="stable")
            batch, order = batch.take(pa.array(sort)), order[sort]
        return AvroRun(batch, order.tolist(), sorted(bad))

    def _plan(self, schema_id: SchemaId) -> _Plan:
        """How the values of ``schema_id`` are read (cached per id); ``LineError`` if the
        registry does not know the id (not cached: it may be registered later)."""
        plan = self._plans.get(schema_id)
        if plan is None:
            writer = self._records.writer_schema(schema_id)
            try:
                self._records.resolution(schema_id)  # fastavro parses both schemas
                plan = _resolve(writer, self.schema, self.fields)
            except (LineError, _Unresolvable) as e:
                why = str(e)
                if isinstance(e, _Unresolvable):
                    why = (
                        f"schema id {schema_id}: the writer's schema cannot be resolved into "
                        f"the reader's: {e}"
                    )
                plan = _Plan(error=why)
            self._plans[schema_id] = plan
        return plan

    def _columns(self, plan: _Plan, sid: int, group: Sequence[bytes | None]) -> AvroRun:
        """``group`` (values of one flat writer's schema) decoded column by column and
        resolved into the reader's columns."""
        assert plan.decoder is not None
        run = plan.decoder.decode(group)
        rows = run.batch.num_rows
        arrays: list[pa.Array] = []
        null_in: dict[int, str] = {}  # row → the first non-null reader's field it has null for
        for column, field in zip(plan.columns, self.arrow, strict=True):
            if isinstance(column, _Default):
                arrays.append(pa.repeat(pa.scalar(column.value, field.type), rows))
                continue
            array = run.batch.column(column.source)
            if array.type != field.type:
                array = pc.cast(array, field.type, safe=False)
            if column.nulls_bad and array.null_count:
                for j in np.nonzero(np.asarray(array.is_null()))[0].tolist():
                    null_in.setdefault(j, field.name)
            arrays.append(array)
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.arrow)
        bad = [(i, f"schema id {sid}: {why}") for i, why in run.bad]
        kept = run.kept
        if null_in:
            bad += [
                (
                    kept[j],
                    f"schema id {sid}: the writer's value cannot be resolved into the "
                    f"reader's: null in {name!r}, which the reader's schema does not allow",
                )
                for j, name in null_in.items()
            ]
            null_bad = np.zeros(rows, dtype=bool)
            null_bad[list(null_in)] = True
            keep = np.nonzero(~null_bad)[0]
            batch = batch.take(pa.array(keep))
            kept = [kept[j] for j in keep.tolist()]
        return AvroRun(batch, kept, sorted(bad))

    def _one_by_one(self, group: Sequence[bytes | None]) -> AvroRun:
        """``group`` read record by record with fastavro (a writer's schema that is not
        flat)."""
        return read_one_by_one(self._records.read, group, self.arrow)


def read_one_by_one(
    read: Callable[[bytes | None], dict[str, Any]],
    values: Sequence[bytes | None],
    arrow: pa.Schema,
) -> AvroRun:
    """``values`` read record by record by ``read`` into one batch of ``arrow``, in their
    order; a value ``read`` refuses (``LineError``) left out with its reason."""
    records: list[dict[str, Any]] = []
    kept: list[int] = []
    bad: list[tuple[int, str]] = []
    for i, value in enumerate(values):
        try:
            records.append(read(value))
            kept.append(i)
        except LineError as e:
            bad.append((i, str(e)))
    return AvroRun(pa.RecordBatch.from_pylist(records, schema=arrow), kept, bad)


class _Unresolvable(Exception):
    """Why a writer's schema cannot be resolved into the reader's."""


def _resolve(writer: Any, reader: dict[str, Any], fields: list[AvroField]) -> _Plan:
    """The plan of a writer's schema (parsed JSON); ``_Unresolvable`` saying why not."""
    if not isinstance(writer, dict) or writer.get("type") != "record":
        raise _Unresolvable("the writer's schema is not a record")
    flat = {**writer, "fields": [_bare(f) for f in writer.get("fields", [])]}
    if arrow_schema(flat) is None:
        return _Plan()  # not flat: record by record
    by_name = {f.name: f for f in avro_fields(flat)}
    columns: list[_Take | _Default] = []
    for spec, field in zip(reader["fields"], fields, strict=True):
        names = [field.name, *spec.get("aliases", [])]
        source = next((by_name[n] for n in names if n in by_name), None)
        if source is None:
            if "default" not in spec:
                raise _Unresolvable(
                    f"the reader's field {field.name!r} is not in the writer's schema and "
                    "has no default"
                )
            default = spec["default"]
            if field.kind == "bytes" and isinstance(default, str):
                default = default.encode("latin-1")  # Avro's JSON default of bytes
            columns.append(_Default(default))
            continue
        kinds = (source.kind, field.kind)
        if kinds in _SWAPS:
            return _Plan()  # fastavro checks the UTF-8 of each value
        if source.kind != field.kind and kinds not in _PROMOTE:
            raise _Unresolvable(
                f"the writer's field {source.name!r} is {source.kind}, the reader's "
                f"{field.name!r} is {field.kind}"
            )
        columns.append(_Take(source.name, source.nullable and not field.nullable))
    return _Plan(decoder=AvroDecoder(flat, "confluent"), columns=tuple(columns))


def _bare(field: Any) -> Any:
    """A writer's field with only what decoding reads (its name and type)."""
    if not isinstance(field, dict):
        return field
    return {"name": field.get("name"), "type": field.get("type")}


def _schema_ids(values: Sequence[bytes | None]) -> tuple[Any, Any]:
    """The schema id of each value, and whether it has a Confluent header at all."""
    n = len(values)
    try:  # the usual case: every message has a value
        lens = np.fromiter(map(len, values), dtype=np.int64, count=n)  # type: ignore[arg-type]
        data = b"".join(values)  # type: ignore[arg-type]
    except TypeError:  # a null value: no bytes
        lens = np.fromiter((len(v) if v else 0 for v in values), dtype=np.int64, count=n)
        data = b"".join(v for v in values if v)
    buf = np.frombuffer(data + bytes(HEADER_BYTES), dtype=np.uint8)
    starts = np.cumsum(lens) - lens
    framed = (lens >= HEADER_BYTES) & (buf[starts] == MAGIC)
    header = buf[starts[:, None] + np.arange(1, HEADER_BYTES)].astype(np.int64)
    ids = (header[:, 0] << 24) | (header[:, 1] << 16) | (header[:, 2] << 8) | header[:, 3]
    return ids, framed


def _pick(values: Sequence[bytes | None], rows: Any) -> list[bytes | None]:
    """``values`` at ``rows`` (an index array), by one C-level gather."""
    if len(rows) == 1:
        return [values[int(rows[0])]]
    return list(operator.itemgetter(*rows.tolist())(values))


def _header_reason(value: bytes | None) -> str:
    try:
        split_header(value)
    except LineError as e:
        return str(e)
    raise AssertionError("a value with a header was taken for one without")


def _empty(arrow: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in arrow], schema=arrow)
