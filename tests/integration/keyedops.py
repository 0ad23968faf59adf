"""The pipeline of the keyed-operators kill test (executors import it by reference).

``events`` (Kafka, event time = the ``ts`` field, equal to the record timestamp) feeds a
hopping window directly (it sees every record, late ones included) and, through
``ontime`` (drops the records the test wrote late on purpose), a session window and a
process function with event-time timers. Configured through ``SPILLWAY_TEST_*``
environment variables.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from spillway.spark_jobs.api.pipeline import Pipeline
from spillway.spark_jobs.api.windowspec import Hopping, Session
from spillway.spark_jobs.operators.process import ProcessContext
from spillway.spark_jobs.records.watermarks import Watermarks

BOUND_MS = 2000  # max out-of-orderness
SIZE_MS, HOP_MS = 2000, 1000  # hopping windows
LATENESS_MS = 15_000  # the hopping window's allowed lateness
GAP_MS = 500  # session gap

EVENT = {
    "type": "record",
    "name": "Event",
    "fields": [
        {"name": "seq", "type": "long"},
        {"name": "key", "type": "string"},
        {"name": "ts", "type": "long"},
        {"name": "kind", "type": "string"},
    ],
}
WINDOW = {
    "type": "record",
    "name": "Window",
    "fields": [
        {"name": "key", "type": "string"},
        {"name": "start", "type": "long"},
        {"name": "end", "type": "long"},
        {"name": "count", "type": "long"},
        {"name": "seqs", "type": "long"},
    ],
}


def add(acc: list[int], r: dict[str, Any]) -> list[int]:
    """Count the records and sum their sequence numbers (which ones went in)."""
    return [acc[0] + 1, acc[1] + r["seq"]]


def merge(a: list[int], b: list[int]) -> list[int]:
    """Two sessions' accumulators into one."""
    return [a[0] + b[0], a[1] + b[1]]


def result(key: str, start: int, end: int, acc: list[int]) -> dict[str, Any]:
    """One output row per window (per update)."""
    return {"key": key, "start": start, "end": end, "count": acc[0], "seqs": acc[1]}


def per_second(r: dict[str, Any], ctx: ProcessContext) -> None:
    """Count the key's records per second of event time; a timer closes each second."""
    sec = r["ts"] // 1000
    seconds = ctx.map("seconds")
    n, seqs = seconds.get(str(sec), [0, 0])
    seconds.put(str(sec), [n + 1, seqs + r["seq"]])
    ctx.timers.register_event_time((sec + 1) * 1000)


def close_second(ts: int, ctx: ProcessContext) -> Iterator[dict[str, Any]]:
    """The closed second's row; its bucket is forgotten."""
    sec = ts // 1000 - 1
    seconds = ctx.map("seconds")
    n, seqs = seconds.get(str(sec), [0, 0])
    seconds.remove(str(sec))
    yield {"key": ctx.key, "start": sec * 1000, "end": ts, "count": n, "seqs": seqs}


def keyed_operators() -> Pipeline:
    """events → hop (hopping window with lateness); events → ontime → sess, proc."""
    p = Pipeline("keyed-ops", chaining=True)
    out = os.environ["SPILLWAY_TEST_OUT"]
    events = p.read_kafka(
        "events",
        os.environ["SPILLWAY_TEST_IN"],
        schema=EVENT,
        timestamp_column="ts",
        watermarks=Watermarks.bounded(BOUND_MS),
    )
    events.key_by(lambda r: r["key"]).window(
        "hop", Hopping(SIZE_MS, HOP_MS), allowed_lateness=LATENESS_MS
    ).aggregate(init=lambda: [0, 0], add=add, result=result, schema=WINDOW).write_jsonl(
        "hop_out", out
    )
    ontime = events.filter("ontime", lambda r: r["kind"] == "on")
    ontime.key_by(lambda r: r["key"]).window("sess", Session(GAP_MS)).aggregate(
        init=lambda: [0, 0], add=add, merge=merge, result=result, schema=WINDOW
    ).write_jsonl("sess_out", out)
    ontime.key_by(lambda r: r["key"]).process(
        "proc", per_second, on_timer=close_second, schema=WINDOW
    ).write_jsonl("proc_out", out)
    return p
