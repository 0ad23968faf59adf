"""Kafka Avro values decoded a run at a time into one Arrow record batch, column by column.

Each value is one Avro datum of a flat record schema (primitive fields, each optionally
``["null", T]``), as ``fastavro.schemaless_writer`` writes it, optionally behind the
5-byte Confluent Schema Registry header (``framing="confluent"``: magic byte 0 and a
schema id, which is not looked up). Since every message is one datum, every row's start is
known; the decoder walks the fields in schema order and decodes each field *for all rows
at once* with numpy (varints, zig-zag, little-endian floats, length-prefixed strings
gathered into one Arrow buffer): no Python object per record.

A malformed value — truncated, trailing bytes, a union branch or boolean byte out of range,
a varint longer than 10 bytes, a negative length, a string that is not UTF-8, an ``int``
out of 32-bit range, no value at all — is found per row by the same vectorised checks; it
is rejected (the caller dead-letters it with ``topic[partition]@offset``) and the other
rows go on. The reason given is fastavro's own error for that value when it has one.

``make bench-columnar``-style measurement: ``python -m bench.avrodecode``.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import fastavro
import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from spillway.channels.errors import PipelineDefinitionError
from spillway.channels.wire.arrowcodec import arrow_schema
from spillway.recovery.job.origins import TopicOffset, topic_runs
from spillway.recovery.job.plan import Rejected
from spillway.spark_jobs.connectors.batchjson import KafkaJsonBatch
from spillway.spark_jobs.modes import ValueFormat
from spillway.spark_jobs.records.lines import LineError

Arr = NDArray[Any]
FRAMINGS = ("none", "confluent")
_HEADER = {"none": 0, "confluent": 5}
_PAD = 16  # zero bytes after the data: a read of up to 10 bytes past a value stays inside
_SHIFTS = (np.arange(10, dtype=np.uint64) * np.uint64(7)).astype(np.uint64)
_INT32 = (-(2**31), 2**31 - 1)


@dataclass(frozen=True)
class AvroField:
    """A flat field: its Avro primitive, whether it is ``["null", T]`` and which branch
    index is ``T``."""

    name: str
    kind: str
    nullable: bool
    branch: int


def avro_fields(schema: dict[str, Any]) -> list[AvroField]:
    """The fields of a flat Avro record schema; ``PipelineDefinitionError`` if not flat."""
    if arrow_schema(schema) is None:
        raise PipelineDefinitionError(
            f"Avro values decode column by column only for a flat record schema (fields of "
            f"boolean, int, long, float, double, string or bytes, each optionally "
            f'["null", T]); got {schema!r}: read records (batches=False) instead'
        )
    out = []
    for f in schema["fields"]:
        typ = f["type"]
        if isinstance(typ, list):
            branch = 1 if typ[0] == "null" else 0
            kind = typ[branch]
            kind = kind["type"] if isinstance(kind, dict) else kind
            out.append(AvroField(f["name"], kind, True, branch))
        else:
            kind = typ["type"] if isinstance(typ, dict) else typ
            out.append(AvroField(f["name"], kind, False, 0))
    return out


class _Walk:
    """Positions of every row while the fields are decoded; ``bad[i]`` once row ``i``
    broke a rule (its later fields are decoded from wherever, and thrown away)."""

    def __init__(self, buf: Arr, starts: Arr, ends: Arr) -> None:
        self.buf, self.pos, self.ends = buf, starts.copy(), ends
        self.bad = np.zeros(len(starts), dtype=bool)

    def clamp(self, rows: Arr) -> None:
        """Rows read past their value's end are bad; keep their position in bounds."""
        over = self.pos[rows] > self.ends[rows]
        if over.any():
            hit = rows[over]
            self.bad[hit] = True
            self.pos[hit] = self.ends[hit]

    def varint(self, rows: Arr) -> Arr:
        """The zig-zag varints (Avro int/long) at the positions of ``rows``, as int64.

        Byte by byte over the rows whose varint goes on: most are one to three bytes, so
        the later rounds touch few rows."""
        at = self.pos[rows]
        byte = self.buf[at]
        n: Arr = (byte & 0x7F).astype(np.uint64)
        size = np.ones(len(rows), dtype=np.int64)
        going = np.nonzero(byte & 0x80)[0]
        for k in range(1, 10):
            if not going.size:
                break
            byte = self.buf[at[going] + k]
            n[going] |= (byte & 0x7F).astype(np.uint64) << _SHIFTS[k]
            size[going] += 1
            going = going[(byte & 0x80) != 0]
        self.bad[rows[going]] = True  # still going after 10 bytes
        self.pos[rows] = at + size
        self.clamp(rows)
        signed: Arr = (n >> np.uint64(1)).astype(np.int64) ^ -(n & np.uint64(1)).astype(np.int64)
        return signed

    def fixed(self, rows: Arr, width: int, dtype: str) -> Arr:
        """``width``-byte little-endian numbers at the positions of ``rows``."""
        at = self.pos[rows]
        raw = self.buf[at[:, None] + np.arange(width)]
        self.pos[rows] = at + width
        self.clamp(rows)
        return np.ascontiguousarray(raw).view(dtype).reshape(-1)


_IOTA: list[Arr] = [np.arange(0, dtype=np.int64)]


def _iota(n: int) -> Arr:
    """``0..n-1`` as a view of one kept array: a fresh ``np.arange`` beside the gather's
    other large temporaries cost 8x the gather itself (measured: 0.41 against 0.05 µs per
    row of a 46-byte string column), the allocator handing pages back and forth."""
    if len(_IOTA[0]) < n:
        _IOTA[0] = np.arange(max(n, 2 * len(_IOTA[0])), dtype=np.int64)
    return _IOTA[0][:n]


def _valid(present: Arr | None) -> pa.Buffer | None:
    return None if present is None else pa.py_buffer(np.packbits(present, bitorder="little"))


def _binary(walk: _Walk, rows: Arr, n: int, present: Arr | None, typ: pa.DataType) -> pa.Array:
    """Length-prefixed bytes of ``rows`` (the others empty) as one Arrow array of ``n``."""
    lens = walk.varint(rows)
    negative = lens < 0
    walk.bad[rows[negative]] = True
    lens[negative] = 0
    starts = walk.pos[rows]
    walk.pos[rows] = starts + lens
    walk.clamp(rows)
    lens = np.where(walk.bad[rows], 0, lens)  # a bad row's bytes may lie anywhere
    full = np.zeros(n, dtype=np.int64)
    full[rows] = lens
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(full, out=offsets[1:])
    total = int(offsets[-1])
    big = total >= 2**31 - 1
    gather = np.repeat(starts - offsets[rows], lens)
    gather += _iota(total)
    data = walk.buf[gather]
    kind = (pa.large_string() if typ == pa.string() else pa.large_binary()) if big else typ
    offs = offsets if big else offsets.astype(np.int32)
    return pa.Array.from_buffers(
        kind, n, [_valid(present), pa.py_buffer(offs), pa.py_buffer(data)]
    ).cast(typ)


def _bad_utf8(walk: _Walk, array: pa.Array) -> None:
    """Rows whose string is not UTF-8 are bad (looked at one by one: only when some is)."""
    try:
        array.validate(full=True)
        return
    except pa.ArrowInvalid:
        pass
    raw = array.view(pa.binary()) if array.type == pa.string() else array
    for i, v in enumerate(raw.to_pylist()):
        if v is not None:
            try:
                v.decode("utf-8")
            except UnicodeDecodeError:
                walk.bad[i] = True


def _column(walk: _Walk, f: AvroField, typ: pa.DataType, n: int) -> pa.Array:
    """Field ``f`` of every row, advancing each row past it."""
    rows = np.arange(n, dtype=np.int64)
    present: Arr | None = None
    if f.nullable:
        branch = walk.varint(rows)
        walk.bad[(branch != 0) & (branch != 1)] = True
        present = (branch == f.branch) & ~walk.bad
        rows = np.nonzero(present)[0]
    if f.kind in ("string", "bytes"):
        array = _binary(walk, rows, n, present, typ)
        if f.kind == "string":
            _bad_utf8(walk, array)
        return array
    if f.kind in ("int", "long"):
        values = walk.varint(rows)
        if f.kind == "int":
            walk.bad[rows[(values < _INT32[0]) | (values > _INT32[1])]] = True
            values = values.astype(np.int32)
    elif f.kind == "boolean":
        byte = walk.fixed(rows, 1, "u1")
        walk.bad[rows[byte > 1]] = True
        values = byte == 1
    else:
        values = walk.fixed(
            rows, 4 if f.kind == "float" else 8, "<f4" if f.kind == "float" else "<f8"
        )
    full = np.zeros(n, dtype=values.dtype)
    full[rows] = values
    mask = None if present is None else ~present
    return pa.array(full, typ, mask=mask)


@dataclass(frozen=True)
class AvroRun:
    """The rows decoded from a run of values; ``kept[i]`` the value row ``i`` came from,
    ``bad`` the values rejected with the reason."""

    batch: pa.RecordBatch
    kept: list[int]
    bad: list[tuple[int, str]]


class AvroDecoder:
    """Decodes runs of Avro values of one flat ``schema`` (Avro dict) into Arrow batches."""

    def __init__(self, schema: dict[str, Any], framing: str = "none") -> None:
        check_framing(framing)
        self.fields = avro_fields(schema)
        arrow = arrow_schema(schema)
        assert arrow is not None
        self.arrow: pa.Schema = arrow
        self.header = _HEADER[framing]
        self._parsed = fastavro.parse_schema(schema)

    def decode(self, values: Sequence[bytes | None]) -> AvroRun:
        """``values`` as one batch of the schema, bad values left out with the reason; pure."""
        n = len(values)
        try:  # the usual case: every message has a value
            lens = np.fromiter(map(len, values), dtype=np.int64, count=n)  # type: ignore[arg-type]
            data = b"".join(values)  # type: ignore[arg-type]
        except TypeError:  # a null value: no bytes
            lens = np.fromiter((len(v) if v else 0 for v in values), dtype=np.int64, count=n)
            data = b"".join(v for v in values if v)
        ends = np.cumsum(lens)
        starts = ends - lens
        buf = np.frombuffer(data + bytes(_PAD), dtype=np.uint8)
        walk = _Walk(buf, starts + self.header, ends)
        walk.bad[lens < max(self.header, 1)] = True  # none, empty, or shorter than a header
        if self.header:
            walk.bad[buf[np.minimum(starts, len(buf) - 1)] != 0] = True
        columns = [_column(walk, f, self.arrow.field(i).type, n) for i, f in enumerate(self.fields)]
        walk.bad |= walk.pos != ends  # bytes left over, or read past the end
        batch = pa.RecordBatch.from_arrays(columns, schema=self.arrow)
        if not walk.bad.any():
            return AvroRun(batch, list(range(n)), [])
        keep = np.nonzero(~walk.bad)[0]
        bad = [
            (i, _reason(self._parsed, self.header, values[i]))
            for i in np.nonzero(walk.bad)[0].tolist()
        ]
        return AvroRun(batch.take(pa.array(keep)), keep.tolist(), bad)


class ColumnDecoder(Protocol):
    """What :func:`decode_kafka_avro` decodes with: :class:`AvroDecoder`, or the
    registry's (:mod:`spillway.spark_jobs.connectors.batchregistry`)."""

    def decode(self, values: Sequence[bytes | None]) -> AvroRun:
        """``values`` as one batch, bad values left out with the reason (``AvroRun``)."""
        ...


def decode_kafka_avro(
    decoder: ColumnDecoder,
    topic: str,
    partition: int,
    offsets: Sequence[int],
    values: Sequence[bytes | None],
) -> KafkaJsonBatch:
    """The messages at ``offsets`` (ascending) of ``topic[partition]`` as one batch, as
    :func:`spillway.spark_jobs.connectors.batchjson.decode_kafka_json` gives JSON ones: each row's
    origin its
    ``topic[partition]@offset``; a rejected value a ``Rejected`` with that origin."""
    run = decoder.decode(values)
    origins = topic_runs(topic)
    if not run.bad and offsets and offsets[-1] - offsets[0] == len(offsets) - 1:
        origins.add_run(partition, offsets[0], len(offsets))
    else:
        for i in run.kept:
            origins.add(partition, offsets[i])
    rejected = [
        Rejected(TopicOffset(topic, partition, offsets[i]), why, values[i] or b"")
        for i, why in run.bad
    ]
    return KafkaJsonBatch(run.batch, origins, rejected)


def read_datum(parsed: Any, header: int, value: bytes | None) -> dict[str, Any]:
    """One value as a record with fastavro (the record path, and the reason a value the
    column decoder refused is bad): ``LineError`` if there is no value, no Confluent
    header where one is expected, no datum of the schema, or bytes after it."""
    if not value:
        raise LineError("no value (null)" if value is None else "empty value")
    if header and (len(value) < header or value[0] != 0):
        raise LineError("no Confluent Schema Registry header (magic byte 0, a 4-byte schema id)")
    stream = io.BytesIO(value[header:] if header else value)
    try:
        record = cast(dict[str, Any], fastavro.schemaless_reader(stream, parsed, None))
    except Exception as e:  # fastavro raises many kinds (EOFError, IndexError, UnicodeError...)
        raise LineError(f"not an Avro datum of the schema: {type(e).__name__}: {e}") from e
    left = len(value) - header - stream.tell()
    if left:
        raise LineError(f"not an Avro datum of the schema: {left} bytes after its end")
    return record


class AvroRecords:
    """The record path's decoder of Avro values: ``read(value)`` is a dict per value."""

    def __init__(self, schema: dict[str, Any], framing: str = "none") -> None:
        check_framing(framing)
        self._parsed = fastavro.parse_schema(schema)
        self._header = _HEADER[framing]

    def read(self, value: bytes | None) -> dict[str, Any]:
        """``value`` as a record; ``LineError`` saying why it is not one (:func:`read_datum`)."""
        return read_datum(self._parsed, self._header, value)


FRAMING_OF: dict[ValueFormat, str | None] = {
    "json": None,
    "avro": "none",
    "avro-confluent": "confluent",
    "json-schema": None,  # JSON text behind the header: spark_jobs.connectors.confluentjson
    "protobuf": None,  # a message behind the header: spark_jobs.connectors.confluentproto
}


def avro_framing(value_format: ValueFormat, where: str, keyed: bool = False) -> str | None:
    """The Avro framing of ``read_kafka``'s ``value_format`` (``None``: JSON values);
    ``PipelineDefinitionError`` naming ``where`` for another format, or Avro with message
    keys as fields (``keyed``: key_field/tombstones read JSON values only)."""
    framing = FRAMING_OF[value_format]
    if value_format != "json" and keyed:
        raise PipelineDefinitionError(
            f"{where}: key_field/tombstones read JSON values; drop them or value_format"
        )
    return framing


def check_framing(framing: str) -> None:
    """``PipelineDefinitionError`` unless ``framing`` is one of :data:`FRAMINGS`."""
    if framing not in FRAMINGS:
        raise PipelineDefinitionError(
            f'Avro framing must be one of {FRAMINGS} ("confluent": values behind the Schema '
            f"Registry's 5-byte header), got {framing!r}"
        )


def _reason(parsed: Any, header: int, value: bytes | None) -> str:
    """Why the column decoder refused ``value``: fastavro's error where it has one."""
    try:
        read_datum(parsed, header, value)
    except LineError as e:
        return str(e)
    return (
        "not an Avro datum of the schema: a boolean byte other than 0 or 1, an int out "
        "of 32-bit range or a string that is not UTF-8"
    )
