"""Channel messages as Arrow batches, for the operators that take batches.

A batch operator's input is the Arrow channel message as it arrived: :class:`BatchDecoders`
opens the message's IPC stream and hands its record batch on, with no Python object per
row. A message written in Avro (a writer on ``codec="avro"``, or a wide schema) becomes a
batch with ``RecordBatch.from_pylist``, so an operator never sees both forms.

:class:`ArrowRows` is that batch as the reader's delivery carries it: a sequence whose
length is the row count, so positions, replay counts and mid-message resumes (which count
and slice a message's records) work as they do for dicts, and a slice stays a batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

import pyarrow as pa

from spillway.channels.errors import PipelineDefinitionError, SchemaMismatchError
from spillway.channels.wire.arrowcodec import arrow_schema
from spillway.channels.wire.envelope import VERSION, Decoders
from spillway.channels.wire.resolve import resolved_batch


class ArrowRows(Sequence[Any]):
    """One channel message's rows as an Arrow record batch (``batch``), zero-copy sliced."""

    __slots__ = ("batch",)

    def __init__(self, batch: pa.RecordBatch) -> None:
        self.batch = batch

    def __len__(self) -> int:
        return int(self.batch.num_rows)

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> ArrowRows: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            start, stop, step = index.indices(self.batch.num_rows)
            if step != 1:
                raise ValueError("ArrowRows slices must be contiguous")
            return ArrowRows(self.batch.slice(start, max(0, stop - start)))
        n = self.batch.num_rows
        if not -n <= index < n:
            raise IndexError(f"row {index} of a batch of {n}")
        return self.batch.slice(index % n, 1).to_pylist()[0]

    def __iter__(self) -> Iterator[Any]:
        """The rows as dicts (only where a record is asked for: errors, fallbacks)."""
        return iter(self.batch.to_pylist())


def one_batch(batches: Sequence[pa.RecordBatch], schema: pa.Schema) -> pa.RecordBatch:
    """``batches`` as one record batch of ``schema`` (no copy when there is one)."""
    if len(batches) == 1:
        return batches[0]
    table = pa.Table.from_batches(list(batches), schema=schema).combine_chunks()
    parts = table.to_batches()
    return parts[0] if parts else pa.RecordBatch.from_pylist([], schema=schema)


class BatchDecoders:
    """Decodes a flat-schema channel's data messages into :class:`ArrowRows`.

    Same contract as :class:`spillway.channels.wire.envelope.Decoders` (a message that cannot be
    decoded is a :class:`SchemaMismatchError`), with batches in place of dicts.
    """

    def __init__(self, schema: dict[str, Any], earlier: Iterable[dict[str, Any]] = ()) -> None:
        flat = arrow_schema(schema)
        if flat is None:
            raise PipelineDefinitionError(
                f"channel schema {schema.get('name', '?')!r} is not flat (primitive fields "
                "only): batch operators cannot read it; use record operators, or flatten the "
                "records upstream"
            )
        self.schema = flat
        self._avro_schema = schema
        self._name = schema.get("name", "?")
        self._avro = Decoders(schema, earlier)

    def decode(self, version: bytes, value: bytes, writer: bytes | None = None) -> ArrowRows:
        """The message's rows as one batch of the channel's Arrow schema (a message written
        with an older schema of the channel resolved to it,
        :mod:`spillway.channels.wire.resolve`)."""
        if version == VERSION:
            records = self._avro.decode(version, value, writer)
            return ArrowRows(pa.RecordBatch.from_pylist(records, schema=self.schema))
        try:
            reader = pa.ipc.open_stream(value)
            batches = list(reader)
            if not reader.schema.equals(self.schema):
                batches = [resolved_batch(b, self._avro_schema, self.schema) for b in batches]
            return ArrowRows(one_batch(batches, self.schema))
        except (pa.ArrowException, ValueError, OSError) as e:
            raise SchemaMismatchError(
                f"cannot decode an Arrow batch of {len(value)} bytes with schema "
                f"{self._name!r}: {e}"
            ) from e
