"""The recovery record of a killed subtask: every restart phase in order, and a replay figure
equal to exactly what the dead attempt had read past its checkpoint (real Spark, real broker).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, Offset, OperatorName, SubtaskId, TopicPartition
from spillway.channels.kafka.consumer import AssignedConsumer
from spillway.channels.reader import ChannelReader, InputChannel
from spillway.channels.wire.envelope import Kind
from spillway.examples import clicks
from spillway.offsets.checkpoint import Checkpoint
from spillway.offsets.store import CheckpointStore
from spillway.recovery.observe.events import read_events
from spillway.recovery.observe.phases import PHASES, merge, missing, out_of_order
from spillway.recovery.restore.ownership import owned_partitions
from spillway.recovery.restore.progress import READ
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from tests.integration.conftest import RECORDS

pytestmark = [pytest.mark.broker, pytest.mark.spark]

REF = "spillway.examples.clicks:pipeline"


def read_output(out: Path) -> dict[str, tuple[str, int]]:
    """The job's output files as page -> (section, views); a repeated page fails."""
    rows: dict[str, tuple[str, int]] = {}
    for f in sorted((out / "out").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            assert r["page"] not in rows, f"duplicate output row for {r['page']}"
            rows[r["page"]] = (r["section"], r["views"])
    return rows


def _aborted_checkpoint(
    settings: KafkaSettings, store: CheckpointStore, index: int, cid: int
) -> Checkpoint:
    """Checkpoint ``cid`` of subtask ``index`` as attempt 0 wrote it in the transaction that
    never committed (visible to read_uncommitted readers only): what that attempt had read."""
    tp = TopicPartition(store.topic, index)
    reader = AssignedConsumer(
        settings, "restart-record-probe", extra={"isolation.level": "read_uncommitted"}
    )
    try:
        _, high = reader.watermarks(tp)
        reader.assign({tp: Offset(0)})
        found: list[Checkpoint] = []
        deadline = time.monotonic() + 30
        while (reader.position(tp) or 0) < high and time.monotonic() < deadline:
            for m in reader.consume(100, 0.2):
                c = Checkpoint.from_bytes(m.value() or b"")
                if c.meta.attempt == 0 and int(c.checkpoint_id) == cid:
                    found.append(c)
    finally:
        reader.close()
    assert len(found) == 1, found
    return found[0]


def _records_between(settings: KafkaSettings, ch: InputChannel, start: int, end: int) -> int:
    """Committed data records in messages of ``ch`` at offsets ``[start, end)``."""
    reader = ChannelReader(AssignedConsumer(settings, "restart-record-count"), [ch])
    n = 0
    try:
        reader.start({ch.tp: Offset(start)})
        deadline = time.monotonic() + 60
        while reader.positions()[ch.tp] < end:
            assert time.monotonic() < deadline, "the channel did not deliver up to the mark"
            for d in reader.poll(100, 0.2):
                if d.kind is Kind.DATA and d.offset < end:
                    n += len(d.records)
    finally:
        reader.close()
    return n


def test_killed_subtask_records_every_phase_in_order_and_replays_what_it_had_read(
    kafka_bootstrap: str, unique: str, clicks_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # count[0] dies with its third checkpoint written (outputs and checkpoint record on the
    # broker, uncommitted) while the sources keep emitting: what it had read past its second
    # checkpoint is exactly that aborted checkpoint's input positions. The source clicks[1]
    # dies the same way: what it re-reads is the aborted checkpoint's source position.
    monkeypatch.setenv("CLICKS_RATE", str(RECORDS / 2 / 6))
    monkeypatch.setenv("SPILLWAY_CRASH_AT", "count:0:before-commit:0:3,clicks:1:before-commit:0:3")
    results = run_on_spark(JobConfig(REF, unique, kafka_bootstrap, master="local[8,4]"))
    assert read_output(clicks_env) == clicks.reference(RECORDS)
    final = next(r for r in results if r.subtask.endswith("/count[0]"))
    assert (final.attempt, final.status) == (1, "finished")

    settings = KafkaSettings(kafka_bootstrap)
    events: list[dict[str, Any]] = [
        e
        for e in read_events(settings, JobId(unique))
        if (e.get("operator"), e.get("index"), e.get("attempt")) == ("count", 0, 1)
    ]
    started = next(e for e in events if e["event"] == "started")
    later = [e.get("phases") for e in events if e["event"] in ("caught-up", "finished")]
    record = merge(started["phases"], *later)
    # Every phase but "killed" (only a killer knows it), in order.
    assert missing(record, PHASES[1:]) == [], record
    assert out_of_order(record) == [], record

    plan = clicks.pipeline().plan(unique)
    (edge,) = plan.inputs_of(OperatorName("count"))
    store = CheckpointStore(settings, JobId(unique), OperatorName("count"), 2)
    try:
        restored = store.get(0, started["restored_from"])
        assert restored is not None
        assert restored.meta.attempt == 0
        dead = _aborted_checkpoint(settings, store, 0, started["restored_from"] + 1)
    finally:
        store.close()
    assert started["replay_basis"] == READ
    assert started["replay_read_by"]["attempt"] == 0
    assert final.replay_basis == READ
    # Whatever arrived after what it had read is read for the first time, not replayed.
    # (On a loaded machine the upstreams may have committed nothing new between its last
    # two checkpoints: then it had read nothing past the restored one.)
    # count[0] reads the key-group range of its keyed input (docs/architecture.md), so this holds
    # per owned partition (it was partition 0 alone before key groups).
    owned = owned_partitions(plan, SubtaskId(JobId(unique), OperatorName("count"), 0))
    expect_started: dict[str, list[int]] = {}
    expect_final: dict[str, list[int]] = {}
    for tp in owned.topic_partitions(plan.topic_of(edge)):
        start, end = int(restored.reader.inputs[tp]), int(dead.reader.inputs[tp])
        if end > start:
            ups = plan.operator(edge.upstream).parallelism
            ch = InputChannel(tp.topic, tp.partition, edge.schema, ups)
            reprocessed = _records_between(settings, ch, start, end)
            assert reprocessed > 0
            expect_started[str(tp)] = [start, end, 0]
            expect_final[str(tp)] = [start, end, reprocessed]
        else:
            assert end == start
    assert started["replay"] == expect_started
    assert final.replay == expect_final

    # The restarted source re-generates the indices from its checkpoint to where it had got.
    source = next(r for r in results if r.subtask.endswith("/clicks[1]"))
    assert source.attempt == 1
    assert source.restored_from is not None
    clicks_store = CheckpointStore(settings, JobId(unique), OperatorName("clicks"), 2)
    try:
        restored_src = clicks_store.get(1, source.restored_from)
        assert restored_src is not None
        dead_src = _aborted_checkpoint(settings, clicks_store, 1, source.restored_from + 1)
    finally:
        clicks_store.close()
    a, b = int(restored_src.source["next"]), int(dead_src.source["next"])
    assert b > a  # a paced generator always emits between two checkpoints
    assert source.source_replay == {"index": [a, b], "records": len(range(a, b, 2)), "basis": READ}
