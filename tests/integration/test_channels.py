"""Persistent channels against a real broker: exactly-once delivery, order, fencing, resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from typing import Any

import pytest

from spillway.channels.config import ChannelSettings, KafkaSettings
from spillway.channels.errors import (
    ProducerFencedError,
    RecordTooLargeError,
    SchemaMismatchError,
    TopologyMismatchError,
)
from spillway.channels.ids import CheckpointId, JobId, OperatorName, SubtaskId, TopicPartition
from spillway.channels.kafka.admin import Admin, TopicSpec
from spillway.channels.kafka.consumer import AssignedConsumer
from spillway.channels.kafka.producer import TransactionalProducer
from spillway.channels.naming import channel_topic
from spillway.channels.reader import ChannelReader, InputChannel, ReaderState
from spillway.channels.routing.partitioners import KeyHash
from spillway.channels.wire.envelope import Kind
from spillway.channels.writer import ChannelWriter, OutputChannel
from spillway.offsets.checkpoint import Checkpoint, CheckpointMeta, ReaderPositions
from spillway.offsets.store import CheckpointStore, commit_checkpoint
from tests.integration.support import CHANNEL_SCHEMA as SCHEMA
from tests.integration.support import DOWN, UP, writer_for

pytestmark = pytest.mark.broker


def make_topic(settings: KafkaSettings, job: str) -> str:
    topic = channel_topic(JobId(job), OperatorName("up"), OperatorName("down"))
    Admin(settings).ensure_topics([TopicSpec(topic, DOWN)])
    return topic


def reader_for(settings: KafkaSettings, job: str, topic: str, index: int) -> ChannelReader:
    sub = SubtaskId(JobId(job), OperatorName("down"), index)
    consumer = AssignedConsumer(settings, sub.group_id)
    return ChannelReader(consumer, [InputChannel(topic, index, SCHEMA, UP)])


def read_until_ended(reader: ChannelReader, timeout_s: float = 30) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while not reader.finished():
        assert time.monotonic() < deadline, f"reader did not finish; ended={reader.state.ended}"
        for d in reader.poll(500, 0.2):
            records.extend(d.records)
    return records


def write_all(
    settings: KafkaSettings,
    job: str,
    topic: str,
    per_writer: int,
    codecs: tuple[str, ...] = ("arrow",),
) -> None:
    for i in range(UP):
        producer, writer = writer_for(settings, job, topic, i, codecs[i % len(codecs)])
        producer.begin()
        for seq in range(per_writer):
            record = {"key": f"k{seq % 17}", "writer": i, "seq": seq}
            writer.write_many([record])
            if seq % 1000 == 999:  # several transactions per writer
                writer.flush_batches()
                producer.commit()
                producer.begin()
        writer.end_of_stream()
        producer.commit()
        producer.close()


# Mixed: writers of one channel on different codecs (a rolling change of --channel-codec);
# every reader decodes each message by its header.
@pytest.mark.parametrize("codecs", [("arrow",), ("avro",), ("avro", "arrow")])
def test_every_record_arrives_exactly_once_in_its_partition_in_writer_order(
    kafka_bootstrap: str, unique: str, codecs: tuple[str, ...]
) -> None:
    settings = KafkaSettings(kafka_bootstrap)
    topic = make_topic(settings, unique)
    per_writer = 2500
    write_all(settings, unique, topic, per_writer, codecs)

    seen: list[dict[str, Any]] = []
    route = KeyHash(lambda r: r["key"], DOWN)
    for j in range(DOWN):
        reader = reader_for(settings, unique, topic, j)
        reader.start()
        got = read_until_ended(reader)
        reader.close()
        assert all(route.targets(r)[0] == j for r in got)
        for w in range(UP):  # channel w -> j is FIFO
            seqs = [r["seq"] for r in got if r["writer"] == w]
            assert seqs == sorted(seqs)
        seen.extend(got)
    counts = Counter((r["writer"], r["seq"]) for r in seen)
    assert len(counts) == UP * per_writer
    assert set(counts.values()) == {1}


def test_reader_resumed_from_checkpoint_has_no_gap_and_no_duplicate(
    kafka_bootstrap: str, unique: str
) -> None:
    settings = KafkaSettings(kafka_bootstrap)
    topic = make_topic(settings, unique)
    write_all(settings, unique, topic, 1500)
    sub = SubtaskId(JobId(unique), OperatorName("down"), 0)
    store = CheckpointStore(settings, JobId(unique), OperatorName("down"), DOWN)
    Admin(settings).ensure_topics([store.topic_spec()])

    # First incarnation: read some batches, checkpoint, read more without checkpointing.
    reader = reader_for(settings, unique, topic, 0)
    reader.start()
    producer = TransactionalProducer(settings, sub.transactional_id)
    producer.start()
    producer.begin()
    first: list[dict[str, Any]] = []
    while len(first) < 1000:
        for d in reader.poll(3, 0.5):
            first.extend(d.records)
    ckpt = Checkpoint(
        sub,
        CheckpointId(0),
        CheckpointMeta("fp"),
        ReaderPositions(
            inputs=reader.positions(),
            ended={tp: frozenset(w) for tp, w in reader.state.ended.items()},
        ),
    )
    commit_checkpoint(producer, store, ckpt, reader._consumer.group_metadata())
    uncommitted = [r for d in reader.poll(50, 1.0) for r in d.records]
    assert uncommitted, "the dead incarnation should have read past its checkpoint"
    reader.close()
    producer.close()

    # Second incarnation resumes from the checkpoint it finds in the store.
    restored = store.latest(0)
    assert restored == ckpt
    reader2 = reader_for(settings, unique, topic, 0)
    reader2.start(dict(restored.reader.inputs), restored.reader_state())
    rest = read_until_ended(reader2)
    reader2.close()

    everything = first + rest
    keys = [(r["writer"], r["seq"]) for r in everything]
    assert len(keys) == len(set(keys)), "duplicate after resume"
    route = KeyHash(lambda r: r["key"], DOWN)
    expected = {
        (w, s)
        for w in range(UP)
        for s in range(1500)
        if route.targets({"key": f"k{s % 17}"})[0] == 0
    }
    assert set(keys) == expected, "gap after resume"
    # The per-subtask group shows the checkpointed position to Kafka's lag tools.
    probe = AssignedConsumer(settings, sub.group_id)
    assert (
        probe.committed([TopicPartition(topic, 0)])[TopicPartition(topic, 0)]
        == ckpt.reader.inputs[TopicPartition(topic, 0)]
    )
    probe.close()


_KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {root!r})
    from tests.integration.support import writer_for
    from spillway.channels.config import KafkaSettings
    settings = KafkaSettings({bootstrap!r})
    producer, writer = writer_for(settings, {job!r}, {topic!r}, 0)
    producer.begin()
    for seq in range(100):
        writer.write_many([{{"key": "k", "writer": 0, "seq": seq}}])
    writer.flush_batches()
    producer.commit()
    producer.begin()
    for seq in range(100, 5000):
        writer.write_many([{{"key": "k", "writer": 0, "seq": seq}}])
    writer.flush_batches()
    producer.flush()  # on the broker, inside an open transaction
    print("ready", flush=True)
    time.sleep(600)
    """
)


def test_writer_killed_mid_transaction_leaves_nothing_visible(
    kafka_bootstrap: str, unique: str
) -> None:
    settings = KafkaSettings(kafka_bootstrap)
    topic = make_topic(settings, unique)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = _KILLED_WRITER.format(root=root, bootstrap=kafka_bootstrap, job=unique, topic=topic)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    # The restarted incarnation fences the dead one and aborts its open transaction.
    producer, writer = writer_for(settings, unique, topic, 0)
    producer.begin()
    writer.end_of_stream()
    producer.commit()
    producer.close()

    seen: list[int] = []
    for j in range(DOWN):
        reader = reader_for(settings, unique, topic, j)
        reader.start()
        deadline = time.monotonic() + 30
        while len(reader.ended_writers(TopicPartition(topic, j))) < 1:
            assert time.monotonic() < deadline
            seen.extend(r["seq"] for d in reader.poll(500, 0.2) for r in d.records)
        reader.close()
    assert sorted(seen) == list(range(100))


def test_zombie_writer_is_fenced(kafka_bootstrap: str, unique: str) -> None:
    settings = KafkaSettings(kafka_bootstrap)
    topic = make_topic(settings, unique)
    old, old_writer = writer_for(settings, unique, topic, 1)
    old.begin()
    old_writer.write_many([{"key": "a", "writer": 1, "seq": 0}])
    old_writer.flush_batches()
    new, _ = writer_for(settings, unique, topic, 1)  # same transactional.id
    with pytest.raises(ProducerFencedError, match="fenced"):
        old.commit()
    new.begin()
    new.commit()  # the new incarnation is unaffected
    new.close()


def test_wrong_partition_count_is_a_clear_error(kafka_bootstrap: str, unique: str) -> None:
    settings = KafkaSettings(kafka_bootstrap)
    topic = make_topic(settings, unique)
    Admin(settings).ensure_topics([TopicSpec(topic, DOWN)])  # idempotent
    with pytest.raises(
        TopologyMismatchError, match=rf"{topic} has 2 partitions but this job needs 5"
    ):
        Admin(settings).ensure_topics([TopicSpec(topic, 5)])


def test_schema_mismatch_and_oversized_records_are_clear_errors(
    kafka_bootstrap: str, unique: str
) -> None:
    settings = KafkaSettings(kafka_bootstrap)
    topic = make_topic(settings, unique)
    producer, writer = writer_for(settings, unique, topic, 2)
    producer.begin()
    with pytest.raises(SchemaMismatchError, match="Event"):
        writer.write_many([{"key": "a", "writer": "two", "seq": 1}])
    # A record larger than a message spans several, up to max_record_bytes (framing
    # included); past it the error names the size and the limit.
    too_big = (
        r"record of 10\d\d\d bytes for .*\[\d\] \(writer 2\) exceeds the largest record a "
        r"channel carries, 8192 bytes \(max_record_bytes"
    )
    with pytest.raises(RecordTooLargeError, match=too_big):
        writer.write_many([{"key": "x" * 10_000, "writer": 2, "seq": 1}])
    writer.write_many([{"key": "a", "writer": 2, "seq": 1}])
    writer.end_of_stream()
    producer.commit()
    producer.close()

    # A reader expecting another schema fails on the message, naming where it is.
    other = {
        "type": "record",
        "name": "Other",
        "fields": [{"name": "x", "type": "double"}, {"name": "y", "type": "double"}],
    }
    j = KeyHash(lambda r: r["key"], DOWN).targets({"key": "a"})[0]
    reader = ChannelReader(
        AssignedConsumer(settings, f"g-{unique}"), [InputChannel(topic, j, other, UP)]
    )
    reader.start()

    def poll_until_failure() -> None:
        for _ in range(50):
            reader.poll(10, 0.2)

    with pytest.raises(SchemaMismatchError, match=rf"{topic}\[{j}\] offset 0"):
        poll_until_failure()
    reader.close()


def test_delivery_kinds(kafka_bootstrap: str, unique: str) -> None:
    settings = KafkaSettings(kafka_bootstrap)
    topic = make_topic(settings, unique)
    producer, writer = writer_for(settings, unique, topic, 0)
    producer.begin()
    writer.write_many([{"key": "a", "writer": 0, "seq": 0}])
    writer.watermark(1234)
    writer.barrier(7)
    writer.end_of_stream()
    producer.commit()
    producer.close()
    reader = reader_for(settings, unique, topic, 0)
    reader.start()
    kinds: list[tuple[Kind, int | None]] = []
    deadline = time.monotonic() + 20
    while not reader.ended_writers(TopicPartition(topic, 0)):
        assert time.monotonic() < deadline
        kinds.extend((d.kind, d.value) for d in reader.poll(10, 0.2))
    reader.close()
    assert [k for k, _ in kinds if k is not Kind.DATA] == [
        Kind.WATERMARK,
        Kind.BARRIER,
        Kind.END_OF_STREAM,
    ]
    assert (Kind.WATERMARK, 1234) in kinds
    assert (Kind.BARRIER, 7) in kinds


@pytest.mark.parametrize("codec", ["arrow", "avro"])
def test_records_larger_than_a_message_span_parts_committed_together(
    kafka_bootstrap: str, unique: str, codec: str
) -> None:
    """Records of 10-30 KB through 4 KiB messages (spillway.channels.wire.spanning): a transaction
    aborted after some parts leaves nothing a reader sees, and a reader restarted from
    a position taken while it held part of a record neither loses nor repeats one."""
    settings = KafkaSettings(kafka_bootstrap)
    topic = make_topic(settings, unique)
    channel_settings = ChannelSettings(max_batch_bytes=4096, codec=codec)
    out = OutputChannel(topic, SCHEMA, KeyHash(lambda r: r["key"], DOWN), DOWN)
    expected: list[tuple[int, int, str]] = []
    for i in range(2):
        sub = SubtaskId(JobId(unique), OperatorName("up"), i)
        producer = TransactionalProducer(settings, sub.transactional_id)
        producer.start()
        writer = ChannelWriter(producer, out, i, channel_settings)
        for txn in range(4):
            producer.begin()
            for seq in range(txn * 30, txn * 30 + 30):
                big = seq % 10 == 3
                key = "b" * (10_000 + 700 * (seq % 30)) if big else f"k{seq % 7}"
                writer.write_many([{"key": key, "writer": i, "seq": seq}])
                if txn != 2:
                    expected.append((i, seq, key))
            writer.flush_batches()
            if txn == 2:  # its parts on the log (flushed first, as in
                producer.flush()  # test_changelog_restore), never to be read
                producer.abort()
            else:
                producer.commit()
        producer.begin()
        writer.end_of_stream()
        producer.commit()
        producer.close()

    j = KeyHash(lambda r: r["key"], DOWN).targets({"key": "b" * 10_000})[0]
    sub = SubtaskId(JobId(unique), OperatorName("down"), j)
    inputs = [InputChannel(topic, j, SCHEMA, 2)]  # two writers
    first = ChannelReader(AssignedConsumer(settings, sub.group_id), inputs)
    first.start()
    got: list[dict[str, Any]] = []
    while not first.open_records():  # read until it holds part of a record
        got.extend(r for d in first.poll(1, 1.0) for r in d.records)
    # A checkpoint here; what is read after it is lost with the crash.
    positions, skip, kept = first.positions(), first.skip_state(), len(got)
    got.extend(r for d in first.poll(5, 1.0) for r in d.records)
    first.close()
    del got[kept:]
    second = ChannelReader(AssignedConsumer(settings, sub.group_id), inputs)
    second.start(positions, ReaderState(skip=skip))
    got.extend(read_until_ended(second))
    second.close()
    route = KeyHash(lambda r: r["key"], DOWN)
    want = [(w, s, k) for w, s, k in expected if route.targets({"key": k})[0] == j]
    assert Counter((r["writer"], r["seq"], r["key"]) for r in got) == Counter(want)
    assert any(len(k) >= 10_000 for _, _, k in want)
