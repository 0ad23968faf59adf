"""Records that span messages on the real broker and real Spark (docs/architecture.md,
Records larger than a message).

20 records of 5 MB among 2,980 small ones go through a keyed channel whose messages hold
at most 256 KiB, so each big record travels as 21 parts. Two SIGKILLs mid-run:

* the writer ``events[0]``, with every output of a checkpoint flushed, parts of a big
  record among them, and not committed: its restart aborts them; no reader ever sees
  those parts (read_committed), and the record comes again whole from the restart;
* the reader ``count[1]``, right after committing a checkpoint taken while it held some
  parts of a record: its restart must read that record again from its first part, and
  skip the other writer's messages it had already processed in between.

The output (per key: count, sum of sequence numbers, bytes, sum of content hashes) must
equal the reference exactly; each big record has a key of its own, so its row checks
its content. A lost, repeated or altered record changes a row.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, OperatorName
from spillway.channels.kafka.admin import Admin
from spillway.channels.naming import channel_topic
from spillway.channels.routing.keygroups import key_group, key_group_range
from spillway.channels.wire.envelope import PART_VERSION, read_header
from spillway.channels.wire.spanning import read_mark
from spillway.recovery.observe.events import read_events
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from tests.integration.spanjobs import BIG_BYTES, is_big, make_event, read_output, reference

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.extended]

REF = "tests.integration.spanjobs:span_totals"
RECORDS = 3000  # 20 big ones
RATE = 150.0  # records per second per generator subtask: about 10 s of input
MAX_PARALLELISM = 32  # the default of key_by


def parts(bootstrap: str, topic: str, partitions: int, isolation: str) -> dict[Any, int]:
    """(partition, offset) -> part index, of every part message in ``topic`` visible
    under ``isolation``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}.{isolation}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    found: dict[Any, int] = {}
    try:
        consumer.assign([CkTopicPartition(topic, p, 0) for p in range(partitions)])
        at_end: set[int] = set()
        while len(at_end) < partitions:
            m = consumer.poll(10)
            assert m is not None, f"no message or end of partition from {topic} in 10 s"
            if m.error():
                at_end.add(m.partition() or 0)
                continue
            if read_header(m.headers())[1] == PART_VERSION:
                found[(m.partition(), m.offset())] = read_mark(m.headers()).index
    finally:
        consumer.close()
    return found


def test_five_megabyte_records_through_a_keyed_channel_with_kills(
    kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bigs = [i for i in range(RECORDS) if is_big(i)]
    assert len(bigs) == 20
    # count[1] owns key groups of some big records (so the reader's kill can happen).
    owned_by_1 = set(key_group_range(1, 2, MAX_PARALLELISM))
    assert any(key_group(f"big{i}", MAX_PARALLELISM) in owned_by_1 for i in bigs)

    out = tmp_path / "out"
    monkeypatch.setenv("SPILLWAY_TEST_OUT", str(out))
    monkeypatch.setenv("SPILLWAY_TEST_RECORDS", str(RECORDS))
    monkeypatch.setenv("SPILLWAY_TEST_RATE", str(RATE))
    monkeypatch.setenv(
        "SPILLWAY_CRASH_AT",
        "events:0:after-produce-spanning:0:2,count:1:after-commit-inside-record:0:1",
    )
    # A checkpoint falls inside a record only while the reader holds some of its parts:
    # fetching one part per partition and request, prefetching little more than that
    # (librdkafka otherwise queues up to 64 MB ahead, so one poll on an idle machine
    # returned all 21 parts at once) and checkpointing every 20 ms make that happen every
    # few records rather than by luck.
    config = JobConfig(
        REF,
        unique,
        kafka_bootstrap,
        master="local[4,3]",
        checkpoint_interval_s=0.02,
        client={"max.partition.fetch.bytes": 256 * 1024, "queued.max.messages.kbytes": 512},
    )
    results = run_on_spark(config)

    expected = reference(RECORDS)
    got = read_output(out)
    assert got == expected
    assert all(got[f"big{i}"][2] == len(make_event(i)["data"]) >= BIG_BYTES - 32 for i in bigs)

    # Exactly the two killed subtasks restarted, once each, from a checkpoint. count[1]
    # can only have died at after-commit-inside-record: a checkpoint committed while it
    # held parts of a record (its position at the record's first part).
    attempts = {r.subtask.split("/")[1]: r.attempt for r in results}
    assert attempts == {
        "events[0]": 1,
        "events[1]": 0,
        "count[0]": 0,
        "count[1]": 1,
        "out[0]": 0,
        "out[1]": 0,
    }
    settings = KafkaSettings(kafka_bootstrap)
    job = JobId(unique)
    restarts = [
        e for e in read_events(settings, job) if e.get("event") == "started" and e["attempt"] > 0
    ]
    assert {f"{e['operator']}[{e['index']}]" for e in restarts} == {"events[0]", "count[1]"}
    restored = {r.subtask.split("/")[1]: r.restored_from for r in results}
    assert restored["count[1]"] is not None
    assert restored["events[0]"] is not None

    # The killed writer left parts in an aborted transaction: on the log, never read.
    channel = channel_topic(job, OperatorName("events"), OperatorName("count"))
    partitions = Admin(settings).partition_counts()[channel]
    committed = parts(kafka_bootstrap, channel, partitions, "read_committed")
    everything = parts(kafka_bootstrap, channel, partitions, "read_uncommitted")
    assert committed.items() < everything.items()
    # Committed: each big record once (one first part each), all its parts.
    assert list(committed.values()).count(0) == len(bigs)
    assert len(committed) % len(bigs) == 0
    print(f"parts: {len(committed)} committed, {len(everything) - len(committed)} aborted")
