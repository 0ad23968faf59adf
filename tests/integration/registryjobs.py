"""The pipelines of test_schema_registry.py: registry-framed Avro orders (an unbounded
topic) → a map → registry-framed Avro output; the same orders (bounded) read as Arrow
batches → ``map_batches`` → JSONL; and those batches → ``map_batches`` → registry-framed
Avro output, written by a sink chained behind the batch operator and by one alone. For
test_jsonschema_registry.py: JSON Schema orders (bounded) read as records and as batches,
each taxed and written as JSON Schema values.

Environment: ``SPILLWAY_TEST_IN``/``SPILLWAY_TEST_OUT`` (topics; for the batches, the
output directory), ``SPILLWAY_TEST_OUT2`` (the second output topic),
``SPILLWAY_TEST_REGISTRY`` (the registry's URL).
"""

from __future__ import annotations

import os
from typing import Any

from spillway.spark_jobs.api.pipeline import Pipeline
from spillway.spark_jobs.connectors.batchregistry import channel_schema
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


def taxed_batch(b: Any) -> Any:
    """:func:`taxed` over an Arrow batch (amounts are positive: ``divide`` truncates as //)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    gross = pc.divide(pc.multiply(b.column("amount"), 6), 5)
    return pa.RecordBatch.from_arrays([*b.columns, gross], names=[*b.schema.names, "gross"])


def registry_orders_batches() -> Pipeline:
    """The bounded orders topic read as Arrow batches by their schema ids, resolved into
    version 2; taxed with ``map_batches``; written as JSONL to ``SPILLWAY_TEST_OUT``."""
    registry = RegistryConfig(os.environ["SPILLWAY_TEST_REGISTRY"])
    p = Pipeline("registry-orders-batches")
    orders = p.read_kafka(
        "orders", os.environ["SPILLWAY_TEST_IN"], schema=ORDER_V2, parallelism=2,
        bounded=True, batches=True, value_format="avro", registry=registry,
    )  # fmt: skip
    tax = orders.map_batches("tax", taxed_batch, schema=channel_schema(TAXED))
    tax.write_jsonl("out", os.environ["SPILLWAY_TEST_OUT"])
    return p


def registry_orders_batches_to_kafka() -> Pipeline:
    """The bounded orders topic read as Arrow batches by their schema ids, taxed with
    ``map_batches`` twice: one written by a sink chained behind it to ``SPILLWAY_TEST_OUT``
    (TopicRecordNameStrategy), one rebalanced to a sink alone that reads batches, to
    ``SPILLWAY_TEST_OUT2`` (RecordNameStrategy); both registry-framed Avro."""
    registry = RegistryConfig(os.environ["SPILLWAY_TEST_REGISTRY"])
    p = Pipeline("registry-orders-batches-out", chaining=True)
    orders = p.read_kafka(
        "orders", os.environ["SPILLWAY_TEST_IN"], schema=ORDER_V2, parallelism=2,
        bounded=True, batches=True, value_format="avro", registry=registry,
    )  # fmt: skip
    chained = orders.map_batches("tax", taxed_batch, schema=channel_schema(TAXED))
    chained.write_kafka(
        "chained", os.environ["SPILLWAY_TEST_OUT"], value_format="avro", registry=registry,
        subject_strategy="topic_record",
    )  # fmt: skip
    alone = orders.map_batches("tax2", taxed_batch, schema=channel_schema(TAXED))
    alone.rebalance().write_kafka(
        "alone", os.environ["SPILLWAY_TEST_OUT2"], value_format="avro", registry=registry,
        subject_strategy="record",
    )  # fmt: skip
    return p


# JSON Schema values: the reader's schema (an Avro record schema, as for plain JSON values)
# reads both versions of the producers' JSON schema; version 1 has no note (null here).
ORDER_JSON = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "amount", "type": "long"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
TAXED_JSON = {
    "type": "record",
    "name": "Taxed",
    "namespace": "spillway.test",
    "fields": [*ORDER_JSON["fields"], {"name": "gross", "type": "long"}],
}


def taxed_json(order: dict[str, Any]) -> dict[str, Any]:
    """The order in :data:`TAXED_JSON`'s fields (a version 1 order has no note: null)."""
    return {
        "id": order["id"],
        "amount": order["amount"],
        "note": order.get("note"),
        "gross": order["amount"] * 6 // 5,
    }


def registry_json_orders() -> Pipeline:
    """The bounded orders topic of JSON Schema values read twice, as records and as Arrow
    batches, each taxed and written as JSON Schema values (the records' schema derived,
    registered under ``<topic>-value``) to ``SPILLWAY_TEST_OUT`` and ``SPILLWAY_TEST_OUT2``."""
    registry = RegistryConfig(os.environ["SPILLWAY_TEST_REGISTRY"])
    p = Pipeline("registry-json-orders", chaining=True)
    for name, batches, out in (("orders", False, "OUT"), ("orders_b", True, "OUT2")):
        orders = p.read_kafka(
            name, os.environ["SPILLWAY_TEST_IN"], schema=ORDER_JSON, parallelism=2,
            bounded=True, batches=batches, value_format="json-schema", registry=registry,
        )  # fmt: skip
        tax = (
            orders.map_batches(f"{name}_tax", taxed_batch, schema=channel_schema(TAXED_JSON))
            if batches
            else orders.map(f"{name}_tax", taxed_json, schema=TAXED_JSON)
        )
        tax.write_kafka(
            f"{name}_sink", os.environ[f"SPILLWAY_TEST_{out}"], value_format="json-schema",
            registry=registry,
        )  # fmt: skip
    return p


def taxed_proto(order: dict[str, Any]) -> dict[str, Any]:
    """An order record of ``shop.Order`` (tests.protomessages) as a ``shop.Taxed`` record."""
    return {**order, "gross": order["amount"] * 6 // 5}


def registry_proto_orders() -> Pipeline:
    """The bounded orders topic of Protobuf values (``shop.Order``, either version) read
    twice, as records and as Arrow batches, each taxed and written as ``shop.Taxed``
    Protobuf values (registered under ``<topic>-value``) to ``SPILLWAY_TEST_OUT`` and
    ``SPILLWAY_TEST_OUT2``."""
    from spillway.spark_jobs.connectors.confluentproto import record_schema
    from tests.protomessages import Order, Taxed

    registry = RegistryConfig(os.environ["SPILLWAY_TEST_REGISTRY"])
    taxed_schema = record_schema(Taxed.DESCRIPTOR)
    p = Pipeline("registry-proto-orders", chaining=True)
    for name, batches, out in (("orders", False, "OUT"), ("orders_b", True, "OUT2")):
        orders = p.read_kafka(
            name, os.environ["SPILLWAY_TEST_IN"], parallelism=2, bounded=True,
            batches=batches, value_format="protobuf", registry=registry, message_type=Order,
        )  # fmt: skip
        tax = (
            orders.map_batches(f"{name}_tax", taxed_batch, schema=taxed_schema)
            if batches
            else orders.map(f"{name}_tax", taxed_proto, schema=taxed_schema)
        )
        tax.write_kafka(
            f"{name}_sink", os.environ[f"SPILLWAY_TEST_{out}"], value_format="protobuf",
            registry=registry, message_type=Taxed,
        )  # fmt: skip
    return p
