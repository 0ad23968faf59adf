"""Sources with checkpointable positions: a seeded generator and files read with pyarrow."""

from __future__ import annotations

import glob
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from channels import jsontext
from channels.errors import ConfigError, RecordError
from channels.ids import Offset, TopicPartition
from channels.kafka.admin import Admin
from channels.kafka.consumer import AssignedConsumer
from offsets.store import check_retention
from recovery.plan import Context, Record, Rejected
from spark_jobs.lines import LineError, field_types, parse_csv, parse_csv_header, parse_jsonl

_from_json = jsontext.loads


class GeneratorSource:
    """Records ``make(i)`` for ``i`` in ``0..count-1``; subtask k of p takes ``i ≡ k (mod p)``.

    Deterministic in ``i``, so a batch reference can recompute exactly what was emitted.
    ``count=None`` is unbounded. ``rate`` caps records per second per subtask.
    Position: the next ``i`` to emit.
    """

    def __init__(
        self,
        make: Callable[[int], Record],
        count: int | None,
        parallelism: int,
        rate: float | None = None,
        event_time: Callable[[Record], int] | None = None,
    ) -> None:
        self.make, self.count, self.p, self.rate, self.event_time = (
            make,
            count,
            parallelism,
            rate,
            event_time,
        )
        self._next = 0
        self._wm: int | None = None
        self._t0 = 0.0
        self._emitted = 0

    def open(self, ctx: Context, position: Mapping[str, Any]) -> None:
        """Continue after the last checkpointed record."""
        self._next = int(position.get("next", ctx.subtask.index))
        wm = position.get("watermark")
        self._wm = None if wm is None else int(wm)
        self._t0 = time.monotonic()

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
        out = [self.make(i) for i in range(self._next, stop, self.p)]
        self._next = self._next + len(out) * self.p
        self._emitted += len(out)
        if self.event_time is not None and out:
            self._wm = max(self._wm or 0, max(self.event_time(r) for r in out))
        return out

    def position(self) -> dict[str, Any]:
        """The next index and the watermark so far."""
        return {"next": self._next, "watermark": self._wm}

    def watermark(self) -> int | None:
        """Event times per subtask only grow, so the last one seen is the watermark."""
        return self._wm

    def reread(self, since: Mapping[str, Any], until: Mapping[str, Any]) -> dict[str, Any] | None:
        """The indices ``[from, to)`` between two positions and how many are this subtask's."""
        a, b = int(since["next"]), int(until["next"])
        return {"index": [a, b], "records": len(range(a, b, self.p))} if b > a else None

    def rejected(self) -> list[Rejected]:
        """Generated records are never unreadable."""
        return []


class FileSource:
    """JSONL, CSV or Parquet files; file i goes to subtask ``i % p``.

    JSONL and CSV are read line by line (:mod:`spark_jobs.lines`), so one bad line — not
    UTF-8, not JSON, wrong column count, NaN, a number the schema cannot hold — is
    reported by :meth:`rejected` with its file and line instead of spoiling the file;
    CSV values may not span lines. Parquet is typed and read whole with pyarrow.

    Position: this subtask's file list (fixed at the first start), the index of the current
    file in it and the next row — for JSONL and CSV the index of the next data line
    (blank and bad lines included), so a restart neither repeats nor skips a line.
    """

    FORMATS = ("jsonl", "csv", "parquet")

    def __init__(
        self, pattern: str, fmt: str, parallelism: int, schema: Mapping[str, Any] | None = None
    ) -> None:
        if fmt not in self.FORMATS:
            raise ConfigError(f"file format {fmt!r} is not one of {', '.join(self.FORMATS)}")
        self.pattern, self.fmt, self.p = pattern, fmt, parallelism
        self._fields = field_types(schema)
        self._files: list[str] = []
        self._file = 0
        self._row = 0
        self._rows: list[Any] | None = None  # parquet: records; jsonl/csv: data lines (bytes)
        self._header: list[str] | None = None
        self._rejected: list[Rejected] = []

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

    def read(self, max_records: int) -> list[Record] | None:
        """The records of the next (up to ``max_records``) rows; ``None`` after the last file."""
        self._rejected = []
        while self._file < len(self._files):
            if self._rows is None:
                self._load(Path(self._files[self._file]))
                assert self._rows is not None
            if self._row < len(self._rows):
                chunk = self._rows[self._row : self._row + max_records]
                first = self._row
                self._row += len(chunk)
                if self.fmt == "parquet":
                    return chunk
                return self._parse(chunk, first)
            self._file, self._row, self._rows = self._file + 1, 0, None
        return None

    def position(self) -> dict[str, Any]:
        """This subtask's file list, the file index and the next row."""
        return {"files": self._files, "file": self._file, "row": self._row}

    def watermark(self) -> int | None:
        """Files carry no event-time order."""
        return None

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
        # 1-based line numbers; CSV data starts after the header line.
        base = first + (2 if self.fmt == "csv" else 1)
        for n, raw in enumerate(chunk, base):
            if not raw.strip():
                continue  # blank lines carry no record (pyarrow skips them too)
            try:
                if self._header is None:
                    out.append(parse_jsonl(raw, self._fields))
                else:
                    out.append(parse_csv(raw, self._header, self._fields))
            except LineError as e:
                self._rejected.append(Rejected(self._files[self._file], n, str(e), raw))
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

    Position: the next offset per partition (and, for a bounded source, the end offsets
    fixed when the job first started, so a restart ends at the same place).
    """

    def __init__(self, topic: str, parallelism: int, bounded: bool) -> None:
        self.topic, self.p, self.bounded = topic, parallelism, bounded
        self._consumer: AssignedConsumer | None = None
        self._next: dict[int, int] = {}
        self._ends: dict[int, int] = {}

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
        ends = position.get("ends")
        self._ends = (
            {int(k): int(v) for k, v in ends.items()}
            if ends
            else ({p: marks[p][1] for p in mine} if self.bounded else {})
        )
        live = {TopicPartition(self.topic, p): Offset(o) for p, o in self._next.items()}
        self._consumer.assign(live)

    def read(self, max_records: int) -> list[Record] | None:
        """Decoded values (JSON) of the next committed messages; ``None`` at the bounded end."""
        assert self._consumer is not None
        if self.bounded and all(self._next[p] >= self._ends.get(p, 0) for p in self._next):
            return None
        out: list[Record] = []
        for m in self._consumer.consume(min(max_records, 1000), 0.1):
            p, off = m.partition() or 0, m.offset() or 0
            if self.bounded and off >= self._ends.get(p, 0):
                continue
            try:
                out.append(_from_json(m.value() or b"null"))
            except ValueError as e:
                raise RecordError(f"{self.topic}[{p}] offset {off}: value is not JSON ({e})") from e
            self._next[p] = off + 1
        if self.bounded:
            for p, end in self._ends.items():
                pos = self._consumer.position(TopicPartition(self.topic, p))
                if pos is not None and pos >= end:  # only transaction markers were left
                    self._next[p] = max(self._next[p], end)
        return out

    def position(self) -> dict[str, Any]:
        """Next offsets (and the fixed end offsets of a bounded read)."""
        return {
            "offsets": {str(p): o for p, o in self._next.items()},
            "ends": {str(p): o for p, o in self._ends.items()},
        }

    def watermark(self) -> int | None:
        """No event time."""
        return None

    def reread(self, since: Mapping[str, Any], until: Mapping[str, Any]) -> dict[str, Any] | None:
        """The offsets ``[from, to)`` between two positions, per partition of the topic."""
        a = {int(p): int(o) for p, o in (since.get("offsets") or {}).items()}
        b = {int(p): int(o) for p, o in (until.get("offsets") or {}).items()}
        spans = {str(p): [a.get(p, o), o] for p, o in sorted(b.items()) if o > a.get(p, o)}
        return {"topic": self.topic, "offsets": spans} if spans else None

    def rejected(self) -> list[Rejected]:
        """A value that is not JSON raises a RecordError instead."""
        return []
