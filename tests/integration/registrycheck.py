"""What the registry tests (test_schema_registry.py, test_jsonschema_registry.py,
test_protobuf_registry.py) share, so that no test module imports another: the input
topics' partition count, reading a topic's committed output through a confluent-kafka
deserializer, and the bounded orders jobs of :mod:`tests.integration.registryjobs` with
the dead letter their unknown schema id leaves.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from tests.integration.deadletters import read_dlq

PARTITIONS = 2  # of every input topic the registry tests create
PER_VERSION = 1_000  # orders the bounded orders jobs' producers write with each schema version
UNKNOWN_ID = 987_654  # a schema id no registry of the tests knows


def read_output(
    bootstrap: str,
    topic: str,
    url: str,
    deserializer: Callable[[SchemaRegistryClient], Any] = AvroDeserializer,
) -> list[dict[str, Any]]:
    """Every committed output value, decoded by confluent-kafka's AvroDeserializer (or
    the deserializer ``deserializer`` makes with a registry client)."""
    decode = deserializer(SchemaRegistryClient({"url": url}))
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-check",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    tps = [CkTopicPartition(topic, p, 0) for p in range(PARTITIONS)]
    consumer.assign(tps)
    ends = {p: consumer.get_watermark_offsets(CkTopicPartition(topic, p))[1] for p in range(2)}
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    while any(
        (consumer.position([CkTopicPartition(topic, p)])[0].offset or 0) < end
        for p, end in ends.items()
        if end
    ):
        assert time.monotonic() < deadline, "output not read to its end"
        ctx = SerializationContext(topic, MessageField.VALUE)
        out.extend(decode(m.value(), ctx) for m in consumer.consume(1000, 0.2) if not m.error())
    consumer.close()
    return out


def run_orders_job(
    job: str, unique: str, kafka_bootstrap: str, registry_url: str, topics: tuple[str, ...]
) -> None:
    """Run the bounded job ``job`` of tests.integration.registryjobs on Spark, from
    ``topics[0]`` to ``topics[1]`` and ``topics[2]``, dead letters on: every subtask
    finishes."""
    env = dict(zip(("IN", "OUT", "OUT2"), topics, strict=True)) | {"REGISTRY": registry_url}
    with pytest.MonkeyPatch.context() as monkeypatch:
        for name, value in env.items():
            monkeypatch.setenv(f"SPILLWAY_TEST_{name}", value)
        results = run_on_spark(
            JobConfig(
                f"tests.integration.registryjobs:{job}", unique, kafka_bootstrap,
                master="local[6,3]", dead_letter=True, checkpoint_interval_s=0.1,
            )
        )  # fmt: skip
    assert {r.status for r in results} == {"finished"}


def assert_unknown_id_dead_lettered(kafka_bootstrap: str, unique: str, topic_in: str) -> None:
    """The value of :data:`UNKNOWN_ID` (after ``PER_VERSION`` values of partition 0) was
    dead-lettered once by each read of the job, with its origin and the id."""
    dead = read_dlq(kafka_bootstrap, unique)
    assert sorted(d["operator"] for d in dead) == ["orders", "orders_b"]  # once by each read
    for d in dead:
        assert (d["stage"], d["topic"]) == ("source", topic_in)
        # Partition 0 held the even ids of both versions before it: PER_VERSION values.
        assert d["origin"] == f"{topic_in}[0]@{PER_VERSION}"
        assert d["error"].startswith(f"schema id {UNKNOWN_ID} is not in the schema registry (")
