"""Replay debt of a subtask that is not running: offsets past its position that hold only
transaction markers or aborted records are nothing left to read (recovery/observe/status.py)."""

from __future__ import annotations

import time

import pytest

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, TopicPartition
from spillway.channels.kafka.admin import Admin, TopicSpec
from spillway.channels.kafka.producer import TransactionalProducer
from spillway.recovery.observe.status import unread

pytestmark = [pytest.mark.broker]


def test_only_markers_and_aborted_records_past_a_position_are_nothing_left_to_read(
    kafka_bootstrap: str, unique: str
) -> None:
    settings = KafkaSettings(kafka_bootstrap)
    topic = f"spillway.{unique}.ch"
    admin = Admin(settings)
    admin.ensure_topics([TopicSpec(topic, 2)])
    producer = TransactionalProducer(settings, f"spillway.{unique}.writer")
    try:
        producer.start()
        producer.begin()
        for i in range(3):  # offsets 0-2 in each partition, then the commit marker at 3
            producer.produce(topic, 0, b"k", b"%d" % i)
            producer.produce(topic, 1, b"k", b"%d" % i)
        producer.commit()
        producer.begin()  # partition 1: 2 aborted records (4, 5) and the abort marker at 6
        producer.produce(topic, 1, b"k", b"gone")
        producer.produce(topic, 1, b"k", b"gone")
        producer.flush()  # written before the abort (which drops what is still queued)
        producer.abort()
    finally:
        producer.close()
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    end = {p0: 4, p1: 7}

    def settled() -> bool:  # the coordinator writes the markers after commit() returns
        return {tp: high for tp, (_, high) in admin.watermarks([p0, p1]).items()} == end

    deadline = time.monotonic() + 30
    while not settled():
        assert time.monotonic() < deadline, admin.watermarks([p0, p1])
        time.sleep(0.1)
    job = JobId(unique)
    # Every record read (position 3): only markers and aborted records remain.
    assert unread(settings, job, {p0: 3, p1: 3}, end) == {p0, p1}
    # A record left to read in each.
    assert unread(settings, job, {p0: 2, p1: 2}, end) == set()
    assert unread(settings, job, {p0: 0, p1: 3}, end) == {p1}
