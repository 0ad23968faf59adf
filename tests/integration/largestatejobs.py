"""The pipeline of test_large_state_records.py: records of 2 MB through a keyed aggregate
whose state keeps the largest record of its key, so a keyed-state value is 2 MB too
(generate → key_by → aggregate "count" → files)."""

from __future__ import annotations

import hashlib
import os
from typing import Any

from spillway.spark_jobs.api.pipeline import Pipeline
from tests.integration.spanjobs import TOTAL, digest

BIG_CHARS = 2 * 1024 * 1024
EVERY = 100  # records i with i % EVERY == BIG_AT are big
BIG_AT = 37
KEYS = 4
EVENT = {
    "type": "record",
    "name": "LargeEvent",
    "fields": [
        {"name": "seq", "type": "long"},
        {"name": "key", "type": "string"},
        {"name": "data", "type": "string"},
    ],
}


def key_of(i: int) -> str:
    """Record ``i``'s key: runs of ten records per key, so big ones land on k1 and k3."""
    return f"k{(i // 10) % KEYS}"


def make_event(i: int) -> dict[str, Any]:
    """Event ``i``: 2 MiB of text of its own for a big one, a few characters otherwise."""
    if i % EVERY == BIG_AT:
        seed = hashlib.sha256(f"big{i}".encode()).hexdigest()
        data = seed * (BIG_CHARS // len(seed))
    else:
        data = f"small{i}"
    return {"seq": i, "key": key_of(i), "data": data}


def add(acc: list[Any], r: dict[str, Any]) -> list[Any]:
    """Count, sum of seq, and the longest text seen with its seq (the highest seq among
    equal lengths, so the order the two generators' records arrive in does not matter):
    the state of a key that had a big record holds 2 MiB."""
    if (len(r["data"]), r["seq"]) > (len(acc[3]), acc[2]):
        return [acc[0] + 1, acc[1] + r["seq"], r["seq"], r["data"]]
    return [acc[0] + 1, acc[1] + r["seq"], acc[2], acc[3]]


def result(key: str, acc: list[Any]) -> dict[str, Any]:
    """The key's row: the kept text as its size and digest."""
    data = acc[3].encode()
    return {"key": key, "n": acc[0], "seqs": acc[1], "size": len(data), "digest": digest(data)}


def large_state() -> Pipeline:
    """generate (p=2, paced) → key_by → aggregate "count" (p=2) → files (p=2)."""
    p = Pipeline("large-state")
    events = p.generate(
        "events",
        make=make_event,
        schema=EVENT,
        count=int(os.environ["SPILLWAY_TEST_RECORDS"]),
        parallelism=2,
        rate=float(os.environ["SPILLWAY_TEST_RATE"]),
    )
    events.key_by(lambda r: r["key"]).aggregate(
        "count", init=lambda: [0, 0, -1, ""], add=add, result=result, schema=TOTAL, parallelism=2
    ).write_jsonl("out", os.environ["SPILLWAY_TEST_OUT"])
    return p


def reference(records: int) -> dict[str, tuple[int, int, int, int]]:
    """What the job must output: per key, (count, sum of seq, bytes, digest) of its row."""
    accs: dict[str, list[Any]] = {}
    for i in range(records):
        r = make_event(i)
        accs[r["key"]] = add(accs.get(r["key"], [0, 0, -1, ""]), r)
    rows = {k: result(k, acc) for k, acc in accs.items()}
    return {k: (r["n"], r["seqs"], r["size"], r["digest"]) for k, r in rows.items()}
