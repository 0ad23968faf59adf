"""The columnar aggregation's operator context and a changelog partition kept in a list
(no broker): test_batchagg, test_aggregations and test_tombstones share them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spillway.channels.ids import JobId, OperatorName, SubtaskId, TopicPartition
from spillway.recovery.restore.state import ChangelogState


@dataclass
class Ctx:
    """The columnar aggregation's context: subtask ``agg[0]``, its changelog state, its
    watermark."""

    subtask: SubtaskId = field(
        default_factory=lambda: SubtaskId(JobId("j"), OperatorName("agg"), 0)
    )
    state: ChangelogState = field(default_factory=lambda: ChangelogState(TopicPartition("c", 0)))
    watermark: int | None = None


class Log:
    """A changelog partition as a list: the producer side and the consumer side."""

    def __init__(self) -> None:
        self.log: list[tuple[bytes, bytes | None]] = []
        self.next = 0

    def produce(self, topic: str, partition: int, key: bytes, value: bytes | None) -> None:
        self.log.append((key, value))

    def watermarks(self, tp: TopicPartition) -> tuple[int, int]:
        return 0, len(self.log)

    def assign(self, starts: dict[TopicPartition, int]) -> None:
        self.next = int(next(iter(starts.values())))

    def consume(self, n: int, timeout: float) -> list[Any]:
        out = [LogMsg(i, *self.log[i]) for i in range(self.next, min(self.next + n, len(self.log)))]
        self.next += len(out)
        return out

    def position(self, tp: TopicPartition) -> int:
        return self.next


@dataclass
class LogMsg:
    """A message read from :class:`Log`: its offset, key and value."""

    off: int
    k: bytes
    v: bytes | None

    def offset(self) -> int:
        return self.off

    def key(self) -> bytes:
        return self.k

    def value(self) -> bytes | None:
        return self.v
