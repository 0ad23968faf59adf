"""Built-in aggregations in a tumbling window on real Spark and Kafka: the
window reads the event time its source declared, a window subtask is killed after a
commit, and the output equals a plain-Python reference exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

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
    results = run_on_spark(
        JobConfig(REF, unique, kafka_bootstrap, master="local[8,4]", global_interval_s=1.0)
    )
    status = {r.subtask.split("/")[1]: (r.attempt, r.status) for r in results}
    assert {k: v for k, v in status.items() if v[0]} == {"win[0]": (1, "finished")}
    assert all(s == "finished" for _, s in status.values())
    rows = [
        json.loads(line)
        for f in sorted(tmp_path.glob("out/*.jsonl"))
        for line in f.read_text().splitlines()
    ]
    assert sorted(rows, key=lambda r: (r["key"], r["start"])) == reference(RECORDS)
