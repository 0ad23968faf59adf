"""Avro values of a Kafka topic on Spark, read record by record and decoded
column by column into Arrow batches, with subtasks SIGKILLed mid-run: malformed values
are dead-lettered once each with ``topic[partition]@offset`` while the rest of their
batch goes on, and the output equals the record path's and a plain-Python reference
exactly. The second test routes batches by a key *function* over batches
(``key_by(lambda b: pc.utf8_lower(...)).aggregate_batches``), its aggregate subtasks
killed, against the record aggregate keyed per record."""

from __future__ import annotations

import base64
import io
import json
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import fastavro
import pytest
from confluent_kafka import Producer

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId
from spillway.channels.kafka.admin import Admin, TopicSpec
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from tests.integration.deadletters import read_dlq
from tests.integration.gates import Gates, started
from tests.integration.pipelines import ORDER, taxed

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.extended]

ORDERS = 20_000
PARTITIONS = 3
BAD_EVERY = 487  # a malformed value after every 487th order, five kinds in turn
PARSED = fastavro.parse_schema(ORDER)
# Offsets each source subtask reads before it holds (held runs): a few thousand orders
# reach the aggregate, so its checkpoints before its kills have records to commit.
HELD_AT = 2_000


def order(i: int) -> dict[str, Any]:
    return {"id": i, "customer": f"{'C' if i % 3 == 0 else 'c'}{i % 97}", "amount": 100 + i % 1000}


def encode(record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, PARSED, record)
    return out.getvalue()


def malformed(j: int, i: int) -> bytes:
    """The ``j``-th malformed value (kinds in turn), made from order ``i``."""
    good = encode(order(i))
    kinds = [
        good[:-1],  # truncated
        good + b"\x00",  # a byte after the datum
        b"\xff" * 11,  # a varint longer than 10 bytes
        b"",  # empty
        encode({**order(i), "customer": "XY"}).replace(b"\x04XY", b"\x04\xff\xfe"),  # not UTF-8
    ]
    return kinds[j % len(kinds)]


def make_input(bootstrap: str, topic: str) -> dict[tuple[int, int], bytes]:
    """Orders as Avro datums, order ``i`` in partition ``i % 3``, with malformed values
    among them; returns where each malformed one is: (partition, offset) → value."""
    Admin(KafkaSettings(bootstrap)).ensure_topics([TopicSpec(topic, PARTITIONS)])
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    next_offset = [0] * PARTITIONS
    bad: dict[tuple[int, int], bytes] = {}

    def send(partition: int, value: bytes) -> None:
        producer.produce(topic, value, partition=partition)
        producer.poll(0)
        next_offset[partition] += 1

    for i in range(ORDERS):
        send(i % PARTITIONS, encode(order(i)))
        if i % BAD_EVERY == BAD_EVERY - 1:
            value = malformed(len(bad), i)
            bad[(i % PARTITIONS, next_offset[i % PARTITIONS])] = value
            send(i % PARTITIONS, value)
    assert producer.flush(60) == 0
    return bad


def check_dead_letters(
    dlq: list[dict[str, Any]], topic: str, bad: dict[tuple[int, int], bytes]
) -> None:
    """Each malformed value dead-lettered exactly once, at the source, with its origin."""
    assert Counter((int(d["partition"]), int(d["offset"])) for d in dlq) == Counter(bad.keys())
    for d in dlq:
        assert (d["operator"], d["stage"], d["topic"]) == ("orders", "source", topic)
        assert d["origin"] == f"{topic}[{d['partition']}]@{d['offset']}"
        assert base64.b64decode(str(d["raw"])) == bad[(int(d["partition"]), int(d["offset"]))]
        assert d["error"]


def run_both(
    job: str,
    unique: str,
    bootstrap: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    kills: str,
    held: bool = False,
) -> dict[str, list[dict[str, Any]]]:
    """Run pipeline ``job`` (of tests.integration.avrojobs) columnar ("1") then on records
    ("0") over one input topic with malformed values, each run with ``kills``: each
    killed subtask restarted once and finished, nothing else restarted, every malformed
    value dead-lettered once. Returns each run's published JSONL rows.

    ``held``: each source subtask holds after ``HELD_AT`` offsets until every killed
    subtask's second attempt started, so the kills come mid-input however fast the
    job reads (an operator that got all of its input within one checkpoint interval would
    finish before a kill planned at its 2nd commit)."""
    topic_in = f"{unique}-in"
    bad = make_input(bootstrap, topic_in)
    monkeypatch.setenv("SPILLWAY_TEST_IN", topic_in)
    monkeypatch.setenv("SPILLWAY_CRASH_AT", kills)
    killed = {f"{k.split(':')[0]}[{k.split(':')[1]}]": 1 for k in kills.split(",")}
    rows: dict[str, list[dict[str, Any]]] = {}
    for mode in ("1", "0"):
        out = tmp_path / mode
        monkeypatch.setenv("SPILLWAY_TEST_OUT", str(out))
        monkeypatch.setenv("SPILLWAY_TEST_BATCHES", mode)
        job_id = f"{unique}-{mode}"
        gates = Gates(tmp_path / f"gates-{mode}", monkeypatch, [HELD_AT] if held else [])
        restarted = partial(started, KafkaSettings(bootstrap), JobId(job_id), killed, 1)
        steps = [("every killed subtask's second attempt started", restarted)] if held else []
        results = run_on_spark(
            JobConfig(
                f"tests.integration.avrojobs:{job}", job_id, bootstrap, master="local[6,3]",
                dead_letter=True, checkpoint_interval_s=0.05,  # several commits per input
            ),
            on_running=gates.on_running(*steps),
        )  # fmt: skip
        assert gates.missed == []
        assert {r.status for r in results} == {"finished"}
        assert {r.subtask.split("/")[1]: r.attempt for r in results if r.attempt} == killed
        check_dead_letters(read_dlq(bootstrap, job_id), topic_in, bad)
        rows[mode] = [
            json.loads(line) for f in sorted(out.glob("out/*.jsonl")) for line in f.open()
        ]
    return rows


def test_avro_source_decodes_batches_exactly_once_across_kills(
    kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The source dies after its first commit, the sink before its first (its only one when
    # all of its input arrives within one checkpoint interval, as the batch path can do).
    kills = "orders:1:after-commit:0:1,out:0:before-commit:0:1"
    rows = run_both("avro_taxed", unique, kafka_bootstrap, tmp_path, monkeypatch, kills)
    for got in rows.values():
        assert Counter(o["id"] for o in got) == Counter(range(ORDERS))  # each exactly once
    assert sorted(rows["1"], key=lambda o: o["id"]) == [taxed(order(i)) for i in range(ORDERS)]
    assert sorted(rows["0"], key=lambda o: o["id"]) == sorted(rows["1"], key=lambda o: o["id"])


def test_batches_routed_by_a_key_function_equal_the_record_aggregate_across_kills(
    kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # total[0] dies after its 2nd commit (restores from the changelog), total[1] before it.
    kills = "total:0:after-commit:0:2,total:1:before-commit:0:2"
    rows = run_both(
        "avro_keyed_totals", unique, kafka_bootstrap, tmp_path, monkeypatch, kills, held=True
    )
    expected: dict[str, tuple[int, int]] = {}
    for i in range(ORDERS):
        o = order(i)
        n, t = expected.get(o["customer"].lower(), (0, 0))
        expected[o["customer"].lower()] = (n + 1, t + o["amount"])
    assert len(expected) == 97  # "C5" and "c5" are one key
    for got in rows.values():
        assert len(got) == len(expected)  # one row per key: no duplicates
        assert {r["customer"]: (r["n"], r["total"]) for r in got} == expected
