"""Exactly-once Parquet files: published when the checkpoint that covers them commits.

The two-phase commit is :class:`spillway.spark_jobs.connectors.sinks.StagedFileSink`'s, as for
JSONL. Files
are staged as ``.part-….parquet.inprogress`` next to their final place: the leading dot
makes ``pyarrow.dataset`` (and Spark, Hive, DuckDB) skip them, so a reader never sees a
partial file, and the rename that publishes them stays inside one directory.

Layout under ``directory/<name>/``, with ``partition_by="col"`` Hive-style::

    col=value/part-<subtask>-<checkpoint>-<seq>.parquet

``value`` is URL-quoted (what ``pyarrow.dataset``'s ``partitioning="hive"`` decodes) and
``None`` is ``__HIVE_DEFAULT_PARTITION__``; the partition column is not stored in the
files, as Hive, Spark and ``pyarrow.dataset.write_dataset`` do.

Rolling. A Parquet file cannot be made durable without its footer, and cannot be
continued after it, so every file written since a checkpoint is closed at that
checkpoint (Flink's ``OnCheckpointRollingPolicy`` for bulk formats). Within a checkpoint
interval a file also rolls when it reaches ``max_file_bytes`` (bytes on disk plus the
Arrow size of rows not yet written) or has been open ``roll_interval_s`` (checked when
records arrive). Longer checkpoint intervals make bigger files.

Records. Each :meth:`ParquetFileSink.write` call becomes one ``pyarrow.RecordBatch``
(``from_pylist`` with the sink's schema, checked as the Arrow channel codec checks: no
silent conversions), split by partition value with ``pyarrow.compute``; rows are
buffered per file and written as row groups of ``row_group_rows``.
"""

from __future__ import annotations

import os
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spillway.channels.errors import PipelineDefinitionError, SchemaMismatchError
from spillway.channels.routing.batchwrite import conform
from spillway.channels.wire.arrowcodec import ArrowCodec, arrow_schema, short_repr
from spillway.channels.wire.batchread import ArrowRows
from spillway.channels.wire.mismatch import describe
from spillway.recovery.job.plan import Record
from spillway.spark_jobs.connectors.sinks import StagedFileSink

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
_CONVERSION_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError)


@dataclass
class _OpenFile:
    final: str  # relative to the sink's directory
    fh: Any
    writer: pq.ParquetWriter
    opened: float
    buffered: list[pa.RecordBatch] = field(default_factory=list)
    rows: int = 0
    nbytes: int = 0


class ParquetFileSink(StagedFileSink):
    """Parquet files under ``directory/<name>/``, published at checkpoints (see module doc).

    ``schema``: the files' Arrow schema; ``avro``: the records' Avro schema when known
    (flat ones are checked by :class:`spillway.channels.wire.arrowcodec.ArrowCodec`, and mismatches
    are
    described field by field).
    """

    extension = ".parquet"
    hidden = True
    # Alone in its subtask, it reads its channel as Arrow batches
    # (spillway.recovery.runtime.batchpath):
    # a batch that has the files' schema is written as it arrived, no dict per row.
    takes_batches = True

    def __init__(
        self,
        directory: str,
        name: str | None,
        schema: pa.Schema,
        avro: dict[str, Any] | None = None,
        partition_by: str | None = None,
        max_file_bytes: int = 128 << 20,
        roll_interval_s: float = 60.0,
        row_group_rows: int = 65_536,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(directory, name)
        check_partition_column(schema, partition_by, f"sink {name!r}")
        self.schema = schema
        self.partition_by = partition_by
        self.max_file_bytes = max_file_bytes
        self.roll_interval_s = roll_interval_s
        self.row_group_rows = row_group_rows
        self._avro = avro
        self._clock = clock
        flat = arrow_schema(avro) if avro is not None else None
        self._codec = ArrowCodec(avro, flat) if avro is not None and flat == schema else None
        self._file_schema = (
            schema.remove(schema.get_field_index(partition_by)) if partition_by else schema
        )
        self._open: dict[str, _OpenFile] = {}  # partition directory ("" without) → file
        self._sealed: list[str] = []  # staged paths closed since the last checkpoint
        self._seq = 0  # files started since the last checkpoint

    def write(self, records: Sequence[Record]) -> None:
        """Stage ``records`` (one record batch per call) in this checkpoint's files."""
        if not records:
            return
        batch = self._batch(records)
        now = self._clock()
        for subdir, part in self._split(batch):
            self._append(subdir, part, now)

    def seal(self) -> list[str]:
        """Close and fsync every file of this checkpoint; their staged paths."""
        for subdir in list(self._open):
            self._roll(subdir)
        sealed, self._sealed, self._seq = self._sealed, [], 0
        return sealed

    # -- internals -----------------------------------------------------------------------

    def _batch(self, records: Sequence[Record]) -> pa.RecordBatch:
        if isinstance(records, ArrowRows):
            fit = conform(records.batch, self.schema)
            if fit is not None:
                return fit
        if self._codec is not None:
            try:
                return self._codec.batch(records)
            except SchemaMismatchError as e:
                raise SchemaMismatchError(f"sink {self.name!r}: {e}") from e
        try:
            return pa.RecordBatch.from_pylist(list(records), schema=self.schema)
        except _CONVERSION_ERRORS as e:
            for r in records:  # name the record that does not fit
                try:
                    pa.RecordBatch.from_pylist([r], schema=self.schema)
                except _CONVERSION_ERRORS as e1:
                    why = (describe(self._avro, r) if self._avro else None) or e1
                    raise SchemaMismatchError(
                        f"sink {self.name!r}: record {short_repr(r)} does not fit the Parquet "
                        f"schema: {why}"
                    ) from e1
            raise SchemaMismatchError(f"sink {self.name!r}: cannot build a batch: {e}") from e

    def _split(self, batch: pa.RecordBatch) -> Iterator[tuple[str, pa.RecordBatch]]:
        """(partition directory, rows without the partition column) per partition value."""
        if self.partition_by is None:
            yield "", batch
            return
        i = batch.schema.get_field_index(self.partition_by)
        column = batch.column(i)
        rest = batch.remove_column(i)
        values = pc.unique(column).to_pylist()
        if len(values) == 1:
            yield _hive_dir(self.partition_by, values[0]), rest
            return
        # One vectorised filter per distinct value: cheap for the few values a partition
        # column has; a column with thousands of values per batch is a poor partition key.
        for v in values:
            mask = pc.is_null(column) if v is None else pc.equal(column, v)
            yield _hive_dir(self.partition_by, v), rest.filter(mask)

    def _append(self, subdir: str, batch: pa.RecordBatch, now: float) -> None:
        f = self._open.get(subdir)
        if f is not None and now - f.opened >= self.roll_interval_s:
            self._roll(subdir)
            f = None
        if f is None:
            f = self._start(subdir, now)
        f.buffered.append(batch)
        f.rows += batch.num_rows
        f.nbytes += batch.nbytes
        if f.rows >= self.row_group_rows:
            _flush(f)
        if f.fh.tell() + f.nbytes >= self.max_file_bytes:
            self._roll(subdir)

    def _start(self, subdir: str, now: float) -> _OpenFile:
        name = f"part-{self._index:04d}-{self._next:08d}-{self._seq:04d}.parquet"
        self._seq += 1
        final = f"{subdir}/{name}" if subdir else name
        path = self._dir / self.staged_name(final)
        path.parent.mkdir(parents=True, exist_ok=True)
        # "x": never truncate a file a zombie incarnation created (see JsonlFileSink.write).
        fh = open(path, "xb")  # noqa: SIM115 - closed in _roll
        writer = pq.ParquetWriter(fh, self._file_schema)
        f = _OpenFile(final, fh, writer, now)
        self._open[subdir] = f
        return f

    def _roll(self, subdir: str) -> None:
        f = self._open.pop(subdir)
        _flush(f)
        f.writer.close()
        f.fh.flush()
        os.fsync(f.fh.fileno())
        f.fh.close()
        self._sealed.append(self.staged_name(f.final))


def _flush(f: _OpenFile) -> None:
    """Write the buffered rows of ``f`` as one row group."""
    if f.buffered:
        f.writer.write_table(pa.Table.from_batches(f.buffered), row_group_size=max(f.rows, 1))
        f.buffered, f.rows, f.nbytes = [], 0, 0


def _hive_dir(column: str, value: Any) -> str:
    text = HIVE_NULL if value is None else urllib.parse.quote(partition_text(value), safe="")
    return f"{column}={text}"


def partition_text(value: Any) -> str:
    """A partition value as text (booleans as ``true``/``false``, as Hive and Delta write)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def check_partition_column(schema: pa.Schema, column: str | None, where: str) -> None:
    """A partition column must be a top-level field of a primitive type."""
    if column is None:
        return
    if column not in schema.names:
        raise PipelineDefinitionError(
            f"{where}: partition_by={column!r} is not a field of the records "
            f"({', '.join(schema.names)})"
        )
    t = schema.field(column).type
    if pa.types.is_nested(t) or pa.types.is_binary(t) or pa.types.is_floating(t):
        raise PipelineDefinitionError(
            f"{where}: partition_by={column!r} has type {t}; partition by a string, integer "
            "or boolean field"
        )
    if len(schema) == 1:
        raise PipelineDefinitionError(
            f"{where}: partition_by={column!r} is the only field; the files would hold no column"
        )
