"""Interval, as-of and lookup joins on real Spark and Kafka, join subtasks SIGKILLed
mid-run: outputs equal plain-Python references exactly, without a duplicate, on
out-of-order input with late records and one hot key holding half the records.

Which records end up too late (dead-lettered) depends on how far the watermark has got
when they arrive; the references leave out exactly the dead-lettered ones, and only the
far-too-late records may be among them (the others are within the allowed lateness of
any watermark that can have been sent before them).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId
from spillway.channels.kafka.admin import Admin, TopicSpec
from spillway.recovery.observe.events import read_events
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from tests.integration.deadletters import read_dlq
from tests.integration.joinjobs import LOWER, UPPER, left, pair, right, very_late

pytestmark = [pytest.mark.broker, pytest.mark.spark]


def rows(out: Path, sink: str) -> list[dict[str, Any]]:
    """Every published row of ``sink``, sorted (duplicates kept, to be seen)."""
    got = [
        json.loads(line)
        for f in sorted((out / sink).glob("*.jsonl"))
        for line in f.read_text().splitlines()
    ]
    return sorted(got, key=lambda r: json.dumps(r, sort_keys=True))


def sort(rows_: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows_, key=lambda r: json.dumps(r, sort_keys=True))


def interval_reference(ls: list[dict[str, Any]], rs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every pair of one key with ``l.ts + LOWER <= r.ts <= l.ts + UPPER``."""
    by_key: dict[str, list[dict[str, Any]]] = {}
    for r in rs:
        by_key.setdefault(r["key"], []).append(r)
    return sort([
        pair(a, b)
        for a in ls
        for b in by_key.get(a["key"], [])
        if a["ts"] + LOWER <= b["ts"] <= a["ts"] + UPPER
    ])  # fmt: skip


def asof_reference(ls: list[dict[str, Any]], rs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each left record with the latest right one of its key at or before its time (on
    equal times the later one: the right input has one writer, so it arrives later)."""
    out = []
    for a in ls:
        before = [(b["ts"], b["seq"], b) for b in rs if b["key"] == a["key"] and b["ts"] <= a["ts"]]
        out.append(pair(a, max(before, key=lambda x: x[:2])[2] if before else None))
    return sort(out)


def test_interval_and_as_of_joins_survive_kills_exactly_once(
    kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, n = tmp_path / "out", 3_000
    for k, v in {"N": n, "RATE": 200, "OUT": out}.items():
        monkeypatch.setenv(f"SPILLWAY_TEST_{k}", str(v))
    # interval[0] dies about to write the output of its 4th transaction that has any,
    # asof[1] of its 3rd: data-driven, so the checkpoint they restore holds buffered
    # records whatever the timing. Their second attempts restore buffers and timers.
    monkeypatch.setenv(
        "SPILLWAY_CRASH_AT", "interval:0:before-produce:0:4,asof:1:before-produce:0:3"
    )
    config = JobConfig(
        "tests.integration.joinjobs:joins", unique, kafka_bootstrap, master="local[8,4]",
        dead_letter=True,
    )  # fmt: skip
    results = run_on_spark(config)

    dead = Counter(
        (d["operator"], json.dumps(json.loads(d["record"]), sort_keys=True))
        for d in read_dlq(kafka_bootstrap, unique)
        if d["stage"] == "late"
    )
    assert max(dead.values()) == 1  # each too-late record dead-lettered once
    ls, rs = [left(i) for i in range(n)], [right(j) for j in range(n // 2)]

    def kept(op: str, recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for r in recs if (op, json.dumps(r, sort_keys=True)) not in dead]

    for op, reference in (("interval", interval_reference), ("asof", asof_reference)):
        got = rows(out, f"{op}_out")
        assert got == reference(kept(op, ls), kept(op, rs)), op
        gone = [json.loads(r) for o, r in dead if o == op]
        assert gone, f"{op}: no record was too late"
        assert all(very_late(r, 10 if r in ls else 20) for r in gone), op
    hot = sum(r["key"] == "hot" for r in ls)
    assert 0.4 < hot / n < 0.6  # the skew the test is about
    assert len(rows(out, "interval_out")) > n  # hot keys make many pairs
    attempts = {r.subtask.split("/")[1]: (r.attempt, r.status) for r in results}
    assert attempts["interval[0]"] == (1, "finished")
    assert attempts["asof[1]"] == (1, "finished")


# -- lookup join: the test writes both topics, in phases ----------------------------------

LOOKUP_CRASH = "lookup:0:after-produce:0:6,lookup:1:before-commit:0:9,table:0:after-produce:0:4"
UPDATED = ["hot", *(f"k{i}" for i in range(6))]  # a new value every phase
STATIC = [f"s{i}" for i in range(4)]  # a value in the first phase only
MISSING = "nokey"  # never a value
DELETES = {2: ["k5"], 3: ["s0", "s1"]}  # tombstones after the phase's rows (k5 is back in 3)
PHASES, PER_PHASE = 4, 400


def start_job(bootstrap: str, job: str, log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``spillway run`` of the lookup pipeline in its own session (SIGTERM: the driver)."""
    cmd = [sys.executable, "-m", "spillway.cli", "run", "tests.integration.joinjobs:lookup"]
    cmd += ["--job-id", job, "--bootstrap", bootstrap, "--master", "local[6,2]"]
    with open(log, "wb") as out:
        return subprocess.Popen(
            cmd, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip


class Topics:
    """Writes the table and event topics and remembers what each event must get."""

    def __init__(self, bootstrap: str, table: str, events: str) -> None:
        self.table, self.events = table, events
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        self.values: dict[str, int] = {}
        self.want: list[dict[str, Any]] = []
        self.probes = 0  # probe events have negative seqs: their values are not checked
        self.rng = random.Random(5)

    def _send(self, topic: str, r: dict[str, Any]) -> None:
        self.producer.produce(topic, json.dumps(r).encode(), key=r["key"].encode())

    def update(self, phase: int) -> None:
        """The table rows of ``phase``."""
        for i, k in enumerate(UPDATED + (STATIC if phase == 1 else [])):
            self.values[k] = phase * 100 + i
            self._send(self.table, {"key": k, "v": self.values[k]})
        for k in DELETES.get(phase, []):
            del self.values[k]
            self.producer.produce(self.table, None, key=k.encode())
        assert self.producer.flush(30) == 0

    def probe(self, keys: list[str]) -> None:
        """One event per key in ``keys``, to see which table value the join has."""
        for k in keys:
            self.probes += 1
            self._send(self.events, {"seq": -self.probes, "key": k})
        assert self.producer.flush(30) == 0

    def send_events(self) -> None:
        """``PER_PHASE`` events, half of them of the hot key."""
        keys = [*UPDATED[1:], *STATIC, MISSING]
        for _ in range(PER_PHASE):
            k = "hot" if self.rng.random() < 0.5 else self.rng.choice(keys)
            e = {"seq": len(self.want), "key": k}
            self.want.append({**e, "v": self.values.get(k)})
            self._send(self.events, e)
        assert self.producer.flush(30) == 0


POLL_S = 0.2  # how often the test looks at the output and the event log
# The subtasks LOOKUP_CRASH kills, each attempt that must start: the first, and the retry.
CRASHED_RETRIES = {(op, i, a) for op, i in (("lookup", 0), ("lookup", 1), ("table", 0))
                   for a in (0, 1)}  # fmt: skip


def lookup_starts(bootstrap: str, job: str) -> set[tuple[str, int, int]]:
    """(operator, index, attempt) of every subtask start of the job."""
    return {
        (e["operator"], e["index"], e["attempt"])
        for e in read_events(KafkaSettings(bootstrap), JobId(job))
        if e.get("event") == "started"
    }


def published(out: Path) -> list[dict[str, Any]]:
    return rows(out, "lookup_out")


@pytest.mark.extended
def test_lookup_join_follows_its_table_topic_across_kills(
    kafka_bootstrap: str, unique: str, tmp_path: Path
) -> None:
    # Certainty, whatever the timing: each phase's table rows are written, then probe
    # events until every key's probe came out with the new value (so the join holds the
    # phase's table), then the phase's events; the next phase starts once all of them
    # came out. A join that lost its table in a kill would give the static keys no value.
    table, events = f"{unique}-table", f"{unique}-events"
    compacted = {"cleanup.policy": "compact"}
    Admin(KafkaSettings(kafka_bootstrap)).ensure_topics(
        [TopicSpec(table, 1, compacted), TopicSpec(events, 2)]
    )
    out, log = tmp_path / "out", tmp_path / "driver.log"
    env = {
        "SPILLWAY_TEST_TABLE": table, "SPILLWAY_TEST_EVENTS": events,
        "SPILLWAY_TEST_OUT": str(out), "SPILLWAY_CRASH_AT": LOOKUP_CRASH,
    }  # fmt: skip
    driver = start_job(kafka_bootstrap, unique, log, env)
    data = Topics(kafka_bootstrap, table, events)
    try:
        for phase in range(1, PHASES + 1):
            data.update(phase)
            todo = [*UPDATED, *STATIC]
            deadline = time.monotonic() + 240
            while todo:
                assert driver.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, (phase, todo, log.read_text()[-2000:])
                first = data.probes + 1
                data.probe(todo)
                sent = [(k, -(first + i)) for i, k in enumerate(todo)]
                # Until every probe came out (not a fixed wait): then re-probe the keys
                # whose probe still showed an older table value.
                seen = {r["seq"]: r for r in published(out) if r["seq"] < 0}
                while any(s not in seen for _, s in sent):
                    assert driver.poll() is None, log.read_text()[-3000:]
                    assert time.monotonic() < deadline, (phase, todo, log.read_text()[-2000:])
                    time.sleep(POLL_S)
                    seen = {r["seq"]: r for r in published(out) if r["seq"] < 0}
                todo = [k for k, s in sent if seen[s]["v"] != data.values.get(k)]
            data.send_events()
            while len([r for r in published(out) if r["seq"] >= 0]) < len(data.want):
                assert driver.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, (phase, log.read_text()[-2000:])
                time.sleep(POLL_S)
        # The job no longer runs for a fixed time: stop it once every planned kill
        # happened and its subtask's second attempt started (asserted below).
        while not lookup_starts(kafka_bootstrap, unique) >= CRASHED_RETRIES:
            assert driver.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(POLL_S)
        driver.send_signal(signal.SIGTERM)
        assert driver.wait(120) == 0, log.read_text()[-3000:]
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)

    got = published(out)
    assert [r for r in got if r["seq"] >= 0] == sort(data.want)
    assert len({r["seq"] for r in got}) == len(got)  # probes too: none twice
    assert sum(r["key"] == "hot" for r in data.want) > len(data.want) // 3
    assert any(r["v"] is None for r in data.want)  # the key without a row
    # Deleted rows: no row for the events after their tombstone; k5 back in phase 3.
    events = sorted((r for r in got if r["seq"] >= 0), key=lambda r: r["seq"])
    for phase, deleted in enumerate([set(), {"k5"}, {"s0", "s1"}, {"s0", "s1"}], 1):
        span = events[(phase - 1) * PER_PHASE : phase * PER_PHASE]
        assert {r["key"] for r in span if r["v"] is None} == {MISSING, *deleted}, phase
    # Each crash point was reached and its subtask's second attempt ran.
    assert lookup_starts(kafka_bootstrap, unique) >= CRASHED_RETRIES
