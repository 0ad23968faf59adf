"""Pure channel logic: routing, framing, batching. No broker."""

from __future__ import annotations

import io
import subprocess
import sys
from typing import Any

import pytest
from fastavro import schemaless_reader

from spillway.channels.config import ChannelSettings, KafkaSettings
from spillway.channels.errors import (
    ConfigError,
    PipelineDefinitionError,
    RecordTooLargeError,
    SchemaMismatchError,
)
from spillway.channels.ids import SubtaskId, offset
from spillway.channels.naming import (
    changelog_topic,
    channel_topic,
    checkpoint_topic,
    job_id,
    operator_name,
)
from spillway.channels.routing.partitioners import (
    Broadcast,
    Forward,
    KeyHash,
    RoundRobin,
    stable_hash,
)
from spillway.channels.wire.batcher import Batcher
from spillway.channels.wire.envelope import (
    Kind,
    RecordCodec,
    decode_data,
    decode_i64,
    encode_i64,
    frame_batch,
    headers,
    read_header,
    read_kind,
    writer_key,
    writer_of,
)

SCHEMA = {
    "type": "record",
    "name": "Event",
    "fields": [{"name": "key", "type": "string"}, {"name": "seq", "type": "long"}],
}


def test_stable_hash_is_the_same_in_another_process() -> None:
    here = [stable_hash(k) for k in ("a", "user-42", 7, b"x", ("a", 1))]
    code = (
        "from spillway.channels.routing.partitioners import stable_hash;"
        "print([stable_hash(k) for k in ('a', 'user-42', 7, b'x', ('a', 1))])"
    )
    there = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert repr(here) == there.strip()


def test_key_hash_spreads_keys_and_is_deterministic() -> None:
    part = KeyHash(lambda r: r["key"], 4)
    targets = [part.targets({"key": f"k{i}"})[0] for i in range(1000)]
    assert targets == [part.targets({"key": f"k{i}"})[0] for i in range(1000)]
    counts = [targets.count(p) for p in range(4)]
    assert min(counts) > 200  # roughly even: 250 expected each


def test_str_and_int_keys_do_not_collide() -> None:
    assert stable_hash("1") != stable_hash(1)


def test_unhashable_key_type_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="cannot be hashed stably"):
        stable_hash(1.5)


def test_forward_round_robin_broadcast() -> None:
    assert Forward(2, 3).targets(None) == (2,)
    with pytest.raises(PipelineDefinitionError, match="forward needs equal parallelism"):
        Forward(3, 3)
    rr = RoundRobin(1, 3)
    assert [rr.targets(None)[0] for _ in range(4)] == [1, 2, 0, 1]
    assert list(Broadcast(3).targets(None)) == [0, 1, 2]


def test_batch_is_a_plain_avro_array_any_consumer_can_decode() -> None:
    codec = RecordCodec(SCHEMA)
    records = [{"key": "a", "seq": i} for i in range(300)]
    value = frame_batch([codec.encode(r) for r in records])
    decoded = schemaless_reader(io.BytesIO(value), {"type": "array", "items": SCHEMA}, None)
    assert decoded == records
    assert codec.decode_batch(value) == records


def test_record_not_matching_schema_names_the_schema() -> None:
    with pytest.raises(SchemaMismatchError, match="Event"):
        RecordCodec(SCHEMA).encode({"key": "a", "seq": "not a number"})


def test_garbage_batch_is_a_schema_error() -> None:
    with pytest.raises(SchemaMismatchError, match="cannot decode"):
        RecordCodec(SCHEMA).decode_batch(b"\x07\xff")


def test_control_headers_and_keys_round_trip() -> None:
    for kind in Kind:
        assert read_kind(headers(kind)) is kind
    assert decode_i64(encode_i64(-5)) == -5
    assert writer_of(writer_key(12)) == 12
    with pytest.raises(SchemaMismatchError, match="version"):
        read_kind([("spw.v", b"9"), ("spw.k", b"d")])
    with pytest.raises(SchemaMismatchError, match="version"):
        read_kind(None)


def test_batcher_flushes_by_size_without_losing_or_reordering() -> None:
    b = Batcher(max_bytes=1024, linger_s=10, topic="t")
    codec = RecordCodec(SCHEMA)
    written: list[bytes] = []
    for i in range(500):
        full = b.add(0, codec.encode({"key": "k" * 20, "seq": i}), now=0.0)
        if full is not None:
            assert len(full) <= 1024
            written.append(full)
    written.extend(batch for _, batch in b.drain())
    out = [r["seq"] for value in written for r in codec.decode_batch(value)]
    assert out == list(range(500))
    assert b.pending_records() == 0


def test_batcher_flushes_by_linger() -> None:
    b = Batcher(max_bytes=4096, linger_s=0.5, topic="t")
    assert b.add(1, b"\x02a\x02", now=10.0) is None
    assert b.due(now=10.4) == []
    due = b.due(now=10.5)
    assert [p for p, _ in due] == [1]
    assert b.due(now=20.0) == []


def test_oversized_record_is_rejected_with_size_and_limit() -> None:
    b = Batcher(max_bytes=1024, linger_s=1, topic="orders")
    with pytest.raises(
        RecordTooLargeError, match=r"record of 5000 bytes for orders\[0\].*1004 bytes"
    ):
        b.add(0, b"x" * 5000, now=0.0)


def test_names_and_ids() -> None:
    job, a, b = job_id("wc-1"), operator_name("split"), operator_name("count")
    assert channel_topic(job, a, b) == "spillway.wc-1.ch.split.count"
    assert changelog_topic(job, b) == "spillway.wc-1.changelog.count"
    assert checkpoint_topic(job, b) == "spillway.wc-1.ckpt.count"
    assert SubtaskId(job, b, 1).transactional_id == "spillway.wc-1.count.1"
    assert str(SubtaskId(job, b, 1)) == "wc-1/count[1]"
    with pytest.raises(ConfigError, match="invalid job id"):
        job_id("has.dot")
    with pytest.raises(ConfigError, match="invalid operator name"):
        operator_name("")
    with pytest.raises(ValueError, match="sentinel"):
        offset(-1001)
    with pytest.raises(ConfigError, match="operator name"):
        operator_name("x" * 65)


def test_settings_validation() -> None:
    with pytest.raises(ConfigError, match="bootstrap"):
        KafkaSettings("  ")
    with pytest.raises(ConfigError, match="min_insync_replicas"):
        KafkaSettings("h:1", replication_factor=1, min_insync_replicas=2)
    with pytest.raises(ConfigError, match=r"transactional\.id"):
        KafkaSettings("h:1", client={"transactional.id": "x"})
    with pytest.raises(ConfigError, match="max_batch_bytes"):
        ChannelSettings(max_batch_bytes=10)
    s = KafkaSettings("h:1", client={"sasl.password": "hunter2", "security.protocol": "SASL_SSL"})
    assert s.redacted()["sasl.password"] == "***"
    assert s.base()["sasl.password"] == "hunter2"


class _FakeProducer:
    """Collects what a ChannelWriter produces (the writer only calls produce)."""

    def __init__(self) -> None:
        self.messages: list[tuple[int, bytes]] = []
        self.headers: list[Any] = []

    def produce(
        self, topic: str, partition: int, key: bytes, value: bytes, headers: object
    ) -> None:
        self.messages.append((partition, value))
        self.headers.append(headers)

    def decoded(self, partition: int) -> list[Any]:
        return [
            r
            for (p, v), h in zip(self.messages, self.headers, strict=True)
            if p == partition
            for r in decode_data(h, v, SCHEMA)
        ]


@pytest.mark.parametrize("codec", ["arrow", "avro"])
def test_write_many_blocks_and_single_writes_keep_order_and_split_big_groups(codec: str) -> None:
    from typing import cast

    from spillway.channels.writer import ChannelWriter, OutputChannel

    producer = _FakeProducer()
    channel = OutputChannel("t", SCHEMA, KeyHash(lambda r: r["key"], 2), 2)
    settings = ChannelSettings(max_batch_bytes=1024, codec=codec)
    writer = ChannelWriter(cast(Any, producer), channel, 0, settings, clock=lambda: 0.0)
    records = [{"key": f"k{i % 5}", "seq": i} for i in range(2000)]
    writer.write_many([records[0]])
    writer.write_many(records[1:1500])  # far more than one 1 KiB message per partition
    writer.write_many([records[1500]])
    writer.write_many(records[1501:])
    writer.flush_batches()
    assert all(len(v) <= 1024 for _, v in producer.messages)
    version = b"2" if codec == "arrow" else b"1"
    assert all(read_header(h) == (Kind.DATA, version) for h in producer.headers)
    route = KeyHash(lambda r: r["key"], 2)
    for p in range(2):
        assert producer.decoded(p) == [r for r in records if route.targets(r)[0] == p]
    assert sum(writer.counts) == 2000


def test_write_many_names_the_record_that_does_not_fit_the_schema() -> None:
    from typing import Any, cast

    from spillway.channels.writer import ChannelWriter, OutputChannel

    channel = OutputChannel("t", SCHEMA, Forward(0, 1), 1)
    for codec in ("arrow", "avro"):
        producer = _FakeProducer()
        writer = ChannelWriter(cast(Any, producer), channel, 0, ChannelSettings(codec=codec))
        with pytest.raises(SchemaMismatchError, match="'seq': 'x'"):
            writer.write_many([{"key": "a", "seq": 1}, {"key": "b", "seq": "x"}])
        with pytest.raises(SchemaMismatchError, match=r"record \{'key': 'a'\}.*seq"):
            writer.write_many([{"key": "a"}])
        with pytest.raises(SchemaMismatchError, match=r"record \{'key': None"):
            writer.write_many([{"key": None, "seq": 3}])
        with pytest.raises(SchemaMismatchError, match=r"record \['a', 1\] does not match"):
            writer.write_many([["a", 1]])
        writer.flush_batches()
        assert producer.messages == []  # nothing of a failed call was buffered


def test_a_wide_schema_in_small_batches_keeps_avro() -> None:
    from typing import cast

    from spillway.channels.writer import ChannelWriter, OutputChannel

    wide = {
        "type": "record",
        "name": "Wide",
        "fields": [{"name": f"f{i}", "type": ["null", "long"]} for i in range(40)],
    }
    channel = OutputChannel("t", wide, Forward(0, 1), 1)
    producer = _FakeProducer()
    writer = ChannelWriter(cast(Any, producer), channel, 0, ChannelSettings(max_batch_bytes=1024))
    writer.write_many([{f"f{i}": i for i in range(40)}])
    writer.flush_batches()
    assert [read_header(h)[1] for h in producer.headers] == [b"1"]
    assert decode_data(producer.headers[0], producer.messages[0][1], wide)[0]["f39"] == 39
