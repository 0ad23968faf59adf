"""Event time that travels with each record (spillway.channels.wire.stamps): the carrier
through the channel codecs, routings and parts, and messages written without it. No broker."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, cast

import pytest

from spillway.channels.config import ChannelSettings
from spillway.channels.errors import SchemaMismatchError
from spillway.channels.reader import ChannelReader, InputChannel
from spillway.channels.routing.partitioners import Forward, KeyHash, RoundRobin, Sticky
from spillway.channels.wire.envelope import PART_VERSION, read_header
from spillway.channels.wire.spanning import read_mark
from spillway.channels.wire.stamps import (
    H_TIMES,
    Timed,
    read_times,
    stamped,
    time_of,
    times_header,
    with_times,
)
from spillway.channels.writer import ChannelWriter, OutputChannel
from tests.unit.channelfakes import BLOB_SCHEMA, FakeProducer, LogMsg, ScriptedLog

SCHEMA = BLOB_SCHEMA
TOPIC = "ch"
PART = 1024  # max_batch_bytes: a record of 3000 bytes spans parts


def blob(seq: int, size: int = 10) -> dict[str, Any]:
    data = hashlib.sha256(str(seq).encode()).digest() * (size // 32 + 1)
    return {"key": f"k{seq % 5}", "seq": seq, "data": data[:size]}


def timed(seq: int, size: int = 10) -> Timed:
    # Times out of order and negative ones too: the carrier keeps each record's own.
    t = None if seq % 11 == 10 else (seq * 7919) % 1000 - 100
    return stamped(blob(seq, size), t)


def write(
    codec: str, records: list[Any], partitioner: Any, partitions: int, *, carries: bool = True
) -> FakeProducer:
    producer = FakeProducer()
    channel = OutputChannel(TOPIC, SCHEMA, partitioner, partitions, carries)
    settings = ChannelSettings(max_batch_bytes=PART, codec=codec, linger_s=60)
    writer = ChannelWriter(cast(Any, producer), channel, 0, settings, lambda: 0.0)
    for k in range(0, len(records), 7):  # calls of several records, as operators make
        writer.write_many(records[k : k + 7])
    writer.flush_batches()
    return producer


@dataclass
class Read:
    records: list[Any]
    last: int  # offset of the message's last part


def deliver(producer: FakeProducer, partition: int, *, carries: bool = True) -> list[Read]:
    """The deliveries of ``partition`` (message at offset k: Kafka timestamp 5000 + k)."""
    log = [
        LogMsg(partition, k, key, v, h, ms=5_000 + k)
        for k, (_p, key, v, h) in enumerate(m for m in producer.sent if m[0] == partition)
    ]
    channel = InputChannel(TOPIC, partition, SCHEMA, 1, carries_time=carries)
    reader = ChannelReader(cast(Any, ScriptedLog(log)), [channel])
    reader.start()
    out: list[Read] = []
    while deliveries := reader.poll(1000):
        out.extend(Read(list(d.records), _last_part(log, d.offset)) for d in deliveries)
    return out


def _last_part(log: list[LogMsg], first: int) -> int:
    """The offset of the last message of the record or batch that starts at ``first``."""
    k = first
    while read_header(log[k].h)[1] == PART_VERSION and not _is_last(log[k]):
        k += 1
    return k


def _is_last(m: LogMsg) -> bool:
    return read_mark(m.h).last


def read(producer: FakeProducer, partitions: int, *, carries: bool = True) -> list[Any]:
    """Every record of every partition, as a reader of a carrying channel gets them."""
    return [
        r
        for p in range(partitions)
        for d in deliver(producer, p, carries=carries)
        for r in d.records
    ]


def carried(records: list[Any]) -> list[tuple[int, int | None]]:
    return sorted((r["seq"], time_of(r)) for r in records)


@pytest.mark.parametrize("codec", ["avro", "arrow"])
@pytest.mark.parametrize(
    ("partitioner", "partitions"),
    [
        (Forward(0, 1), 1),
        (KeyHash(lambda r: r["key"], 3), 3),
        (RoundRobin(0, 3), 3),
        (Sticky(0, 4), 4),
    ],
    ids=["forward", "hash", "round-robin", "sticky"],
)
def test_every_record_comes_back_with_its_own_time(
    codec: str, partitioner: Any, partitions: int
) -> None:
    # Small records (many per message), and big ones that span parts.
    records = [timed(i, 3000 if i % 13 == 5 else 10) for i in range(120)]
    producer = write(codec, records, partitioner, partitions)
    sent = [read_header(h)[1] for _p, _k, _v, h in producer.sent]
    assert sent.count(PART_VERSION) >= 8  # the big ones went out as parts
    assert all(any(n == H_TIMES for n, _ in h) for _p, _k, _v, h in producer.sent)
    got = read(producer, partitions)
    assert carried(got) == carried(records)
    assert sorted(got, key=lambda r: r["seq"]) == sorted(records, key=lambda r: r["seq"])


@pytest.mark.parametrize("codec", ["avro", "arrow"])
def test_a_channel_that_carries_no_time_writes_no_header(codec: str) -> None:
    records = [timed(i) for i in range(40)]
    producer = write(codec, records, Forward(0, 1), 1, carries=False)
    assert not any(n == H_TIMES for _p, _k, _v, h in producer.sent for n, _ in h)
    got = read(producer, 1, carries=False)
    assert [type(r) for r in got] == [dict] * 40  # a reader that carries none: plain dicts


@pytest.mark.parametrize("codec", ["avro", "arrow"])
def test_messages_written_without_times_read_with_their_kafka_timestamp(codec: str) -> None:
    # An older job (or a run whose plan carried no time) wrote them; the reader now carries.
    records = [blob(i, 3000 if i == 4 else 100) for i in range(30)]
    producer = write(codec, records, Forward(0, 1), 1, carries=False)
    deliveries = deliver(producer, 0)
    assert len(deliveries) >= 3  # several messages, one of them a record in parts
    for d in deliveries:  # the Kafka timestamp of the message (of its last part)
        assert {time_of(r) for r in d.records} == {5_000 + d.last}
    assert [r for d in deliveries for r in d.records] == records


def test_the_header_packs_int64_times_and_no_time() -> None:
    records = [stamped({}, 0), stamped({}, -(2**63) + 1), stamped({}, 2**63 - 1), {"a": 1}]
    name, value = times_header(records)
    assert name == H_TIMES
    assert len(value) == 32
    assert read_times([("spw.v", b"1"), (name, value)]) == [0, -(2**63) + 1, 2**63 - 1, None]
    assert read_times([("spw.v", b"1")]) is None
    with pytest.raises(SchemaMismatchError, match="not int64 times"):
        read_times([(H_TIMES, b"\x00" * 7)])
    with pytest.raises(SchemaMismatchError, match="a message of 2 records carries 1 times"):
        with_times([{}, {}], [1])


def test_a_timed_record_is_its_fields_and_keeps_its_time_through_copies() -> None:
    import copy
    import pickle

    r = stamped({"a": 1}, 42)
    assert r == {"a": 1}
    assert repr(r) == "{'a': 1}"
    assert time_of(r) == 42
    assert time_of(copy.deepcopy(r)) == 42
    assert time_of(pickle.loads(pickle.dumps(r))) == 42
    assert stamped(r, 7) is r
    assert time_of(r) == 7
    assert time_of({"a": 1}) is None
