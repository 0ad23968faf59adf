"""Whole-job rewind bookkeeping: discard spans, rewind checkpoints, readers, sinks. No broker."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from spillway.channels.errors import CheckpointFormatError, ConfigError, RetentionGapError
from spillway.channels.ids import (
    JobId,
    Offset,
    OperatorName,
    SubtaskId,
    TopicPartition,
)
from spillway.channels.reader import ChannelReader, InputChannel, ReaderState
from spillway.channels.wire.envelope import Kind
from spillway.offsets.checkpoint import Checkpoint
from spillway.offsets.store import prune_point
from spillway.recovery.control.globalckpt import GlobalProgress
from spillway.recovery.control.rewind import _add_span, check_compaction_window, plan_rewind
from spillway.recovery.job.plan import JobPlan
from spillway.recovery.runtime.runner import GlobalCadence
from spillway.spark_jobs.api.pipeline import Pipeline
from spillway.spark_jobs.connectors.sinks import JsonlFileSink
from tests.unit.channelfakes import SCHEMA, TP, Msg
from tests.unit.checkpointfakes import changed, checkpoint
from tests.unit.readerfakes import ScriptedConsumer, data

EVENT = {
    "type": "record",
    "name": "Event",
    "fields": [{"name": "key", "type": "string"}, {"name": "n", "type": "long"}],
}


def two_stage() -> JobPlan:
    """src(2) -> [round robin] count(2) -> out(2)."""
    p = Pipeline("rw")
    src = p.generate(
        "src", make=lambda i: {"key": "k", "n": i}, schema=EVENT, count=10, parallelism=2
    )
    # One key group per subtask: the layout of partition j = subtask j these tests spell out.
    counted = src.key_by(lambda r: r["key"], max_parallelism=2).aggregate(
        "count",
        init=lambda: 0,
        add=lambda n, _r: n + 1,
        result=lambda k, n: {"key": k, "n": n},
        schema=EVENT,
        parallelism=2,
    )
    counted.write_jsonl("out", "/x", parallelism=2)
    return p.plan("rw")


def sub(op: str, i: int) -> SubtaskId:
    return SubtaskId(JobId("rw"), OperatorName(op), i)


def taken_at(plan: JobPlan, marks: dict[str, tuple[int, ...]]) -> dict[SubtaskId, Checkpoint]:
    """Checkpoints of global checkpoint 5: every subtask read its inputs up to offset 10."""
    out = {}
    for s in plan.subtasks():
        inputs = {
            TopicPartition(plan.topic_of(e), s.index): Offset(10)
            for e in plan.inputs_of(s.operator)
        }
        outputs = {plan.topic_of(e): marks[s.operator] for e in plan.outputs_of(s.operator)}
        out[s] = checkpoint(
            s,
            3,
            plan.fingerprint,
            inputs=inputs,
            output_marks=outputs,
            global_id=5,
            wall_time=100.0,
        )
    return out


def log_bounds(
    plan: JobPlan, end: int
) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """Every input partition ends at ``end`` and starts at 0."""
    ends = {
        TopicPartition(plan.topic_of(e), s.index): end
        for s in plan.subtasks()
        for e in plan.inputs_of(s.operator)
    }
    return ends, dict.fromkeys(ends, 0)


def test_rewind_discards_each_writers_records_after_its_checkpoint() -> None:
    plan = two_stage()
    ch = plan.topic_of(plan.inputs_of("count")[0])
    taken = taken_at(plan, {"src": (20, 30), "count": (15, 16)})
    # src[1] wrote to partition 0 up to offset 25 at its checkpoint 5.
    taken[sub("src", 1)] = changed(taken[sub("src", 1)], output_marks={ch: (25, 31)})
    ends, starts = log_bounds(plan, 40)
    latest = {s: 9 for s in plan.subtasks()}

    out = plan_rewind(plan, 5, taken, latest, ends, starts, now=200.0)

    c0 = out[sub("count", 0)]
    assert c0.reader.discard == {TopicPartition(ch, 0): {0: ((20, 40),), 1: ((25, 40),)}}
    assert out[sub("count", 1)].reader.discard == {
        TopicPartition(ch, 1): {0: ((30, 40),), 1: ((31, 40),)}
    }
    assert c0.checkpoint_id == 10  # after the newest, so it is "latest" and ids stay unique
    assert c0.reader.inputs == taken[sub("count", 0)].reader.inputs  # positions of checkpoint 5
    assert c0.meta.rewound_from == 5
    assert c0.meta.global_id is None
    assert c0.state.rewrite_state
    assert not out[sub("src", 0)].state.rewrite_state
    assert out[sub("src", 0)].reader.discard == {}


def test_rewind_keeps_spans_of_earlier_rewinds_and_merges_overlaps() -> None:
    assert _add_span(((5, 10),), (20, 30)) == ((5, 10), (20, 30))
    assert _add_span(((5, 10), (20, 30)), (8, 22)) == ((5, 30),)
    assert _add_span((), (3, 4)) == ((3, 4),)


def test_rewind_refuses_deleted_channel_data_with_the_numbers() -> None:
    plan = two_stage()
    taken = taken_at(plan, {"src": (20, 30), "count": (15, 16)})
    ends, starts = log_bounds(plan, 40)
    starts[next(iter(starts))] = 12
    with pytest.raises(RetentionGapError, match=r"from offset 10, .* below 12 \(2 records lost\)"):
        plan_rewind(plan, 5, taken, {}, ends, starts, now=0.0)


def test_rewind_refuses_checkpoints_without_marks_or_missing_subtasks() -> None:
    plan = two_stage()
    taken = taken_at(plan, {"src": (20, 30), "count": (15, 16)})
    ends, starts = log_bounds(plan, 40)
    old = dict(taken)
    old[sub("src", 0)] = changed(old[sub("src", 0)], output_marks={})
    with pytest.raises(CheckpointFormatError, match="no output high-water marks"):
        plan_rewind(plan, 5, old, {}, ends, starts, now=0.0)
    del taken[sub("out", 1)]
    with pytest.raises(ConfigError, match=r"has no checkpoint of rw/out\[1\]"):
        plan_rewind(plan, 5, taken, {}, ends, starts, now=0.0)


def test_stateful_rewind_is_refused_past_the_compaction_lag() -> None:
    c = checkpoint(sub("count", 0), 1, "t", wall_time=0.0)
    topic = "spillway.rw.changelog.count"
    check_compaction_window(1, {c.subtask: c}, {topic: 60_000}, now=59.0)
    with pytest.raises(ConfigError, match="may compact records older than 60s"):
        check_compaction_window(1, {c.subtask: c}, {topic: 60_000}, now=61.0)


def test_reader_drops_discarded_spans_and_forgets_them_once_passed() -> None:
    log = [
        data(0, 0, 1),
        data(1, 1, 2),
        data(2, 0, 99),
        Msg(3, 0, Kind.END_OF_STREAM, 0),
        data(4, 1, 3),
        data(5, 0, 4),
    ]
    r = ChannelReader(cast(Any, ScriptedConsumer(log)), [InputChannel(TP.topic, 0, SCHEMA, 2)])
    r.start({TP: Offset(0)}, ReaderState(discard={TP: {0: ((2, 5),)}}))
    got = [rec["v"] for d in r.poll(3, 0) for rec in d.records]
    assert got == [1, 2]
    assert r.discard_state() == {TP: {0: ((2, 5),)}}
    got += [rec["v"] for d in r.poll(10, 0) for rec in d.records]
    assert got == [1, 2, 3, 4]  # the abandoned run's record and end-of-stream are gone
    assert r.ended_writers(TP) == frozenset()
    assert r.discard_state() == {}


def test_checkpoint_with_rewind_fields_round_trips() -> None:
    c = checkpoint(
        sub("count", 1),
        4,
        "t",
        output_marks={"a": (1, 2)},
        discard={TP: {0: ((1, 2), (5, 9))}},
        rewound_from=3,
        rewrite_state=True,
        partial={TP: (17, 256)},
    )
    assert Checkpoint.from_bytes(c.to_bytes()) == c
    assert c.reader_state().discard == {TP: {0: ((1, 2), (5, 9))}}
    assert (c.writers.output_marks, c.meta.rewound_from, c.state.rewrite_state) == (
        {"a": (1, 2)},
        3,
        True,
    )


class _Ctx:
    subtask = sub("out", 0)


def test_file_sink_deletes_files_published_after_the_restored_checkpoint(tmp_path: Path) -> None:
    d = tmp_path / "out"
    d.mkdir()
    for n in (2, 3, 4):
        (d / f"part-0000-{n:08d}.jsonl").write_text("x\n")
    (d / "part-0001-00000009.jsonl").write_text("other subtask\n")
    JsonlFileSink(str(tmp_path)).open(cast(Any, _Ctx()), {"next": 3}, None)
    assert sorted(p.name for p in d.iterdir()) == [
        "part-0000-00000002.jsonl",
        "part-0001-00000009.jsonl",
    ]


def test_prune_point_keeps_the_newest_and_the_last_k_global_checkpoints() -> None:
    # (offset, is_global): one record and one transaction marker per checkpoint.
    recs = [(o, o in (4, 10, 16)) for o in range(0, 24, 2)]
    assert prune_point(recs, keep=3, keep_global=0) == 18  # plain "newest 3"
    assert prune_point(recs, keep=3, keep_global=2) == 10  # back to the 2nd newest global
    assert prune_point(recs, keep=3, keep_global=5) == 4  # fewer globals: the oldest one
    assert prune_point(recs, keep=20, keep_global=2) is None  # nothing beyond what is kept
    assert prune_point(recs, keep=3, keep_global=5, limit=6) == 12  # bounded all the same


def test_completed_checkpoint_reports_bytes_written_and_spilled() -> None:
    progress = GlobalProgress(frozenset({"a[0]", "b[0]"}))
    for sub, b, spilled in (("a[0]", 100, 5000), ("b[0]", 40, 0)):
        op, index = sub[:-1].split("[")
        progress.observe(
            {
                "event": "checkpointed",
                "operator": op,
                "index": int(index),
                "global": 3,
                "checkpoint": 7,
                "time": 10.5,
                "bytes": b,
                "spilled_bytes": spilled,
            }
        )
    assert progress.complete(3)
    summary = progress.summary(3, started=10.0)
    assert summary["bytes"] == 140
    assert summary["spilled_bytes"] == 5000
    assert summary["subtask_bytes"] == {"a[0]": 100, "b[0]": 40}
    assert summary["duration_s"] == 0.5


def test_interval_checkpoints_give_way_to_regular_global_ones() -> None:
    c = GlobalCadence()
    assert not c.expected_soon(0.0)  # no global checkpoint yet: interval ones run
    c.taken(10.0)
    assert not c.expected_soon(10.5)  # one is not a cadence
    c.taken(11.0)
    assert c.expected_soon(11.9)  # the next is due around 12.0
    assert c.expected_soon(12.4)
    assert not c.expected_soon(12.6)  # 1.5 spacings without one: the coordinator stopped
