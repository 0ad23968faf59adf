"""Sources with checkpointable positions: a seeded generator and files read with pyarrow."""

from __future__ import annotations

import glob
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Message

from spillway.channels.errors import ConfigError, RecordError
from spillway.channels.ids import Offset, TopicPartition
from spillway.channels.kafka.admin import Admin
from spillway.channels.kafka.consumer import AssignedConsumer
from spillway.channels.wire.stamps import stamped
from spillway.offsets.store import check_retention
from spillway.recovery.job.origins import (
    UNKNOWN,
    FileLine,
    Origins,
    Runs,
    TopicOffset,
    line_runs,
    topic_runs,
)
from spillway.recovery.job.plan import Context, Record, Rejected
from spillway.spark_jobs.connectors.batchavro import AvroRecords
from spillway.spark_jobs.connectors.confluentavro import RegistryAvroRecords
from spillway.spark_jobs.connectors.confluentjson import RegistryJsonRecords
from spillway.spark_jobs.connectors.confluentproto import RegistryProtoRecords
from spillway.spark_jobs.modes import FileFormat
from spillway.spark_jobs.records.lines import (
    LineError,
    field_types,
    parse_csv,
    parse_csv_header,
    parse_json_value,
    parse_jsonl,
)
from spillway.spark_jobs.records.tombstones import DELETED, KeyedDecoder
from spillway.spark_jobs.records.watermarks import Watermarks, WatermarkTracker, event_time


class GeneratorSource:
    """Records ``make(i)`` for ``i`` in ``0..count-1``; subtask k of p takes ``i ≡ k (mod p)``.

    Deterministic in ``i``, so a batch reference can recompute exactly what was emitted.
    ``count=None`` is unbounded. ``rate`` caps records per second per subtask.
    ``event_time(record)``: the record's timestamp (ms); watermarks then follow
    ``watermarks`` (default: :meth:`Watermarks.monotonic`).
    Position: the next ``i`` to emit, and the watermark bookkeeping.
    """

    def __init__(
        self,
        make: Callable[[int], Record],
        count: int | None,
        parallelism: int,
        rate: float | None = None,
        event_time: Callable[[Record], int] | None = None,
        watermarks: Watermarks | None = None,
    ) -> None:
        self.make, self.count, self.p, self.rate, self.event_time = (
            make,
            count,
            parallelism,
            rate,
            event_time,
        )
        self.watermarks = watermarks or Watermarks.monotonic()
        self._next = 0
        self._first = 0
        self._tracker: WatermarkTracker | None = None
        self._t0 = 0.0
        self._emitted = 0

    def open(self, ctx: Context, position: Mapping[str, Any]) -> None:
        """Continue after the last checkpointed record."""
        self._first = ctx.subtask.index
        self._next = int(position.get("next", ctx.subtask.index))
        self._t0 = time.monotonic()
        if self.event_time is not None:
            self._tracker = WatermarkTracker(self.watermarks, [0], self._t0)
            self._tracker.restore(position)

    def read(self, max_records: int) -> list[Record] | None:
        """Up to ``max_records`` new records, or ``None`` when ``count`` is reached."""
        if self.count is not None and self._next >= self.count:
            return None
        n = max_records
        if self.rate is not None:
            allowed = int((time.monotonic() - self._t0) * self.rate) - self._emitted
            if allowed <= 0:
                time.sleep(min(0.05, 1 / self.rate))
                return []
            n = min(n, allowed)
        stop = self._next + n * self.p
        if self.count is not None:
            stop = min(stop, self.count)
        first = self._next
        out = [self.make(i) for i in range(first, stop, self.p)]
        self._next = first + len(out) * self.p
        self._emitted += len(out)
        if self._tracker is not None and out:
            fn, now = self.event_time, time.monotonic()
            assert fn is not None
            for n, r in enumerate(out):
                try:
                    t = event_time(fn, r)
                except RecordError as e:
                    raise RecordError(f"generated record {first + n * self.p}: {e}") from e
                self._tracker.observe(0, t, now)
        return out

    def progress(self) -> tuple[int, int] | None:
        """(records emitted, records to emit) by this subtask; None when unbounded."""
        if self.count is None:
            return None
        k = self._first
        return len(range(k, min(self._next, self.count), self.p)), len(range(k, self.count, self.p))

    def position(self) -> dict[str, Any]:
        """The next index and the watermark so far."""
        if self._tracker is None:
            return {"next": self._next, "watermark": None}
        return {"next": self._next, **self._tracker.position()}

    def watermark(self) -> int | None:
        """Largest event time read minus the strategy's bound (``None``: no event time)."""
        return None if self._tracker is None else self._tracker.current(time.monotonic())

    def idle(self) -> bool:
        """Idle once nothing was generated for the strategy's idle timeout."""
        return self._tracker is not None and self._tracker.idle(time.monotonic())

    def reread(self, since: Mapping[str, Any], until: Mapping[str, Any]) -> dict[str, Any] | None:
        """The indices ``[from, to)`` between two positions and how many are this subtask's."""
        a, b = int(since["next"]), int(until["next"])
        return {"index": [a, b], "records": len(range(a, b, self.p))} if b > a else None

    def rejected(self) -> list[Rejected]:
        """Generated records are never unreadable."""
        return []

    def origins(self) -> Origins:
        """Generated records come from no file or topic."""
        return UNKNOWN


class FileSource:
    """JSONL, CSV or Parquet files; file i goes to subtask ``i % p``.

    JSONL and CSV are read line by line (:mod:`spillway.spark_jobs.records.lines`), so one bad line
    — not
    UTF-8, not JSON, wrong column count, NaN, a number the schema cannot hold — is
    reported by :meth:`rejected` with its file and line instead of spoiling the file;
    CSV values may not span lines. Parquet is typed and read whole with pyarrow.

    ``timestamp(record)``: event time (ms); a subtask reads its files one after another, so
    its watermark is the largest event time read minus ``watermarks``' bound.

    Position: this subtask's file list (fixed at the first start), the index of the current
    file in it and the next row — for JSONL and CSV the index of the next data line
    (blank and bad lines included), so a restart neither repeats nor skips a line — and,
    with event time, the watermark bookkeeping.
    """

    def __init__(
        self,
        pattern: str,
        fmt: FileFormat,
        parallelism: int,
        schema: Mapping[str, Any] | None = None,
        timestamp: Callable[[Record], int] | None = None,
        watermarks: Watermarks | None = None,
    ) -> None:
        self.pattern, self.fmt, self.p = pattern, fmt, parallelism
        self.timestamp, self.watermarks = timestamp, watermarks or Watermarks.monotonic()
        self._tracker: WatermarkTracker | None = None
        self._fields = field_types(schema)
        self._files: list[str] = []
        self._file = 0
        self._row = 0
        self._rows: list[Any] | None = None  # parquet: records; jsonl/csv: data lines (bytes)
        self._header: list[str] | None = None
        self._rejected: list[Rejected] = []
        self._origins: Origins = UNKNOWN

    def open(self, ctx: Context, position: Mapping[str, Any]) -> None:
        """List this subtask's files and continue at the checkpointed file and row."""
        saved = position.get("files")
        if saved is not None:
            # The file list is fixed at the first start: files appearing or vanishing later
            # must not shift what (file, row) points at.
            self._files = [str(f) for f in saved]
        else:
            files = sorted(glob.glob(self.pattern))
            if not files:
                raise ConfigError(f"no input files match {self.pattern!r}")
            self._files = files[ctx.subtask.index :: self.p]
        self._file = int(position.get("file", 0))
        self._row = int(position.get("row", 0))
        self._rows = None
        if self.timestamp is not None:
            self._tracker = WatermarkTracker(self.watermarks, [0], time.monotonic())
            self._tracker.restore(position)

    def read(self, max_records: int) -> list[Record] | None:
        """The records of the next (up to ``max_records``) rows; ``None`` after the last file."""
        self._rejected = []
        self._origins = UNKNOWN  # parquet rows: no line numbers
        while self._file < len(self._files):
            if self._rows is None:
                self._load(Path(self._files[self._file]))
                assert self._rows is not None
            if self._row < len(self._rows):
                chunk = self._rows[self._row : self._row + max_records]
                first = self._row
                self._row += len(chunk)
                if self.fmt == "parquet":
                    return self._timed(chunk, first)
                return self._parse(chunk, first)
            self._file, self._row, self._rows = self._file + 1, 0, None
        return None

    def position(self) -> dict[str, Any]:
        """This subtask's file list, the file index and the next row (and the watermark)."""
        pos = {"files": self._files, "file": self._file, "row": self._row}
        return pos if self._tracker is None else {**pos, **self._tracker.position()}

    def progress(self) -> tuple[int, int]:
        """(files read, files known) of this subtask."""
        return min(self._file, len(self._files)), len(self._files)

    def watermark(self) -> int | None:
        """Largest event time read minus the bound; ``None`` without ``timestamp``."""
        return None if self._tracker is None else self._tracker.current(time.monotonic())

    def idle(self) -> bool:
        """Idle once no row was read for the strategy's idle timeout."""
        return self._tracker is not None and self._tracker.idle(time.monotonic())

    def _timed(self, rows: list[Record], first: int) -> list[Record]:
        """Parquet ``rows`` (from row index ``first``), their event times noted."""
        if self._tracker is None or self.timestamp is None:
            return rows
        now = time.monotonic()
        for n, r in enumerate(rows, first):
            try:
                t = event_time(self.timestamp, r)
            except RecordError as e:
                raise RecordError(f"{self._files[self._file]} row {n + 1}: {e}") from e
            self._tracker.observe(0, t, now)
        return rows

    def reread(self, since: Mapping[str, Any], until: Mapping[str, Any]) -> dict[str, Any] | None:
        """The lines (parquet: rows) between two positions, per file: ``[file, first, end)``,
        1-based line numbers as editors count (``end`` ``None``: to the end of the file)."""
        files = [str(f) for f in until.get("files") or since.get("files") or self._files]
        a = (int(since.get("file", 0)), int(since.get("row", 0)))
        b = (int(until.get("file", 0)), int(until.get("row", 0)))
        if b <= a:
            return None
        base = 0 if self.fmt == "parquet" else 2 if self.fmt == "csv" else 1
        spans: list[list[Any]] = []
        for f in range(a[0], min(b[0], len(files) - 1) + 1):
            first = a[1] if f == a[0] else 0
            end = b[1] if f == b[0] else None
            if end is None or end > first:
                spans.append([files[f], first + base, None if end is None else end + base])
        return {"rows" if self.fmt == "parquet" else "lines": spans} if spans else None

    def rejected(self) -> list[Rejected]:
        """The lines the last :meth:`read` could not parse, with file, line and reason."""
        return self._rejected

    def origins(self) -> Origins:
        """File and line of each record of the last :meth:`read` (JSONL and CSV)."""
        return self._origins

    def _load(self, path: Path) -> None:
        if self.fmt == "parquet":
            self._rows = _read_parquet(path)
            return
        try:
            lines = path.read_bytes().splitlines()
        except OSError as e:
            raise ConfigError(f"cannot read {path}: {e.strerror}") from e
        self._header = None
        if self.fmt == "csv":
            if not lines:
                raise ConfigError(f"{path} is empty: a CSV file needs a header line")
            try:
                self._header = parse_csv_header(lines[0])
            except LineError as e:
                raise ConfigError(f"{path} line 1 (the header): {e}") from None
            missing = [
                f for f, t in self._fields.items() if f not in self._header and not t.nullable
            ]
            if missing:
                raise ConfigError(
                    f"{path}: the header has no column for {missing}, which the schema requires"
                )
            lines = lines[1:]
        self._rows = lines

    def _parse(self, chunk: list[bytes], first: int) -> list[Record]:
        out: list[Record] = []
        now = time.monotonic()
        origins = self._origins = line_runs(self._files)
        # 1-based line numbers; CSV data starts after the header line.
        base = first + (2 if self.fmt == "csv" else 1)
        for n, raw in enumerate(chunk, base):
            if not raw.strip():
                continue  # blank lines carry no record (pyarrow skips them too)
            try:
                if self._header is None:
                    rec = parse_jsonl(raw, self._fields)
                else:
                    rec = parse_csv(raw, self._header, self._fields)
                if self._tracker is not None and self.timestamp is not None:
                    self._tracker.observe(0, event_time(self.timestamp, rec), now)
            except (LineError, RecordError) as e:
                origin = FileLine(self._files[self._file], n)
                self._rejected.append(Rejected(origin, str(e), raw))
                continue
            out.append(rec)
            origins.add(self._file, n)
        return out


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow raises ArrowInvalid and friends
        raise ConfigError(f"cannot read {path} as parquet: {e}") from e
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


class KafkaTopicSource:
    """JSON records from an existing Kafka topic, read_committed; partition i → subtask i % p.

    A value that is empty, not UTF-8, not JSON, not a JSON object, or holds NaN, Infinity
    or an integer too big for its field
    (:func:`~spillway.spark_jobs.records.lines.parse_json_value`), or
    whose event time cannot be taken, is reported by :meth:`rejected` with its partition
    and offset; field types are checked when the record is written to its channel.

    With ``watermarks``, records have event time: ``timestamp(record)``, or by default the
    Kafka record timestamp; the subtask's watermark is the minimum over its partitions
    (:class:`~spillway.spark_jobs.records.watermarks.WatermarkTracker`).

    ``time_field``: each message's Kafka timestamp (ms) goes into this field of its
    record. ``stamp_time``: each record carries its event time
    (:class:`~spillway.channels.wire.stamps.Timed`), for windows downstream that read it.

    ``key_field``/``tombstones``: the message key as a record field, and tombstones as
    deletion records (:mod:`spillway.spark_jobs.records.tombstones`; a deletion's event time is its
    Kafka
    timestamp); without them an empty value is rejected.

    Position: the next offset per partition (and, for a bounded source, the end offsets
    fixed when the job first started, so a restart ends at the same place), and with
    event time the watermark bookkeeping.
    """

    def __init__(
        self,
        topic: str,
        parallelism: int,
        bounded: bool,
        schema: Mapping[str, Any] | None = None,
        timestamp: Callable[[Record], int] | None = None,
        watermarks: Watermarks | None = None,
        key_field: str | None = None,
        tombstones: bool = False,
        avro: (
            AvroRecords | RegistryAvroRecords | RegistryJsonRecords | RegistryProtoRecords | None
        ) = None,
        time_field: str | None = None,
    ) -> None:
        self.topic, self.p, self.bounded = topic, parallelism, bounded
        self._time_field = time_field  # the Kafka timestamp goes into this field
        # Each record carries its event time (spillway.spark_jobs.operators.stamping): set
        # by the plan where a window downstream reads the carried time.
        self.stamp_time = False
        # Avro values (spark_jobs.connectors.batchavro), or registry-framed ones (Avro or
        # JSON Schema), else JSON.
        self._avro = avro
        self.timestamp, self.watermarks = timestamp, watermarks
        self._fields = field_types(schema)
        self._keys = (
            None if key_field is None else KeyedDecoder(key_field, tombstones, list(self._fields))
        )
        self._consumer: AssignedConsumer | None = None
        self._next: dict[int, int] = {}
        self._ends: dict[int, int] = {}
        self._low: dict[int, int] = {}
        self._tracker: WatermarkTracker | None = None
        self._rejected: list[Rejected] = []
        self._origins: Runs = topic_runs(topic)

    def open(self, ctx: Context, position: Mapping[str, Any]) -> None:
        """Assign this subtask's partitions at the checkpointed offsets."""
        settings = ctx.kafka
        partitions = Admin(settings).partition_counts().get(self.topic)
        if partitions is None:
            raise ConfigError(f"source topic {self.topic!r} does not exist; create it first")
        mine = [p for p in range(partitions) if p % self.p == ctx.subtask.index]
        self._consumer = AssignedConsumer(settings, ctx.subtask.group_id + ".source")
        saved = {int(k): int(v) for k, v in position.get("offsets", {}).items()}
        marks = {p: self._consumer.watermarks(TopicPartition(self.topic, p)) for p in mine}
        needed = {TopicPartition(self.topic, p): Offset(o) for p, o in saved.items()}
        check_retention(
            ctx.subtask, needed, {TopicPartition(self.topic, p): m for p, m in marks.items()}
        )
        # Never read before: start at the log start (earlier records were never ours).
        self._next = {p: saved.get(p, marks[p][0]) for p in mine}
        self._low = {p: marks[p][0] for p in mine}
        ends = position.get("ends")
        self._ends = (
            {int(k): int(v) for k, v in ends.items()}
            if ends
            else ({p: marks[p][1] for p in mine} if self.bounded else {})
        )
        live = {TopicPartition(self.topic, p): Offset(o) for p, o in self._next.items()}
        self._consumer.assign(live)
        if self.watermarks is not None:
            self._tracker = WatermarkTracker(self.watermarks, mine, time.monotonic())
            self._tracker.restore(position.get("watermarks", {}))

    def read(self, max_records: int) -> list[Record] | None:
        """Decoded values (JSON or Avro) of the next committed messages; ``None`` at the end."""
        assert self._consumer is not None
        self._rejected = []
        origins = self._origins = topic_runs(self.topic)
        if self.bounded and all(self._next[p] >= self._ends.get(p, 0) for p in self._next):
            return None
        out: list[Record] = []
        fields = self._fields
        now = time.monotonic()
        for m in self._consumer.consume(min(max_records, 1000), 0.1):
            p, off = m.partition() or 0, m.offset() or 0
            if self.bounded and off >= self._ends.get(p, 0):
                continue
            self._next[p] = off + 1
            value = m.value()
            try:
                if self._avro is not None:
                    record = self._avro.read(value)
                elif self._keys is None:
                    record = parse_json_value(value, fields)
                else:
                    record = self._keys.decode(m.key(), value, fields)
                if self._time_field is not None:
                    record[self._time_field] = self._kafka_time(m)
                if self._tracker is not None:
                    t = self._event_time(m, record)
                    self._tracker.observe(p, t, now)
                    if self.stamp_time:
                        record = stamped(record, t)
            except (LineError, RecordError) as e:
                origin = TopicOffset(self.topic, p, off)
                self._rejected.append(Rejected(origin, str(e), value or b""))
                continue
            out.append(record)
            origins.add(p, off)
        if self.bounded:
            for p, end in self._ends.items():
                pos = self._consumer.position(TopicPartition(self.topic, p))
                if pos is not None and pos >= end:  # only transaction markers were left
                    self._next[p] = max(self._next[p], end)
        return out

    def _event_time(self, m: Message, record: Record) -> int:
        # A deletion record has no values for the timestamp function: its Kafka time counts.
        deletion = self._keys is not None and record.get(DELETED) is True
        if self.timestamp is not None and not deletion:
            return event_time(self.timestamp, record)
        return self._kafka_time(m)

    def _kafka_time(self, m: Message) -> int:
        kind, ms = m.timestamp()
        if kind == TIMESTAMP_NOT_AVAILABLE:
            raise RecordError(
                "the message has no Kafka timestamp; pass timestamp= to read_kafka to "
                "take the event time from the record"
            )
        return int(ms)

    def position(self) -> dict[str, Any]:
        """Next offsets (and the fixed end offsets of a bounded read, and the watermark)."""
        pos = {
            "offsets": {str(p): o for p, o in self._next.items()},
            "ends": {str(p): o for p, o in self._ends.items()},
        }
        if self._tracker is not None:
            pos["watermarks"] = self._tracker.position()
        return pos

    def progress(self) -> tuple[int, int] | None:
        """(offsets read, offsets to read) from the log start to the fixed ends; None when
        unbounded."""
        if not self.bounded:
            return None
        ends, low = dict(self._ends), dict(self._low)
        done = sum(min(self._next.get(p, 0), e) - low.get(p, 0) for p, e in ends.items())
        return max(0, done), sum(max(0, e - low.get(p, 0)) for p, e in ends.items())

    def watermark(self) -> int | None:
        """Min over this subtask's active partitions of (max event time − bound);
        ``None`` without event time."""
        return None if self._tracker is None else self._tracker.current(time.monotonic())

    def idle(self) -> bool:
        """Every partition of this subtask is idle (or it has none)."""
        return self._tracker is not None and self._tracker.idle(time.monotonic())

    def reread(self, since: Mapping[str, Any], until: Mapping[str, Any]) -> dict[str, Any] | None:
        """The offsets ``[from, to)`` between two positions, per partition of the topic."""
        a = {int(p): int(o) for p, o in (since.get("offsets") or {}).items()}
        b = {int(p): int(o) for p, o in (until.get("offsets") or {}).items()}
        spans = {str(p): [a.get(p, o), o] for p, o in sorted(b.items()) if o > a.get(p, o)}
        return {"topic": self.topic, "offsets": spans} if spans else None

    def rejected(self) -> list[Rejected]:
        """The messages the last :meth:`read` could not turn into records, with the reason."""
        return self._rejected

    def origins(self) -> Origins:
        """Partition and offset of each record of the last :meth:`read`."""
        return self._origins
