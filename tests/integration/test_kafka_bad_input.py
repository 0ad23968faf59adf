"""Bad values in a Kafka input topic, on Spark.

With a dead-letter channel, one run over nine classes of bad input interleaved with good
records: every bad one is dead-lettered exactly once, with its origin and stage, and the
output equals the reference over the good ones. Without it, the first bad value stops
the job once (no retries) and ``spillway run`` ends with one line naming it. A
``write_kafka`` topic that does not exist stops the job before it starts.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import RecordTooLargeError
from spillway.channels.ids import JobId, OperatorName, SubtaskId
from spillway.channels.kafka.admin import Admin, TopicSpec
from spillway.channels.kafka.producer import TransactionalProducer
from spillway.channels.naming import job_topic_prefix
from spillway.recovery.job.loader import load_plan
from spillway.recovery.job.origins import TopicOffset
from spillway.recovery.observe.events import read_events
from spillway.recovery.runtime.deadletter import (
    MAX_MESSAGE_BYTES,
    PRODUCER_CONFIG,
    DeadLetters,
    dead_letter_topic,
)
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from tests.integration.deadletters import read_dlq
from tests.integration.support import spillway

pytestmark = [pytest.mark.broker, pytest.mark.spark]

REF = "tests.integration.pipelines:kafka_sums"
GOOD = 3000
PER_CLASS = 50
# Twice the broker's default max.message.bytes (1 MB): too big for a channel batch
# (256 KiB) and for a dead-letter topic with the broker's default limit.
BIG = 2 * 1024 * 1024
# Where each class must end up: "source" (the source cannot make a record of the value),
# "emit" (the source's record does not fit its schema or size limit when written to its
# channel), "process" (the user function raises).
STAGES = {
    "utf8": "source",
    "malformed": "source",
    "shape": "source",
    "types": "emit",
    "nan": "source",
    "huge": "source",
    "oversized": "emit",
    "empty": "source",
    "poison": "process",
}


def good_row(i: int) -> dict[str, Any]:
    return {"key": f"k{i % 11}", "n": i, "x": i / 8}


def bad_value(kind: str, j: int) -> bytes:
    """The ``j``-th bad value of class ``kind``."""
    odd = j % 2 == 1
    values = {
        "utf8": b'{"key": "k\xff\xfe", "n": 1, "x": 1.0}',
        "malformed": b'{"key": "k1", "n": 1, "x":',
        "shape": b"[1, 2, 3]" if odd else b'"a string"',
        "types": b'{"key": "k1", "n": "seven", "x": 1.0}' if odd else b'{"key": 7, "n": 1, "x": 1}',
        "nan": b'{"key": "k1", "n": 1, "x": NaN}' if odd else b'{"n": 1, "x": -Infinity}',
        "huge": b'{"key": "k1", "n": 9223372036854775808, "x": 1.0}'
        if odd
        else b'{"key": "k1", "n": 1, "x": 1e400}',
        "empty": b"",
    }  # fmt: skip
    if kind == "oversized":
        return json.dumps({"key": f"big{j}" + "y" * BIG, "n": 1, "x": 1.0}).encode()
    if kind == "poison":
        return json.dumps({"key": "poison", "n": 1_000_000 + j, "x": 0.0}).encode()
    return values[kind]


def make_input_topic(bootstrap: str, topic: str, messages: list[bytes]) -> None:
    """``messages`` round-robin over 2 partitions, in order: message ``k`` is at offset
    ``k // 2`` of partition ``k % 2`` (a fresh topic, no transaction markers)."""
    Admin(KafkaSettings(bootstrap)).ensure_topics(
        [TopicSpec(topic, 2, {"max.message.bytes": str(4 * 1024 * 1024)})]
    )
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "message.max.bytes": 4 * 1024 * 1024,
        }
    )
    for k, value in enumerate(messages):
        producer.produce(topic, value, partition=k % 2)
        producer.poll(0)
    assert producer.flush(60) == 0


def read_sums(out: Path) -> dict[str, list[int]]:
    rows: dict[str, list[int]] = {}
    for f in sorted(out.glob("out/*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            assert r["key"] not in rows, f"duplicate output for {r['key']}"
            rows[r["key"]] = [r["count"], r["total"]]
    return rows


def test_dead_letter_channel_takes_every_class_of_bad_kafka_value_with_its_origin(
    kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = f"{unique}-in"
    classes = list(STAGES)
    messages: list[bytes] = []
    bad: dict[tuple[int, int], tuple[str, bytes]] = {}  # (partition, offset) -> class, value
    reference: dict[str, list[int]] = {}
    made = Counter[str]()
    for i in range(GOOD):
        row = good_row(i)
        messages.append(json.dumps(row).encode())
        acc = reference.setdefault(row["key"], [0, 0])
        acc[0], acc[1] = acc[0] + 1, acc[1] + i
        if i % 6 == 3 and len(bad) < PER_CLASS * len(classes):
            kind = classes[len(bad) % len(classes)]
            value = bad_value(kind, made[kind])
            made[kind] += 1
            k = len(messages)
            bad[(k % 2, k // 2)] = (kind, value)
            messages.append(value)
    assert made == dict.fromkeys(classes, PER_CLASS)
    make_input_topic(kafka_bootstrap, topic, messages)
    monkeypatch.setenv("SPILLWAY_TEST_IN", topic)
    monkeypatch.setenv("SPILLWAY_TEST_OUT", str(tmp_path))
    # A dead-letter topic as an older version made it: the broker's 1 MB message limit.
    admin = Admin(KafkaSettings(kafka_bootstrap))
    dlq_topic = dead_letter_topic(JobId(unique))
    admin.ensure_topics([TopicSpec(dlq_topic, 1, {"retention.ms": "-1"})])
    assert int(admin.topic_config(dlq_topic)["max.message.bytes"]) < BIG

    results = run_on_spark(
        JobConfig(
            REF,
            unique,
            kafka_bootstrap,
            master="local[8,2]",
            dead_letter=True,
            # A record past the channels' bound is refused (smaller ones span messages).
            max_record_bytes=BIG // 2,
        )
    )
    assert int(admin.topic_config(dlq_topic)["max.message.bytes"]) == MAX_MESSAGE_BYTES
    assert {r.status for r in results} == {"finished"}
    assert {r.attempt for r in results} == {0}  # nothing failed, nothing restarted
    assert read_sums(tmp_path) == reference  # no good record lost, repeated or diverted

    dlq = read_dlq(kafka_bootstrap, unique)
    plan = load_plan(REF, unique)
    channel = plan.topic_of(plan.inputs_of("check")[0])
    from_input = [d for d in dlq if d["topic"] == topic]
    got = Counter((int(d["partition"]), int(d["offset"])) for d in from_input)
    poisoned = [d for d in dlq if d["topic"] != topic]
    # Each bad value exactly once, with its own partition and offset.
    assert got == Counter(k for k, (kind, _) in bad.items() if kind != "poison")
    per_class = Counter(bad[(int(d["partition"]), int(d["offset"]))][0] for d in from_input)
    per_class["poison"] = len(poisoned)
    print("dead letters per class:", dict(per_class))
    assert per_class == dict.fromkeys(classes, PER_CLASS)
    for d in from_input:
        kind, value = bad[(int(d["partition"]), int(d["offset"]))]
        assert (d["operator"], d["stage"]) == ("readings", STAGES[kind]), (kind, d["error"])
        assert d["origin"] == f"{topic}[{d['partition']}]@{d['offset']}"
        assert d["error"]
        assert d["truncated"] is False
        if d["stage"] == "source":
            assert base64.b64decode(str(d["raw"])) == value
        else:  # the record as the source read it
            assert json.loads(str(d["record"])) == json.loads(value)
    oversized = [d for d in from_input if bad[(d["partition"], d["offset"])][0] == "oversized"]
    assert all(d["size"] > BIG and "RecordTooLargeError" in d["error"] for d in oversized)
    # User-function errors: origin is the channel message the record came in.
    assert all(d["operator"] == "check" and d["stage"] == "process" for d in poisoned)
    assert all(d["topic"] == channel and d["offset"] is not None for d in poisoned)
    assert all("poisoned reading" in d["error"] for d in poisoned)
    assert sorted(json.loads(str(d["record"]))["n"] for d in poisoned) == [
        1_000_000 + j for j in range(PER_CLASS)
    ]


def test_without_dead_letters_the_first_bad_value_stops_the_job_once_with_one_line(
    kafka_bootstrap: str, unique: str, tmp_path: Path
) -> None:
    topic = f"{unique}-in"
    messages = [json.dumps(good_row(i)).encode() for i in range(2000)]
    messages.insert(2 * 600 + 1, b'{"key": "k1", "n": ')  # partition 1, offset 600
    make_input_topic(kafka_bootstrap, topic, messages)
    env = {"SPILLWAY_TEST_IN": topic, "SPILLWAY_TEST_OUT": str(tmp_path)}
    # Default attempts: local[8,4]. Before, each attempt failed the same way.
    proc = spillway("run", REF, "--job-id", unique, "--bootstrap", kafka_bootstrap, env=env)

    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert sum("spillway: error:" in line for line in lines) == 1
    last = lines[-1]
    assert last.startswith(f"spillway: error: {unique}/readings[1]: "), last
    assert f"{topic}[1]@600" in last
    assert "not JSON" in last
    assert "--dead-letter" in last
    assert "Traceback" not in last

    events = list(read_events(KafkaSettings(kafka_bootstrap), JobId(unique)))
    mine = [e for e in events if (e.get("operator"), e.get("index")) == ("readings", 1)]
    assert [(e["event"], e["attempt"]) for e in mine if e["event"] in ("started", "failed")] == [
        ("started", 0),
        ("failed", 0),
    ]
    failed = next(e for e in mine if e["event"] == "failed")
    assert failed["deterministic"] is True
    assert failed["origin"] == f"{topic}[1]@600"
    assert failed["message"] == last.removeprefix("spillway: error: ")
    # Not retried, and no other subtask restarted either.
    assert all(e.get("attempt", 0) == 0 for e in events)
    assert not list(tmp_path.glob("out/*.jsonl"))  # nothing past the bad value committed


def test_a_missing_write_kafka_topic_stops_the_job_before_it_starts(
    kafka_bootstrap: str, unique: str
) -> None:
    topic_in, missing = f"{unique}-in", f"{unique}-nowhere"
    order = {"id": 1, "customer": "c1", "amount": 100}
    make_input_topic(kafka_bootstrap, topic_in, [json.dumps(order).encode()])
    env = {"SPILLWAY_TEST_IN": topic_in, "SPILLWAY_TEST_OUT": missing}
    ref = "tests.integration.pipelines:kafka_to_kafka"
    # One attempt: before the check, the job started and its sink's commit timed out
    # (minutes later, per attempt) without naming the topic.
    common = ["--job-id", unique, "--bootstrap", kafka_bootstrap, "--task-attempts", "1"]
    proc = spillway("run", ref, *common, env=env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"spillway: error: job {unique}: write_kafka operator 'sink' ")
    assert f"uses topic '{missing}', which does not exist" in last
    assert "Create the topic first" in last
    # Found before the job started: none of its topics was created.
    existing = Admin(KafkaSettings(kafka_bootstrap)).partition_counts()
    assert not [t for t in existing if t.startswith(job_topic_prefix(JobId(unique)))]
    assert missing not in existing


def test_a_dead_letter_the_broker_refuses_names_the_topic_and_the_origin(
    kafka_bootstrap: str, unique: str
) -> None:
    # A dead-letter topic whose limit could not be raised (say, no AlterConfigs ACL).
    settings = KafkaSettings(kafka_bootstrap)
    topic = dead_letter_topic(JobId(unique))
    Admin(settings).ensure_topics([TopicSpec(topic, 1, {"max.message.bytes": "100000"})])
    producer = TransactionalProducer(settings, f"{unique}-tx", extra=PRODUCER_CONFIG)
    producer.start()
    producer.begin()
    letters = DeadLetters(producer, SubtaskId(JobId(unique), OperatorName("readings"), 0))
    origin = TopicOffset("in", 1, 42)
    letters.send(stage="source", error="too big", origin=origin, raw=b"z" * 300_000)
    with pytest.raises(RecordTooLargeError) as raised:
        producer.commit()
    assert f"a message to {topic} (the record at in[1]@42) as too large" in str(raised.value)
    assert raised.value.deterministic
    producer.close()
