"""Event time on an unbounded Kafka source: windows fire while input still arrives, late
records are counted and dead-lettered, and the output equals a batch reference exactly.

The input is built so that every record is on time or late *for certain*, whatever the
timing: an on-time record lies at most ``BOUND_MS - 1`` behind the largest event time
already written to its partition, so no watermark can have passed it when it arrives;
a late record is written only after its window's result was seen in the committed output,
so the window operator's watermark had passed the window's end. The reference applies the
operator's rule (late: its window was already emitted) to that input.
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
from spillway.channels.ids import JobId, OperatorName
from spillway.channels.kafka.admin import Admin, TopicSpec
from spillway.channels.routing.partitioners import KeyHash
from spillway.offsets.store import CheckpointStore
from spillway.recovery.observe.events import read_events
from spillway.testing import TestDriver
from tests.integration.deadletters import read_dlq
from tests.integration.windows import BOUND_MS, IDLE_MS, WINDOW_MS, windowed_kafka

pytestmark = [pytest.mark.broker, pytest.mark.spark]

REF = "tests.integration.windows:windowed_kafka"
KEYS = [f"k{i}" for i in range(6)]
STEP_MS = 50  # event time advances this much per round of input
PER_ROUND = 4  # records per live partition per round
MIN_LATE = 40
ROUNDS_AFTER_FIRST_WINDOW = 200  # input keeps arriving this long after windows fire


def start_job(bootstrap: str, job: str, log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``spillway run`` in its own session, so SIGTERM reaches only the driver."""
    cmd = [sys.executable, "-m", "spillway.cli", "run", REF, "--job-id", job]
    cmd += ["--bootstrap", bootstrap, "--master", "local[7,2]", "--dead-letter"]
    with open(log, "wb") as out:
        return subprocess.Popen(
            cmd,
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def committed_windows(out: Path) -> list[dict[str, Any]]:
    """Every published output row (files appear when the sink's checkpoint commits)."""
    return [
        json.loads(line)
        for f in sorted((out / "out").glob("*.jsonl"))
        for line in f.read_text().splitlines()
    ]


class Input:
    """Writes the test input and remembers it: on-time records, and late ones on demand."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        self.rng = random.Random(14)
        self.frontier = int(time.time() * 1000) // WINDOW_MS * WINDOW_MS
        self.on_time: list[dict[str, Any]] = []
        self.late: list[dict[str, Any]] = []
        self.rounds = 0
        self.max_ts: dict[int, int] = {}  # per input partition
        self.sent: list[tuple[int, dict[str, Any]]] = []  # (partition, record), in write order

    def final_watermark(self) -> int:
        """The window operator's watermark once every source subtask fell idle: the
        largest a source reported (each: its live partition's largest time − bound)."""
        return max(self.max_ts.values()) - BOUND_MS

    def _send(self, record: dict[str, Any], partition: int) -> None:
        # The Kafka record timestamp is the event time: the source's default timestamp.
        value = json.dumps(record).encode()
        self.producer.produce(self.topic, value, partition=partition, timestamp=record["ts"])
        self.sent.append((partition, record))
        self.max_ts[partition] = max(self.max_ts.get(partition, record["ts"]), record["ts"])

    def round(self) -> None:
        """PER_ROUND records on partitions 0 and 1 (never 2 or 3), out of order within the
        bound; both partitions advance together."""
        for partition in (0, 1):
            for _ in range(PER_ROUND):
                ts = self.frontier - self.rng.randrange(BOUND_MS)  # never BOUND_MS behind
                r = {"seq": self._seq(), "key": self.rng.choice(KEYS), "ts": ts}
                self.on_time.append(r)
                self._send(r, partition)
        self.frontier += STEP_MS
        self.rounds += 1
        assert self.producer.flush(30) == 0

    def late_for(self, key: str, start: int) -> None:
        """A record for a window whose result was already committed."""
        r = {"seq": self._seq(), "key": key, "ts": start + self.rng.randrange(WINDOW_MS)}
        self.late.append(r)
        self._send(r, len(self.late) % 2)

    def _seq(self) -> int:
        return len(self.on_time) + len(self.late)


def window_watermarks(store: CheckpointStore) -> dict[int, int | None]:
    """The watermark in each window subtask's latest checkpoint."""
    return {i: (c.operator.watermark if (c := store.latest(i)) else None) for i in range(2)}


def reference(
    on_time: list[dict[str, Any]], final_watermarks: dict[int, int]
) -> list[dict[str, Any]]:
    """Windows per key over the on-time records, for windows the operator had emitted: those
    whose end is at or below the final watermark of the subtask that owns the key."""
    owner = KeyHash(lambda r: r["key"], 2)
    acc: dict[tuple[str, int], list[int]] = {}
    for r in on_time:
        start = r["ts"] - r["ts"] % WINDOW_MS
        a = acc.setdefault((r["key"], start), [0, 0])
        a[0] += 1
        a[1] += r["seq"]
    return sorted(
        (
            {"key": k, "start": s, "count": n, "seqs": total}
            for (k, s), (n, total) in acc.items()
            if s + WINDOW_MS <= final_watermarks[owner.targets({"key": k})[0]]
        ),
        key=lambda w: (w["key"], w["start"]),
    )


def in_process(
    sent: list[tuple[int, dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> tuple[list[dict[str, Any]], list[int]]:
    """The same pipeline and input through :class:`spillway.testing.TestDriver`: its
    windows (sorted) and the sequence numbers of the records it set aside as late.

    Partitions 0 and 1 are read by ``events[0]`` and ``events[1]``
    (:func:`tests.integration.windows.windowed_kafka`); ``events[2]`` reads nothing and
    falls idle as on Spark, after ``IDLE_MS``. Each record's event time is its Kafka
    timestamp (``timestamps=``). At the end every source falls idle, so the windows'
    watermark reaches the largest a source reported, as on Spark.
    """
    monkeypatch.setenv("SPILLWAY_TEST_IN", "unused")
    monkeypatch.setenv("SPILLWAY_TEST_OUT", "unused")
    monkeypatch.delenv("SPILLWAY_TEST_BATCHES", raising=False)
    t = TestDriver(windowed_kafka())
    t.advance_processing_time(IDLE_MS)
    for partition, record in sent:
        t.send("events", [record], subtask=partition, timestamps=[record["ts"]])
    t.advance_processing_time(IDLE_MS)
    windows = sorted(t.output("out"), key=lambda w: (w["key"], w["start"]))
    late = [d.record["seq"] for d in t.dead_letters() if d.stage == "late"]
    assert len(late) == len(t.dead_letters())
    return windows, sorted(late)


# "kafka"/"column": read_kafka(batches=True), its event time the Kafka timestamp or the
# "ts" column; its watermarks are observed per batch and partition
# (spillway.spark_jobs.connectors.batchsources).
@pytest.mark.parametrize(
    "batches",
    [
        "",
        pytest.param("kafka", marks=pytest.mark.extended),
        pytest.param("column", marks=pytest.mark.extended),
    ],
)
def test_windows_fire_on_an_unbounded_kafka_source_and_late_records_are_dead_lettered(
    kafka_bootstrap: str,
    unique: str,
    tmp_path: Path,
    batches: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = f"{unique}-in"
    Admin(KafkaSettings(kafka_bootstrap)).ensure_topics([TopicSpec(topic, 4)])
    out = tmp_path / "windows"
    log = tmp_path / "driver.log"
    driver = start_job(
        kafka_bootstrap,
        unique,
        log,
        {
            "SPILLWAY_TEST_IN": topic,
            "SPILLWAY_TEST_OUT": str(out),
            "SPILLWAY_TEST_BATCHES": batches,
        },
    )
    data = Input(kafka_bootstrap, topic)
    settings = KafkaSettings(kafka_bootstrap)
    store = CheckpointStore(settings, JobId(unique), OperatorName("win"), 2)
    seen: set[tuple[str, int]] = set()
    first_window_round: int | None = None
    try:
        deadline = time.monotonic() + 300
        while first_window_round is None or (
            data.rounds < first_window_round + ROUNDS_AFTER_FIRST_WINDOW
            or len(data.late) < MIN_LATE
        ):
            assert driver.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "no window output before the deadline"
            data.round()
            time.sleep(0.02)
            if data.rounds % 10:
                continue
            for w in committed_windows(out):
                if (w["key"], w["start"]) not in seen:
                    seen.add((w["key"], w["start"]))
                    first_window_round = first_window_round or data.rounds
                    data.late_for(w["key"], w["start"])
        assert data.producer.flush(30) == 0
        # Windows fired while input was still arriving: records were written for
        # ROUNDS_AFTER_FIRST_WINDOW rounds after the first result was committed.
        assert first_window_round is not None
        assert data.rounds - first_window_round >= ROUNDS_AFTER_FIRST_WINDOW

        # Every late record reached the window operator before we stop the job.
        deadline = time.monotonic() + 120
        while len([d for d in read_dlq(kafka_bootstrap, unique) if d["stage"] == "late"]) < len(
            data.late
        ):
            assert driver.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "late records did not reach the dead letters"
            time.sleep(1)
        # No more input: once the sources fall idle, the windows' watermark reaches its
        # last value and nothing else can fire. Stop only when the sink has published all
        # of that (a stop checkpoints where each subtask is, it does not drain channels).
        last_wm = data.final_watermark()
        deadline = time.monotonic() + 120
        while window_watermarks(store) != {0: last_wm, 1: last_wm} or sorted(
            committed_windows(out), key=lambda w: (w["key"], w["start"])
        ) != reference(data.on_time, {0: last_wm, 1: last_wm}):
            assert driver.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, (window_watermarks(store), last_wm)
            time.sleep(1)
        driver.send_signal(signal.SIGTERM)
        assert driver.wait(120) == 0, log.read_text()[-3000:]
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)

    final: dict[int, int] = {}
    late_counted = 0
    for i in range(2):
        ckpt = store.latest(i)
        assert ckpt is not None
        assert ckpt.operator.watermark is not None
        final[i] = ckpt.operator.watermark
        late_counted += ckpt.operator.set_aside.get("late", 0)
    store.close()
    assert final == {0: last_wm, 1: last_wm}
    assert late_counted == len(data.late)  # the count is checkpointed

    got = sorted(committed_windows(out), key=lambda w: (w["key"], w["start"]))
    assert Counter((w["key"], w["start"]) for w in got).most_common(1)[0][1] == 1  # no repeats
    expected = reference(data.on_time, final)
    assert len(expected) >= 100
    assert got == expected

    late = [d for d in read_dlq(kafka_bootstrap, unique) if d["stage"] == "late"]
    assert sorted(json.loads(d["record"])["seq"] for d in late) == sorted(
        r["seq"] for r in data.late
    )
    assert all(d["operator"] == "win" and d["topic"] and d["offset"] is not None for d in late)
    assert all(str(d["error"]).startswith("late: event time ") for d in late)
    # The count: checkpointed per window subtask, reported when the job stopped.
    stopped = {
        e["index"]: e["set_aside"]
        for e in read_events(settings, JobId(unique))
        if e.get("event") == "stopped" and e.get("operator") == "win"
    }
    assert sum(s.get("late", 0) for s in stopped.values()) == len(data.late)

    # The in-process test driver, given the same input in the same order, writes the same
    # windows and sets aside the same late records (record path only: it has no batches).
    if not batches:
        assert in_process(data.sent, monkeypatch) == (got, sorted(r["seq"] for r in data.late))
