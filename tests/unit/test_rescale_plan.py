"""Restore under a new parallelism without a broker (recovery/restore/rescale.py): which
positions and changelog offsets each new subtask continues from, up and down, keyed and
non-keyed edges, stateful and stateless operators, and the cases refused."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from spillway.channels.errors import ConfigError, RescaleError, TopologyMismatchError
from spillway.channels.ids import (
    CheckpointId,
    Offset,
    TopicPartition,
)
from spillway.channels.routing.keygroups import key_group_range
from spillway.offsets.checkpoint import Checkpoint
from spillway.recovery.job.plan import JobPlan
from spillway.recovery.job.plandoc import PlanDoc
from spillway.recovery.restore.ownership import owned_partitions
from spillway.recovery.restore.rescale import (
    OperatorHandover,
    Rescale,
    accepts_fingerprint,
    check_rescalable,
    describe,
    handover_checkpoint,
    handover_released,
    previous_parallelism,
    with_parallelism,
)
from spillway.spark_jobs.api.pipeline import Pipeline
from spillway.spark_jobs.cli import _rewind_to, parse_parallelism
from spillway.spark_jobs.spark.liverescale import check_live
from spillway.spark_jobs.spark.taskslots import Offer
from tests.unit.checkpointfakes import changed, checkpoint
from tests.unit.rescalefakes import EVENT, M, plan, restorer_of, sub

CH = "spillway.j.ch.src.count"
LOG = "spillway.j.changelog.count"
MAPPED = "spillway.j.ch.count.tag"


def without_slots(jp: JobPlan) -> JobPlan:
    """``jp`` with ``tag`` as an operator without slots (as one with another kind of input
    beside its round-robin one): its input keeps one partition per subtask."""
    ops = tuple(
        dataclasses.replace(o, max_parallelism=None, slotted=False) if o.name == "tag" else o
        for o in jp.operators
    )
    return dataclasses.replace(jp, operators=ops)


def ckpt(jp: JobPlan, op: str, i: int, cid: int, **kw: object) -> Checkpoint:
    """A checkpoint of ``op[i]`` under ``jp`` whose position on partition g is 100 + g and
    changelog offset on partition g is 1000 + g; each writer-0 channel watermark 10 * g."""
    own = owned_partitions(jp, sub(op, i))
    tps = [TopicPartition(t, p) for t, ps in own.partitions.items() for p in ps]
    inputs = {tp: Offset(100 + tp.partition) for tp in tps if tp.topic != LOG}
    logs = {tp: Offset(1000 + tp.partition) for tp in tps if tp.topic == LOG}
    return checkpoint(
        sub(op, i),
        cid,
        jp.fingerprint,
        inputs=inputs,
        changelogs=logs,
        owned=own,
        channel_watermarks={tp: {0: 10 * tp.partition} for tp in inputs},
        ended={tp: frozenset({1}) for tp in inputs if tp.partition % 2},
        outputs={MAPPED: (i, i + 1)},
        watermark=50 + i,
        **kw,
    )


def test_scale_up_hands_each_key_group_from_its_previous_owner() -> None:
    old, new = plan(count=2), plan(count=4)
    handed = {0: ckpt(old, "count", 0, 7), 1: ckpt(old, "count", 1, 9)}
    for i in range(4):
        c = handover_checkpoint(new, sub("count", i), 2, handed, floor=9)
        groups = list(key_group_range(i, 4, M))
        assert c.checkpoint_id == 9
        assert c.meta.topology == new.fingerprint
        assert c.meta.owned.of_topic(CH) == tuple(groups) == c.meta.owned.of_topic(LOG)
        assert c.reader.inputs == {TopicPartition(CH, g): Offset(100 + g) for g in groups}
        assert c.state.changelogs == {TopicPartition(LOG, g): Offset(1000 + g) for g in groups}
        assert c.reader.channel_watermarks == {TopicPartition(CH, g): {0: 10 * g} for g in groups}
        assert c.reader.ended == {TopicPartition(CH, g): {1} for g in groups if g % 2}
        # Groups 0..3 were subtask 0's (watermark 50), 4..7 subtask 1's (51).
        assert c.operator.watermark == (50 if i < 2 else 51)
        # Output counts continue the writer of the same index; new writers start fresh.
        assert c.writers.outputs == ({MAPPED: (i, i + 1)} if i < 2 else {})


def test_scale_down_merges_every_previous_owner() -> None:
    old, new = plan(count=4), plan(count=1)
    handed = {i: ckpt(old, "count", i, 3 + i) for i in range(4)}
    c = handover_checkpoint(new, sub("count", 0), 4, handed, floor=20)
    assert c.reader.inputs == {TopicPartition(CH, g): Offset(100 + g) for g in range(M)}
    assert c.state.changelogs == {TopicPartition(LOG, g): Offset(1000 + g) for g in range(M)}
    assert c.operator.watermark == 50  # the lowest of the four
    assert c.checkpoint_id == 20
    assert c.writers.outputs == {MAPPED: (0, 1)}


def test_a_previous_owner_without_checkpoint_hands_over_nothing() -> None:
    old, new = plan(count=2), plan(count=1)
    c = handover_checkpoint(new, sub("count", 0), 2, {0: ckpt(old, "count", 0, 4), 1: None}, 4)
    assert c.reader.inputs == {TopicPartition(CH, g): Offset(100 + g) for g in range(4)}
    assert set(c.state.changelogs) == {TopicPartition(LOG, g) for g in range(4)}
    assert c.operator.watermark == 50  # only owners that checkpointed count


def test_rewrite_state_and_discards_follow_their_partitions() -> None:
    old, new = plan(count=2), plan(count=4)
    spans = {TopicPartition(CH, 5): {0: ((3, 9),)}}
    handed = {
        0: ckpt(old, "count", 0, 1),
        1: ckpt(old, "count", 1, 1, rewrite_state=True, discard=spans),
    }
    low, high = (handover_checkpoint(new, sub("count", i), 2, handed, 1) for i in (0, 2))
    assert not low.state.rewrite_state
    assert low.reader.discard == {}
    assert high.state.rewrite_state
    assert high.reader.discard == spans


def test_non_keyed_input_grows_new_partitions_start_empty() -> None:
    old, new = without_slots(plan(tag=2)), without_slots(plan(tag=3))
    handed = {i: ckpt(old, "tag", i, 5) for i in range(2)}
    kept = handover_checkpoint(new, sub("tag", 1), 2, handed, 5)
    fresh = handover_checkpoint(new, sub("tag", 2), 2, handed, 5)
    assert kept.reader.inputs == {TopicPartition(MAPPED, 1): Offset(101)}
    assert fresh.meta.owned.of_topic(MAPPED) == (2,)
    assert fresh.reader.inputs == {}
    assert fresh.operator.watermark is None
    assert fresh.state.changelogs == {}


def test_refused_cases_say_why() -> None:
    with pytest.raises(RescaleError, match=r"not keyed \(rebalance\); partitions 1\.\.1"):
        check_rescalable(without_slots(plan(tag=1)), "tag", 2)
    check_rescalable(plan(tag=1), "tag", 2)  # with slots (tests/unit/test_slots.py)
    with pytest.raises(RescaleError, match="a source cannot be rescaled"):
        check_rescalable(with_parallelism(plan(), {"src": 3}), "src", 2)
    old = plan(count=2)
    finished = {0: ckpt(old, "count", 0, 2, finished=True), 1: ckpt(old, "count", 1, 2)}
    with pytest.raises(RescaleError, match=r"subtasks \[0\] finished"):
        handover_checkpoint(plan(count=3), sub("count", 0), 2, finished, 2)
    with pytest.raises(RescaleError, match=r"must be between 1 and 8 \(its key-group count"):
        with_parallelism(old, {"count": 9})
    with pytest.raises(RescaleError, match="not operators of job j"):
        with_parallelism(old, {"nope": 2})


def test_broadcast_and_unkeyed_state_are_refused() -> None:
    pipe = Pipeline("b")
    src = pipe.generate("src", make=lambda i: {"key": "k", "n": i}, schema=EVENT, count=1)
    src.broadcast().map("m", lambda r: r, schema=EVENT, parallelism=2).write_jsonl(
        "o", "/x", parallelism=1
    )
    with pytest.raises(RescaleError, match="broadcast"):
        check_rescalable(with_parallelism(pipe.plan("j"), {"m": 3}), "m", 2)
    jp = plan(tag=3)
    ops = tuple(
        dataclasses.replace(o, stateful=o.stateful or o.name == "tag") for o in jp.operators
    )
    with pytest.raises(RescaleError, match="not divided into key groups"):
        check_rescalable(dataclasses.replace(jp, operators=ops), "tag", 2)


def test_forward_edges_need_equal_widths() -> None:
    pipe = Pipeline("f")
    src = pipe.generate("src", make=lambda i: {"key": "k", "n": i}, schema=EVENT, count=1,
                        parallelism=2)  # fmt: skip
    src.forward().map("m", lambda r: r, schema=EVENT, parallelism=2).write_jsonl("o", "/x")
    with pytest.raises(RescaleError, match="forward"):
        with_parallelism(pipe.plan("j"), {"m": 3})


def test_previous_parallelism_and_the_record_round_trip() -> None:
    assert previous_parallelism(plan(count=4), PlanDoc.of(plan(count=2))) == {"count": 2}
    assert previous_parallelism(plan(), None) == {}
    r = Rescale(2, ("abc", "old"), {"count": OperatorHandover(2, {0: 7, 1: None}, 9)})
    assert Rescale.from_json(r.to_json(), "here") == r
    with pytest.raises(RescaleError, match="here: malformed"):
        Rescale.from_json({"number": 1}, "here")
    assert accepts_fingerprint(r, "new") == ("new", "abc", "old")
    assert accepts_fingerprint(None, "new") == ("new",)


def test_cli_parallelism_and_savepoint_options() -> None:
    assert parse_parallelism(["count=4", "tag=1"]) == {"count": 4, "tag": 1}
    for bad in (["count"], ["count=0"], ["=3"], ["count=x"]):
        with pytest.raises(ConfigError, match="expected OP=N"):
            parse_parallelism(bad)
    with pytest.raises(ConfigError, match="twice"):
        parse_parallelism(["a=1", "a=2"])

    def ns(savepoint: str | None, checkpoint: int | None = None) -> argparse.Namespace:
        return argparse.Namespace(from_savepoint=savepoint, from_checkpoint=checkpoint)

    assert _rewind_to(ns("7")) == 7
    assert _rewind_to(ns("latest")) is None
    assert _rewind_to(ns(None, 3)) == 3
    with pytest.raises(ConfigError, match="not both"):
        _rewind_to(ns("7", 3))
    with pytest.raises(ConfigError, match="or 'latest'"):
        _rewind_to(ns("newest"))


def test_the_restorer_uses_the_handover_until_the_subtask_checkpointed_itself() -> None:
    old, new = plan(count=2), plan(count=4)
    c0, c1 = ckpt(old, "count", 0, 7), ckpt(old, "count", 1, 9)
    rescale = Rescale(1, (old.fingerprint,), {"count": OperatorHandover(2, {0: 7, 1: 9}, 9)})
    kept = {0: [c0], 1: [c1]}
    got = restorer_of(sub("count", 1), kept).load(new.fingerprint, rescaled=(new, rescale))
    assert got.checkpoint == handover_checkpoint(new, sub("count", 1), 2, {0: c0, 1: c1}, 9)
    assert got.mark is None
    # Once it checkpointed above the floor, its own checkpoint is the one.
    own = changed(c1, checkpoint_id=CheckpointId(10), topology=new.fingerprint)
    kept[1] = [c1, own]
    assert (
        restorer_of(sub("count", 1), kept).load(new.fingerprint, rescaled=(new, rescale)).checkpoint
        == own
    )
    # An operator the rescale left alone keeps its checkpoint of the plan before it.
    tag = ckpt(old, "tag", 0, 4)
    got = restorer_of(sub("tag", 0), {0: [tag]}).load(new.fingerprint, rescaled=(new, rescale))
    assert got.checkpoint == tag
    other = changed(tag, topology="another")
    with pytest.raises(TopologyMismatchError):
        restorer_of(sub("tag", 0), {0: [other]}).load(new.fingerprint, rescaled=(new, rescale))
    # A handed-over checkpoint no longer retained: a clear error, not a fresh start.
    with pytest.raises(RescaleError, match="checkpoint 9 of subtask 1, handed over by rescale 1"):
        restorer_of(sub("count", 3), {0: [c0]}).load(new.fingerprint, rescaled=(new, rescale))


def test_status_describes_the_latest_rescale() -> None:
    r = Rescale(2, ("a",), {"count": OperatorHandover(4, {0: 7, 1: 9, 2: None, 3: 8}, 9)})
    assert describe(r, {"count": 1}) == (
        "rescale 2: count 4 -> 1 subtasks (from checkpoints 0:7, 1:9, 2:None, 3:8)"
    )


def test_live_rescale_needs_keyed_inputs_and_interval_checkpoints() -> None:
    check_live(plan(count=4), "count", 2, "interval")
    check_live(plan(tag=3), "tag", 2, "interval")  # round-robin into slots
    with pytest.raises(RescaleError, match=r"\(rebalance\) has one partition per subtask; its"):
        check_live(without_slots(plan(tag=3)), "tag", 2, "interval")
    with pytest.raises(RescaleError, match="--checkpoint-mode unaligned cannot be rescaled live"):
        check_live(plan(count=4), "count", 2, "unaligned")


def test_live_rescale_of_an_unbounded_job_needs_a_slot_for_every_subtask() -> None:
    # src 2 + count 4 + tag 2 + out 1 = 9 subtasks after count goes 2 -> 4.
    unbounded = dataclasses.replace(plan(count=4), bounded=False)
    check_live(unbounded, "count", 2, "interval", slots=Offer(9, "local"))
    check_live(unbounded, "count", 2, "interval", slots=None)  # not known: not checked
    with pytest.raises(RescaleError, match=r"each of its 9 subtasks at once, but Spark offers 8"):
        check_live(unbounded, "count", 2, "interval", slots=Offer(8, "local"))
    # A bounded job may queue subtasks: upstream ones finish and free their slots.
    check_live(plan(count=4), "count", 2, "interval", slots=Offer(2, "local"))


def test_a_live_rescale_without_room_says_what_is_free_and_how_to_start_with_room() -> None:
    # 7 subtasks run (src 2, count 2, tag 2, out 1) on 8 slots: 1 free; count 2 -> 4 needs 9.
    unbounded = dataclasses.replace(plan(count=4), bounded=False)
    with pytest.raises(RescaleError) as local:
        check_live(unbounded, "count", 2, "interval", slots=Offer(8, "local"))
    assert str(local.value) == (
        f"operator 'count' of job {unbounded.job}: the job is unbounded and would need a "
        "task slot for each of its 9 subtasks at once, but Spark offers 8 (local mode), 7 "
        "held by its running subtasks, 1 free: add at most 1 subtask(s), or stop the job "
        "(SIGTERM to spillway run: it checkpoints and exits) and run it again "
        "with --slots 9"
    )
    with pytest.raises(RescaleError) as cluster:
        check_live(unbounded, "count", 2, "interval", slots=Offer(7, "cluster"))
    assert str(cluster.value).endswith(
        "but Spark offers 7 (cluster mode), 7 held by its running subtasks, 0 free: add at "
        "most 0 subtask(s), or stop the job (SIGTERM to spillway "
        "run: it checkpoints and exits) and run it again with --slots 9 on a cluster with 9 "
        "free executor cores (spillway cluster start --workers W --worker-cores C offers W x C)"
    )


def test_handed_over_checkpoints_stay_until_every_new_subtask_checkpointed_above_the_floor() -> (
    None
):
    # count went 2 -> 3; the newest checkpoint id before the rescale was 9.
    r = Rescale(1, ("old",), {"count": OperatorHandover(2, {0: 9, 1: 8}, 9)})
    jp = plan(count=3)
    latest: dict[int, Checkpoint | None] = {0: ckpt(jp, "count", 0, 12), 1: None, 2: None}
    assert not handover_released(r, "count", 3, latest.get)  # count[1], count[2]: none yet
    latest[1] = ckpt(jp, "count", 1, 10)
    latest[2] = ckpt(jp, "count", 2, 9)  # restored and re-committed at the floor: not yet
    assert not handover_released(r, "count", 3, latest.get)
    latest[2] = ckpt(jp, "count", 2, 10)
    assert handover_released(r, "count", 3, latest.get)
    # Another operator, or no rescale at all: nothing to keep.
    assert handover_released(r, "tag", 2, lambda i: None)
    assert handover_released(None, "count", 3, lambda i: None)
