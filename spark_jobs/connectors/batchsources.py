"""Sources that read Arrow batches: ``read_files(..., batches=True)`` for CSV
and Parquet, ``read_kafka(..., batches=True)`` for JSON values.

Files:
The source of :class:`spillway.spark_jobs.connectors.sources.FileSource` — the same file assignment,
position
(``files``, ``file``, ``row``: data rows read, blank and bad CSV lines included) and
re-read spans, so a checkpoint means the same thing — whose :meth:`BatchFileSource.read`
returns one ``pyarrow.RecordBatch`` per call (:mod:`spillway.spark_jobs.connectors.batchfiles`),
written to
the channel as Arrow without a Python object per row. Bad CSV lines are rejected with
``file:line`` as the record source rejects them (see
:mod:`spillway.spark_jobs.connectors.batchfiles` for the
documented differences).

Kafka: :class:`BatchKafkaSource` is :class:`spillway.spark_jobs.connectors.sources.KafkaTopicSource`
(same
partitions, offsets, bounded ends, re-read spans) whose :meth:`BatchKafkaSource.read`
groups one consume() by partition and decodes each partition's values with one
``pyarrow.json`` call (:func:`spillway.spark_jobs.connectors.batchjson.decode_kafka_json`); a value
that is
not a JSON object of the schema is rejected with ``topic[partition]@offset``.

Event time: a batch source's timestamp is a column (``timestamp="ts"``, a non-null
integer field in ms) or, for Kafka without one, each message's Kafka timestamp. Its
watermarks are the record sources'
(:class:`spillway.spark_jobs.records.watermarks.WatermarkTracker`, in
the checkpointed position): each batch is observed once per input partition with its
largest event time, which gives the same watermark as observing its rows one by one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import TIMESTAMP_NOT_AVAILABLE

from spillway.channels.errors import PipelineDefinitionError
from spillway.channels.ids import TopicPartition
from spillway.channels.kafka.runs import PartitionRun, partition_runs
from spillway.channels.wire.arrowcodec import arrow_schema
from spillway.channels.wire.batchread import one_batch
from spillway.recovery.job.origins import Origin, Origins, Runs, TopicOffset
from spillway.recovery.job.plan import Context, Rejected
from spillway.spark_jobs.connectors.batchavro import AvroDecoder, decode_kafka_avro
from spillway.spark_jobs.connectors.batchfiles import (
    FileBatch,
    read_csv_batches,
    read_parquet_batches,
)
from spillway.spark_jobs.connectors.batchjson import decode_kafka_json
from spillway.spark_jobs.connectors.batchregistry import RegistryAvroBatches, channel_schema
from spillway.spark_jobs.connectors.confluentjson import RegistryJsonBatches
from spillway.spark_jobs.connectors.confluentproto import MessageType, RegistryProtoBatches
from spillway.spark_jobs.connectors.registry import RegistryConfig
from spillway.spark_jobs.connectors.sources import FileSource, KafkaTopicSource
from spillway.spark_jobs.modes import BATCH_FILE_FORMATS, FileFormat, RegistryFormat
from spillway.spark_jobs.records.watermarks import Watermarks, WatermarkTracker

# Messages a batch Kafka source reads at most per call, whatever the runner's max_records:
# each batch operator call and each key in a batch costs Python time once, whatever the
# batch's size (B1c on Spark: ~11 µs per record with 1,000-row batches; bench/columnar.py
# per stage: the keyed count 3.8 µs per record in runs of 1,000, 1.5 in 5,000, 0.45 in 20,000).
KAFKA_BATCH_ROWS = 10_000


def check_timestamp_column(schema: pa.Schema, column: str | None, where: str) -> None:
    """A batch source's timestamp column must be a non-nullable integer field (event time
    in ms): a ``PipelineDefinitionError`` naming ``where`` otherwise."""
    if column is None:
        return
    if not isinstance(column, str):
        raise PipelineDefinitionError(
            f"{where}: a batch source's timestamp is the name of a column (event time in "
            f"ms), not {column!r}; or read records (batches=False) to pass a function"
        )
    index = schema.get_field_index(column)
    field = schema.field(index) if index >= 0 else None
    if field is None or not pa.types.is_integer(field.type) or field.nullable:
        raise PipelineDefinitionError(
            f"{where}: timestamp column {column!r} must be a non-nullable integer field "
            f'("long", event time in ms) of the schema; its fields: {schema}'
        )


def column_max(batch: pa.RecordBatch, column: str) -> int | None:
    """The largest value of ``column`` in ``batch`` (``None``: no rows)."""
    if not batch.num_rows:
        return None
    top = pc.max(batch.column(column)).as_py()
    return None if top is None else int(top)


class BatchFileSource(FileSource):
    """CSV or Parquet files as Arrow batches of the schema (flat); file i → subtask i % p."""

    # Its subtask writes what it reads as Arrow (spillway.recovery.runtime.batchpath).
    returns_batches = True

    def __init__(
        self,
        pattern: str,
        fmt: FileFormat,
        parallelism: int,
        schema: Mapping[str, Any],
        timestamp: str | None = None,
        watermarks: Watermarks | None = None,
    ):
        super().__init__(pattern, fmt, parallelism, schema, None, watermarks)
        flat = arrow_schema(dict(schema))
        if fmt not in BATCH_FILE_FORMATS or flat is None:
            raise PipelineDefinitionError(
                f"read_files(batches=True) reads {' or '.join(BATCH_FILE_FORMATS)} files with "
                f"a flat schema (primitive fields); got format {fmt!r} and schema {dict(schema)!r}"
            )
        check_timestamp_column(flat, timestamp, f"read_files {pattern!r}")
        self._arrow = flat
        self._ts_column = timestamp
        self._batches: Iterator[FileBatch] | None = None

    def open(self, ctx: Context, position: Mapping[str, Any]) -> None:
        """Continue at the checkpointed file and row (see :class:`FileSource`), and the
        checkpointed watermark with a timestamp column."""
        super().open(ctx, position)
        self._batches = None
        if self._ts_column is not None:
            self._tracker = WatermarkTracker(self.watermarks, [0], time.monotonic())
            self._tracker.restore(position)

    def read(self, max_records: int) -> list[pa.RecordBatch] | None:
        """The next batch of up to ``max_records`` rows (``[]``: only rejected lines, or
        none); ``None`` after the last file."""
        self._rejected = []
        while self._file < len(self._files):
            if self._batches is None:
                path, start = self._files[self._file], self._row
                self._batches = (
                    read_csv_batches(path, self._arrow, max_records, start)
                    if self.fmt == "csv"
                    else read_parquet_batches(path, self._arrow, max_records, start)
                )
            fb = next(self._batches, None)
            if fb is None:
                self._file, self._row, self._batches = self._file + 1, 0, None
                continue
            self._row, self._rejected, self._origins = fb.next, fb.rejected, fb.origins
            if self._tracker is not None and self._ts_column is not None:
                top = column_max(fb.batch, self._ts_column)
                if top is not None:
                    self._tracker.observe(0, top, time.monotonic())
            return [fb.batch] if fb.batch.num_rows else []
        return None


class Chained:
    """The origins of rows made of several parts, one after another (``Origins``)."""

    def __init__(self, parts: list[Runs]) -> None:
        self._parts = parts

    def at(self, k: int) -> Origin | None:
        """The origin of row ``k`` (``None`` past the end)."""
        for part in self._parts:
            n = len(part)
            if k < n:
                return part.at(k)
            k -= n
        return None


class BatchKafkaSource(KafkaTopicSource):
    """JSON (or Avro: ``framing``, :mod:`spillway.spark_jobs.connectors.batchavro`; or Avro
    by a schema registry: ``registry``, :mod:`spillway.spark_jobs.connectors.batchregistry`;
    or JSON Schema by one: ``registry_format="json-schema"``,
    :mod:`spillway.spark_jobs.connectors.confluentjson`; or Protobuf messages of
    ``message_type`` by one: ``registry_format="protobuf"``,
    :mod:`spillway.spark_jobs.connectors.confluentproto`) values of an existing Kafka topic
    as Arrow batches of the (flat) schema. With a registry the schema's defaults serve
    resolution only: the batches' schema has none."""

    # Its subtask writes what it reads as Arrow (spillway.recovery.runtime.batchpath).
    returns_batches = True

    def __init__(
        self,
        topic: str,
        parallelism: int,
        bounded: bool,
        schema: Mapping[str, Any],
        timestamp: str | None = None,
        watermarks: Watermarks | None = None,
        framing: str | None = None,
        registry: RegistryConfig | None = None,
        registry_format: RegistryFormat = "avro",
        message_type: MessageType | None = None,
    ):
        reader = dict(schema)
        if registry is not None:
            schema = channel_schema(reader)
        super().__init__(topic, parallelism, bounded, schema, None, watermarks)
        flat = arrow_schema(dict(schema))
        if flat is None:
            raise PipelineDefinitionError(
                f"read_kafka(batches=True) needs a flat schema (primitive fields); got "
                f"{dict(schema)!r}"
            )
        check_timestamp_column(flat, timestamp, f"read_kafka {topic!r}")
        self._arrow = flat
        self._ts_column = timestamp
        self._batch_origins: Origins = Chained([])
        self._columns: (
            AvroDecoder | RegistryAvroBatches | RegistryJsonBatches | RegistryProtoBatches | None
        ) = None
        if registry is not None and message_type is not None:
            self._columns = RegistryProtoBatches(message_type, registry)
        elif registry is not None and registry_format == "json-schema":
            self._columns = RegistryJsonBatches(reader, registry)
        elif registry is not None:
            self._columns = RegistryAvroBatches(reader, registry)
        elif framing is not None:
            self._columns = AvroDecoder(reader, framing)

    def read(self, max_records: int) -> list[pa.RecordBatch] | None:
        """One batch of the next committed messages' values, up to
        ``max(max_records, KAFKA_BATCH_ROWS)`` (``[]``: none, or only rejected ones);
        ``None`` at the bounded end."""
        assert self._consumer is not None
        self._rejected = []
        if self.bounded and all(self._next[p] >= self._ends.get(p, 0) for p in self._next):
            return None
        kafka_time = self._tracker is not None and self._ts_column is None
        msgs = self._consumer.consume(max(max_records, KAFKA_BATCH_ROWS), 0.1)
        runs = partition_runs(msgs, timestamps=kafka_time)  # no Python loop per message
        times: dict[int, dict[int, int]] = {}  # partition → offset → Kafka timestamp (ms)
        for p, run in list(runs.items()):
            if self.bounded:
                run = runs[p] = run.below(self._ends.get(p, 0))
            if run.offsets:
                self._next[p] = run.offsets[-1] + 1
            if kafka_time:
                runs[p], times[p] = self._timed(p, run)
        batches: list[pa.RecordBatch] = []
        parts: list[Runs] = []
        now = time.monotonic()
        for p, run in runs.items():
            if not run.offsets:
                continue
            decoded = (
                decode_kafka_json(self.topic, p, run.offsets, run.values, self._arrow)
                if self._columns is None
                else decode_kafka_avro(self._columns, self.topic, p, run.offsets, run.values)
            )
            self._rejected += decoded.rejected
            if decoded.batch.num_rows:
                batches.append(decoded.batch)
                parts.append(decoded.origins)
                self._observe(p, decoded.batch, decoded.rejected, times.get(p, {}), now)
        self._batch_origins = Chained(parts)
        if self.bounded:
            for p, end in self._ends.items():
                pos = self._consumer.position(TopicPartition(self.topic, p))
                if pos is not None and pos >= end:  # only transaction markers were left
                    self._next[p] = max(self._next[p], end)
        return [one_batch(batches, self._arrow)] if batches else []

    def _timed(self, p: int, run: PartitionRun) -> tuple[PartitionRun, dict[int, int]]:
        """The messages of ``run`` that carry a Kafka timestamp, and their timestamps by
        offset; the others are rejected as the record source rejects them."""
        assert run.timestamps is not None
        offsets: list[int] = []
        values: list[bytes | None] = []
        times: dict[int, int] = {}
        for off, value, (kind, ms) in zip(run.offsets, run.values, run.timestamps, strict=True):
            if kind == TIMESTAMP_NOT_AVAILABLE:
                self._rejected.append(_untimed(self.topic, p, off, value))
                continue
            offsets.append(off)
            values.append(value)
            times[off] = int(ms)
        return PartitionRun(offsets, values), times

    def origins(self) -> Origins:
        """Partition and offset of each row of the last batch, by row index."""
        return self._batch_origins

    def _observe(
        self,
        p: int,
        batch: pa.RecordBatch,
        rejected: list[Rejected],
        times: dict[int, int],
        now: float,
    ) -> None:
        """Tell the watermark tracker partition ``p``'s largest event time in ``batch``:
        the timestamp column's, or the Kafka timestamps of the rows not rejected."""
        if self._tracker is None:
            return
        if self._ts_column is not None:
            top = column_max(batch, self._ts_column)
        else:
            bad = {r.origin.offset for r in rejected if isinstance(r.origin, TopicOffset)}
            top = max((t for off, t in times.items() if off not in bad), default=None)
        if top is not None:
            self._tracker.observe(p, top, now)


def _untimed(topic: str, partition: int, offset: int, value: bytes | None) -> Rejected:
    """A message without a Kafka timestamp, rejected as the record source rejects it."""
    return Rejected(
        TopicOffset(topic, partition, offset),
        "the message has no Kafka timestamp; pass timestamp= (a column) to read_kafka to "
        "take the event time from the value",
        value or b"",
    )
