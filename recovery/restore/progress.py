"""What a running attempt has read, recorded as it goes, so the next one knows what it re-reads.

A subtask appends a *read mark* — its input positions (the next offset per channel
partition, as a checkpoint records them), its source's position, its attempt — to
partition ``index`` of its operator's progress topic: once restored, every
:data:`MARK_EVERY_S` while its positions move, and at every checkpoint just before the
commit. Outside transactions, because a mark must survive the abort of the transaction it
describes. The topic is compacted on one key, so it keeps little more than each subtask's
last mark.

A restarted attempt reads the last mark (:func:`last_mark`). What lies between its
restored checkpoint and that mark was processed by the dead attempt and is processed
again (*re-processed*); what lies after it is read for the first time. Marks are sent
without waiting, so an attempt killed between two marks may have read up to
``MARK_EVERY_S`` more than its last mark says: the figure is exact as of that mark. Where
there is no usable mark (none written, or one older than the checkpoint), the figure is
the partition's end at restore time instead: an upper bound, and labelled so
(:data:`UPPER_BOUND`).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from confluent_kafka import KafkaError, Message, Producer

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import SpillwayError
from spillway.channels.ids import JobId, Offset, OperatorName, SubtaskId, TopicPartition
from spillway.channels.kafka.admin import TopicSpec
from spillway.channels.kafka.clients import ordered_producer
from spillway.channels.naming import PREFIX
from spillway.recovery.job.plan import Source

log = logging.getLogger("spillway.progress")

MARK_EVERY_S = 0.2
READ = "read"  # re-processing ends where the dead attempt's last mark says it had read
UPPER_BOUND = "upper-bound"  # no usable mark: the partition's end at restore time
_KEY = b"mark"  # one key per partition: compaction keeps the last mark
PROGRESS_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.ms": str(10 * 60 * 1000),  # roll often, so compaction can drop old marks
    "min.cleanable.dirty.ratio": "0.5",
}


def progress_topic(job: JobId, operator: OperatorName) -> str:
    """The read marks of ``operator``'s subtasks; partition = subtask index."""
    return f"{PREFIX}.{job}.progress.{operator}"


def progress_topic_spec(job: JobId, operator: OperatorName, parallelism: int) -> TopicSpec:
    """The progress topic ``operator`` needs."""
    return TopicSpec(progress_topic(job, operator), parallelism, PROGRESS_TOPIC_CONFIG)


@dataclass(frozen=True)
class ReadMark:
    """How far one attempt of a subtask had read at wall time ``time``."""

    attempt: int
    pid: int
    time: float
    inputs: dict[TopicPartition, Offset]  # next offset to read, per channel partition
    source: dict[str, Any] | None  # the source's position (a source or a chain from one)

    def to_bytes(self) -> bytes:
        """JSON, with partitions as ``topic[partition]``."""
        doc = {
            "v": 1,
            "attempt": self.attempt,
            "pid": self.pid,
            "time": self.time,
            "inputs": {str(tp): int(o) for tp, o in self.inputs.items()},
            "source": self.source,
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> ReadMark | None:
        """The mark in ``raw``; ``None`` (logged) if it is not one this version reads."""
        try:
            doc = json.loads(raw)
            if doc.get("v") != 1:
                raise ValueError(f"version {doc.get('v')!r}")
            return cls(
                attempt=int(doc["attempt"]),
                pid=int(doc["pid"]),
                time=float(doc["time"]),
                inputs={_tp(k): Offset(int(v)) for k, v in doc["inputs"].items()},
                source=doc.get("source"),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            log.warning("ignoring an unreadable read mark (%s): %r", e, raw[:200])
            return None


def _tp(text: str) -> TopicPartition:
    topic, _, rest = text.rpartition("[")
    return TopicPartition(topic, int(rest.rstrip("]")))


def replay_ends(
    start: Mapping[TopicPartition, Offset],
    ends: Mapping[TopicPartition, int],
    mark: ReadMark | None,
    restarted: bool,
) -> tuple[dict[TopicPartition, int], str | None]:
    """Where re-processing ends per input partition, and on what basis. Pure.

    ``start``: the restored positions; ``ends``: each partition's end now; ``mark``: the
    last read mark of an earlier attempt; ``restarted``: an earlier attempt existed (a
    checkpoint was restored). A mark at or past ``start`` on every partition gives the
    exact ends (:data:`READ`); without one, a restart re-reads at most up to the ends
    (:data:`UPPER_BOUND`); a first start re-reads nothing. Partitions with nothing to
    re-read are left out.
    """
    read = mark.inputs if mark is not None else {}
    if mark is not None and all(tp in read and read[tp] >= off for tp, off in start.items()):
        return {tp: int(read[tp]) for tp, off in start.items() if read[tp] > off}, READ
    if not restarted and mark is None:
        return {}, None
    return {tp: ends[tp] for tp, off in start.items() if ends[tp] > off}, UPPER_BOUND


@runtime_checkable
class Rereading(Source, Protocol):
    """A source that can say what reading from one of its positions to another re-reads."""

    def reread(self, since: Mapping[str, Any], until: Mapping[str, Any]) -> dict[str, Any] | None:
        """What reading from position ``since`` up to position ``until`` covers (JSON-able,
        in the source's own terms: indices, lines, offsets); ``None`` if nothing, i.e.
        ``since`` is at or past ``until``."""
        ...


class Replay:
    """What a restarted attempt re-reads, counted as it reads (pure bookkeeping).

    ``figure`` is the ``replay`` of the recovery record: ``topic[partition] -> [from, to,
    records re-processed so far]``, ``to`` exclusive.
    """

    def __init__(
        self,
        start: Mapping[TopicPartition, Offset],
        ends: Mapping[TopicPartition, int],
        basis: str | None,
    ) -> None:
        self.ends = dict(ends)
        self.basis = basis
        self.figure: dict[str, list[int]] = {
            str(tp): [int(start[tp]), end, 0] for tp, end in self.ends.items()
        }

    @property
    def pending(self) -> bool:
        """True if any partition has something to re-read."""
        return bool(self.ends)

    def count(self, tp: TopicPartition, offset: int, records: int) -> None:
        """``records`` of the message at ``offset`` of ``tp`` were processed."""
        end = self.ends.get(tp)
        if end is not None and offset < end:
            self.figure[str(tp)][2] += records

    def done(self, positions: Mapping[TopicPartition, Offset]) -> bool:
        """True once every partition's position reached its end."""
        return all(positions.get(tp, Offset(0)) >= end for tp, end in self.ends.items())


class SourceReplay:
    """What a restarted source re-reads: from where it restarts up to ``until``, the position
    its previous attempt had read to (``None``: unknown, or not a restart)."""

    def __init__(self, source: Source | None, until: Mapping[str, Any] | None) -> None:
        self._source = source if isinstance(source, Rereading) else None
        self._until = until if self._source is not None else None
        self.span: dict[str, Any] = {}  # the recovery record's source_replay
        if self._source is not None and self._until is not None:
            span = self._source.reread(self._source.position(), self._until)
            if span is None:
                self._until = None
            else:
                self.span = {**span, "basis": READ}

    @property
    def pending(self) -> bool:
        """True until the source has re-read up to ``until``."""
        return self._until is not None

    def caught_up(self) -> bool:
        """True (once) when the source has just re-read up to ``until``."""
        if self._source is None or self._until is None:
            return False
        if self._source.reread(self._source.position(), self._until) is not None:
            return False
        self._until = None
        return True


class ProgressLog:
    """Writes one subtask's read marks (a producer of its own, made at the first mark)."""

    def __init__(
        self, settings: KafkaSettings, subtask: SubtaskId, every_s: float = MARK_EVERY_S
    ) -> None:
        self._settings = settings
        self.tp = TopicPartition(progress_topic(subtask.job, subtask.operator), subtask.index)
        self._every_s = every_s
        self._producer: Producer | None = None
        self._last_at = 0.0
        self._last: tuple[Any, ...] | None = None
        self._failures = 0

    def due(self, now: float) -> bool:
        """True if a periodic mark is due at monotonic time ``now``."""
        return now - self._last_at >= self._every_s

    def write(
        self,
        attempt: int,
        inputs: Mapping[TopicPartition, Offset],
        source: Mapping[str, Any] | None,
    ) -> None:
        """Send a mark without waiting (nothing if the positions did not move)."""
        self._last_at = time.monotonic()
        key = (tuple(sorted(inputs.items())), json.dumps(source, sort_keys=True, default=str))
        if key == self._last:
            return
        self._last = key
        mark = ReadMark(attempt, os.getpid(), time.time(), dict(inputs), _plain(source))
        if self._producer is None:
            # Not idempotent: that asks for a producer id only after 500 ms (librdkafka).
            # One request in flight keeps marks in order; one that arrives twice only
            # repeats a position.
            self._producer = ordered_producer(self._settings)
        try:
            self._producer.produce(
                self.tp.topic, mark.to_bytes(), _KEY, self.tp.partition, self._delivered
            )
            self._producer.poll(0)
        except Exception as e:  # marks only make replay figures exact: never fail the job
            self._failed(e)

    def flush(self, timeout_s: float = 5.0) -> None:
        """Wait until the marks sent so far are stored (crash points need them there)."""
        if self._producer is not None:
            self._producer.flush(timeout_s)

    def close(self) -> None:
        """Send what is pending (briefly) and drop the producer."""
        if self._producer is not None:
            self._producer.flush(1.0)
            self._producer = None

    def _delivered(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self._failed(err)

    def _failed(self, e: object) -> None:
        self._failures += 1
        if self._failures in (1, 100, 10_000):  # a broken topic must not flood the log
            log.warning(
                "cannot record read marks in %s (%s): replay figures fall back to upper bounds",
                self.tp,
                e,
            )


def last_mark(messages: list[Message]) -> ReadMark | None:
    """The newest mark among ``messages`` (the tail of a progress partition)."""
    for m in reversed(messages):
        mark = ReadMark.from_bytes(m.value() or b"")
        if mark is not None:
            return mark
    return None


def _plain(source: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if source is None else json.loads(json.dumps(source, default=str))


class TailReader(Protocol):
    """Reads the last messages of a partition (``spillway.offsets.store.CheckpointStore.tail``)."""

    def tail(self, tp: TopicPartition, n: int) -> list[Message]: ...


def read_last_mark(reader: TailReader, tp: TopicPartition) -> ReadMark | None:
    """The last mark in progress partition ``tp``; ``None`` if there is none or it cannot
    be read (logged: the replay figure is then an upper bound)."""
    try:
        return last_mark(reader.tail(tp, 1))
    except SpillwayError as e:
        log.warning("cannot read the last read mark of %s (%s)", tp, e)
        return None
