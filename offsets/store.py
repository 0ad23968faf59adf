"""The checkpoint store: one topic per operator, partition = subtask index.

Each checkpoint is one record written *inside* the subtask's transaction, together with
its outputs, changelog records and consumer positions — so a checkpoint is visible to
read_committed readers exactly when its outputs are. The latest checkpoint is found by
reading a short tail of the subtask's partition (one record and one transaction marker
per checkpoint); the last ``keep`` are retained and older ones deleted with
``DeleteRecords``, so lookups stay cheap however long the job runs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from confluent_kafka import Message

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import RetentionGapError, UndecidedTransactionError
from spillway.channels.ids import JobId, Offset, OperatorName, SubtaskId, TopicPartition
from spillway.channels.kafka.admin import Admin, TopicSpec
from spillway.channels.kafka.consumer import AssignedConsumer
from spillway.channels.kafka.producer import TransactionalProducer
from spillway.channels.naming import checkpoint_topic
from spillway.offsets.checkpoint import Checkpoint

log = logging.getLogger("spillway.checkpoints")

CHECKPOINT_TOPIC_CONFIG = {"cleanup.policy": "delete", "retention.ms": "-1"}
_SCAN_WAIT_S = 0.01  # per consume() call while reading a range of the checkpoint topic
SETTLE_TIMEOUT_S = 120.0  # how long settle() waits for an undecided transaction


class CheckpointStore:
    """Reads and writes the checkpoints of one operator's subtasks."""

    def __init__(
        self, settings: KafkaSettings, job: JobId, operator: OperatorName, parallelism: int
    ) -> None:
        self.settings = settings
        self.topic = checkpoint_topic(job, operator)
        self.parallelism = parallelism
        self._job = job
        self._consumer: AssignedConsumer | None = None
        self._raw: AssignedConsumer | None = None  # read_uncommitted, for settle()
        # Kept like the reader: requests of a new admin client now and then stalled for
        # exactly 1.0 or 3.0 s in bench.checkpoints (one per prune, every 10 checkpoints).
        self._admin: Admin | None = None

    def topic_spec(self) -> TopicSpec:
        """The checkpoint topic this operator needs."""
        return TopicSpec(self.topic, self.parallelism, CHECKPOINT_TOPIC_CONFIG)

    def write(self, producer: TransactionalProducer, checkpoint: Checkpoint) -> None:
        """Add ``checkpoint`` to the producer's open transaction."""
        producer.produce(
            self.topic,
            checkpoint.subtask.index,
            str(int(checkpoint.checkpoint_id)).encode(),
            checkpoint.to_bytes(),
        )

    def settle(self, index: int, timeout_s: float = SETTLE_TIMEOUT_S) -> None:
        """Return once no transaction on subtask ``index``'s partition is undecided: its
        last stable offset has reached its high watermark. :class:`UndecidedTransactionError`
        after ``timeout_s``.

        Call it after fencing the subtask's transactional id and before choosing its latest
        checkpoint. Fencing does not wait for every commit marker: after a broker restart
        the coordinator can hold a transaction as complete while the markers of its
        commit are still to be written (a partition without a leader yet), and meanwhile
        read_committed readers see the checkpoint *before* it. Restoring from that one
        would process again what the committed transaction already wrote (seen in the
        chaos run: a checkpoint became visible 14 s after the next attempt restored).
        Nothing else writes to this partition once the id is fenced, so waiting ends.
        """
        tp = TopicPartition(self.topic, index)
        deadline = time.monotonic() + timeout_s
        pause = 0.05
        while True:
            _, stable = self._reader().watermarks(tp)
            _, high = self._raw_reader().watermarks(tp)
            if stable >= high:
                return
            if time.monotonic() > deadline:
                raise UndecidedTransactionError(
                    f"{tp}: a transaction is still undecided after {timeout_s:.0f}s (last "
                    f"stable offset {stable}, high watermark {high}); the latest checkpoint "
                    "cannot be known. The subtask is retried; if this persists, check the "
                    "broker's transaction coordinator"
                )
            log.warning(
                "%s: waiting for an undecided transaction (last stable offset %d < high "
                "watermark %d) before reading the latest checkpoint",
                tp,
                stable,
                high,
            )
            time.sleep(pause)
            pause = min(1.0, pause * 2)

    def latest(self, index: int) -> Checkpoint | None:
        """The newest committed checkpoint of subtask ``index``, or ``None`` if it has none."""
        history = self.history(index, 1)
        return history[-1] if history else None

    def history(self, index: int, n: int) -> list[Checkpoint]:
        """Up to ``n`` newest committed checkpoints of subtask ``index``, oldest first."""
        tp = TopicPartition(self.topic, index)
        consumer = self._reader()
        low, high = consumer.watermarks(tp)
        window = 2 * n + 4  # a record and a marker per checkpoint, plus a few aborted ones
        while True:
            start = max(low, high - window)
            found = self._read_range(consumer, tp, start, high)
            if len(found) >= n or start == low:
                return found[-n:]
            window *= 4

    def tail(self, tp: TopicPartition, n: int) -> list[Message]:
        """Up to the last ``n`` committed messages of ``tp`` (any topic), oldest first, read
        with this store's reader (a restart reads its progress mark with it: one client
        fewer to connect)."""
        consumer = self._reader()
        low, high = consumer.watermarks(tp)
        return self._scan(consumer, tp, max(low, high - n), high)

    def get(self, index: int, checkpoint_id: int, search: int = 100) -> Checkpoint | None:
        """A retained checkpoint of subtask ``index`` by id (searching the last ``search``)."""
        for c in self.history(index, search):
            if c.checkpoint_id == checkpoint_id:
                return c
        return None

    def prune(self, index: int, keep: int, keep_global: int = 0) -> None:
        """Delete all but the newest ``keep`` checkpoints of subtask ``index``.

        ``keep_global > 0``: also keep everything from this subtask's part of its newest
        ``keep_global`` global checkpoints on, so a job can be rewound to any of them
        (``DeleteRecords`` cuts a prefix, so what lies between is kept too).
        """
        tp = TopicPartition(self.topic, index)
        consumer = self._reader()
        low, high = consumer.watermarks(tp)
        if not keep_global:
            offsets = self._read_offsets(consumer, tp, max(low, high - 2 * keep - 8), high)
            if len(offsets) > keep:
                self._admin_client().delete_records_before({tp: offsets[-keep]})
            return
        found = [
            (m.offset() or 0, Checkpoint.from_bytes(m.value() or b"", where=f"at {tp}"))
            for m in self._scan(consumer, tp, low, high)
        ]
        cut = prune_point(
            [(off, c.meta.global_id is not None) for off, c in found], keep, keep_global
        )
        if cut is not None and cut > low:
            self._admin_client().delete_records_before({tp: cut})

    def _read_range(
        self, consumer: AssignedConsumer, tp: TopicPartition, start: int, end: int
    ) -> list[Checkpoint]:
        return [
            Checkpoint.from_bytes(m.value() or b"", where=f"at {tp} offset {m.offset()}")
            for m in self._scan(consumer, tp, start, end)
        ]

    def _read_offsets(
        self, consumer: AssignedConsumer, tp: TopicPartition, start: int, end: int
    ) -> list[int]:
        return [m.offset() or 0 for m in self._scan(consumer, tp, start, end)]

    def _scan(
        self, consumer: AssignedConsumer, tp: TopicPartition, start: int, end: int
    ) -> list[Message]:
        """Committed messages of ``tp`` in ``[start, end)`` (``end``: a last stable offset)."""
        out: list[Message] = []
        if start >= end:
            return out
        consumer.assign({tp: Offset(start)})
        deadline = time.monotonic() + self.settings.request_timeout_s
        while time.monotonic() < deadline:
            # A short wait: consume() returns early only once it has all it asked for, and
            # the range holds fewer messages than offsets (a commit marker per checkpoint),
            # so a long wait was always waited out in full (0.2 s of every restart).
            out.extend(consumer.consume(100, _SCAN_WAIT_S))
            pos = consumer.position(tp)  # moves past transaction markers too
            if pos is not None and pos >= end:
                consumer.unassign()
                return out
        raise RetentionGapError(f"could not read checkpoints {tp} [{start}, {end}) in time")

    def _reader(self) -> AssignedConsumer:
        if self._consumer is None:
            # Short fetch waits: a fetch waiting at the broker for data at a partition's end
            # holds up the next read of another partition (one fetch per broker at a time),
            # and a restart reads two (its checkpoints, then its read mark): the default
            # 100 ms wait cost 0.1-0.3 s (bench.restart). Unassigned between reads, it does
            # not fetch while idle.
            self._consumer = AssignedConsumer(
                self.settings,
                f"spillway.{self._job}.ckpt-reader",
                extra={"fetch.wait.max.ms": 5},
            )
        return self._consumer

    def _raw_reader(self) -> AssignedConsumer:
        # read_uncommitted: its high watermark counts undecided transactions too.
        if self._raw is None:
            self._raw = AssignedConsumer(
                self.settings,
                f"spillway.{self._job}.ckpt-settle",
                extra={"isolation.level": "read_uncommitted"},
            )
        return self._raw

    def _admin_client(self) -> Admin:
        if self._admin is None:
            self._admin = Admin(self.settings)
        return self._admin

    def close(self) -> None:
        """Release the reader and the admin client."""
        for c in (self._consumer, self._raw):
            if c is not None:
                c.close()
        self._consumer = self._raw = None
        self._admin = None


def prune_point(
    records: list[tuple[int, bool]], keep: int, keep_global: int, limit: int = 500
) -> int | None:
    """First offset to keep, given ``(offset, is_global)`` per checkpoint record, oldest first.

    Keeps the newest ``keep`` records and everything from the ``keep_global``-th newest
    global one on (from the oldest global one if there are fewer) — but never more than
    ``limit`` records, so a job whose coordinator stopped does not grow without bound.
    ``None``: nothing to delete.
    """
    if len(records) <= keep:
        return None
    cut = records[-keep][0]
    globals_ = [off for off, is_global in records if is_global and keep_global > 0]
    if globals_:
        cut = min(cut, globals_[-keep_global] if len(globals_) >= keep_global else globals_[0])
    if len(records) > limit:
        cut = max(cut, records[-limit][0])
    return cut if cut > records[0][0] else None


def check_retention(
    subtask: SubtaskId,
    needed: Mapping[TopicPartition, Offset],
    watermarks: Mapping[TopicPartition, tuple[int, int]],
) -> None:
    """Fail loudly if a partition's low watermark passed an offset a checkpoint still needs.

    Replaying from a deleted offset would silently lose records, so this raises
    :class:`RetentionGapError` with the numbers instead.
    """
    gaps = [
        f"{tp}: checkpoint needs offset {off} but the log starts at {watermarks[tp][0]} "
        f"({watermarks[tp][0] - off} records lost)"
        for tp, off in sorted(needed.items())
        if tp in watermarks and watermarks[tp][0] > off
    ]
    if gaps:
        raise RetentionGapError(
            f"{subtask}: retention deleted channel data still needed for replay: "
            + "; ".join(gaps)
            + ". Raise retention.ms of the channel topics above the checkpoint retention",
            subtasks=[subtask],
        )


def commit_checkpoint(
    producer: TransactionalProducer,
    store: CheckpointStore,
    checkpoint: Checkpoint,
    group_metadata: object,
    reached: Callable[[str], None] | None = None,
) -> None:
    """Commit ``checkpoint`` atomically with everything already produced in the transaction.

    The record, the consumer positions (to the subtask's own group, so Kafka's lag tools
    show them) and the outputs commit together, or none of them does. ``reached`` is the
    failure-injection hook (``spillway.recovery.runtime.faults``): called with ``"before-commit"``,
    ``"after-send-offsets"`` and ``"during-commit"`` (just before the commit call).
    """
    store.write(producer, checkpoint)
    if reached is not None:
        reached("before-commit")
    producer.send_offsets(checkpoint.reader.inputs, group_metadata)
    if reached is not None:
        reached("after-send-offsets")
        reached("during-commit")
    producer.commit()
