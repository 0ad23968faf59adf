"""Arrow record batches encoded as Avro values, column by column (the batch Kafka sink).

:class:`AvroBatchEncoder` gives, for each row of a batch, the bytes
``header + fastavro.schemaless_writer(row)`` gives for a flat record schema (primitive
fields, each optionally ``["null", T]``), without a dict per row. Every field of every
row is a *part*: a run of bytes (a union branch byte, a zig-zag varint, a little-endian
float, a length-prefixed string) made for all rows at once with numpy; the parts are
then scattered, field after field, into one buffer laid out row after row, which Arrow
cuts into one ``bytes`` per row.

What it does not write it leaves to the caller, who then writes the rows one by one
(fastavro raises there as it would for a record): a column the batch lacks, a null in a
field that is not nullable, a value the field's type cannot take (an int out of 32-bit
range, a string column for a long), or a schema that is not flat (:meth:`encode`
returns ``None``; :func:`batch_encoder` returns ``None``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from spillway.channels.wire.arrowcodec import arrow_schema
from spillway.spark_jobs.connectors.batchavro import AvroField, avro_fields

Arr = NDArray[Any]
_VARINT_BYTES = 10
_SHIFTS = (np.arange(_VARINT_BYTES, dtype=np.uint64) * np.uint64(7)).astype(np.uint64)
_FIXED = {"boolean": (1, np.uint8), "float": (4, np.dtype("<f4")), "double": (8, np.dtype("<f8"))}
_CAST_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)


@dataclass(frozen=True)
class _Part:
    """Bytes of every row: row ``i``'s are ``source[starts[i] : starts[i] + lens[i]]``."""

    lens: Arr  # int64, one per row (0: the row has none)
    starts: Arr  # int64, one per row
    source: Arr  # uint8


def _varints(values: Arr, present: Arr) -> _Part:
    """Avro's zig-zag varint of each int64 in ``values`` (none where not ``present``)."""
    u = (values.astype(np.int64) << 1) ^ (values.astype(np.int64) >> 63)
    z = u.astype(np.uint64)
    groups = (z[:, None] >> _SHIFTS[None, :]) & np.uint64(0x7F)
    size = np.ones(len(z), dtype=np.int64)
    for k in range(1, _VARINT_BYTES):
        size += z >= (np.uint64(1) << _SHIFTS[k])
    more = np.arange(_VARINT_BYTES)[None, :] < (size - 1)[:, None]
    table = (groups | (more.astype(np.uint64) << np.uint64(7))).astype(np.uint8)
    starts = np.arange(len(z), dtype=np.int64) * _VARINT_BYTES
    return _Part(np.where(present, size, 0), starts, table.reshape(-1))


def _constant(byte: int, rows: Arr) -> _Part:
    """The one byte ``byte`` in each row where ``rows`` is true."""
    n = len(rows)
    return _Part(rows.astype(np.int64), np.zeros(n, dtype=np.int64), np.array([byte], np.uint8))


def _numbers(column: pa.Array, dtype: Any) -> Arr:
    """The column's values as a numpy array of ``dtype`` (nulls as zero)."""
    filled = pc.fill_null(column, False if pa.types.is_boolean(column.type) else 0)
    return np.asarray(filled.to_numpy(zero_copy_only=False)).astype(dtype)


def _binary_parts(column: pa.Array, present: Arr) -> list[_Part]:
    """A string or bytes column's parts: the length as a varint, then the bytes."""
    raw = column.cast(pa.large_binary())
    _, offsets_buf, data_buf = raw.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[raw.offset : raw.offset + len(raw) + 1]
    data = (
        np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    )
    lens = np.where(present, np.diff(offsets), 0)
    return [_varints(lens, present), _Part(lens, offsets[:-1].copy(), data)]


def _field_parts(field: AvroField, column: pa.Array, typ: pa.DataType) -> list[_Part] | None:
    """The parts of one field of every row; ``None`` if the column cannot be written."""
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    try:
        column = column.cast(typ)  # checked: an int out of range or a bad string refuses
    except _CAST_ERRORS:
        return None
    n = len(column)
    present = np.asarray(column.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    parts: list[_Part] = []
    if field.nullable:
        # The branch index as a zig-zag varint: 0 → 0x00, 1 → 0x02.
        branch_of_value, branch_of_null = (0x02, 0x00) if field.branch == 1 else (0x00, 0x02)
        parts.append(_Part(np.ones(n, np.int64), np.where(present, 0, 1), np.array(
            [branch_of_value, branch_of_null], np.uint8
        )))  # fmt: skip
    elif not present.all():
        return None  # a null where the schema has none: fastavro says why
    if field.kind in ("string", "bytes"):
        return parts + _binary_parts(column, present)
    if field.kind in ("int", "long"):
        return [*parts, _varints(_numbers(column, np.int64), present)]
    width, dtype = _FIXED[field.kind]
    values = np.ascontiguousarray(_numbers(column, dtype)).view(np.uint8)
    starts = np.arange(n, dtype=np.int64) * width
    return [*parts, _Part(np.where(present, width, 0), starts, values)]


def _assemble(parts: list[_Part], n: int) -> list[bytes]:
    """Row ``i``'s bytes: every part's bytes of row ``i``, in the parts' order."""
    sizes = np.zeros(n, dtype=np.int64)
    for p in parts:
        sizes += p.lens
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    out = np.empty(int(offsets[-1]), dtype=np.uint8)
    cursor = offsets[:-1].copy()
    for p in parts:
        total = int(p.lens.sum())
        if total:
            before = np.zeros(n, dtype=np.int64)
            np.cumsum(p.lens[:-1], out=before[1:])
            within = np.arange(total, dtype=np.int64)
            out[np.repeat(cursor - before, p.lens) + within] = p.source[
                np.repeat(p.starts - before, p.lens) + within
            ]
        cursor += p.lens
    big = int(offsets[-1]) >= 2**31 - 1
    kind, offs = (pa.large_binary(), offsets) if big else (pa.binary(), offsets.astype(np.int32))
    array = pa.Array.from_buffers(kind, n, [None, pa.py_buffer(offs), pa.py_buffer(out)])
    values: list[bytes] = array.to_pylist()
    return values


class AvroBatchEncoder:
    """Encodes Arrow batches as Avro values of one flat record ``schema`` (an Avro dict)."""

    def __init__(self, schema: dict[str, Any]) -> None:
        """``schema`` must be flat once its defaults are dropped (:func:`batch_encoder`)."""
        flat = _no_defaults(schema)
        arrow = arrow_schema(flat)
        assert arrow is not None, "batch_encoder checks the schema is flat"
        self.fields = avro_fields(flat)
        self.types = [arrow.field(i).type for i in range(len(self.fields))]

    def encode(self, batch: pa.RecordBatch, header: bytes = b"") -> list[bytes] | None:
        """Each row of ``batch`` as ``header`` then its Avro datum (the bytes fastavro's
        ``schemaless_writer`` writes for the row's dict); pure. ``None`` if a row cannot be
        written here (see the module's docstring): write the rows one by one."""
        n = int(batch.num_rows)
        if n == 0:
            return []
        names = batch.schema.names
        if len(set(names)) != len(names):
            return None  # a dict keeps one of the repeated columns: the records decide
        start = np.frombuffer(header, dtype=np.uint8)
        parts = [_Part(np.full(n, len(header), np.int64), np.zeros(n, np.int64), start)]
        for field, typ in zip(self.fields, self.types, strict=True):
            if field.name not in names:
                return None
            field_parts = _field_parts(field, batch.column(field.name), typ)
            if field_parts is None:
                return None
            parts += field_parts
        return _assemble(parts, n)


def _no_defaults(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` without its fields' defaults: a writer writes every field, so they do
    not change its values (only a reader resolving another schema reads them)."""
    fields = schema.get("fields")
    if not isinstance(fields, list):
        return schema
    plain = [
        {k: v for k, v in f.items() if k != "default"} if isinstance(f, dict) else f for f in fields
    ]
    return {**schema, "fields": plain}


def batch_encoder(schema: dict[str, Any]) -> AvroBatchEncoder | None:
    """A column encoder of ``schema``'s values, or ``None`` if it is not flat (its values
    are written record by record)."""
    return AvroBatchEncoder(schema) if arrow_schema(_no_defaults(schema)) is not None else None
