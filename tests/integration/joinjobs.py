"""The pipelines of the join kill tests (executors import them by reference).

Two event-time generators, ``left`` (p=2) and ``right`` (p=1), over the same span of
event time and a skewed key set (``hot`` holds half the records). Records run up to
``JITTER_MS`` behind their place in time, more than the sources' bound, so some are
late at the source yet within the joins' allowed lateness; every ``VERY_LATE_*``-th
record is ``VERY_LATE_MS`` behind, far beyond it. Both an interval join and an as-of
join read them. Configured through ``SPILLWAY_TEST_*``.
"""

from __future__ import annotations

import os
from typing import Any

from spillway.spark_jobs.api.pipeline import Pipeline, connect
from spillway.spark_jobs.records.watermarks import Watermarks

KEYS = 8
JITTER_MS = 300
BOUND_MS = 100
LATENESS_MS = 3_000
VERY_LATE_MS = 20_000
VERY_LATE_LEFT, VERY_LATE_RIGHT = 97, 89
LOWER, UPPER = -50, 100

TICK = {
    "type": "record",
    "name": "Tick",
    "fields": [
        {"name": "seq", "type": "long"},
        {"name": "key", "type": "string"},
        {"name": "ts", "type": "long"},
    ],
}
PAIR = {
    "type": "record",
    "name": "Pair",
    "fields": [
        {"name": "key", "type": "string"},
        {"name": "l", "type": "long"},
        {"name": "r", "type": ["null", "long"]},
    ],
}


def _mix(i: int, salt: int) -> int:
    return (i * 2654435761 + salt * 40503) % 2**32


def _key(i: int, salt: int) -> str:
    h = _mix(i, salt)
    return "hot" if h % 2 == 0 else f"k{(h >> 8) % KEYS}"


def _ts(i: int, step: int, salt: int, very_late: int) -> int:
    t = i * step
    if i % very_late == very_late // 2 and t >= VERY_LATE_MS:
        return t - VERY_LATE_MS
    return max(0, t - (_mix(i, salt + 1) >> 4) % JITTER_MS)


def left(i: int) -> dict[str, Any]:
    """Left record ``i``: 10 ms apart."""
    return {"seq": i, "key": _key(i, 1), "ts": _ts(i, 10, 3, VERY_LATE_LEFT)}


def right(j: int) -> dict[str, Any]:
    """Right record ``j``: 20 ms apart (half as many over the same span)."""
    return {"seq": j, "key": _key(j, 7), "ts": _ts(j, 20, 9, VERY_LATE_RIGHT)}


def very_late(r: dict[str, Any], step: int) -> bool:
    """Whether a generated record is one of the far-too-late ones."""
    return r["ts"] <= r["seq"] * step - VERY_LATE_MS


def pair(l: dict[str, Any], r: dict[str, Any] | None) -> dict[str, Any]:  # noqa: E741
    """The output row of a joined pair (``r`` None: an as-of miss)."""
    return {"key": l["key"], "l": l["seq"], "r": None if r is None else r["seq"]}


def joins() -> Pipeline:
    """left, right → interval join and as-of join (p=2 each, chained with their sinks)."""
    env = os.environ
    n, rate, out = (
        int(env["SPILLWAY_TEST_N"]),
        float(env["SPILLWAY_TEST_RATE"]),
        env["SPILLWAY_TEST_OUT"],
    )
    wm = Watermarks.bounded(BOUND_MS)
    p = Pipeline("joins", chaining=True)
    a = p.generate(
        "left", make=left, schema=TICK, count=n, parallelism=2, rate=rate,
        timestamp=lambda r: r["ts"], watermarks=wm,
    )  # fmt: skip
    b = p.generate(
        "right", make=right, schema=TICK, count=n // 2, parallelism=1, rate=rate,
        timestamp=lambda r: r["ts"], watermarks=wm,
    )  # fmt: skip
    ts = {"left_time": lambda r: r["ts"], "right_time": lambda r: r["ts"]}
    keyed = connect(a, b).key_by(lambda r: r["key"], lambda r: r["key"])
    keyed.interval_join(
        "interval", lower=LOWER, upper=UPPER, result=pair, schema=PAIR,
        allowed_lateness_ms=LATENESS_MS, parallelism=2, **ts,
    ).write_jsonl("interval_out", out, parallelism=2)  # fmt: skip
    keyed.asof_join(
        "asof", result=pair, schema=PAIR, allowed_lateness_ms=LATENESS_MS, parallelism=2, **ts
    ).write_jsonl("asof_out", out, parallelism=2)
    return p


# -- a lookup join against a table topic (compacted), both topics written by the test ----

ROW = {
    "type": "record",
    "name": "Row",
    "fields": [{"name": "key", "type": "string"}, {"name": "v", "type": "long"}],
}
EVENT = {
    "type": "record",
    "name": "Event",
    "fields": [{"name": "seq", "type": "long"}, {"name": "key", "type": "string"}],
}
LOOKED_UP = {
    "type": "record",
    "name": "LookedUp",
    "fields": [
        {"name": "seq", "type": "long"},
        {"name": "key", "type": "string"},
        {"name": "v", "type": ["null", "long"]},
    ],
}


def looked_up(e: dict[str, Any], row: dict[str, Any] | None) -> dict[str, Any]:
    """An event with its key's current table value (None: no row)."""
    return {"seq": e["seq"], "key": e["key"], "v": None if row is None else row["v"]}


def lookup() -> Pipeline:
    """events (Kafka, p=2) ⋈ table (a compacted Kafka topic, p=1) → lookup join (p=2)."""
    env = os.environ
    p = Pipeline("lookup", chaining=True)
    events = p.read_kafka("events", env["SPILLWAY_TEST_EVENTS"], schema=EVENT, parallelism=2)
    # tombstones: a message with a key and no value deletes the key's row
    table = p.read_kafka(
        "table", env["SPILLWAY_TEST_TABLE"], schema=ROW, key_field="key", tombstones=True
    )
    keyed = connect(events, table).key_by(lambda r: r["key"], lambda r: r["key"])
    keyed.lookup_join("lookup", result=looked_up, schema=LOOKED_UP, parallelism=2).write_jsonl(
        "lookup_out", env["SPILLWAY_TEST_OUT"], parallelism=2
    )
    return p
