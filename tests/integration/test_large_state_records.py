"""Records of 2 MB through keyed state on the real broker and real Spark.

The broker keeps its default message limit (1 MB). Four records of 2 MiB among 396 small
ones go through a keyed aggregate whose state keeps the longest text of each key, so two
keys' state values are 2 MiB: the changelog carries them as parts
(spillway.recovery.restore.state), and ``count[1]``, which owns both keys, is killed
after its third commit and restores them. The output (per key: count, sum of sequence
numbers, and the kept text's size and digest) must equal the reference exactly.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, OperatorName
from spillway.channels.kafka.admin import Admin
from spillway.channels.naming import changelog_topic
from spillway.channels.routing.keygroups import key_group, key_group_range
from spillway.channels.wire.spanning import read_mark
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from tests.integration.largestatejobs import BIG_CHARS, make_event, reference
from tests.integration.spanjobs import read_output

pytestmark = [pytest.mark.broker, pytest.mark.spark]

REF = "tests.integration.largestatejobs:large_state"
RECORDS = 400  # 4 big ones
RATE = 50.0  # records per second per generator subtask: about 4 s of input


def changelog_parts(bootstrap: str, topic: str, partitions: int) -> list[tuple[int, int]]:
    """(index, count) of every committed part message in the changelog ``topic``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}.parts",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    found: list[tuple[int, int]] = []
    try:
        consumer.assign([CkTopicPartition(topic, p, 0) for p in range(partitions)])
        at_end: set[int] = set()
        while len(at_end) < partitions:
            m = consumer.poll(10)
            assert m is not None, f"no message or end of partition from {topic} in 10 s"
            if m.error():
                at_end.add(m.partition() or 0)
                continue
            if (m.key() or b"")[:1] == b"\x00" and m.value() is not None:
                mark = read_mark(m.headers())
                found.append((mark.index, mark.count))
    finally:
        consumer.close()
    return found


def test_two_megabyte_state_values_through_the_changelog_with_a_kill(
    kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big_keys = {make_event(i)["key"] for i in range(RECORDS) if len(make_event(i)["data"]) > 1000}
    assert big_keys == {"k1", "k3"}
    owned_by_1 = set(key_group_range(1, 2, 32))
    assert all(key_group(k, 32) in owned_by_1 for k in big_keys)

    out = tmp_path / "out"
    monkeypatch.setenv("SPILLWAY_TEST_OUT", str(out))
    monkeypatch.setenv("SPILLWAY_TEST_RECORDS", str(RECORDS))
    monkeypatch.setenv("SPILLWAY_TEST_RATE", str(RATE))
    monkeypatch.setenv("SPILLWAY_CRASH_AT", "count:1:after-commit:0:3")
    config = JobConfig(REF, unique, kafka_bootstrap, master="local[4,3]")
    results = run_on_spark(config)

    expected = reference(RECORDS)
    assert read_output(out) == expected
    assert expected["k1"][2] == expected["k3"][2] == BIG_CHARS

    attempts = {r.subtask.split("/")[1]: r.attempt for r in results}
    assert attempts == {
        "events[0]": 0,
        "events[1]": 0,
        "count[0]": 0,
        "count[1]": 1,
        "out[0]": 0,
        "out[1]": 0,
    }
    restored = {r.subtask.split("/")[1]: r.restored_from for r in results}
    assert restored["count[1]"] is not None

    # The state went as parts: a 2 MiB value of JSON text is 9 parts of 256 KiB.
    settings = KafkaSettings(kafka_bootstrap)
    topic = changelog_topic(JobId(unique), OperatorName("count"))
    parts = changelog_parts(kafka_bootstrap, topic, Admin(settings).partition_counts()[topic])
    assert parts
    assert {count for _, count in parts} == {9}
    assert sorted(i for i, _ in parts) == sorted(list(range(9)) * (len(parts) // 9))
    print(f"changelog parts: {len(parts)} committed")
