"""The pipelines of the multi-input kill tests (executors import them by reference).

Two event generators of one schema, ``a`` (p=2) and ``b`` (p=1), are united: a keyed count
per key reads both. The union is also connected with ``prices`` (one price per key, slowly,
and none for the last ``UNPRICED`` keys): the co-process ``enrich`` keeps each key's price
in keyed state and emits every event with it, keeping events that came before their
key's price in list state until it does; events of a key that never gets a price are
emitted with ``price`` null when the inputs end (an event-time timer). Whatever the
interleaving of the inputs, the output is the same. Configured through ``SPILLWAY_TEST_*``.

:func:`asof_pipeline` joins each left record with the latest right value of its key at or
before its event time, from event-time timers: correct only if the watermark is the
minimum over both inputs (the right one lags).
"""

from __future__ import annotations

import os
from typing import Any

from spillway.spark_jobs.api.pipeline import Pipeline, connect, union
from spillway.spark_jobs.operators.process import ProcessContext
from spillway.spark_jobs.records.watermarks import Watermarks

KEYS = 40
UNPRICED = 3  # the last keys get no price
B_BASE = 1_000_000  # b's sequence numbers start here (a's at 0)
END_TIMER = 0  # fires only when the bounded inputs end (no watermark before)

EVENT = {
    "type": "record",
    "name": "Event",
    "fields": [{"name": "seq", "type": "long"}, {"name": "key", "type": "string"}],
}
PRICE = {
    "type": "record",
    "name": "Price",
    "fields": [{"name": "key", "type": "string"}, {"name": "price", "type": "long"}],
}
ENRICHED = {
    "type": "record",
    "name": "Enriched",
    "fields": [
        {"name": "seq", "type": "long"},
        {"name": "key", "type": "string"},
        {"name": "price", "type": ["null", "long"]},
    ],
}
COUNT = {
    "type": "record",
    "name": "Count",
    "fields": [{"name": "key", "type": "string"}, {"name": "n", "type": "long"}],
}


def event_a(i: int) -> dict[str, Any]:
    """Event ``i`` of generator a."""
    return {"seq": i, "key": f"k{i * 7 % KEYS}"}


def event_b(i: int) -> dict[str, Any]:
    """Event ``i`` of generator b."""
    return {"seq": B_BASE + i, "key": f"k{i * 3 % KEYS}"}


def price(j: int) -> dict[str, Any]:
    """The price of key ``j``."""
    return {"key": f"k{j}", "price": 100 + j}


def on_event(r: dict[str, Any], ctx: ProcessContext) -> list[dict[str, Any]]:
    """An event: joined with its key's price, or kept until the price comes."""
    p = ctx.value("price").value()
    if p is None:
        ctx.list("waiting").add(r["seq"])
        ctx.timers.register_event_time(END_TIMER)
        return []
    return [{"seq": r["seq"], "key": ctx.key, "price": p}]


def on_price(r: dict[str, Any], ctx: ProcessContext) -> list[dict[str, Any]]:
    """A price: kept for the key; the events waiting for it go out."""
    ctx.value("price").update(r["price"])
    waiting = ctx.list("waiting").get()
    ctx.list("waiting").clear()
    ctx.timers.delete_event_time(END_TIMER)
    return [{"seq": s, "key": ctx.key, "price": r["price"]} for s in waiting]


def unpriced(ts: int, ctx: ProcessContext) -> list[dict[str, Any]]:
    """The inputs ended: the events whose key never got a price."""
    return [{"seq": s, "key": ctx.key, "price": None} for s in ctx.list("waiting").get()]


def pipeline() -> Pipeline:
    """a ∪ b → count per key; (a ∪ b) ⋈ prices → enriched."""
    env = os.environ
    n_a, n_b = int(env["SPILLWAY_TEST_A"]), int(env["SPILLWAY_TEST_B"])
    rate = float(env["SPILLWAY_TEST_RATE"])
    out = env["SPILLWAY_TEST_OUT"]
    p = Pipeline("multi-input")
    a = p.generate("a", make=event_a, schema=EVENT, count=n_a, parallelism=2, rate=rate)
    b = p.generate("b", make=event_b, schema=EVENT, count=n_b, parallelism=1, rate=rate)
    prices = p.generate(
        "prices", make=price, schema=PRICE, count=KEYS - UNPRICED, rate=KEYS / (n_a / 2 / rate)
    )
    events = union(a, b)
    events.key_by(lambda r: r["key"]).aggregate(
        "count", init=lambda: 0, add=lambda n, r: n + 1,
        result=lambda k, n: {"key": k, "n": n}, schema=COUNT, parallelism=2,
    ).write_jsonl("counts", out)  # fmt: skip
    enriched = connect(events, prices).key_by(lambda r: r["key"], lambda r: r["key"])
    enriched.process(
        "enrich", on_event, on_price, on_timer=unpriced, schema=ENRICHED, parallelism=2
    ).write_jsonl("enriched", out)
    return p


# -- event time over two inputs: an as-of join by timers on the combined watermark -------

ASOF_KEYS = 5
TICK = {
    "type": "record",
    "name": "Tick",
    "fields": [
        {"name": "seq", "type": "long"},
        {"name": "key", "type": "string"},
        {"name": "ts", "type": "long"},
    ],
}
JOINED = {
    "type": "record",
    "name": "Joined",
    "fields": [
        {"name": "seq", "type": "long"},
        {"name": "key", "type": "string"},
        {"name": "ts", "type": "long"},
        {"name": "b", "type": ["null", "long"]},
    ],
}


def tick_a(i: int) -> dict[str, Any]:
    """Left record ``i``: event time 10 ms apart (each subtask's in increasing order)."""
    return {"seq": i, "key": f"k{i % ASOF_KEYS}", "ts": i * 10}


def tick_b(j: int) -> dict[str, Any]:
    """Right record ``j``: event time 100 ms apart, over the same span as the left."""
    return {"seq": j, "key": f"k{j * 3 % ASOF_KEYS}", "ts": j * 100}


def left(r: dict[str, Any], ctx: ProcessContext) -> None:
    """Wait until the watermark passes the record's time: every right record at or before
    it has come by then (on either input, a record is never behind the watermark)."""
    ctx.list("left").add([r["ts"], r["seq"]])
    ctx.timers.register_event_time(r["ts"] + 1)


def right(r: dict[str, Any], ctx: ProcessContext) -> None:
    """Keep every right value of the key with its time."""
    ctx.list("right").add([r["ts"], r["seq"]])


def as_of(ts: int, ctx: ProcessContext) -> list[dict[str, Any]]:
    """Each waiting left record due by ``ts``, with the latest right value at or before it."""
    rights = ctx.list("right").get()
    out, keep = [], []
    for t, seq in ctx.list("left").get():
        if t + 1 > ts:
            keep.append([t, seq])
            continue
        before = [(rt, v) for rt, v in rights if rt <= t]
        out.append({"seq": seq, "key": ctx.key, "ts": t, "b": max(before)[1] if before else None})
    ctx.list("left").update(keep)
    return out


def asof_pipeline() -> Pipeline:
    """Left (p=2) and right (p=1, ten times fewer records over the same event time, so it
    lags) → as-of join by event-time timers (p=2) → files."""
    env = os.environ
    n_a, rate = int(env["SPILLWAY_TEST_A"]), float(env["SPILLWAY_TEST_RATE"])
    mono = Watermarks.monotonic()
    p = Pipeline("as-of")
    a = p.generate(
        "left", make=tick_a, schema=TICK, count=n_a, parallelism=2, rate=rate,
        timestamp=lambda r: r["ts"], watermarks=mono,
    )  # fmt: skip
    b = p.generate(
        "right", make=tick_b, schema=TICK, count=n_a // 10, rate=rate / 10,
        timestamp=lambda r: r["ts"], watermarks=mono,
    )  # fmt: skip
    keyed = connect(a, b).key_by(lambda r: r["key"], lambda r: r["key"])
    keyed.process(
        "asof", left, right, on_timer=as_of, schema=JOINED, parallelism=2,
        event_time_a=lambda r: r["ts"], event_time_b=lambda r: r["ts"],
    ).write_jsonl("joined", env["SPILLWAY_TEST_OUT"])  # fmt: skip
    return p
