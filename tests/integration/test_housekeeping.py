"""``spillway topics create``, ``jobs`` and ``reset`` on the session broker.

A job is simulated as the runtime makes one: its topics from the runtime's own topic
specs, heartbeats from a real :class:`~spillway.recovery.observe.events.EventLog`, and
consumer groups holding committed positions under the subtasks' group ids.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, OperatorName, SubtaskId
from spillway.channels.kafka.admin import Admin, TopicSpec
from spillway.channels.naming import channel_topic, checkpoint_topic
from spillway.cli import main
from spillway.recovery.control.globalckpt import checkpoints_topic_spec
from spillway.recovery.observe.events import EventLog, events_topic_spec
from spillway.recovery.observe.heartbeat import heartbeats_topic_spec
from spillway.recovery.restore.progress import progress_topic_spec

pytestmark = pytest.mark.broker

A, B = OperatorName("parse"), OperatorName("count")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``spillway ARGV`` in this process: exit code, stdout, stderr."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def make_job(settings: KafkaSettings, job: JobId) -> tuple[list[str], list[str]]:
    """The topics a two-operator job's driver creates and its subtasks' consumer groups,
    each with a committed position; (topics, groups), sorted."""
    specs = [
        TopicSpec(channel_topic(job, A, B), 2),
        TopicSpec(checkpoint_topic(job, A), 1),
        TopicSpec(checkpoint_topic(job, B), 2),
        events_topic_spec(job),
        heartbeats_topic_spec(job),
        checkpoints_topic_spec(job),
        progress_topic_spec(job, A, 1),
        progress_topic_spec(job, B, 2),
    ]
    Admin(settings).ensure_topics(specs)
    groups = [SubtaskId(job, B, i).group_id for i in range(2)]
    for i, group in enumerate(groups):
        commit(settings.bootstrap_servers, group, channel_topic(job, A, B), i)
    return sorted(s.name for s in specs), sorted(groups)


def commit(bootstrap: str, group: str, topic: str, partition: int) -> None:
    """Store offset 0 of ``topic[partition]`` for ``group``, as a subtask's transaction does."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, partition, 0)], asynchronous=False)
    finally:
        consumer.close()


def groups_on(admin: Admin) -> set[str]:
    return set(admin.consumer_groups())


def jobs_json(capsys: pytest.CaptureFixture[str], bootstrap: str, *extra: str) -> dict[str, Any]:
    code, out, err = run(capsys, "jobs", "--json", "--bootstrap", bootstrap, *extra)
    assert code == 0, err
    return {row["job"]: row for row in json.loads(out)}


@pytest.fixture
def settings(kafka_bootstrap: str) -> KafkaSettings:
    return KafkaSettings(kafka_bootstrap)


@pytest.fixture
def beating(settings: KafkaSettings, unique: str) -> Iterator[EventLog]:
    """A subtask of job ``unique`` that has started: it sends a heartbeat every second
    until closed."""
    job = JobId(unique)
    make_job(settings, job)
    log = EventLog(settings, SubtaskId(job, A, 0), attempt=0, run_id="r1")
    log.emit("started")
    try:
        yield log
    finally:
        log.close()


def test_topics_create_is_idempotent(
    settings: KafkaSettings, unique: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bootstrap = settings.bootstrap_servers
    names = [f"{unique}-in", f"{unique}-out"]
    argv = ["topics", "create", *names, "--partitions", "3", "--bootstrap", bootstrap]
    code, out, err = run(capsys, *argv, "--config", "retention.ms=3600000")
    assert (code, err) == (0, "")
    assert out.splitlines() == [f"{n}: created (3 partitions)" for n in names]
    code, out, err = run(capsys, *argv)
    assert (code, err) == (0, "")
    assert out.splitlines() == [f"{n}: exists (3 partitions)" for n in names]
    admin = Admin(settings)
    counts = admin.partition_counts()
    assert [counts[n] for n in names] == [3, 3]
    assert admin.topic_config(names[0])["retention.ms"] == "3600000"


def test_topics_create_with_another_partition_count_is_refused(
    settings: KafkaSettings, unique: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bootstrap = settings.bootstrap_servers
    topic, new = f"{unique}-in", f"{unique}-new"
    code, _, err = run(
        capsys, "topics", "create", topic, "--partitions", "3", "--bootstrap", bootstrap
    )
    assert (code, err) == (0, "")
    code, out, err = run(
        capsys, "topics", "create", new, topic, "--partitions", "4", "--bootstrap", bootstrap
    )
    assert (code, out) == (2, "")
    assert err.startswith(f"spillway: error: topic {topic} has 3 partitions, asked for 4: ")
    assert "Pass --partitions matching the existing topic" in err
    assert err.count("\n") == 1
    counts = Admin(settings).partition_counts()
    assert counts[topic] == 3
    assert new not in counts  # nothing is created when any topic does not match


def test_reset_refuses_while_heartbeats_are_fresh(
    settings: KafkaSettings, unique: str, beating: EventLog, capsys: pytest.CaptureFixture[str]
) -> None:
    bootstrap = settings.bootstrap_servers
    time.sleep(1.5)  # a heartbeat or two after the first
    row = jobs_json(capsys, bootstrap)[unique]
    assert row["state"] == "running"
    assert time.time() - row["last_activity"] < 5
    before = Admin(settings).partition_counts()
    code, out, err = run(capsys, "reset", "--job", unique, "--yes", "--bootstrap", bootstrap)
    assert (code, out) == (2, "")
    assert err.startswith(f"spillway: error: job {unique} is running (last heartbeat ")
    assert err.endswith(" s ago); stop it first, then reset\n")
    after = Admin(settings).partition_counts()
    assert {t for t in before if t.startswith(f"spillway.{unique}.")} == {
        t for t in after if t.startswith(f"spillway.{unique}.")
    }


def test_jobs_lists_and_reset_deletes_exactly_the_jobs_topics_and_groups(
    settings: KafkaSettings, unique: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bootstrap = settings.bootstrap_servers
    job, other = JobId(unique), JobId(f"{unique}-2")  # job is a prefix of other's id
    topics, groups = make_job(settings, job)
    other_topics, other_groups = make_job(settings, other)
    user = [f"{unique}-in", f"spillway.{unique}.raw"]  # the second: a user's name, no kind
    Admin(settings).create_topics([TopicSpec(t, 1) for t in user])
    commit(bootstrap, f"{unique}-reader", user[0], 0)
    log = EventLog(settings, SubtaskId(job, A, 0), attempt=0, run_id="r1")
    log.emit("started")
    time.sleep(1.5)
    log.close()
    stopped_at = time.time()

    time.sleep(max(0.0, stopped_at + 2.5 - time.time()))  # older than --lost-after 1
    rows = jobs_json(capsys, bootstrap, "--lost-after", "1")
    assert {k: rows[job][k] for k in ("state", "topics", "groups")} == {
        "state": "stopped",
        "topics": topics,
        "groups": groups,
    }
    assert stopped_at - 3 < rows[job]["last_activity"] <= stopped_at
    assert rows[other]["state"] == "stopped"
    assert rows[other]["last_activity"] is None  # no event, no heartbeat
    assert rows[other]["topics"] == other_topics

    code, out, err = run(
        capsys, "reset", "--job", job, "--yes", "--lost-after", "1", "--bootstrap", bootstrap
    )
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"reset of job {job} deletes {len(topics)} topics and {len(groups)} consumer groups:",
        *(f"  topic {t}" for t in topics),
        *(f"  group {g}" for g in groups),
        f"deleted {len(topics)} topics and {len(groups)} consumer groups of job {job}",
    ]
    admin = Admin(settings)
    left = set(admin.partition_counts())
    assert not left & set(topics)
    assert set(other_topics) | set(user) <= left
    left_groups = groups_on(admin)
    assert not left_groups & set(groups)
    assert set(other_groups) | {f"{unique}-reader"} <= left_groups
    assert job not in jobs_json(capsys, bootstrap)

    code, out, err = run(capsys, "reset", "--job", job, "--yes", "--bootstrap", bootstrap)
    assert (code, err) == (0, "")
    assert out == f"job {job} has no internal topics or consumer groups on this cluster\n"
