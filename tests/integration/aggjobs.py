"""The pipelines of the built-in aggregation tests (executors import them by reference).

``windowed_aggs``: ``events`` (a paced generator, event time declared once: the ``ts``
field, bounded out-of-orderness) → ``key_by("key")`` → ``window("win", Tumbling(1 s))
.agg(...)`` with count, sum, min, max and mean → JSONL files. No ``event_time=`` on the
window: it reads the time the source declared.

``kafka_time_aggs``: a bounded Kafka topic whose event time is the Kafka record
timestamp (no field holds it) → a map that keeps only ``key`` and ``cents`` → the same
kind of window, without ``event_time=``: the time travels with each record.

Configured through ``SPILLWAY_TEST_*`` variables.
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


NARROW = {
    "type": "record",
    "name": "Narrow",
    "fields": [{"name": "key", "type": "string"}, {"name": "cents", "type": ["null", "long"]}],
}


def narrow(e: dict[str, Any]) -> dict[str, Any]:
    """Only the key and the cents: neither the time nor anything it could be read from."""
    return {"key": e["key"], "cents": e["cents"]}


def kafka_time_aggs() -> Pipeline:
    """Topic ``SPILLWAY_TEST_IN`` (bounded, p=2; event time: the Kafka record timestamp)
    → narrow (p=2) → per key and 1 s tumbling window: n, total (p=2) → files."""
    p = Pipeline("kafka-time-aggs")
    events = p.read_kafka(
        "events",
        os.environ["SPILLWAY_TEST_IN"],
        schema=EVENT,
        parallelism=2,
        bounded=True,
        watermarks=Watermarks.bounded(BOUND_MS),
    )
    kept = events.map("narrow", narrow, schema=NARROW)
    kept.key_by("key").window("win", Tumbling(WINDOW)).agg(
        n=count(), total=sum("cents"), parallelism=2
    ).write_jsonl("out", os.environ["SPILLWAY_TEST_OUT"])
    return p
