"""Built-in aggregations in a tumbling window on real Spark and Kafka: the
window reads the event time its source declared (a field, or the Kafka record timestamp
carried with each record past a map that drops every time field), a window subtask is
killed, and the output equals a plain-Python reference exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from spillway.channels.config import KafkaSettings
from spillway.channels.kafka.admin import Admin, TopicSpec
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from tests.integration.aggjobs import WINDOW, make_event

pytestmark = [pytest.mark.broker, pytest.mark.spark]

REF = "tests.integration.aggjobs:windowed_aggs"
RECORDS = 12_000
SIZE_MS = int(WINDOW.total_seconds() * 1000)


def reference(n: int) -> list[dict[str, Any]]:
    """Every (key, window)'s row, computed from the records themselves."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for i in range(n):
        e = make_event(i)
        start = e["ts"] - e["ts"] % SIZE_MS
        groups.setdefault((e["key"], start), []).append(e)
    rows = []
    for (key, start), es in groups.items():
        cents = [e["cents"] for e in es if e["cents"] is not None]
        rows.append(
            {
                "key": key,
                "start": start,
                "end": start + SIZE_MS,
                "n": len(es),
                "total": sum(cents) if cents else None,
                "lo": min(cents) if cents else None,
                "hi": max(cents) if cents else None,
                "avg": sum(e["price"] for e in es) / len(es),
            }
        )
    return sorted(rows, key=lambda r: (r["key"], r["start"]))


def test_builtin_aggregations_in_a_tumbling_window_equal_the_reference_across_a_kill(
    kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPILLWAY_TEST_RECORDS", str(RECORDS))
    monkeypatch.setenv("SPILLWAY_TEST_RATE", str(RECORDS / 2 / 6))  # ~6 s, several commits
    monkeypatch.setenv("SPILLWAY_TEST_OUT", str(tmp_path))
    monkeypatch.setenv("SPILLWAY_CRASH_AT", "win:0:after-commit:0:2")
    assert run_killing_win0(REF, unique, kafka_bootstrap, tmp_path) == reference(RECORDS)


def run_killing_win0(ref: str, job: str, bootstrap: str, out: Path) -> list[dict[str, Any]]:
    """Run pipeline ``ref`` on Spark, where ``SPILLWAY_CRASH_AT`` kills ``win[0]`` once:
    only ``win[0]`` restarts, once, and every subtask finishes; the output rows, sorted."""
    results = run_on_spark(
        JobConfig(ref, job, bootstrap, master="local[8,4]", global_interval_s=1.0)
    )
    status = {r.subtask.split("/")[1]: (r.attempt, r.status) for r in results}
    assert {k: v for k, v in status.items() if v[0]} == {"win[0]": (1, "finished")}
    assert all(s == "finished" for _, s in status.values())
    rows = [
        json.loads(line)
        for f in sorted(out.glob("out/*.jsonl"))
        for line in f.read_text().splitlines()
    ]
    return sorted(rows, key=lambda r: (r["key"], r["start"]))


KAFKA_REF = "tests.integration.aggjobs:kafka_time_aggs"
KAFKA_RECORDS = 6_000


def test_the_kafka_timestamp_travels_past_a_map_to_a_window_across_a_kill(
    kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Event i's time is only its Kafka record timestamp: the value's "ts" is not read
    # (the source has no timestamp_column=) and the map drops it.
    topic = f"{unique}-in"
    Admin(KafkaSettings(kafka_bootstrap)).ensure_topics([TopicSpec(topic, 2)])
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    for i in range(KAFKA_RECORDS):
        e = make_event(i)
        value = json.dumps({**e, "ts": 0}).encode()
        producer.produce(topic, value, partition=i % 2, timestamp=e["ts"])
    assert producer.flush(30) == 0
    monkeypatch.setenv("SPILLWAY_TEST_IN", topic)
    monkeypatch.setenv("SPILLWAY_TEST_OUT", str(tmp_path))
    # win[0] dies in its first checkpoint that read records: it re-reads them, with the
    # times their channel messages carry.
    monkeypatch.setenv("SPILLWAY_CRASH_AT", "win:0:after-produce-read:0:1")
    want = [
        {k: r[k] for k in ("key", "start", "end", "n", "total")} for r in reference(KAFKA_RECORDS)
    ]
    assert run_killing_win0(KAFKA_REF, unique, kafka_bootstrap, tmp_path) == want
