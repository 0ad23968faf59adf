"""The pipeline of test_schema_registry.py: registry-framed Avro orders (an unbounded
topic) → a map → registry-framed Avro output.

Environment: ``SPILLWAY_TEST_IN``/``SPILLWAY_TEST_OUT`` (topics),
``SPILLWAY_TEST_REGISTRY`` (the registry's URL).
"""

from __future__ import annotations

import os
from typing import Any

from spillway.spark_jobs.api.pipeline import Pipeline
from spillway.spark_jobs.connectors.registry import RegistryConfig

# The reader's schema: version 2 of the producers' (``note`` added, with a default).
ORDER_V2 = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "amount", "type": "long"},
        {"name": "note", "type": "string", "default": "none"},
    ],
}
ORDER_V1 = {"type": "record", "name": "Order", "fields": ORDER_V2["fields"][:2]}
TAXED = {
    "type": "record",
    "name": "Taxed",
    "namespace": "spillway.test",
    "fields": [*ORDER_V2["fields"], {"name": "gross", "type": "long"}],
}


def taxed(order: dict[str, Any]) -> dict[str, Any]:
    """The order with its amount plus 20 % (integer cents)."""
    return {**order, "gross": order["amount"] * 6 // 5}


def registry_orders() -> Pipeline:
    """Orders read by their schema ids, resolved into version 2; taxed; written back."""
    registry = RegistryConfig(os.environ["SPILLWAY_TEST_REGISTRY"])
    p = Pipeline("registry-orders")
    orders = p.read_kafka(
        "orders", os.environ["SPILLWAY_TEST_IN"], schema=ORDER_V2, parallelism=2,
        value_format="avro", registry=registry,
    )  # fmt: skip
    orders.map("tax", taxed, schema=TAXED).write_kafka(
        "sink", os.environ["SPILLWAY_TEST_OUT"], value_format="avro", registry=registry
    )
    return p
