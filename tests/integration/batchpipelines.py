"""The pipelines of the batch-operator tests (executors import them by reference).

``columnar`` is one pipeline written twice: with batch operators (``map_batches``,
``filter_batches``) when ``SPILLWAY_TEST_BATCHES=1``, with the record operators (``map``,
``filter``) otherwise. Both are mixed: a record map before the batch operators and a
record aggregate after them, or with ``SPILLWAY_TEST_KEYED=column`` the columnar
``key_by("key").aggregate_batches`` followed by a record sink.
"""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from spillway.spark_jobs.api.pipeline import Pipeline
from spillway.spark_jobs.operators.batchagg import Agg
from tests.integration.gates import held_generate

EVENT = {
    "type": "record",
    "name": "Event",
    "fields": [{"name": "seq", "type": "long"}, {"name": "key", "type": "string"}],
}
TAGGED = {
    "type": "record",
    "name": "Tagged",
    "fields": [
        {"name": "seq", "type": "long"},
        {"name": "key", "type": "string"},
        {"name": "score", "type": "long"},
    ],
}
BOOSTED = pa.schema(
    [
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("key", pa.string(), nullable=False),
        pa.field("boosted", pa.int64(), nullable=False),
    ]
)
TOTAL = {
    "type": "record",
    "name": "Total",
    "fields": [
        {"name": "key", "type": "string"},
        {"name": "n", "type": "long"},
        {"name": "total", "type": "long"},
    ],
}


def make_event(i: int) -> dict[str, Any]:
    """Event ``i`` (13 keys)."""
    return {"seq": i, "key": f"k{i % 13}"}


def tag(e: dict[str, Any]) -> dict[str, Any]:
    """A record step: score ``seq % 10``, and ``-1`` (poison for ``boost``) every 97th."""
    return {**e, "score": -1 if e["seq"] % 97 == 0 else e["seq"] % 10}


def boost_record(r: dict[str, Any]) -> dict[str, Any]:
    """The record form of :func:`boost_batch`."""
    if r["score"] < 0:
        raise ValueError(f"negative score in event {r['seq']}")
    return {"seq": r["seq"], "key": r["key"], "boosted": r["score"] * 3 + 1}


def boost_batch(b: pa.RecordBatch) -> pa.RecordBatch:
    """Row-wise over a batch: ``boosted = score * 3 + 1``; a negative score raises."""
    if pc.any(pc.less(b.column("score"), 0)).as_py():
        raise ValueError("negative score in the batch")
    boosted = pc.add(pc.multiply(b.column("score"), 3), 1)
    return pa.RecordBatch.from_arrays(
        [b.column("seq"), b.column("key"), boosted], names=BOOSTED.names
    )


def keep_record(r: dict[str, Any]) -> bool:
    """The record form of :func:`keep_batch`."""
    return bool(r["boosted"] > 7)


def keep_batch(b: pa.RecordBatch) -> pa.Array:
    """The mask of rows with ``boosted > 7``."""
    return pc.greater(b.column("boosted"), 7)


def add(acc: list[int], r: dict[str, Any]) -> list[int]:
    """Count and sum ``boosted``."""
    return [acc[0] + 1, acc[1] + r["boosted"]]


def columnar() -> Pipeline:
    """events(p=2) → tag (record map) → boost (map_batches | map) → keep (filter_batches |
    filter) → count and sum per key (record aggregate, p=2) → files."""
    batches = os.environ.get("SPILLWAY_TEST_BATCHES") == "1"
    p = Pipeline("columnar", chaining=os.environ.get("SPILLWAY_TEST_CHAINED") == "1")
    events = held_generate(  # held at the test's gates (tests/integration/gates.py)
        p,
        "events",
        make=make_event,
        schema=EVENT,
        count=int(os.environ["SPILLWAY_TEST_RECORDS"]),
        parallelism=2,
    )
    tagged = events.map("tag", tag, schema=TAGGED, parallelism=2)
    if batches:
        kept = tagged.map_batches("boost", boost_batch, schema=BOOSTED).filter_batches(
            "keep", keep_batch
        )
    else:
        boosted = tagged.map("boost", boost_record, schema=BOOSTED)
        kept = boosted.filter("keep", keep_record)
    if os.environ.get("SPILLWAY_TEST_SINK"):  # a Kafka topic: the kept rows as JSON
        kept.write_kafka("out", os.environ["SPILLWAY_TEST_SINK"])
        return p
    if os.environ.get("SPILLWAY_TEST_KEYED") == "column":
        totals = kept.key_by("key").aggregate_batches(
            "total", {"n": Agg("count"), "total": Agg("sum", "boosted")}, parallelism=2
        )
        totals.write_jsonl("out", os.environ["SPILLWAY_TEST_OUT"])
        return p
    kept.key_by(lambda r: r["key"]).aggregate(
        "total",
        init=lambda: [0, 0],
        add=add,
        result=lambda k, acc: {"key": k, "n": acc[0], "total": acc[1]},
        schema=TOTAL,
        parallelism=2,
    ).write_jsonl("out", os.environ["SPILLWAY_TEST_OUT"])
    return p


def reference(records: int) -> dict[str, tuple[int, int]]:
    """Plain Python: (count, sum of boosted) per key of what passes ``keep``."""
    out: dict[str, tuple[int, int]] = {}
    for i in range(records):
        e = tag(make_event(i))
        if e["score"] < 0:
            continue
        boosted = e["score"] * 3 + 1
        if boosted > 7:
            n, total = out.get(e["key"], (0, 0))
            out[e["key"]] = (n + 1, total + boosted)
    return out


def kept_rows(records: int) -> list[dict[str, Any]]:
    """Plain Python: the rows that pass ``keep`` (what ``SPILLWAY_TEST_SINK`` gets)."""
    out = []
    for i in range(records):
        e = tag(make_event(i))
        if e["score"] >= 0 and e["score"] * 3 + 1 > 7:
            out.append({"seq": e["seq"], "key": e["key"], "boosted": e["score"] * 3 + 1})
    return out
