"""Bad input: by default the job stops naming where; with a dead-letter channel nothing is lost."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, OperatorName, TopicPartition
from spillway.channels.wire.envelope import Kind, headers, writer_key
from spillway.offsets.store import CheckpointStore
from spillway.recovery.job.loader import load_plan
from spillway.recovery.observe.events import read_events
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from spillway.spark_jobs.spark.submit import prepare_topics
from spillway.spark_jobs.spark.summary import RunSummary, render
from tests.integration.deadletters import read_dlq
from tests.integration.pipelines import make_event

pytestmark = [pytest.mark.broker, pytest.mark.spark]

REF = "tests.integration.pipelines:fragile"
RECORDS = 20_000
GARBAGE = 120


def expected_counts(records: int) -> tuple[dict[str, int], list[int], list[int]]:
    raises = [i for i in range(records) if i % 97 == 0]
    bad_out = [i for i in range(records) if i % 97 != 0 and i % 89 == 1]
    good = Counter(make_event(i)["key"] for i in range(records) if i % 97 != 0 and i % 89 != 1)
    return dict(good), raises, bad_out


def read_counts(out: Path) -> dict[str, int]:
    rows: dict[str, int] = {}
    for f in sorted(out.glob("out/*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            assert r["key"] not in rows
            rows[r["key"]] = r["n"]
    return rows


def inject_garbage(bootstrap: str, job: str) -> None:
    """Malformed messages in the parse → count channel, as a broken writer would leave them."""
    plan = load_plan(REF, job)
    prepare_topics(plan, KafkaSettings(bootstrap), dead_letter=True)
    topic = plan.topic_of(plan.inputs_of("count")[0])
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(GARBAGE):
        value = [b"", b"\x07\xff\xff", b"not avro at all", b"\x02\x06abc"][i % 4]
        producer.produce(topic, value, writer_key(0), partition=i % 2, headers=headers(Kind.DATA))
    assert producer.flush(30) == 0


def test_dead_letter_channel_takes_exactly_the_bad_records(
    kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPILLWAY_TEST_RECORDS", str(RECORDS))
    monkeypatch.setenv("SPILLWAY_TEST_OUT", str(tmp_path))
    inject_garbage(kafka_bootstrap, unique)
    summaries: list[RunSummary] = []
    results = run_on_spark(
        JobConfig(REF, unique, kafka_bootstrap, master="local[6,2]", dead_letter=True),
        on_summary=summaries.append,
    )
    assert {r.status for r in results} == {"finished"}
    assert {r.attempt for r in results} == {0}  # no crash loop, no restart at all
    good, raises, bad_out = expected_counts(RECORDS)
    assert min(len(raises), len(bad_out), GARBAGE) >= 100  # >= 100 per class
    assert read_counts(tmp_path) == good  # no good record diverted, none lost

    dlq = read_dlq(kafka_bootstrap, unique)
    by_stage = Counter(str(d["stage"]) for d in dlq)
    assert by_stage == {"process": len(raises), "emit": len(bad_out), "decode": GARBAGE}
    processed = sorted(json.loads(str(d["record"]))["seq"] for d in dlq if d["stage"] == "process")
    assert processed == raises
    assert all("cannot parse event" in str(d["error"]) for d in dlq if d["stage"] == "process")
    emitted = [d for d in dlq if d["stage"] == "emit"]
    assert all(d["operator"] == "parse" and "Scored" in str(d["error"]) for d in emitted)
    decoded = [d for d in dlq if d["stage"] == "decode"]
    assert all(d["operator"] == "count" and d["raw"] is not None for d in decoded)
    assert all(d["topic"] and d["offset"] is not None for d in dlq)
    # The run's summary counts the committed dead letters per stage.
    (summary,) = summaries
    assert (
        f"  dead letters: {GARBAGE:,} decode, {len(bad_out):,} emit, {len(raises):,} process "
        f"(in spillway.{unique}.dlq, since the job began)"
    ) in render(summary).splitlines()


def test_by_default_a_bad_record_stops_the_subtask_naming_where(
    kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPILLWAY_TEST_RECORDS", str(RECORDS))
    monkeypatch.setenv("SPILLWAY_TEST_OUT", str(tmp_path))
    with pytest.raises(Exception, match=r"operator 'parse' failed on the record at \S+\[\d+\]@\d+"):
        run_on_spark(JobConfig(REF, unique, kafka_bootstrap, master="local[6,2]", task_attempts=2))
    settings = KafkaSettings(kafka_bootstrap)
    failures = [e for e in read_events(settings, JobId(unique)) if e.get("event") == "failed"]
    assert failures
    assert all("RecordError" in str(e["error"]) and "]@" in str(e["error"]) for e in failures)
    # Nothing past the bad record was committed: each failed parse subtask's checkpoint
    # stops at or before the message that held it.
    store = CheckpointStore(settings, JobId(unique), OperatorName("parse"), 2)
    for e in failures:
        if e["operator"] != "parse":
            continue
        msg = str(e["error"])
        origin = msg.split("failed on the record at ")[1].split(" ")[0]  # topic[p]@offset
        tp_text, offset_text = origin.rsplit("@", 1)
        bad_offset = int(offset_text)
        topic, part = tp_text.rsplit("[", 1)
        ckpt = store.latest(int(e["index"]))
        if ckpt is not None:
            assert (
                ckpt.reader.inputs.get(TopicPartition(topic, int(part.rstrip("]"))), 0)
                <= bad_offset
            )
    store.close()
    assert not list(tmp_path.glob("out/*.jsonl"))  # the counts were never emitted
