"""Interval, as-of and lookup joins on real Spark and Kafka, join subtasks SIGKILLed
mid-run: outputs equal plain-Python references exactly, without a duplicate, on
out-of-order input with late records and one hot key holding half the records.

Which records end up too late (dead-lettered) depends on how far the watermark has got
when they arrive; the references leave out exactly the dead-lettered ones, and only the
far-too-late records may be among them (the others are within the allowed lateness of
any watermark that can have been sent before them).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.driver import JobConfig, run_on_spark
from tests.integration.deadletters import read_dlq
from tests.integration.joinjobs import LOWER, UPPER, left, pair, right, very_late


def rows(out: Path, sink: str) -> list[dict[str, Any]]:
    """Every published row of ``sink``, sorted (duplicates kept, to be seen)."""
    got = [
        json.loads(line)
        for f in sorted((out / sink).glob("*.jsonl"))
        for line in f.read_text().splitlines()
    ]
    return sorted(got, key=lambda r: json.dumps(r, sort_keys=True))


def sort(rows_: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows_, key=lambda r: json.dumps(r, sort_keys=True))


def interval_reference(ls: list[dict[str, Any]], rs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every pair of one key with ``l.ts + LOWER <= r.ts <= l.ts + UPPER``."""
    by_key: dict[str, list[dict[str, Any]]] = {}
    for r in rs:
        by_key.setdefault(r["key"], []).append(r)
    return sort([
        pair(a, b)
        for a in ls
        for b in by_key.get(a["key"], [])
        if a["ts"] + LOWER <= b["ts"] <= a["ts"] + UPPER
    ])  # fmt: skip


def asof_reference(ls: list[dict[str, Any]], rs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each left record with the latest right one of its key at or before its time (on
    equal times the later one: the right input has one writer, so it arrives later)."""
    out = []
    for a in ls:
        before = [(b["ts"], b["seq"], b) for b in rs if b["key"] == a["key"] and b["ts"] <= a["ts"]]
        out.append(pair(a, max(before, key=lambda x: x[:2])[2] if before else None))
    return sort(out)


def test_interval_and_as_of_joins_survive_kills_exactly_once(
    kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, n = tmp_path / "out", 3_000
    for k, v in {"N": n, "RATE": 200, "OUT": out}.items():
        monkeypatch.setenv(f"SPILLWAY_TEST_{k}", str(v))
    # interval[0] dies with its 3rd checkpoint's outputs flushed but not committed; asof[1]
    # before its 2nd commit. Their second attempts restore buffers and timers and run on.
    monkeypatch.setenv("SPILLWAY_CRASH_AT", "interval:0:after-produce:0:3,asof:1:before-commit:0:2")
    config = JobConfig(
        "tests.integration.joinjobs:joins", unique, kafka_bootstrap, master="local[8,4]",
        dead_letter=True,
    )  # fmt: skip
    results = run_on_spark(config)

    dead = Counter(
        (d["operator"], json.dumps(json.loads(d["record"]), sort_keys=True))
        for d in read_dlq(kafka_bootstrap, unique)
        if d["stage"] == "late"
    )
    assert max(dead.values()) == 1  # each too-late record dead-lettered once
    ls, rs = [left(i) for i in range(n)], [right(j) for j in range(n // 2)]

    def kept(op: str, recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for r in recs if (op, json.dumps(r, sort_keys=True)) not in dead]

    for op, reference in (("interval", interval_reference), ("asof", asof_reference)):
        got = rows(out, f"{op}_out")
        assert got == reference(kept(op, ls), kept(op, rs)), op
        gone = [json.loads(r) for o, r in dead if o == op]
        assert gone, f"{op}: no record was too late"
        assert all(very_late(r, 10 if r in ls else 20) for r in gone), op
    hot = sum(r["key"] == "hot" for r in ls)
    assert 0.4 < hot / n < 0.6  # the skew the test is about
    assert len(rows(out, "interval_out")) > n  # hot keys make many pairs
    attempts = {r.subtask.split("/")[1]: (r.attempt, r.status) for r in results}
    assert attempts["interval[0]"] == (1, "finished")
    assert attempts["asof[1]"] == (1, "finished")
