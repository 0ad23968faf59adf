"""A read_committed consumer with manual assignment (no group membership, no rebalances)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as CkTopicPartition

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import RetentionGapError, SpillwayError
from spillway.channels.ids import Offset, TopicPartition
from spillway.channels.kafka.retry import retrying

log = logging.getLogger("spillway.consumer")


class AssignedConsumer:
    """Reads exactly the partitions it is given, from the offsets it is given.

    ``group_id`` is used only to commit positions inside the writer's transaction
    (``send_offsets_to_transaction``); the consumer never joins the group, so there are
    no rebalances. ``auto.offset.reset=error``: a start offset that retention deleted is
    an error, never a silent jump.
    """

    def __init__(
        self, settings: KafkaSettings, group_id: str, *, extra: Mapping[str, Any] | None = None
    ) -> None:
        self.group_id = group_id
        self._consumer = Consumer(
            {
                # Once queued.min.messages are queued, librdkafka postpones the next fetch
                # by this much (1 s by default). A reader slower than the network (a
                # restore, a busy subtask) drains the queue far sooner and then sits idle
                # for the rest of that second: B4 saw 0.2 s stalls adding up to 1.2 s of a
                # 1.6 s restore of 300k records. Before base(): client settings may override.
                "fetch.queue.backoff.ms": 20,
                **settings.base(),
                "group.id": group_id,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "error",
                "enable.partition.eof": False,
                "fetch.wait.max.ms": 100,
                **(extra or {}),
            }
        )

    def assign(self, starts: Mapping[TopicPartition, Offset]) -> None:
        """Read exactly these partitions, each from its offset (the next offset to read)."""
        self._consumer.assign(
            [CkTopicPartition(tp.topic, tp.partition, int(off)) for tp, off in starts.items()]
        )

    def unassign(self) -> None:
        """Read nothing until the next :meth:`assign` (no fetches while idle)."""
        self._consumer.unassign()

    def consume(self, max_messages: int, timeout_s: float) -> list[Message]:
        """Up to ``max_messages`` committed messages; raises on partition-level errors."""
        msgs = self._consumer.consume(max_messages, timeout_s)
        # No error: the usual case, checked in one comprehension (a batch source's
        # consume() returns up to 10,000 messages, one per record).
        if not [m for m in msgs if m.error() is not None]:
            return msgs
        out: list[Message] = []
        for m in msgs:
            err = m.error()
            if err is None:
                out.append(m)
            elif err.code() == KafkaError._PARTITION_EOF:
                continue
            elif err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                raise RetentionGapError(
                    f"{m.topic()}[{m.partition()}]: the offset to resume from is no longer in the "
                    f"log ({err.str()}); retention deleted records a checkpoint still needs. "
                    "Raise the channel topics' retention.ms above the checkpoint retention"
                )
            else:
                raise SpillwayError(f"consumer {self.group_id}: {err.name()}: {err.str()}")
        return out

    def watermarks(self, tp: TopicPartition, timeout_s: float = 10.0) -> tuple[int, int]:
        """(low, high) of ``tp``; high is the last stable offset under read_committed."""
        try:
            return self._watermarks(tp, timeout_s)
        except KafkaException as e:
            raise SpillwayError(f"cannot read watermarks of {tp}: {e}") from e

    @retrying()
    def _watermarks(self, tp: TopicPartition, timeout_s: float) -> tuple[int, int]:
        # Right after topic creation the leader may not be known yet: a retriable error.
        low, high = self._consumer.get_watermark_offsets(
            CkTopicPartition(tp.topic, tp.partition), timeout=timeout_s, cached=False
        )
        return int(low), int(high)

    def end_offsets(
        self, tps: Sequence[TopicPartition], timeout_s: float = 10.0
    ) -> dict[TopicPartition, int]:
        """The end offsets of ``tps``, in one ListOffsets request per partition leader
        (not one round trip per partition, as :meth:`watermarks`). Under read_committed,
        each is the partition's last stable offset, as :meth:`watermarks`' high. A
        partition whose end cannot be read (its leader not known yet) is left out."""
        if not tps:
            return {}
        try:
            res = self._end_offsets(tps, timeout_s)
        except KafkaException as e:
            raise SpillwayError(f"cannot read the end offsets of {len(tps)} partitions: {e}") from e
        return {
            TopicPartition(r.topic, r.partition): int(r.offset)
            for r in res
            if r.error is None and r.offset >= 0
        }

    @retrying()
    def _end_offsets(self, tps: Sequence[TopicPartition], timeout_s: float) -> list[Any]:
        # Timestamp OFFSET_END (-1) asks for the latest offset, with the consumer's
        # isolation level.
        query = [CkTopicPartition(tp.topic, tp.partition, OFFSET_END) for tp in tps]
        return list(self._consumer.offsets_for_times(query, timeout=timeout_s))

    def position(self, tp: TopicPartition) -> Offset | None:
        """The fetch position of ``tp``: past delivered messages *and* transaction markers."""
        (res,) = self._consumer.position([CkTopicPartition(tp.topic, tp.partition)])
        return Offset(res.offset) if res.offset >= 0 else None

    def group_metadata(self) -> Any:
        """What ``send_offsets_to_transaction`` needs for this subtask's group."""
        return self._consumer.consumer_group_metadata()

    def committed(
        self, tps: list[TopicPartition], timeout_s: float = 10.0
    ) -> dict[TopicPartition, Offset | None]:
        """The group's committed positions (``None`` where nothing was committed)."""
        res = self._consumer.committed(
            [CkTopicPartition(t.topic, t.partition) for t in tps], timeout=timeout_s
        )
        return {
            TopicPartition(r.topic, r.partition): (Offset(r.offset) if r.offset >= 0 else None)
            for r in res
        }

    def close(self) -> None:
        """Leave without committing anything (positions are committed by transactions only)."""
        self._consumer.close()


def read_partition(
    settings: KafkaSettings, tp: TopicPartition, reader: str, timeout_s: float = 5.0
) -> Iterator[Message]:
    """Every committed message of ``tp``, from its start to its end as of the call.

    For the small single-partition topics a job keeps beside its channels (events, dead
    letters). ``reader`` names the consumer's group id (nothing is committed to it).
    Stops at the end, or after ``timeout_s`` without reaching it.
    """
    consumer = AssignedConsumer(settings, reader)
    try:
        low, high = consumer.watermarks(tp)
        if high <= low:
            return
        consumer.assign({tp: Offset(low)})
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            yield from consumer.consume(500, 0.2)
            pos = consumer.position(tp)
            if pos is not None and pos >= high:
                return
    finally:
        consumer.close()
