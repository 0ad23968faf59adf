"""Schemas, topic configurations and stream builders for pipeline definitions (pure):
test_pipeline_definition and test_chaining share them."""

from __future__ import annotations

from typing import Any

from spillway.spark_jobs.api.pipeline import KeyedStream, Pipeline, Stream

EVENT = {
    "type": "record",
    "name": "Event",
    "fields": [{"name": "key", "type": "string"}, {"name": "n", "type": "long"}],
}
COUNT = {
    "type": "record",
    "name": "Count",
    "fields": [{"name": "key", "type": "string"}, {"name": "count", "type": "long"}],
}
CHANGELOG_CFG = {"cleanup.policy": "compact"}
CHANNEL_CFG = {"retention.ms": "604800000"}


def make_event(i: int) -> dict[str, Any]:
    """Event ``i``: key ``k<i mod 3>``, ``n`` = i."""
    return {"key": f"k{i % 3}", "n": i}


def source(p: Pipeline, name: str = "src", parallelism: int = 2) -> Stream:
    """A generator of 10 :func:`make_event` records named ``name`` in ``p``."""
    return p.generate(name, make=make_event, schema=EVENT, count=10, parallelism=parallelism)


def counting(keyed: KeyedStream, name: str = "count", **kw: Any) -> Stream:
    """A keyed count of ``keyed`` (``{"key", "count"}`` per key) named ``name``."""
    return keyed.aggregate(
        name,
        init=lambda: 0,
        add=lambda n, _r: n + 1,
        result=lambda k, n: {"key": k, "count": n},
        schema=COUNT,
        **kw,
    )
