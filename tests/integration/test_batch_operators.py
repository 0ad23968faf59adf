"""Batch operators on real Spark and Kafka: map_batches and filter_batches
between record operators, their subtasks SIGKILLed mid-run, a poison row dead-lettered
with its origin while the rest of its batch goes on. The output equals the same pipeline
written with map/filter and a plain-Python reference, exactly."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId
from spillway.channels.kafka.admin import Admin, TopicSpec
from spillway.channels.wire import jsontext
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from tests.integration.batchpipelines import kept_rows, reference
from tests.integration.deadletters import read_dlq
from tests.integration.gates import Gates, committed, started

pytestmark = [pytest.mark.broker, pytest.mark.spark]

REF = "tests.integration.batchpipelines:columnar"
RECORDS = 24_000
# boost[0] dies after its 2nd commit, keep[1] before its 2nd (outputs flushed, not committed).
KILLS = "boost:0:after-commit:0:2,keep:1:before-commit:0:2"


def read_totals(out: Path) -> dict[str, tuple[int, int]]:
    rows: dict[str, tuple[int, int]] = {}
    for f in sorted(out.glob("out/*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            assert r["key"] not in rows, f"duplicate output row for {r['key']}"
            rows[r["key"]] = (r["n"], r["total"])
    return rows


def run(
    bootstrap: str,
    job: str,
    out: Path,
    batches: bool,
    monkeypatch: pytest.MonkeyPatch,
    mode: str = "interval",
) -> tuple[dict[str, tuple[int, int]], list[dict[str, Any]], dict[str, tuple[int, str]]]:
    # 12 slots: every subtask runs at once. The source is held at a third and at two
    # thirds of its input (tests/integration/gates.py): the second third runs once every
    # subtask to be killed committed a checkpoint (so the 2nd, where it dies, has records
    # of it), the last third once all of them restarted; the kills come mid-stream.
    monkeypatch.setenv("SPILLWAY_TEST_BATCHES", "1" if batches else "0")
    monkeypatch.setenv("SPILLWAY_TEST_OUT", str(out))
    records = int(os.environ["SPILLWAY_TEST_RECORDS"])
    gates = Gates(out / "gates", monkeypatch, [records // 3, records * 2 // 3])
    settings, job_id = KafkaSettings(bootstrap), JobId(job)
    killed = {
        f"{k.split(':')[0]}[{k.split(':')[1]}]" for k in os.environ["SPILLWAY_CRASH_AT"].split(",")
    }
    results = run_on_spark(
        JobConfig(
            REF,
            job,
            bootstrap,
            master="local[12,4]",
            dead_letter=True,
            checkpoint_mode=mode,
            global_interval_s=1.0,
        ),
        on_running=gates.on_running(
            (
                f"{sorted(killed)} committed a checkpoint",
                partial(committed, settings, job_id, killed, 0, 2),
            ),
            (f"{sorted(killed)} restarted", partial(started, settings, job_id, killed, 1)),
        ),
    )
    assert gates.missed == []
    status = {r.subtask.split("/")[1]: (r.attempt, r.status) for r in results}
    return read_totals(out), read_dlq(bootstrap, job), status


@pytest.mark.extended
def test_batch_operators_survive_kills_and_equal_the_record_operators(
    kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPILLWAY_TEST_RECORDS", str(RECORDS))
    monkeypatch.setenv("SPILLWAY_CRASH_AT", KILLS)
    batch_out, batch_dlq, batch_status = run(
        kafka_bootstrap, f"{unique}-b", tmp_path / "b", True, monkeypatch
    )
    record_out, record_dlq, _ = run(
        kafka_bootstrap, f"{unique}-r", tmp_path / "r", False, monkeypatch
    )
    expected = reference(RECORDS)
    assert batch_out == expected
    assert record_out == expected
    # Both killed subtasks restarted once, restored and finished; nothing else restarted.
    assert {k: v for k, v in batch_status.items() if v[0]} == {
        "boost[0]": (1, "finished"),
        "keep[1]": (1, "finished"),
    }
    assert all(s == "finished" for _, s in batch_status.values())
    # The poison rows, and only they, were dead-lettered, each once, with the channel
    # message they came in as origin; the rest of their batches went on (the totals).
    poison = [i for i in range(RECORDS) if i % 97 == 0]
    for dlq, job in ((batch_dlq, f"{unique}-b"), (record_dlq, f"{unique}-r")):
        assert [d["stage"] for d in dlq] == ["process"] * len(poison)
        assert sorted(json.loads(str(d["record"]))["seq"] for d in dlq) == poison
        assert {d["operator"] for d in dlq} == {"boost"}
        assert {d["topic"] for d in dlq} == {f"spillway.{job}.ch.tag.boost"}
        assert all(isinstance(d["offset"], int) for d in dlq)
    assert sorted(json.loads(str(d["record"]))["seq"] for d in batch_dlq) == sorted(
        json.loads(str(d["record"]))["seq"] for d in record_dlq
    )


def test_columnar_aggregate_survives_kills_and_equals_the_record_aggregate(
    kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # key_by("key").aggregate_batches: batches routed by the key column at keep's writer,
    # folded by Arrow, state through the changelog. total[0] dies after its 2nd commit and
    # restores its state from the changelog; total[1] dies before its 2nd commit.
    monkeypatch.setenv("SPILLWAY_TEST_RECORDS", str(RECORDS))
    monkeypatch.setenv("SPILLWAY_TEST_KEYED", "column")
    monkeypatch.setenv("SPILLWAY_CRASH_AT", "total:0:after-commit:0:2,total:1:before-commit:0:2")
    out, dlq, status = run(kafka_bootstrap, unique, tmp_path, True, monkeypatch)
    # reference() is what the record aggregate gives (the test above checks it on Spark).
    assert out == reference(RECORDS)
    assert {k: v for k, v in status.items() if v[0]} == {
        "total[0]": (1, "finished"),
        "total[1]": (1, "finished"),
    }
    assert all(s == "finished" for _, s in status.values())
    assert sorted(json.loads(str(d["record"]))["seq"] for d in dlq) == [
        i for i in range(RECORDS) if i % 97 == 0
    ]


@pytest.mark.extended
def test_batch_operators_are_exact_under_unaligned_checkpoints_with_kills(
    kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Unaligned global checkpoints: a trigger may fall between chunks of one channel
    # message, which a batch operator then receives as slices of its batch (ArrowRows),
    # and a restart resumes inside the message. Every batch operator dies once.
    monkeypatch.setenv("SPILLWAY_TEST_RECORDS", str(RECORDS))
    monkeypatch.setenv("SPILLWAY_TEST_KEYED", "column")
    monkeypatch.setenv(
        "SPILLWAY_CRASH_AT",
        "boost:1:after-commit:0:2,keep:0:after-commit:0:2,total:1:after-commit:0:2",
    )
    out, dlq, status = run(kafka_bootstrap, unique, tmp_path, True, monkeypatch, "unaligned")
    assert out == reference(RECORDS)
    assert {k: v for k, v in status.items() if v[0]} == {
        "boost[1]": (1, "finished"),
        "keep[0]": (1, "finished"),
        "total[1]": (1, "finished"),
    }
    assert sorted(json.loads(str(d["record"]))["seq"] for d in dlq) == [
        i for i in range(RECORDS) if i % 97 == 0
    ]


def committed_values(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    """Every committed value of ``topic`` (read_committed, to each partition's end)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "verify", "isolation.level": "read_committed"}
    )
    ends = {
        p: consumer.get_watermark_offsets(CkTopicPartition(topic, p))[1] for p in range(partitions)
    }
    consumer.assign([CkTopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    deadline = time.monotonic() + 60
    while any(
        (consumer.position([CkTopicPartition(topic, p)])[0].offset or 0) < end
        for p, end in ends.items()
        if end
    ):
        assert time.monotonic() < deadline, f"{topic} not read to its end in 60 s"
        out += [m.value() for m in consumer.consume(1000, 0.2) if not m.error()]
    consumer.close()
    return out


@pytest.mark.extended
def test_kafka_sink_writes_batches_exactly_once_across_kills(
    kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "b": filter_batches → write_kafka; the sink, alone in its subtask, reads its channel
    # as Arrow batches and writes each batch's JSON column by column. out[0] dies after
    # its 2nd commit, out[1] before its 2nd (produced in the open transaction, not
    # committed). "c": the same with chaining=True, the sink in keep's subtask taking its
    # output batches (the keep+out chain killed likewise). "r": map/filter, records.
    monkeypatch.setenv("SPILLWAY_TEST_RECORDS", str(RECORDS))
    kills = {"b": "out", "c": "keep", "r": "out"}
    values: dict[str, list[bytes]] = {}
    for mode, killed in kills.items():
        topic = f"{unique}-{mode}-out"
        Admin(KafkaSettings(kafka_bootstrap)).ensure_topics([TopicSpec(topic, 2)])
        monkeypatch.setenv("SPILLWAY_TEST_SINK", topic)
        monkeypatch.setenv("SPILLWAY_TEST_CHAINED", "1" if mode == "c" else "0")
        monkeypatch.setenv(
            "SPILLWAY_CRASH_AT", f"{killed}:0:after-commit:0:2,{killed}:1:before-commit:0:2"
        )
        _, dlq, status = run(
            kafka_bootstrap, f"{unique}-{mode}", tmp_path / mode, mode != "r", monkeypatch
        )
        values[mode] = committed_values(kafka_bootstrap, topic, 2)
        assert len(dlq) == len([i for i in range(RECORDS) if i % 97 == 0])
        if mode != "r":
            assert {k: v for k, v in status.items() if v[0]} == {
                f"{killed}[0]": (1, "finished"),
                f"{killed}[1]": (1, "finished"),
            }
        assert all(s == "finished" for _, s in status.values())
    expected = Counter(jsontext.dumps(r) for r in kept_rows(RECORDS))
    for mode in kills:  # exact: every row once, byte for byte
        assert Counter(values[mode]) == expected, mode
        assert len(values[mode]) == sum(expected.values())
