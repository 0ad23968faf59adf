"""Protobuf values by a schema registry on Spark: the session's own local registry
(Apicurio, in memory), a bounded job reading values by their schema ids and message
indexes and writing its output registered.

confluent-kafka's ``ProtobufSerializer`` writes orders with version 1 of ``shop.Order``,
then version 2 (a note added), and one value with an id the registry does not know. One
bounded job reads the topic twice, as records and as Arrow batches, with the generated
class of version 2, taxes each and writes each as ``shop.Taxed`` Protobuf values
(registered under ``<topic>-value``): read back with confluent-kafka's
``ProtobufDeserializer`` each output is exactly the reference, and the unknown id is
dead-lettered once by each read, with its origin and the id. (The compatibility check of
a Protobuf schema is tested with a fake registry only: the local Apicurio build parses the
base64 descriptor ProtobufSerializer registers as .proto text when a subject has a
compatibility rule, and answers 500 "Syntax error in :1:1: unexpected label".)
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from spillway.channels.config import KafkaSettings
from spillway.channels.kafka.admin import Admin, TopicSpec
from tests.integration.registrycheck import (
    PARTITIONS,
    PER_VERSION,
    UNKNOWN_ID,
    assert_unknown_id_dead_lettered,
    read_output,
    run_orders_job,
)
from tests.protomessages import Order, OrderV1, Taxed

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.registry]

CONFLUENT = {"use.deprecated.format": False}


def taxed_deserializer(client: SchemaRegistryClient) -> ProtobufDeserializer:
    """confluent-kafka's ProtobufDeserializer of ``shop.Taxed``."""
    return ProtobufDeserializer(Taxed, CONFLUENT)


def test_a_bounded_job_reads_and_writes_protobuf_values_exactly(
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
    v1 = ProtobufSerializer(OrderV1, registry, CONFLUENT)
    v2 = ProtobufSerializer(Order, registry, CONFLUENT)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    expected: list[Any] = []
    for i in range(2 * PER_VERSION):
        fields: dict[str, Any] = {"id": i, "amount": 100 + i % 1000, "kind": i % 3}
        if i >= PER_VERSION:
            fields["note"] = f"n{i % 7}\u00e9" if i % 5 else ""
        value = v1(OrderV1(**fields), ctx) if i < PER_VERSION else v2(Order(**fields), ctx)
        producer.produce(topic_in, value, partition=i % PARTITIONS)
        expected.append(Taxed(**fields, gross=fields["amount"] * 6 // 5))
    unknown = b"\x00" + UNKNOWN_ID.to_bytes(4, "big") + b"\x00" + Order(id=-1).SerializeToString()
    producer.produce(topic_in, unknown, partition=0)
    assert producer.flush(60) == 0
    versions = registry.get_versions(f"{topic_in}-value")
    assert len(versions) == 2  # the registry took both versions of the file

    topics = (topic_in, out, out2)
    run_orders_job("registry_proto_orders", unique, kafka_bootstrap, schema_registry_url, topics)
    for topic in (out, out2):
        got = read_output(kafka_bootstrap, topic, schema_registry_url, taxed_deserializer)
        assert sorted(got, key=lambda t: t.id) == expected, topic  # each exactly once
        registered = registry.get_latest_version(f"{topic}-value").schema
        assert registered.schema_type == "PROTOBUF"
        assert (
            registered.schema_str == base64.b64encode(Taxed.DESCRIPTOR.file.serialized_pb).decode()
        )
    assert_unknown_id_dead_lettered(kafka_bootstrap, unique, topic_in)
