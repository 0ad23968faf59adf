"""Records too large for a write_kafka topic, on Spark.

The sink topic takes messages of up to 100 000 bytes (``max.message.bytes``); the input
holds a few records of about 200 KB among many small ones. With a dead-letter channel,
the output topic holds exactly the small records and the dead-letter topic exactly the
large ones (stage ``sink``, with their origins), and nothing failed: the large records
were refused before they were produced, so no transaction was spoiled, and the sink's
producer kept its batches of small records below the topic's limit. Without it, the
first large record stops the job once, and ``spillway run`` ends with one line naming
its origin, its size, the limit and the setting to raise.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import Producer

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId
from spillway.channels.kafka.admin import Admin, TopicSpec
from spillway.recovery.job.loader import load_plan
from spillway.recovery.observe.events import read_events
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from tests.integration.deadletters import read_dlq
from tests.integration.support import read_committed, spillway

pytestmark = [pytest.mark.broker, pytest.mark.spark]

REF = "tests.integration.pipelines:kafka_straight_to_kafka"
LIMIT = 100_000  # the sink topic's max.message.bytes
SMALL = 20_000  # about 2 MB of small records: many batches' worth at the topic's limit
LARGE_EVERY = 2_500  # one record in so many is about 200 KB


def note(i: int) -> dict[str, Any]:
    """Record ``i`` of the input: every ``LARGE_EVERY``-th one about 200 KB, else small."""
    text = ("L" * 200_000) if i % LARGE_EVERY == 7 else f"note {i} " * 8
    return {"id": i, "text": text}


def make_topics(bootstrap: str, topic_in: str, topic_out: str, notes: list[dict[str, Any]]) -> None:
    """``notes`` round-robin over 2 partitions of ``topic_in`` (note ``k`` at offset
    ``k // 2`` of partition ``k % 2``); ``topic_out`` with 2 partitions and the limit."""
    Admin(KafkaSettings(bootstrap)).ensure_topics(
        [TopicSpec(topic_in, 2), TopicSpec(topic_out, 2, {"max.message.bytes": str(LIMIT)})]
    )
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for k, n in enumerate(notes):
        producer.produce(topic_in, json.dumps(n).encode(), partition=k % 2)
        producer.poll(0)
    assert producer.flush(60) == 0


@pytest.mark.parametrize("shape", ["chained", "alone"])
def test_records_too_large_for_the_sink_topic_are_dead_lettered_and_the_rest_written(
    kafka_bootstrap: str, unique: str, monkeypatch: pytest.MonkeyPatch, shape: str
) -> None:
    topic_in, topic_out = f"{unique}-in", f"{unique}-out"
    notes = [note(i) for i in range(SMALL)]
    large = {(k % 2, k // 2): n for k, n in enumerate(notes) if len(n["text"]) > LIMIT}
    assert len(large) == SMALL // LARGE_EVERY
    make_topics(kafka_bootstrap, topic_in, topic_out, notes)
    monkeypatch.setenv("SPILLWAY_TEST_IN", topic_in)
    monkeypatch.setenv("SPILLWAY_TEST_OUT", topic_out)
    # chained: source and sink are one subtask, the sink's records come with the input's
    # offsets; alone: the sink reads its channel as Arrow batches and writes them whole.
    monkeypatch.setenv("SPILLWAY_TEST_BATCHES", "chained" if shape == "chained" else "1")

    results = run_on_spark(
        JobConfig(REF, unique, kafka_bootstrap, master="local[4,2]", dead_letter=True)
    )
    assert {r.status for r in results} == {"finished"}
    assert {r.attempt for r in results} == {0}  # nothing failed, nothing restarted

    written = [json.loads(v) for _, _, v in read_committed(kafka_bootstrap, topic_out, 2)]
    small = [n for n in notes if len(n["text"]) <= LIMIT]
    assert Counter(n["id"] for n in written) == Counter(n["id"] for n in small)
    assert sorted(written, key=lambda n: n["id"]) == small

    dlq = read_dlq(kafka_bootstrap, unique)
    assert Counter(d["stage"] for d in dlq) == {"sink": len(large)}
    assert sorted(json.loads(str(d["record"]))["id"] for d in dlq) == sorted(
        n["id"] for n in large.values()
    )
    for d in dlq:
        assert json.loads(str(d["record"])) == notes[json.loads(str(d["record"]))["id"]]
        assert d["truncated"] is False
        assert f"over the limit of {LIMIT} bytes" in d["error"]
        assert f"topic {topic_out}'s max.message.bytes (now {LIMIT})" in d["error"]
        assert d["error"].startswith("RecordTooLargeError: its message to topic ")
        assert d["origin"] == f"{d['topic']}[{d['partition']}]@{d['offset']}"
    if shape == "chained":  # the origin is the input record's own
        assert {(d["operator"], d["topic"]) for d in dlq} == {("notes", topic_in)}
        got = {(int(d["partition"]), int(d["offset"])): json.loads(str(d["record"])) for d in dlq}
        assert got == large
    else:  # the origin is the channel message the sink read the record in
        assert {d["operator"] for d in dlq} == {"sink"}
        plan = load_plan(REF, unique)
        assert {d["topic"] for d in dlq} == {plan.topic_of(plan.inputs_of("sink")[0])}


def test_without_dead_letters_a_record_too_large_for_the_sink_stops_the_job_with_one_line(
    kafka_bootstrap: str, unique: str
) -> None:
    topic_in, topic_out = f"{unique}-in", f"{unique}-out"
    notes = [{"id": i, "text": f"note {i}"} for i in range(2000)]
    notes[2 * 600 + 1] = {"id": 2 * 600 + 1, "text": "L" * 200_000}  # partition 1, offset 600
    make_topics(kafka_bootstrap, topic_in, topic_out, notes)
    env = {
        "SPILLWAY_TEST_IN": topic_in,
        "SPILLWAY_TEST_OUT": topic_out,
        "SPILLWAY_TEST_BATCHES": "chained",
    }
    proc = spillway("run", REF, "--job-id", unique, "--bootstrap", kafka_bootstrap, env=env)

    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert sum("spillway: error:" in line for line in lines) == 1
    size = len(json.dumps(notes[1201], separators=(",", ":"))) + 61 + 36
    assert lines[-1] == (
        f"spillway: error: {unique}/notes[1]: the sink of operator 'notes' cannot write the "
        f"record at {topic_in}[1]@600: its message to topic {topic_out} is {size} bytes, "
        f"over the limit of {LIMIT} bytes set by topic {topic_out}'s max.message.bytes (now "
        f"{LIMIT}); raise that (and the broker's message.max.bytes if it is lower), or make "
        "the record smaller. Nothing from there on is committed; fix the limit or the "
        f"record, or run with --dead-letter to divert bad records to spillway.{unique}.dlq"
    )

    events = list(read_events(KafkaSettings(kafka_bootstrap), JobId(unique)))
    failed = [e for e in events if e["event"] == "failed"]
    assert [(e["operator"], e["index"], e["attempt"]) for e in failed] == [("notes", 1, 0)]
    assert failed[0]["deterministic"] is True
    assert failed[0]["origin"] == f"{topic_in}[1]@600"
    assert failed[0]["message"] == lines[-1].removeprefix("spillway: error: ")
    assert all(e.get("attempt", 0) == 0 for e in events)  # not retried
