"""A consumer that replays a partition's messages from the assigned offset, and data messages
(no broker): test_reader_alignment and test_rewind share them."""

from __future__ import annotations

from spillway.channels.ids import Offset, TopicPartition
from spillway.channels.wire.envelope import Kind
from tests.unit.channelfakes import TP, Msg


class ScriptedConsumer:
    """Replays a partition's messages from the assigned offset."""

    def __init__(self, log: list[Msg]) -> None:
        self.log = log
        self.next = 0

    def assign(self, starts: dict[TopicPartition, Offset]) -> None:
        self.next = int(starts[TP])

    def consume(self, n: int, timeout: float) -> list[Msg]:
        out = [m for m in self.log if m.off >= self.next][:n]
        if out:
            self.next = out[-1].off + 1
        return out


def data(off: int, w: int, v: int) -> Msg:
    """A data message at offset ``off`` from writer ``w`` with value ``v``."""
    return Msg(off, w, Kind.DATA, v)
