"""An event-time pipeline the window test submits by reference (executors import this).

Configured through ``SPILLWAY_TEST_*`` environment variables, which the driver forwards.
"""

from __future__ import annotations

import os
from typing import Any

from spillway.spark_jobs.api.pipeline import Pipeline
from spillway.spark_jobs.api.windowspec import Tumbling
from spillway.spark_jobs.records.watermarks import Watermarks

WINDOW_MS = 1000
BOUND_MS = 2000  # max out-of-orderness
IDLE_MS = 8000  # input partitions 2 and 3 are never written: they go idle after this

TIMED = {
    "type": "record",
    "name": "Timed",
    "fields": [
        {"name": "seq", "type": "long"},
        {"name": "key", "type": "string"},
        {"name": "ts", "type": "long"},
    ],
}
WINDOW = {
    "type": "record",
    "name": "WindowCount",
    "fields": [
        {"name": "key", "type": "string"},
        {"name": "start", "type": "long"},
        {"name": "count", "type": "long"},
        {"name": "seqs", "type": "long"},
    ],
}


def add(acc: list[int], r: dict[str, Any]) -> list[int]:
    """Count the window's records and sum their sequence numbers (which ones went in)."""
    return [acc[0] + 1, acc[1] + r["seq"]]


def result(key: str, start: int, _end: int, acc: list[int]) -> dict[str, Any]:
    """One output row per (key, window)."""
    return {"key": key, "start": start, "count": acc[0], "seqs": acc[1]}


def windowed_kafka() -> Pipeline:
    """Unbounded Kafka topic (event time: the Kafka record timestamp) → tumbling window
    per key → JSONL files.

    With 4 input partitions, ``events[0]`` reads partitions 0 and 3, ``events[1]`` 1 and
    ``events[2]`` 2. The test writes only to 0 and 1, so windows fire only if partition 3
    is left out of ``events[0]``'s watermark and the wholly idle ``events[2]`` out of the
    window's.
    """
    p = Pipeline("event-time")
    # SPILLWAY_TEST_BATCHES: "kafka" reads Arrow batches with the Kafka timestamps as event
    # time, "column" batches with the "ts" column (equal to the Kafka timestamp here);
    # records ("") take the "ts" column. The window reads the source's time, except behind
    # Kafka timestamps (not in the records), where it reads the equal "ts" (event_time=).
    batches = os.environ.get("SPILLWAY_TEST_BATCHES", "")
    events = p.read_kafka(
        "events",
        os.environ["SPILLWAY_TEST_IN"],
        schema=TIMED,
        parallelism=3,
        watermarks=Watermarks.bounded(BOUND_MS, idle_timeout_ms=IDLE_MS),
        timestamp_column=None if batches == "kafka" else "ts",
        batches=bool(batches),
    )
    override = (lambda r: r["ts"]) if batches == "kafka" else None
    events.key_by(lambda r: r["key"]).window(
        "win", Tumbling(WINDOW_MS), event_time=override
    ).aggregate(
        init=lambda: [0, 0], add=add, result=result, schema=WINDOW, parallelism=2
    ).write_jsonl("out", os.environ["SPILLWAY_TEST_OUT"])
    return p
