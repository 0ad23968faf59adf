"""A scripted channel message of one partition, shared by the reader tests (no broker)."""

from __future__ import annotations

from dataclasses import dataclass

from channels.envelope import Kind, RecordCodec, encode_i64, frame_batch, headers, writer_key
from channels.ids import Offset, TopicPartition

SCHEMA = {"type": "record", "name": "R", "fields": [{"name": "v", "type": "long"}]}
CODEC = RecordCodec(SCHEMA)
TP = TopicPartition("t", 0)


@dataclass
class Msg:
    off: int
    writer: int
    kind: Kind
    payload: int  # record value, or barrier id

    def topic(self) -> str:
        return TP.topic

    def partition(self) -> int:
        return TP.partition

    def offset(self) -> int:
        return self.off

    def key(self) -> bytes:
        return writer_key(self.writer)

    def value(self) -> bytes:
        if self.kind is Kind.DATA:
            return frame_batch([CODEC.encode({"v": self.payload})])
        return encode_i64(self.payload)

    def headers(self) -> list[tuple[str, bytes]]:
        return headers(self.kind)

    def error(self) -> None:
        return None


class ScriptedConsumer:
    """A reader's consumer that hands out the messages put in :attr:`pending`, once."""

    def __init__(self) -> None:
        self.pending: list[Msg] = []

    def assign(self, starts: dict[TopicPartition, Offset]) -> None:
        pass

    def consume(self, n: int, timeout: float) -> list[Msg]:
        out, self.pending = self.pending, []
        return out
