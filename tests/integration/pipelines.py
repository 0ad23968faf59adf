"""Pipelines the Spark tests submit by reference (executors import this module).

Configured through ``SPILLWAY_TEST_*`` environment variables, which the driver forwards
to every task.
"""

from __future__ import annotations

import os
from typing import Any

from spark_jobs.pipeline import Pipeline

ORDER = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "amount", "type": "long"},
    ],
}


def taxed(order: dict[str, Any]) -> dict[str, Any]:
    """The order with 20% added, in cents."""
    return {**order, "amount": order["amount"] * 12 // 10}


def kafka_to_kafka() -> Pipeline:
    """A bounded Kafka topic → map → Kafka topic job."""
    p = Pipeline("kafka-to-kafka")
    orders = p.read_kafka(
        "orders", os.environ["SPILLWAY_TEST_IN"], schema=ORDER, parallelism=2, bounded=True
    )
    orders.map("tax", taxed, schema=ORDER).write_kafka("sink", os.environ["SPILLWAY_TEST_OUT"])
    return p
