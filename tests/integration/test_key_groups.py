"""Key groups on the real broker and real Spark (docs/architecture.md): a keyed channel with
max_parallelism 16 read by 3 subtasks, each exactly its key-group range, exactly-once,
with one subtask SIGKILLed mid-run.

What proves that every record of a key group reached its owner: each channel partition
``g`` holds only records whose key is in group ``g`` (read back here), each subtask's
checkpoints own and have read to the end exactly the partitions of its range, and the
output has one row per key whose count and sum of sequence numbers equal the reference
(a key whose records reached two subtasks would give two partial rows).

The source is held at two gates (tests/integration/gates.py) rather than paced, so the
kill comes mid-run: the second third of the records is released once count[1] committed a
checkpoint that read records, the last third once its second attempt started.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, OperatorName, TopicPartition
from spillway.channels.kafka.admin import Admin
from spillway.channels.naming import changelog_topic, channel_topic
from spillway.channels.routing.keygroups import key_group, key_group_range
from spillway.channels.wire.envelope import Decoders, Kind, read_header
from spillway.offsets.store import CheckpointStore
from spillway.recovery.observe.events import read_events
from spillway.spark_jobs.spark.jobconfig import JobConfig
from tests.integration.gates import Gates
from tests.integration.keygroupjobs import (
    EVENT,
    MAX_PARALLELISM,
    count_checkpoints,
    read_output,
    reference,
    run_operated,
    wait_until,
)

pytestmark = [pytest.mark.broker, pytest.mark.spark]

REF = "tests.integration.keygroupjobs:key_totals"
RECORDS = 30_000
P = 3


def channel_keys(
    bootstrap: str, topic: str, start: dict[int, int]
) -> dict[int, list[tuple[Kind, set[str]]]]:
    """Per partition, every committed message from offset ``start[p]`` on: kind and keys."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}.check",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    decoders = Decoders(EVENT)
    out: dict[int, list[tuple[Kind, set[str]]]] = {p: [] for p in start}
    try:
        consumer.assign([CkTopicPartition(topic, p, o) for p, o in start.items()])
        at_end: set[int] = set()
        while len(at_end) < len(start):
            m = consumer.poll(10)
            assert m is not None, f"no message or end of partition from {topic} in 10 s"
            if m.error():
                at_end.add(m.partition() or 0)
                continue
            kind, version = read_header(m.headers())
            keys = set()
            if kind is Kind.DATA:
                keys = {r["key"] for r in decoders.decode(version, m.value() or b"")}
            out[m.partition() or 0].append((kind, keys))
    finally:
        consumer.close()
    return out


def read_some(settings: KafkaSettings, job: JobId) -> bool:
    """True once count[1]'s latest checkpoint has read records of its input."""
    ckpt = count_checkpoints(settings, job, P)[1]
    return ckpt is not None and any(int(o) > 0 for o in ckpt.reader.inputs.values())


def test_sixteen_key_groups_over_three_subtasks_exactly_once_with_a_kill(
    kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    monkeypatch.setenv("SPILLWAY_TEST_OUT", str(out))
    monkeypatch.setenv("SPILLWAY_TEST_RECORDS", str(RECORDS))
    gates = Gates(tmp_path / "gates", monkeypatch, [RECORDS // 3, RECORDS * 2 // 3])
    # count[1] (key groups 6..10) SIGKILLs itself at its 2nd checkpoint that read records,
    # outputs flushed but not committed; its second attempt restores and runs on.
    monkeypatch.setenv("SPILLWAY_CRASH_AT", "count:1:after-produce-read:0:2")
    job = JobId(unique)
    settings = KafkaSettings(kafka_bootstrap)

    def operate() -> None:
        try:
            wait_until("count[1] checkpointed records it read", lambda: read_some(settings, job))
            gates.open(0)  # count[1]'s next checkpoint reads records: its 2nd, where it dies
            wait_until("count[1]'s second attempt started", lambda: any(
                e.get("event") == "started" and (e["operator"], e["index"], e["attempt"])
                == ("count", 1, 1) for e in read_events(settings, job)
            ))  # fmt: skip
        finally:
            gates.open_all()

    results = run_operated(JobConfig(REF, unique, kafka_bootstrap, master="local[8,3]"), operate)

    assert read_output(out) == reference(RECORDS)
    channel = channel_topic(job, OperatorName("events"), OperatorName("count"))
    changelog = changelog_topic(job, OperatorName("count"))
    counts = Admin(settings).partition_counts()
    assert (counts[channel], counts[changelog]) == (MAX_PARALLELISM, MAX_PARALLELISM)

    # Channel partition g holds exactly the keys of key group g (and every key somewhere).
    messages = channel_keys(kafka_bootstrap, channel, dict.fromkeys(range(MAX_PARALLELISM), 0))
    keys = {g: set().union(*(ks for _kind, ks in msgs)) for g, msgs in messages.items()}
    for g, ks in keys.items():
        assert ks, f"key group {g} received no record"
        assert {key_group(k, MAX_PARALLELISM) for k in ks} == {g}
    assert set().union(*keys.values()) == set(reference(RECORDS))

    # Each subtask owned, read to the end and logged state in exactly its key-group range.
    ranges = [list(key_group_range(i, P, MAX_PARALLELISM)) for i in range(P)]
    assert ranges == [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10], [11, 12, 13, 14, 15]]
    store = CheckpointStore(settings, job, OperatorName("count"), P)
    try:
        for i, owned in enumerate(ranges):
            ckpt = store.latest(i)
            assert ckpt is not None
            assert ckpt.meta.finished
            assert ckpt.meta.owned.of_topic(channel) == tuple(owned)
            assert ckpt.meta.owned.of_topic(changelog) == tuple(owned)
            assert sorted(tp.partition for tp in ckpt.reader.inputs) == owned
            # Nothing committed lies past its final positions (commit markers aside).
            after = {tp.partition: int(o) for tp, o in ckpt.reader.inputs.items()}
            assert channel_keys(kafka_bootstrap, channel, after) == {g: [] for g in owned}
            written = ckpt.changelog_positions()
            assert {tp.partition for tp in written} == set(owned)
            assert all(tp.topic == changelog for tp in written)
    finally:
        store.close()

    # Only count[1] restarted, and it replayed only partitions it owns.
    by_subtask = {r.subtask.split("/")[1]: r for r in results}
    assert by_subtask["count[1]"].attempt == 1
    restarts: list[dict[str, Any]] = [
        e for e in read_events(settings, job) if e.get("event") == "started" and e["attempt"] > 0
    ]
    assert {f"{e['operator']}[{e['index']}]" for e in restarts} == {"count[1]"}
    replayed = {tp for e in restarts for tp in e["replay"]}
    assert replayed, "the restarted subtask replayed nothing: the kill came too late"
    assert replayed <= {str(TopicPartition(channel, g)) for g in ranges[1]}
