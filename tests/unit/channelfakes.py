"""Scripted channel messages and logs, and a recording producer, shared by the reader and
writer tests (no broker)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spillway.channels.ids import Offset, TopicPartition
from spillway.channels.wire.envelope import (
    Kind,
    RecordCodec,
    encode_i64,
    frame_batch,
    headers,
    writer_key,
)

SCHEMA = {"type": "record", "name": "R", "fields": [{"name": "v", "type": "long"}]}
CODEC = RecordCodec(SCHEMA)
# Records of any size (test_spanning, test_carried_time): a key, a sequence number, bytes.
BLOB_SCHEMA = {
    "type": "record",
    "name": "Blob",
    "fields": [
        {"name": "key", "type": "string"},
        {"name": "seq", "type": "long"},
        {"name": "data", "type": "bytes"},
    ],
}
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


@dataclass
class LogMsg:
    """A message as the consumer returns it."""

    part: int
    off: int
    k: bytes
    v: bytes
    h: list[tuple[str, bytes]]
    t: str = "ch"  # topic
    ms: int = 0  # the message's Kafka timestamp

    def topic(self) -> str:
        return self.t

    def timestamp(self) -> tuple[int, int]:
        return 1, self.ms  # TIMESTAMP_CREATE_TIME

    def partition(self) -> int:
        return self.part

    def offset(self) -> int:
        return self.off

    def key(self) -> bytes:
        return self.k

    def value(self) -> bytes:
        return self.v

    def headers(self) -> list[tuple[str, bytes]]:
        return self.h

    def error(self) -> None:
        return None


class FakeProducer:
    """What a ChannelWriter produces, in order."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, bytes, bytes, list[tuple[str, bytes]]]] = []

    def produce(self, topic: str, partition: int, key: bytes, value: bytes, headers: Any) -> None:
        self.sent.append((partition, key, value, list(headers)))


class ScriptedLog:
    """Replays a partition log from the assigned offset."""

    def __init__(self, log: list[LogMsg]) -> None:
        self.log = log
        self.next: dict[int, int] = {}

    def assign(self, starts: dict[TopicPartition, Offset]) -> None:
        self.next = {tp.partition: int(o) for tp, o in starts.items()}

    def consume(self, n: int, timeout: float) -> list[LogMsg]:
        out = [m for m in self.log if m.off >= self.next.get(m.part, 0)][:n]
        for m in out:
            self.next[m.part] = m.off + 1
        return out
