"""Avro by a schema registry on Spark: the session's own local registry (Apicurio, in
memory), a job reading values by their schema ids and writing its output registered.

While the job runs, a producer with confluent-kafka's ``AvroSerializer`` writes orders
with version 1 of their schema; a source subtask is SIGKILLed with some of them read past
its checkpoint; once it has restarted the producer writes version 2 (a field added, with a
default) and one value with an id the registry does not know. The output, read back with
confluent-kafka's ``AvroDeserializer``, holds every order exactly once, version 1's with
the default; the unknown id is dead-lettered with its origin and the id.

The batch path: the same two versions, a value of a third schema that does not resolve
into the reader's, a value with an unknown id and a truncated one, read by a bounded job
as Arrow batches (each flat version decoded column by column) and taxed with
``map_batches``: the output is exact and each bad value is dead-lettered once with its
origin and its schema id.

Writing batches: the two versions read as Arrow batches, taxed with ``map_batches`` and
written as registry-framed Avro (encoded column by column) by a Kafka sink chained behind
the batch operator and by one alone in its subtask, under TopicRecordNameStrategy and
RecordNameStrategy: read back with confluent-kafka's ``AvroDeserializer``, each output is
exact, and each subject holds the records' schema.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import PipelineDefinitionError
from spillway.channels.kafka.admin import Admin, TopicSpec
from spillway.spark_jobs.api.pipeline import Pipeline
from spillway.spark_jobs.connectors.batchregistry import channel_schema
from spillway.spark_jobs.connectors.registry import RegistryConfig
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from tests.integration.deadletters import read_dlq
from tests.integration.registrycheck import PARTITIONS, UNKNOWN_ID, read_output
from tests.integration.registryjobs import ORDER_V1, ORDER_V2, TAXED, taxed
from tests.integration.support import starts

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.registry]

PER_VERSION = 3_000


def wait_for(what: str, check: Callable[[], bool], timeout_s: float = 180.0) -> None:
    """Poll ``check`` until it holds; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


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


def test_a_batch_job_reads_two_schema_versions_by_id_into_exact_output(
    kafka_bootstrap: str,
    schema_registry_url: str,
    unique: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic_in = f"{unique}-in"
    Admin(KafkaSettings(kafka_bootstrap)).ensure_topics([TopicSpec(topic_in, PARTITIONS)])
    registry = SchemaRegistryClient({"url": schema_registry_url})
    registry.set_compatibility(f"{topic_in}-value", "BACKWARD")
    ctx = SerializationContext(topic_in, MessageField.VALUE)
    v1 = AvroSerializer(registry, json.dumps(ORDER_V1))
    v2 = AvroSerializer(registry, json.dumps(ORDER_V2))
    # A schema of another subject whose "id" is a string and which lacks "amount".
    clash = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]}
    other = SerializationContext(f"{unique}-other", MessageField.VALUE)
    clashing = AvroSerializer(registry, json.dumps(clash))({"id": "x"}, other)
    clash_id = int.from_bytes(clashing[1:5], "big")
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    expected: list[dict[str, Any]] = []
    for i in range(2 * PER_VERSION):
        order = {"id": i, "amount": 100 + i % 1000}
        if i < PER_VERSION:
            value = v1(order, ctx)
            order["note"] = "none"  # version 1 has no note: the reader's default
        else:
            order["note"] = f"n{i % 7}"
            value = v2(order, ctx)
        producer.produce(topic_in, value, partition=i % PARTITIONS)
        expected.append(taxed(order))
    last_v2 = v2({"id": -1, "amount": 1, "note": "cut"}, ctx)
    bad = {
        (0, PER_VERSION): b"\x00" + UNKNOWN_ID.to_bytes(4, "big") + b"\x02",
        (1, PER_VERSION): last_v2[:-2],  # truncated
        (0, PER_VERSION + 1): clashing,
    }
    for (partition, _), value in sorted(bad.items(), key=lambda kv: kv[0][1]):
        producer.produce(topic_in, value, partition=partition)
    assert producer.flush(60) == 0

    out = tmp_path / "out"
    monkeypatch.setenv("SPILLWAY_TEST_IN", topic_in)
    monkeypatch.setenv("SPILLWAY_TEST_OUT", str(out))
    monkeypatch.setenv("SPILLWAY_TEST_REGISTRY", schema_registry_url)
    results = run_on_spark(
        JobConfig(
            "tests.integration.registryjobs:registry_orders_batches", unique, kafka_bootstrap,
            master="local[6,3]", dead_letter=True, checkpoint_interval_s=0.1,
        )
    )  # fmt: skip
    assert {r.status for r in results} == {"finished"}
    got = [json.loads(line) for f in sorted(out.glob("out/*.jsonl")) for line in f.open()]
    assert Counter(o["id"] for o in got) == Counter(range(2 * PER_VERSION))  # each exactly once
    assert sorted(got, key=lambda o: o["id"]) == expected

    dead = read_dlq(kafka_bootstrap, unique)
    assert sorted((int(d["partition"]), int(d["offset"])) for d in dead) == sorted(bad)
    errors = {(int(d["partition"]), int(d["offset"])): str(d["error"]) for d in dead}
    for d in dead:
        assert (d["operator"], d["stage"], d["topic"]) == ("orders", "source", topic_in)
        assert d["origin"] == f"{topic_in}[{d['partition']}]@{d['offset']}"
    assert errors[(0, PER_VERSION)].startswith(
        f"schema id {UNKNOWN_ID} is not in the schema registry ("
    )
    assert errors[(1, PER_VERSION)].startswith(
        f"schema id {int.from_bytes(last_v2[1:5], 'big')}: not an Avro datum of the schema"
    )
    assert errors[(0, PER_VERSION + 1)] == (
        f"schema id {clash_id}: the writer's schema cannot be resolved into the reader's: "
        "the writer's field 'id' is string, the reader's 'id' is long"
    )


def test_a_batch_job_writes_registry_avro_read_back_exactly_under_its_subjects(
    kafka_bootstrap: str,
    schema_registry_url: str,
    unique: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic_in, topic_out, topic_out2 = f"{unique}-in", f"{unique}-out", f"{unique}-out2"
    Admin(KafkaSettings(kafka_bootstrap)).ensure_topics(
        [TopicSpec(t, PARTITIONS) for t in (topic_in, topic_out, topic_out2)]
    )
    registry = SchemaRegistryClient({"url": schema_registry_url})
    ctx = SerializationContext(topic_in, MessageField.VALUE)
    v1 = AvroSerializer(registry, json.dumps(ORDER_V1))
    v2 = AvroSerializer(registry, json.dumps(ORDER_V2))
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    expected: list[dict[str, Any]] = []
    for i in range(2 * PER_VERSION):
        order: dict[str, Any] = {"id": i, "amount": 100 + i % 1000}
        if i < PER_VERSION:
            value = v1(order, ctx)
            order["note"] = "none"  # version 1 has no note: the reader's default
        else:
            order["note"] = f"n{i % 7}\u00e9" if i % 5 else ""
            value = v2(order, ctx)
        producer.produce(topic_in, value, partition=i % PARTITIONS)
        expected.append(taxed(order))
    assert producer.flush(60) == 0

    monkeypatch.setenv("SPILLWAY_TEST_IN", topic_in)
    monkeypatch.setenv("SPILLWAY_TEST_OUT", topic_out)
    monkeypatch.setenv("SPILLWAY_TEST_OUT2", topic_out2)
    monkeypatch.setenv("SPILLWAY_TEST_REGISTRY", schema_registry_url)
    results = run_on_spark(
        JobConfig(
            "tests.integration.registryjobs:registry_orders_batches_to_kafka", unique,
            kafka_bootstrap, master="local[6,3]", checkpoint_interval_s=0.1,
        )
    )  # fmt: skip
    assert {r.status for r in results} == {"finished"}
    for topic in (topic_out, topic_out2):
        got = read_output(kafka_bootstrap, topic, schema_registry_url)
        assert sorted(got, key=lambda o: o["id"]) == expected, topic  # each exactly once
    written = channel_schema(TAXED)  # the batches' schema: the reader's defaults dropped
    for subject in (f"{topic_out}-spillway.test.Taxed", "spillway.test.Taxed"):
        assert json.loads(registry.get_latest_version(subject).schema.schema_str) == written
