"""Unaligned global checkpoints on Spark: exact output with a kill, and every cut consistent."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, Offset, OperatorName, TopicPartition
from spillway.channels.kafka.consumer import AssignedConsumer
from spillway.channels.wire.envelope import Kind, decode_data, read_kind, writer_of
from spillway.cli import main
from spillway.examples import clicks
from spillway.offsets.checkpoint import Checkpoint
from spillway.offsets.store import CheckpointStore
from spillway.recovery.control.globalckpt import read_completed
from spillway.recovery.job.loader import load_plan
from spillway.recovery.observe.events import read_events
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from tests.integration.gates import Gates, full_speed_clicks, started
from tests.integration.support import read_output

pytestmark = [pytest.mark.broker, pytest.mark.spark]

# The clicks example, its source held at the tests' gates (tests/integration/gates.py).
REF = "tests.integration.gates:held_clicks"
RECORDS = 40_000


def records_per_writer(
    settings: KafkaSettings, tp: TopicPartition, schema: dict[str, object], below: int
) -> Counter[int]:
    """Data records of each upstream writer in ``tp`` at offsets below ``below``."""
    counts: Counter[int] = Counter()
    if below == 0:
        return counts
    consumer = AssignedConsumer(settings, "consistency-check")
    consumer.assign({tp: Offset(0)})
    deadline = time.monotonic() + 60
    while (consumer.position(tp) or 0) < below:
        assert time.monotonic() < deadline
        for m in consumer.consume(200, 0.2):
            if (m.offset() or 0) < below and read_kind(m.headers()) is Kind.DATA:
                records = decode_data(m.headers(), m.value() or b"", schema)
                counts[writer_of(m.key())] += len(records)
    consumer.close()
    return counts


@pytest.mark.parametrize("mode", ["unaligned", "aligned"])
def test_global_checkpoints_are_consistent_and_exact_with_a_kill(
    mode: str,
    kafka_bootstrap: str,
    unique: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    full_speed_clicks(monkeypatch, tmp_path, RECORDS)
    monkeypatch.setenv("SPILLWAY_CRASH_AT", "count:0:after-commit:0:3")
    # The source holds at half its input until count[0] died and restarted and two global
    # checkpoints completed: the kill comes mid-stream however fast the machine.
    gates = Gates(tmp_path / "gates", monkeypatch, [RECORDS // 2])
    settings = KafkaSettings(kafka_bootstrap)
    config = JobConfig(
        REF,
        unique,
        kafka_bootstrap,
        master="local[8,4]",
        checkpoint_mode=mode,
        global_interval_s=1.0,
        keep_global=3,  # older completed records and subtask checkpoints get pruned
    )
    results = run_on_spark(
        config,
        on_running=gates.on_running(
            (
                "count[0] restarted, two global checkpoints completed",
                lambda: (
                    started(settings, JobId(unique), ["count[0]"], 1)
                    and len(read_completed(settings, JobId(unique))) >= 2
                ),
            )
        ),
    )
    assert gates.missed == []
    assert read_output(tmp_path) == clicks.reference(RECORDS)
    assert {r.subtask.split("/")[1]: r.attempt for r in results}["count[0]"] == 1

    completed = read_completed(settings, JobId(unique))
    assert 2 <= len(completed) <= 3, completed  # the last 3 are kept
    ids = [c["id"] for c in completed]
    assert ids == sorted(set(ids))
    # Each records what its transactions wrote: checkpoint records and state changes at
    # least; the channel data spilled before it is reported separately, never copied.
    # (A restarted subtask's re-announcement of its restored checkpoint carries no bytes.)
    fresh = [c for c in completed if c["subtask_bytes"]]
    assert fresh, completed
    assert all(b > 0 for c in fresh for b in c["subtask_bytes"].values()), fresh
    assert all(c["bytes"] == sum(c["subtask_bytes"].values()) for c in fresh)
    plan = load_plan(REF, unique)
    names = {f"{op.name}[{i}]" for op in plan.operators for i in range(op.parallelism)}
    stores = {
        op.name: CheckpointStore(settings, JobId(unique), op.name, op.parallelism)
        for op in plan.operators
    }

    def checkpoint_of(sub: str, ckpt_id: int) -> Checkpoint | None:
        op, index = sub[:-1].split("[")
        return stores[OperatorName(op)].get(int(index), ckpt_id, search=200)

    checked = 0
    for c in completed:
        assert set(c["subtasks"]) == names  # every subtask, finished ones with their final
        found = {sub: checkpoint_of(sub, cid) for sub, cid in c["subtasks"].items()}
        if any(f is None for f in found.values()):
            continue  # older than the last few checkpoints each subtask retains
        cut = {sub: f for sub, f in found.items() if f is not None}
        assert all(f.meta.global_id in (c["id"], None) or f.meta.finished for f in cut.values())
        checked += 1
        for edge in plan.edges:
            topic = plan.topic_of(edge)
            for j in range(plan.operator(edge.downstream).parallelism):
                down = cut[f"{edge.downstream}[{j}]"]
                tp = TopicPartition(topic, j)
                consumed = records_per_writer(
                    settings, tp, edge.schema, down.reader.inputs.get(tp, 0)
                )
                for i in range(plan.operator(edge.upstream).parallelism):
                    produced = cut[f"{edge.upstream}[{i}]"].writers.outputs.get(topic, ())
                    assert consumed[i] <= (produced[j] if produced else 0), (
                        f"checkpoint {c['id']}: {edge.downstream}[{j}] consumed {consumed[i]} "
                        f"records of {edge.upstream}[{i}], which had produced {produced} then"
                    )
    assert checked >= 1, "no retained global checkpoint to check"
    for store in stores.values():
        store.close()

    assert main(["checkpoints", "--job", unique, "--bootstrap", kafka_bootstrap]) == 0
    listing = capsys.readouterr().out
    assert str(completed[-1]["id"]) in listing


@pytest.mark.extended
def test_coordinator_death_does_not_stop_processing_and_numbering_resumes(
    kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spillway.recovery.control.globalckpt import Coordinator, savepoint
    from spillway.recovery.observe.events import last_submission

    full_speed_clicks(monkeypatch, tmp_path, RECORDS)
    monkeypatch.delenv("SPILLWAY_CRASH_AT", raising=False)
    # The source holds at half its input until the test has killed one coordinator, seen
    # the subtasks go on without it and started another: the job is mid-stream throughout,
    # however slow or fast the machine.
    gates = Gates(tmp_path / "gates", monkeypatch, [RECORDS // 2])
    # The driver's own coordinator stays idle; this test plays the coordinators.
    config = JobConfig(
        REF,
        unique,
        kafka_bootstrap,
        master="local[8,2]",
        checkpoint_mode="unaligned",
        global_interval_s=3600,
    )
    results: list[object] = []
    driver = threading.Thread(target=lambda: results.extend(run_on_spark(config)), daemon=True)
    driver.start()
    settings = KafkaSettings(kafka_bootstrap)
    first = second = None
    try:
        deadline = time.monotonic() + 180
        sub = None
        while sub is None:
            assert time.monotonic() < deadline, "the job was not submitted"
            time.sleep(0.5)
            sub = last_submission(settings, JobId(unique))
        names = [s.split("/", 1)[1] for s in sub["subtasks"]]
        run_id = str(sub["run"])

        first = Coordinator(settings, JobId(unique), run_id, names, interval_s=0.5)
        first.start()
        # Three, not two: the first global checkpoint waits for every subtask to start, so
        # the spacing the subtasks judge the coordinator by is set by the later ones.
        while len(first.completed) < 3:
            assert time.monotonic() < deadline, "the first coordinator completed fewer than 3"
            time.sleep(0.2)
        first.stop()  # the coordinator dies
        store = CheckpointStore(settings, JobId(unique), OperatorName("count"), 2)
        try:
            before = store.latest(0)
            assert before is not None
            # Subtasks resume their own interval checkpoints 1.5 spacings after the last
            # global one; a bounded wait for that, never a fixed sleep.
            after = before
            local_deadline = time.monotonic() + 60
            while after.checkpoint_id <= before.checkpoint_id:
                assert time.monotonic() < local_deadline, "no checkpoint without a coordinator"
                time.sleep(0.5)
                latest = store.latest(0)
                assert latest is not None
                after = latest
            assert after.meta.global_id is None  # an interval checkpoint of its own
        finally:
            store.close()

        sp = savepoint(settings, JobId(unique), run_id, names)
        second = Coordinator(settings, JobId(unique), run_id, names, interval_s=0.5)
        second.start()
        while not second.completed:
            assert time.monotonic() < deadline + 60, "the second coordinator completed none"
            time.sleep(0.2)
    finally:
        gates.open_all()  # the rest of the input runs through, whatever happened above
        if first is not None:
            first.stop()
        driver.join(180)
        if second is not None:
            second.stop()
    assert not driver.is_alive()
    assert read_output(tmp_path) == clicks.reference(RECORDS)
    ids = [c["id"] for c in read_completed(settings, JobId(unique))]
    assert ids == sorted(set(ids))  # numbering resumed, never reused
    assert second.completed
    assert min(second.completed) > sp["id"] > max(first.completed)


@pytest.mark.extended
def test_unaligned_checkpoints_inside_a_message_restore_exactly(
    kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = 120_000
    monkeypatch.setenv("SPILLWAY_TEST_RECORDS", str(records))
    monkeypatch.setenv("SPILLWAY_TEST_OUT", str(tmp_path))
    # slow[0] dies right after the first checkpoint it takes inside a channel message, in
    # each of its first three attempts (the local interval is longer than the job: only
    # global checkpoints commit).
    monkeypatch.setenv(
        "SPILLWAY_CRASH_AT", ",".join(f"slow:0:after-partial-commit:{a}" for a in range(3))
    )
    config = JobConfig(
        "tests.integration.pipelines:slow_count",
        unique,
        kafka_bootstrap,
        master="local[6,5]",
        task_attempts=5,
        checkpoint_interval_s=600,
        checkpoint_mode="unaligned",
        global_interval_s=0.3,
    )
    results = {r.subtask.split("/")[1]: r for r in run_on_spark(config)}
    assert results["slow[0]"].attempt == 3

    counts: Counter[str] = Counter()
    for f in tmp_path.glob("out/*.jsonl"):
        for line in f.read_text().splitlines():
            row = json.loads(line)
            assert row["key"] not in counts, f"duplicate output row for {row['key']}"
            counts[row["key"]] = row["n"]
    assert counts == Counter(f"k{i % 13}" for i in range(records))

    settings = KafkaSettings(kafka_bootstrap)
    restarts = [
        e
        for e in read_events(settings, JobId(unique))
        if e.get("event") == "started" and e.get("operator") == "slow" and e["attempt"] > 0
    ]
    assert len(restarts) == 3
    # Each restart resumed inside a message, skipping the records its checkpoint had done.
    assert all(e["resumed_mid_message"] for e in restarts), restarts
