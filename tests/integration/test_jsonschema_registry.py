"""JSON Schema values by a schema registry on Spark: the session's own local registry
(Apicurio, in memory), a bounded job reading values by their schema ids and writing its
output registered.

confluent-kafka's ``JSONSerializer`` writes orders with version 1 of their JSON schema,
then version 2 (a note added), and one value with an id the registry does not know. One
bounded job reads the topic twice, as records and as Arrow batches, taxes each and writes
each as JSON Schema values (the records' schema derived and registered under
``<topic>-value``): read back with confluent-kafka's ``JSONDeserializer`` each output is
exactly the reference, and the unknown id is dead-lettered once by each read, with its
origin and the id. (The compatibility check of a JSON schema is tested with a fake
registry only: the local Apicurio build answers it 500, its JSON Schema library missing.)
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from spillway.channels.config import KafkaSettings
from spillway.channels.kafka.admin import Admin, TopicSpec
from spillway.spark_jobs.connectors.confluentjson import json_schema_of
from tests.integration.registrycheck import (
    PARTITIONS,
    PER_VERSION,
    UNKNOWN_ID,
    assert_unknown_id_dead_lettered,
    read_output,
    run_orders_job,
)
from tests.integration.registryjobs import TAXED_JSON, taxed_json

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.registry]

V1 = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Order",
    "type": "object",
    "properties": {"id": {"type": "integer"}, "amount": {"type": "integer"}},
    "required": ["id", "amount"],
}
V2 = {**V1, "properties": {**V1["properties"], "note": {"type": "string"}}}


def json_deserializer(client: SchemaRegistryClient) -> JSONDeserializer:
    """confluent-kafka's JSONDeserializer: the writer's schema from the registry, each
    value validated against it."""
    return JSONDeserializer(None, schema_registry_client=client)


def test_a_bounded_job_reads_and_writes_json_schema_values_exactly(
    kafka_bootstrap: str,
    schema_registry_url: str,
    unique: str,
) -> None:
    topic_in, out, out2 = f"{unique}-in", f"{unique}-out", f"{unique}-out2"
    Admin(KafkaSettings(kafka_bootstrap)).ensure_topics(
        [TopicSpec(t, PARTITIONS) for t in (topic_in, out, out2)]
    )
    registry = SchemaRegistryClient({"url": schema_registry_url})
    ctx = SerializationContext(topic_in, MessageField.VALUE)
    v1 = JSONSerializer(json.dumps(V1), registry)
    v2 = JSONSerializer(json.dumps(V2), registry)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    expected: list[dict[str, Any]] = []
    for i in range(2 * PER_VERSION):
        order: dict[str, Any] = {"id": i, "amount": 100 + i % 1000}
        if i >= PER_VERSION:
            order["note"] = f"n{i % 7}\u00e9" if i % 5 else ""
        value = (v1 if i < PER_VERSION else v2)(order, ctx)
        producer.produce(topic_in, value, partition=i % PARTITIONS)
        expected.append(taxed_json(order))
    unknown = b"\x00" + UNKNOWN_ID.to_bytes(4, "big") + b'{"id": -1, "amount": 1}'
    producer.produce(topic_in, unknown, partition=0)
    assert producer.flush(60) == 0

    topics = (topic_in, out, out2)
    run_orders_job("registry_json_orders", unique, kafka_bootstrap, schema_registry_url, topics)
    for topic in (out, out2):
        got = read_output(kafka_bootstrap, topic, schema_registry_url, json_deserializer)
        assert sorted(got, key=lambda o: o["id"]) == expected, topic  # each exactly once
        registered = registry.get_latest_version(f"{topic}-value").schema
        assert registered.schema_type == "JSON"
        assert json.loads(registered.schema_str) == json_schema_of(TAXED_JSON)
    assert_unknown_id_dead_lettered(kafka_bootstrap, unique, topic_in)
