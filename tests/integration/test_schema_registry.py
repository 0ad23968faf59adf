"""Avro by a schema registry on Spark: the session's own local registry (Apicurio, in
memory), a job reading values by their schema ids and writing its output registered.

While the job runs, a producer with confluent-kafka's ``AvroSerializer`` writes orders
with version 1 of their schema; a source subtask is SIGKILLed with some of them read past
its checkpoint; once it has restarted the producer writes version 2 (a field added, with a
default) and one value with an id the registry does not know. The output, read back with
confluent-kafka's ``AvroDeserializer``, holds every order exactly once, version 1's with
the default; the unknown id is dead-lettered with its origin and the id.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import PipelineDefinitionError
from spillway.channels.kafka.admin import Admin, TopicSpec
from spillway.spark_jobs.api.pipeline import Pipeline
from spillway.spark_jobs.connectors.registry import RegistryConfig
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from tests.integration.deadletters import read_dlq
from tests.integration.registryjobs import ORDER_V1, ORDER_V2, TAXED, taxed
from tests.integration.support import starts

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.registry]

PER_VERSION = 3_000
PARTITIONS = 2
UNKNOWN_ID = 987_654


def wait_for(what: str, check: Callable[[], bool], timeout_s: float = 180.0) -> None:
    """Poll ``check`` until it holds; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def read_output(bootstrap: str, topic: str, url: str) -> list[dict[str, Any]]:
    """Every committed output value, decoded by confluent-kafka's AvroDeserializer."""
    decode = AvroDeserializer(SchemaRegistryClient({"url": url}))
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


def test_a_job_reads_two_schema_versions_by_id_exactly_once_across_a_kill(
    kafka_bootstrap: str,
    schema_registry_url: str,
    unique: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic_in, topic_out = f"{unique}-in", f"{unique}-out"
    Admin(KafkaSettings(kafka_bootstrap)).ensure_topics(
        [TopicSpec(topic_in, PARTITIONS), TopicSpec(topic_out, PARTITIONS)]
    )
    registry = SchemaRegistryClient({"url": schema_registry_url})
    registry.set_compatibility(f"{topic_in}-value", "BACKWARD")
    ctx = SerializationContext(topic_in, MessageField.VALUE)
    v1 = AvroSerializer(registry, json.dumps(ORDER_V1))
    v2 = AvroSerializer(registry, json.dumps(ORDER_V2))
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    expected: list[dict[str, Any]] = []

    def send(i: int, value: bytes) -> None:
        producer.produce(topic_in, value, partition=i % PARTITIONS)
        producer.poll(0)

    monkeypatch.setenv("SPILLWAY_TEST_IN", topic_in)
    monkeypatch.setenv("SPILLWAY_TEST_OUT", topic_out)
    monkeypatch.setenv("SPILLWAY_TEST_REGISTRY", schema_registry_url)
    # orders[1] dies in its first checkpoint that read records, before it commits: what it
    # read of version 1 past its checkpoint is read again by its next attempt.
    monkeypatch.setenv("SPILLWAY_CRASH_AT", "orders:1:after-produce-read:0:1")
    failure: list[BaseException] = []

    def attempts_of_orders_1() -> set[int]:
        try:
            events = starts(kafka_bootstrap, unique)
        except Exception:  # the job has not created its events topic yet
            return set()
        mine = [e for e in events if (e.get("operator"), e.get("index")) == ("orders", 1)]
        return {int(e["attempt"]) for e in mine}

    def feed() -> None:
        try:
            wait_for("the job to start", lambda: 0 in attempts_of_orders_1())
            for i in range(PER_VERSION):
                order = {"id": i, "amount": 100 + i % 1000}
                send(i, v1(order, ctx))
                expected.append(taxed({**order, "note": "none"}))
            assert producer.flush(60) == 0
            wait_for("orders[1] to be killed and restarted", lambda: 1 in attempts_of_orders_1())
            for i in range(PER_VERSION, 2 * PER_VERSION):
                order = {"id": i, "amount": 100 + i % 1000, "note": f"n{i % 7}"}
                send(i, v2(order, ctx))
                expected.append(taxed(order))
            send(0, b"\x00" + UNKNOWN_ID.to_bytes(4, "big") + b"\x02")
            assert producer.flush(60) == 0
            wait_for(
                "every order in the output",
                lambda: (
                    len(read_output(kafka_bootstrap, topic_out, schema_registry_url))
                    >= 2 * PER_VERSION
                ),
            )
        except BaseException as e:
            failure.append(e)
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # run_on_spark: checkpoint and stop

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    results = run_on_spark(
        JobConfig(
            "tests.integration.registryjobs:registry_orders", unique, kafka_bootstrap,
            master="local[6,3]", dead_letter=True, checkpoint_interval_s=0.1,
        )
    )  # fmt: skip
    feeder.join(30)
    assert not failure, failure
    assert {r.subtask.split("/")[1]: r.attempt for r in results if r.attempt} == {"orders[1]": 1}

    got = read_output(kafka_bootstrap, topic_out, schema_registry_url)
    assert Counter(o["id"] for o in got) == Counter(range(2 * PER_VERSION))  # each exactly once
    assert sorted(got, key=lambda o: o["id"]) == expected
    registered = json.loads(registry.get_latest_version(f"{topic_out}-value").schema.schema_str)
    assert registered == TAXED  # the sink registered its input's schema (TopicNameStrategy)

    (dead,) = read_dlq(kafka_bootstrap, unique)
    assert (dead["operator"], dead["stage"], dead["topic"]) == ("orders", "source", topic_in)
    # Partition 0 held the even ids of both versions before it: PER_VERSION values.
    assert dead["origin"] == f"{topic_in}[0]@{PER_VERSION}"
    assert f"schema id {UNKNOWN_ID} is not in the schema registry" in dead["error"]


def test_a_schema_the_subjects_rule_refuses_stops_the_pipeline_before_it_starts(
    schema_registry_url: str, unique: str
) -> None:
    registry = SchemaRegistryClient({"url": schema_registry_url})
    subject = f"{unique}-out-value"
    registry.set_compatibility(subject, "BACKWARD")
    AvroSerializer(registry, json.dumps(TAXED))(
        {"id": 1, "amount": 2, "note": "x", "gross": 2},
        SerializationContext(f"{unique}-out", MessageField.VALUE),
    )
    # "gross" as a string cannot be read by readers of the registered version: refused.
    clash = {**TAXED, "fields": [*TAXED["fields"][:3], {"name": "gross", "type": "string"}]}
    p = Pipeline("refused")
    orders = p.read_kafka(
        "orders", f"{unique}-in", schema=ORDER_V2, value_format="avro",
        registry=RegistryConfig(schema_registry_url),
    )  # fmt: skip
    tax = orders.map("tax", lambda o: {**o, "gross": str(o["amount"])}, schema=clash)
    with pytest.raises(PipelineDefinitionError) as refused:
        tax.write_kafka(
            "sink", f"{unique}-out", value_format="avro",
            registry=RegistryConfig(schema_registry_url),
        )  # fmt: skip
    assert f"compatibility rule for subject '{subject}' refuses" in str(refused.value)
    # A compatible schema (the registered one) passes the same check.
    tax2 = orders.map("tax2", taxed, schema=TAXED)
    tax2.write_kafka(
        "sink2", f"{unique}-out", value_format="avro",
        registry=RegistryConfig(schema_registry_url),
    )  # fmt: skip
