"""Pipelines of test_avro_batches.py: Avro values of a Kafka topic read as records or as
Arrow batches, and a keyed count whose key is a function (per record, or over batches).

Environment: ``SPILLWAY_TEST_IN`` (input topic), ``SPILLWAY_TEST_OUT`` (output
directory), ``SPILLWAY_TEST_BATCHES`` (``1``: the columnar path; else records).
"""

from __future__ import annotations

import os
from typing import Any

from spillway.spark_jobs.api.pipeline import Pipeline, Stream
from spillway.spark_jobs.operators.batchagg import Agg
from tests.integration.gates import hold
from tests.integration.pipelines import ORDER, taxed, taxed_batch

TOTAL = {
    "type": "record",
    "name": "Total",
    "fields": [
        {"name": "customer", "type": "string"},
        {"name": "n", "type": "long"},
        {"name": "total", "type": "long"},
    ],
}


def customer_lower(b: Any) -> Any:
    """The batch key: each row's customer in lower case (one Arrow kernel call)."""
    import pyarrow.compute as pc

    return pc.utf8_lower(b["customer"])


def _batches() -> bool:
    return os.environ.get("SPILLWAY_TEST_BATCHES") == "1"


def _orders(p: Pipeline) -> Stream:
    """The bounded Avro orders topic, as records or (columnar) as batches, held at the
    test's gates if it set any (tests/integration/gates.py)."""
    orders = p.read_kafka(
        "orders", os.environ["SPILLWAY_TEST_IN"], schema=ORDER, parallelism=2,
        bounded=True, batches=_batches(), value_format="avro",
    )  # fmt: skip
    hold(p, "orders")
    return orders


def avro_taxed() -> Pipeline:
    """Avro orders (bounded) → tax → JSONL; columnar: the source decodes each read's
    values column by column and ``map_batches`` taxes them."""
    p = Pipeline("avro-taxed")
    orders = _orders(p)
    if _batches():
        tax = orders.map_batches("tax", taxed_batch, schema=ORDER)
    else:
        tax = orders.map("tax", taxed, schema=ORDER)
    tax.write_jsonl("out", os.environ["SPILLWAY_TEST_OUT"])
    return p


def avro_keyed_totals() -> Pipeline:
    """Avro orders → count and sum per customer in lower case → JSONL. Columnar:
    ``key_by(customer_lower).aggregate_batches`` (batches routed by the key function);
    records: ``key_by(lambda r: r["customer"].lower()).aggregate``."""
    p = Pipeline("avro-totals")
    orders = _orders(p)
    if _batches():
        totals = orders.key_by(customer_lower).aggregate_batches(
            "total", {"n": Agg("count"), "total": Agg("sum", "amount")},
            key_name="customer", parallelism=2,
        )  # fmt: skip
    else:
        totals = orders.key_by(lambda r: r["customer"].lower()).aggregate(
            "total",
            init=lambda: [0, 0],
            add=lambda acc, r: [acc[0] + 1, acc[1] + r["amount"]],
            result=lambda k, acc: {"customer": k, "n": acc[0], "total": acc[1]},
            schema=TOTAL,
            parallelism=2,
        )
    totals.write_jsonl("out", os.environ["SPILLWAY_TEST_OUT"])
    return p
