"""union and connect/co-process on real Spark and Kafka, subtasks SIGKILLed mid-run:
outputs equal plain-Python references exactly, without a duplicate. The second test's
timers fire on the watermark combined over both inputs (one lags the other)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from tests.integration.multiinput import (
    KEYS,
    UNPRICED,
    event_a,
    event_b,
    price,
    tick_a,
    tick_b,
)

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.extended]

N_A, N_B = 6_000, 2_000


def rows(out: Path, sink: str) -> list[dict[str, Any]]:
    """Every published row of ``sink``, sorted (duplicates kept, to be seen)."""
    got = [
        json.loads(line)
        for f in sorted((out / sink).glob("*.jsonl"))
        for line in f.read_text().splitlines()
    ]
    return sorted(got, key=lambda r: json.dumps(r, sort_keys=True))


def test_union_and_co_process_survive_kills_exactly_once(
    kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    for k, v in {"A": N_A, "B": N_B, "RATE": 600, "OUT": out}.items():
        monkeypatch.setenv(f"SPILLWAY_TEST_{k}", str(v))
    # enrich[0] dies with its 3rd checkpoint's outputs flushed but not committed; count[1]
    # before its 2nd commit. Their second attempts restore and run on.
    monkeypatch.setenv("SPILLWAY_CRASH_AT", "enrich:0:after-produce:0:3,count:1:before-commit:0:2")
    config = JobConfig(
        "tests.integration.multiinput:pipeline", unique, kafka_bootstrap, master="local[8,4]"
    )
    results = run_on_spark(config)

    events = [event_a(i) for i in range(N_A)] + [event_b(i) for i in range(N_B)]
    prices = {p["key"]: p["price"] for p in map(price, range(KEYS - UNPRICED))}
    want_enriched = [{**e, "price": prices.get(e["key"])} for e in events]
    want_counts = [{"key": k, "n": n} for k, n in Counter(e["key"] for e in events).items()]
    assert rows(out, "enriched") == sorted(
        want_enriched, key=lambda r: json.dumps(r, sort_keys=True)
    )
    assert rows(out, "counts") == sorted(want_counts, key=lambda r: json.dumps(r, sort_keys=True))
    # Some keys never get a price: their events came out of the end-of-input timer.
    assert sum(r["price"] is None for r in rows(out, "enriched")) > 0
    attempts = {r.subtask.split("/")[1]: (r.attempt, r.status) for r in results}
    assert attempts["enrich[0]"] == (1, "finished")
    assert attempts["count[1]"] == (1, "finished")
    assert attempts["enrich[1]"] == (0, "finished")


def as_of_reference(n_a: int) -> list[dict[str, Any]]:
    """Each left record with the latest right value of its key at or before its time."""
    rights = [tick_b(j) for j in range(n_a // 10)]
    out = []
    for r in map(tick_a, range(n_a)):
        before = [
            (b["ts"], b["seq"]) for b in rights if b["key"] == r["key"] and b["ts"] <= r["ts"]
        ]
        out.append({**r, "b": max(before)[1] if before else None})
    return sorted(out, key=lambda r: json.dumps(r, sort_keys=True))


def test_timers_follow_the_watermark_combined_over_both_inputs(
    kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The right input lags the left in event time; a timer that fired on the left's
    # watermark alone would join left records with stale right values. asof[0] is
    # SIGKILLed mid-run: pending timers and both inputs' state come back from its changelog.
    out, n_a = tmp_path / "out", 3_000
    for k, v in {"A": n_a, "RATE": 300, "OUT": out}.items():
        monkeypatch.setenv(f"SPILLWAY_TEST_{k}", str(v))
    monkeypatch.setenv("SPILLWAY_CRASH_AT", "asof:0:after-produce:0:3")
    config = JobConfig(
        "tests.integration.multiinput:asof_pipeline", unique, kafka_bootstrap,
        master="local[7,4]",
    )  # fmt: skip
    results = run_on_spark(config)
    assert rows(out, "joined") == as_of_reference(n_a)
    attempts = {r.subtask.split("/")[1]: (r.attempt, r.status) for r in results}
    assert attempts["asof[0]"] == (1, "finished")
