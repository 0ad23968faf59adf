"""The pipeline of the built-in aggregation test (executors import it by reference).

``events`` (a paced generator, event time declared once: the ``ts`` field, bounded
out-of-orderness) → ``key_by("key")`` → ``window("win", Tumbling(1 s)).agg(...)`` with
count, sum, min, max and mean → JSONL files. No ``event_time=`` on the window: it reads
the time the source declared. Configured through ``SPILLWAY_TEST_*`` variables.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

from spillway import Pipeline, Tumbling, Watermarks, count, max, mean, min, sum

BOUND_MS = 300
WINDOW = datetime.timedelta(seconds=1)
EVENT = {
    "type": "record",
    "name": "Event",
    "fields": [
        {"name": "seq", "type": "long"},
        {"name": "key", "type": "string"},
        {"name": "ts", "type": "long"},
        {"name": "cents", "type": ["null", "long"]},
        {"name": "price", "type": "double"},
    ],
}


def make_event(i: int) -> dict[str, Any]:
    """Event ``i``: 7 keys; out of order by less than ``BOUND_MS`` (so never late); every
    11th has no ``cents``; prices are quarters (their sums are exact in any order)."""
    return {
        "seq": i,
        "key": f"k{i % 7}",
        "ts": 10_000 + i * 10 - (i * 7919) % BOUND_MS,
        "cents": None if i % 11 == 0 else (i * 37) % 1000,
        "price": (i % 17) * 0.25,
    }


def windowed_aggs() -> Pipeline:
    """events (p=2) → per key and 1 s tumbling window: n, total, lo, hi, avg → files."""
    p = Pipeline("builtin-aggs")
    events = p.generate(
        "events",
        make=make_event,
        schema=EVENT,
        count=int(os.environ["SPILLWAY_TEST_RECORDS"]),
        parallelism=2,
        rate=float(os.environ.get("SPILLWAY_TEST_RATE", "0")) or None,
        timestamp_column="ts",
        watermarks=Watermarks.bounded(BOUND_MS),
    )
    events.key_by("key").window("win", Tumbling(WINDOW)).agg(
        n=count(),
        total=sum("cents"),
        lo=min("cents"),
        hi=max("cents"),
        avg=mean("price"),
        parallelism=2,
    ).write_jsonl("out", os.environ["SPILLWAY_TEST_OUT"])
    return p
