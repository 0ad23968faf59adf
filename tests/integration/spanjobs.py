"""The pipelines of test_spanning_records.py and test_spanning_rescale.py: 5 MB records
among small ones through a keyed channel (generate → key_by → aggregate per key → files)."""

from __future__ import annotations

import glob
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from spillway.spark_jobs.api.pipeline import Pipeline

BIG_BYTES = 5 * 1024 * 1024
EVERY = 300  # records i with i % EVERY in BIG_AT are big: one in 150 per generator subtask
BIG_AT = (37, 188)  # one odd, one even: both generator subtasks (i mod 2) write big ones
SMALL_KEYS = 7
EVENT = {
    "type": "record",
    "name": "SpanEvent",
    "fields": [
        {"name": "seq", "type": "long"},
        {"name": "key", "type": "string"},
        {"name": "data", "type": "bytes"},
    ],
}
TOTAL = {
    "type": "record",
    "name": "SpanTotal",
    "fields": [
        {"name": "key", "type": "string"},
        {"name": "n", "type": "long"},
        {"name": "seqs", "type": "long"},
        {"name": "size", "type": "long"},
        {"name": "digest", "type": "long"},
    ],
}


def is_big(i: int) -> bool:
    """True for the records of 5 MB."""
    return i % EVERY in BIG_AT


def make_event(i: int) -> dict[str, Any]:
    """Event ``i``: a 5 MB record under its own key ``big{i}``, or a small one of ``k0..k6``."""
    if is_big(i):
        seed = hashlib.sha256(f"big{i}".encode()).digest()
        return {"seq": i, "key": f"big{i}", "data": seed * (BIG_BYTES // len(seed))}
    return {"seq": i, "key": f"k{i % SMALL_KEYS}", "data": f"small{i}".encode()}


def digest(data: bytes) -> int:
    """A record's content as a number (the first 7 bytes of its SHA-256)."""
    return int.from_bytes(hashlib.sha256(data).digest()[:7], "big")


def add(acc: list[int], r: dict[str, Any]) -> list[int]:
    """Count, sum of seq, bytes, and sum of digests: a record lost, repeated or altered
    changes one of them."""
    return [
        acc[0] + 1,
        acc[1] + r["seq"],
        acc[2] + len(r["data"]),
        (acc[3] + digest(r["data"])) % (1 << 62),
    ]


def span_totals() -> Pipeline:
    """generate (p=2, paced) → key_by → aggregate "count" (p=2) → files (p=2)."""
    return _totals(None)


def span_totals_rescalable() -> Pipeline:
    """As :func:`span_totals`, with one file subtask behind a rebalance edge, so that
    count's width can change while the job runs (a forward edge would tie it to out's)."""
    return _totals(1)


def _totals(out_parallelism: int | None) -> Pipeline:
    p = Pipeline("spanning")
    events = p.generate(
        "events",
        make=make_event,
        schema=EVENT,
        count=int(os.environ["SPILLWAY_TEST_RECORDS"]),
        parallelism=2,
        rate=float(os.environ["SPILLWAY_TEST_RATE"]),
    )
    counted = events.key_by(lambda r: r["key"]).aggregate(
        "count",
        init=lambda: [0, 0, 0, 0],
        add=add,
        result=lambda k, acc: {
            "key": k,
            "n": acc[0],
            "seqs": acc[1],
            "size": acc[2],
            "digest": acc[3],
        },
        schema=TOTAL,
        parallelism=2,
    )
    out = os.environ["SPILLWAY_TEST_OUT"]
    if out_parallelism is None:
        counted.write_jsonl("out", out)
    else:
        counted.rebalance().write_jsonl("out", out, parallelism=out_parallelism)
    return p


def reference(records: int) -> dict[str, tuple[int, int, int, int]]:
    """What the job must output: per key, (count, sum of seq, bytes, digest sum)."""
    out: dict[str, list[int]] = {}
    for i in range(records):
        r = make_event(i)
        acc = out.setdefault(r["key"], [0, 0, 0, 0])
        out[r["key"]] = add(acc, r)
    return {k: (n, s, b, d) for k, (n, s, b, d) in out.items()}


def read_output(out: Path) -> dict[str, tuple[int, int, int, int]]:
    """The job's output rows by key (one row per key, asserted)."""
    rows: dict[str, tuple[int, int, int, int]] = {}
    for f in sorted(glob.glob(str(out / "out" / "*.jsonl"))):
        for line in Path(f).read_text().splitlines():
            r = json.loads(line)
            assert r["key"] not in rows, f"two output rows for key {r['key']}"
            rows[r["key"]] = (r["n"], r["seqs"], r["size"], r["digest"])
    return rows
