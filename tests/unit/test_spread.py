"""An Arrow writer over many partitions (channels/routing/spread.py): order, linger, size,
fallbacks."""

from __future__ import annotations

from typing import Any, cast

import pyarrow as pa

from spillway.channels.config import ChannelSettings
from spillway.channels.routing.partitioners import Broadcast, KeyHash
from spillway.channels.routing.spread import Spread
from spillway.channels.wire.envelope import Kind, decode_data, read_header
from spillway.channels.writer import ChannelWriter, OutputChannel

SCHEMA = {
    "type": "record",
    "name": "Event",
    "fields": [{"name": "key", "type": "string"}, {"name": "seq", "type": "long"}],
}


class _Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[int, bytes, Any]] = []

    def produce(self, topic: str, partition: int, key: bytes, value: bytes, hdrs: Any) -> None:
        self.sent.append((partition, value, hdrs))

    def records(self, partition: int) -> list[Any]:
        return [
            r
            for p, v, h in self.sent
            if p == partition and read_header(h)[0] is Kind.DATA
            for r in decode_data(h, v, SCHEMA)
        ]


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _writer(partitions: int, clock: _Clock, max_bytes: int = 256 * 1024) -> tuple[
    ChannelWriter, _Producer
]:
    producer = _Producer()
    channel = OutputChannel("t", SCHEMA, KeyHash(lambda r: r["key"], partitions), partitions)
    settings = ChannelSettings(max_batch_bytes=max_bytes, linger_s=0.05, codec="arrow")
    return ChannelWriter(cast(Any, producer), channel, 3, settings, clock=clock), producer


def test_spread_take_keeps_the_write_order_per_partition() -> None:
    s = Spread(10**9, 1.0)
    s.add(pa.RecordBatch.from_pylist([{"a": i} for i in range(6)]), [3, 1, 3, 0, 1, 3], 0.0)
    assert not s.due(0.5)
    s.add(pa.RecordBatch.from_pylist([{"a": i} for i in range(6, 9)]), [1, 0, 3], 0.7)
    assert s.due(1.0)  # the first add's records have lingered 1 s
    taken = [(p, [r["a"] for r in b.to_pylist()]) for p, b in s.take()]
    assert taken == [(0, [3, 7]), (1, [1, 4, 6]), (3, [0, 2, 5, 8])]
    assert s.take() == []
    assert not s.due(100.0)


def test_many_partitions_get_few_large_messages_in_write_order() -> None:
    clock = _Clock()
    writer, producer = _writer(64, clock)
    records = [{"key": f"k{i % 1000}", "seq": i} for i in range(20_000)]
    for i in range(0, len(records), 256):  # as the benchmark hands them over
        writer.write_many(records[i : i + 256])
    writer.flush_batches()
    route = KeyHash(lambda r: r["key"], 64)
    for p in range(64):
        assert producer.records(p) == [r for r in records if route.targets(r)[0] == p]
    assert sum(writer.counts) == 20_000
    assert writer.counts == [len(producer.records(p)) for p in range(64)]
    # Split per call, 78 calls x 64 partitions would each make a block (and with a
    # linger of 0 a message); held across partitions, a few messages per partition.
    assert len(producer.sent) <= 3 * 64


def test_held_records_go_out_once_they_lingered() -> None:
    clock = _Clock()
    writer, producer = _writer(8, clock)
    writer.write_many([{"key": f"k{i}", "seq": i} for i in range(100)])
    writer.tick()
    assert producer.sent == []
    clock.now = 0.06  # past linger_s: held since 0.0
    writer.tick()
    assert sum(len(producer.records(p)) for p in range(8)) == 100


def test_a_broadcast_call_flushes_what_is_held_first() -> None:
    clock = _Clock()
    producer = _Producer()
    channel = OutputChannel("t", SCHEMA, KeyHash(lambda r: r["key"], 2), 2)
    settings = ChannelSettings(linger_s=0.05, codec="arrow")
    writer = ChannelWriter(cast(Any, producer), channel, 0, settings, clock=clock)
    first = [{"key": f"k{i}", "seq": i} for i in range(10)]
    writer.write_many(first)
    # Same writer, a record routed to both partitions: the held ones must precede it.
    writer.channel = OutputChannel("t", SCHEMA, Broadcast(2), 2)
    writer.write_many([{"key": "all", "seq": 99}])
    writer.flush_batches()
    route = KeyHash(lambda r: r["key"], 2)
    for p in range(2):
        expected = [r for r in first if route.targets(r)[0] == p] + [{"key": "all", "seq": 99}]
        assert producer.records(p) == expected
