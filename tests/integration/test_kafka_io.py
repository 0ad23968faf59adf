"""Kafka topic source and sink on Spark: exactly-once with a subtask killed mid-transaction."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from confluent_kafka import Producer

from spillway.channels.config import KafkaSettings
from spillway.channels.kafka.admin import Admin, TopicSpec
from spillway.recovery.observe.events import read_events
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from tests.integration.pipelines import taxed
from tests.integration.support import read_committed

pytestmark = [pytest.mark.broker, pytest.mark.spark]

ORDERS = 30_000


# "batches": the source decodes each partition's values as one Arrow batch; "chained":
# and a map_batches runs in the source's subtask on it, the sink too, from the batches.
@pytest.mark.parametrize("source", ["records", "batches", "chained"])
def test_kafka_source_and_sink_are_exactly_once_across_a_kill(
    kafka_bootstrap: str, unique: str, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    monkeypatch.setenv(
        "SPILLWAY_TEST_BATCHES", {"records": "0", "batches": "1", "chained": "chained"}[source]
    )
    topic_in, topic_out = f"{unique}-in", f"{unique}-out"
    Admin(KafkaSettings(kafka_bootstrap)).ensure_topics(
        [TopicSpec(topic_in, 3), TopicSpec(topic_out, 2)]
    )
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    orders = [{"id": i, "customer": f"c{i % 97}", "amount": 100 + i % 1000} for i in range(ORDERS)]
    for o in orders:
        producer.produce(topic_in, json.dumps(o).encode(), partition=o["id"] % 3)
    assert producer.flush(30) == 0

    monkeypatch.setenv("SPILLWAY_TEST_IN", topic_in)
    monkeypatch.setenv("SPILLWAY_TEST_OUT", topic_out)
    # The source dies after its first commit; the sink subtask dies before its first commit,
    # its outputs flushed in the open transaction (they must be aborted, never read). Its
    # first commit, not its second: the sink may see all its input in one checkpoint (the
    # batch path reads a partition in a few polls), and then it commits only once.
    # Chained, source, map_batches and sink are one subtask ("orders"): it dies twice.
    last = "orders" if source == "chained" else "sink"
    monkeypatch.setenv("SPILLWAY_CRASH_AT", f"orders:1:after-commit:0:1,{last}:0:before-commit:0:1")
    config = JobConfig(
        "tests.integration.pipelines:kafka_to_kafka",
        unique,
        kafka_bootstrap,
        master="local[6,3]",
        checkpoint_interval_s=0.05,  # several commits while the source reads its partition
    )
    results = run_on_spark(config)
    assert {r.status for r in results} == {"finished"}

    got = [json.loads(v) for _, _, v in read_committed(kafka_bootstrap, topic_out, 2)]
    assert Counter(o["id"] for o in got) == Counter(range(ORDERS))  # every order exactly once
    assert sorted(got, key=lambda o: o["id"]) == [taxed(o) for o in orders]
    restarted = {
        f"{e['operator']}[{e['index']}]"
        for e in read_events(KafkaSettings(kafka_bootstrap), unique)  # type: ignore[arg-type]
        if e.get("event") == "started" and e["attempt"] > 0
    }
    assert restarted == {"orders[1]", f"{last}[0]"}
