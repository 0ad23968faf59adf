"""The pipeline of the multi-input kill test (executors import it by reference).

Two event generators of one schema, ``a`` (p=2) and ``b`` (p=1), are united: a keyed count
per key reads both. The union is also connected with ``prices`` (one price per key, slowly,
and none for the last ``UNPRICED`` keys): the co-process ``enrich`` keeps each key's price
in keyed state and emits every event with it, keeping events that came before their
key's price in list state until it does; events of a key that never gets a price are
emitted with ``price`` null when the inputs end (an event-time timer). Whatever the
interleaving of the inputs, the output is the same. Configured through ``SPILLWAY_TEST_*``.
"""

from __future__ import annotations

import os
from typing import Any

from spark_jobs.pipeline import Pipeline, connect, union
from spark_jobs.process import ProcessContext

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
