"""Round-robin edges into slotted operators, without a broker: the sticky spread over
slots (channels/routing/partitioners.py, channels/writer.py), which operators get slots and
that a restart keeps their count (spark_jobs/api/graph.py, recovery/restore/ownership.py),
and rescaling such an operator up and down, live or from a savepoint
(recovery/restore/rescale.py, spark_jobs/spark/liverescale.py)."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, cast

import pytest

from spillway.channels.config import ChannelSettings
from spillway.channels.errors import RescaleError
from spillway.channels.ids import (
    JobId,
    Offset,
    OperatorName,
    SubtaskId,
    TopicPartition,
)
from spillway.channels.routing.keygroups import key_group_range, owner_of
from spillway.channels.routing.partitioners import RoundRobin, Sticky
from spillway.channels.wire.envelope import Kind, decode_data, read_header
from spillway.channels.writer import ChannelWriter, OutputChannel
from spillway.offsets.checkpoint import Checkpoint
from spillway.recovery.job.plan import JobPlan
from spillway.recovery.job.plandoc import PlanDoc
from spillway.recovery.restore.ownership import (
    keep_recorded_max_parallelism,
    owned_partitions,
)
from spillway.recovery.restore.rescale import (
    check_rescalable,
    handover_checkpoint,
    with_parallelism,
)
from spillway.spark_jobs.api.pipeline import Pipeline
from spillway.spark_jobs.spark.liverescale import check_live
from tests.unit.checkpointfakes import checkpoint

SCHEMA = {
    "type": "record",
    "name": "E",
    "fields": [{"name": "key", "type": "string"}, {"name": "n", "type": "long"}],
}
CH = "spillway.j.ch.src.tag"


def plan(tag: int = 2) -> JobPlan:
    """src(2) -[rebalance]-> tag(tag, stateless map) -[keyed, 8]-> count(2) -> out(2)."""
    pipe = Pipeline("slots")
    src = pipe.generate("src", make=lambda i: {"key": f"k{i}", "n": i}, schema=SCHEMA, count=9,
                        parallelism=2)  # fmt: skip
    tagged = src.rebalance().map("tag", lambda r: r, schema=SCHEMA, parallelism=tag)
    tagged.key_by(lambda r: r["key"], max_parallelism=8).aggregate(
        "count", init=lambda: 0, add=lambda n, _r: n + 1,
        result=lambda k, n: {"key": k, "n": n}, schema=SCHEMA, parallelism=2,
    ).write_jsonl("out", "/x", parallelism=2)  # fmt: skip
    return pipe.plan("j")


def without_slots(jp: JobPlan) -> JobPlan:
    """``jp`` with ``tag`` as an operator without slots (as one with another kind of input
    beside its round-robin one): one partition per subtask on its input."""
    ops = tuple(
        dataclasses.replace(o, max_parallelism=None, slotted=False) if o.name == "tag" else o
        for o in jp.operators
    )
    return dataclasses.replace(jp, operators=ops)


def sub(op: str, i: int) -> SubtaskId:
    return SubtaskId(JobId("j"), OperatorName(op), i)


# -- the spread --------------------------------------------------------------------------


def test_sticky_visits_every_slot_once_per_cycle_far_apart() -> None:
    for slots in (1, 2, 5, 32, 40):
        s = Sticky(0, slots)
        cycle = [s.current] + [s.advance() for _ in range(slots - 1)]
        assert sorted(cycle) == list(range(slots))
        assert s.advance() == cycle[0]  # and starts over
    s = Sticky(0, 32)
    cycle = [s.current] + [s.advance() for _ in range(31)]
    assert cycle[:8] == [0, 16, 8, 24, 4, 20, 12, 28]
    # Consecutive batches go to different subtasks of 2, and any 5 reach all of 3.
    assert all(owner_of(a, 2, 32) != owner_of(b, 2, 32) for a, b in itertools.pairwise(cycle))
    for i in range(len(cycle)):
        assert {owner_of(g, 3, 32) for g in (cycle + cycle)[i : i + 5]} == {0, 1, 2}
    # Writers start at different places of the cycle.
    assert Sticky(1, 32).current == 16
    assert Sticky(0, 32).targets({"any": 1}) == (0,)


class _Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[int, bytes, Any]] = []

    def produce(self, topic: str, partition: int, key: bytes, value: bytes, hdrs: Any) -> None:
        self.sent.append((partition, value, hdrs))

    def last_offset(self, _tp: TopicPartition) -> int | None:
        return None

    def data(self) -> list[tuple[int, list[Any], int]]:
        """(partition, records, value bytes) of each data message, in send order."""
        return [
            (p, list(decode_data(h, v, SCHEMA)), len(v))
            for p, v, h in self.sent
            if read_header(h)[0] is Kind.DATA
        ]


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _writer(route: Any, n: int, codec: str, clock: _Clock) -> tuple[ChannelWriter, _Producer]:
    producer = _Producer()
    settings = ChannelSettings(max_batch_bytes=4096, linger_s=0.05, codec=codec)
    channel = OutputChannel("t", SCHEMA, route, n)
    return ChannelWriter(cast(Any, producer), channel, 0, settings, clock=clock), producer


@pytest.mark.parametrize("codec", ["avro", "arrow"])
def test_a_sticky_writer_fills_one_slot_at_a_time_losing_and_repeating_nothing(
    codec: str,
) -> None:
    records = [{"key": f"k{i % 7}", "n": i} for i in range(6000)]
    clock = _Clock()
    sticky, producer = _writer(Sticky(0, 32), 32, codec, clock)
    single, one = _writer(RoundRobin(0, 1), 1, codec, clock)
    for i in range(0, len(records), 100):
        sticky.write_many(records[i : i + 100])
        single.write_many(records[i : i + 100])
    sticky.flush_batches()
    single.flush_batches()
    messages = producer.data()
    # Every record once, in the order written (one open batch at a time).
    assert [r["n"] for _, rs, _ in messages for r in rs] == list(range(6000))
    # As many messages as on one partition: batches are as large as there.
    assert [size for _, _, size in messages] == [size for _, _, size in one.data()]
    # Each message went to the next slot of the cycle, each slot about as often.
    order = Sticky(0, 32)
    expected = [order.current] + [order.advance() for _ in range(len(messages) - 1)]
    assert [p for p, _, _ in messages] == expected
    per_slot = [sum(1 for p, _, _ in messages if p == s) for s in range(32)]
    assert max(per_slot) - min(per_slot) <= 1
    assert sticky.counts == [sum(len(rs) for p, rs, _ in messages if p == s) for s in range(32)]


def test_a_sticky_writer_moves_on_after_a_linger_and_a_whole_arrow_batch_stays_together() -> None:
    import pyarrow as pa

    clock = _Clock()
    w, producer = _writer(Sticky(0, 32), 32, "arrow", clock)
    w.write_many([{"key": "a", "n": 1}])
    clock.now = 0.1
    w.tick()  # lingered: sent to slot 0, next records go to slot 16
    w.write_batch(pa.RecordBatch.from_pylist([{"key": "b", "n": n} for n in range(2, 5)]))
    w.end_of_stream()  # drains slot 16 first, then a control message to every slot
    data = producer.data()
    assert [(p, [r["n"] for r in rs]) for p, rs, _ in data] == [(0, [1]), (16, [2, 3, 4])]
    assert len(producer.sent) == 2 + 32


# -- which operators get slots; a restart keeps their count --------------------------------


def test_a_stateless_operator_behind_a_round_robin_edge_gets_slots() -> None:
    jp = plan()
    tag, count, out = (jp.operator(n) for n in ("tag", "count", "out"))
    assert (tag.max_parallelism, tag.slotted) == (32, True)
    assert (count.max_parallelism, count.slotted) == (8, False)  # keyed: key groups
    assert (out.max_parallelism, out.slotted) == (None, False)  # forward from count
    (into_tag,) = jp.inputs_of("tag")
    assert jp.partitions_of(into_tag) == 32
    assert isinstance(jp.partitioner_of(into_tag, 1), Sticky)
    assert owned_partitions(jp, sub("tag", 1)).of_topic(CH) == tuple(range(16, 32))
    assert jp.topics({}, {})[0].partitions == 32
    # Stateful without key groups, or a forward edge: no slots, one partition per subtask.
    pipe = Pipeline("f")
    src = pipe.generate("src", make=lambda i: {"key": "k", "n": i}, schema=SCHEMA, count=1,
                        parallelism=2)  # fmt: skip
    src.map("m", lambda r: r, schema=SCHEMA, parallelism=2).write_jsonl("o", "/x", parallelism=2)
    forward = pipe.plan("j")
    assert all(op.max_parallelism is None for op in forward.operators)


def test_a_job_recorded_with_slots_keeps_their_count() -> None:
    kept = keep_recorded_max_parallelism(plan(), PlanDoc.of(plan())).operator("tag")
    assert (kept.max_parallelism, kept.slotted) == (32, True)


# -- rescaling ----------------------------------------------------------------------------


def ckpt(jp: JobPlan, i: int, cid: int) -> Checkpoint:
    """tag[i]'s checkpoint under ``jp``: position 100 + slot on each owned slot, writer 1
    ended on odd slots, a channel watermark 10 * slot."""
    own = owned_partitions(jp, sub("tag", i))
    inputs = {tp: Offset(100 + tp.partition) for tp in own.topic_partitions(CH)}
    return checkpoint(
        sub("tag", i),
        cid,
        jp.fingerprint,
        inputs=inputs,
        owned=own,
        channel_watermarks={tp: {0: 10 * tp.partition} for tp in inputs},
        ended={tp: frozenset({1}) for tp in inputs if tp.partition % 2},
        watermark=50 + i,
    )


@pytest.mark.parametrize(("before", "after"), [(2, 3), (3, 1), (1, 2), (2, 32)])
def test_a_slotted_operator_rescales_up_and_down_taking_each_slot_from_its_owner(
    before: int, after: int
) -> None:
    old, new = plan(tag=before), plan(tag=after)
    handed = {j: ckpt(old, j, 5 + j) for j in range(before)}
    check_rescalable(new, "tag", before)
    check_live(new, "tag", before, "interval")
    seen: list[int] = []
    for i in range(after):
        c = handover_checkpoint(new, sub("tag", i), before, handed, floor=9)
        slots = list(key_group_range(i, after, 32))
        assert c.meta.owned.of_topic(CH) == tuple(slots)
        assert c.reader.inputs == {TopicPartition(CH, s): Offset(100 + s) for s in slots}
        assert c.reader.ended == {TopicPartition(CH, s): {1} for s in slots if s % 2}
        assert c.reader.channel_watermarks == {TopicPartition(CH, s): {0: 10 * s} for s in slots}
        owners = {owner_of(s, before, 32) for s in slots}
        assert c.operator.watermark == 50 + min(owners)
        assert c.checkpoint_id == 9
        seen += slots
    assert seen == list(range(32))  # every slot read by exactly one new subtask


def test_what_stays_refused_says_why() -> None:
    # Without slots (one partition per subtask): live needs a restart; growing adds
    # partitions (shrinking: tests/unit/test_rescale_plan.py).
    with pytest.raises(RescaleError, match=r"\(rebalance\) has one partition per subtask"):
        check_live(without_slots(plan(tag=3)), "tag", 2, "interval")
    check_rescalable(without_slots(plan(tag=3)), "tag", 2)  # growing adds partitions, as before
    # At most one subtask per slot.
    with pytest.raises(RescaleError, match=r"between 1 and 32 \(its slot count"):
        with_parallelism(plan(), {"tag": 33})
    # Broadcast and forward inputs, stateful without key groups: as before.
    pipe = Pipeline("b")
    src = pipe.generate("src", make=lambda i: {"key": "k", "n": i}, schema=SCHEMA, count=1)
    src.broadcast().map("m", lambda r: r, schema=SCHEMA, parallelism=2).write_jsonl(
        "o", "/x", parallelism=1
    )
    with pytest.raises(RescaleError, match="broadcast"):
        check_live(with_parallelism(pipe.plan("j"), {"m": 3}), "m", 2, "interval")
    pipe = Pipeline("f")
    src = pipe.generate("src", make=lambda i: {"key": "k", "n": i}, schema=SCHEMA, count=1,
                        parallelism=2)  # fmt: skip
    src.forward().map("m", lambda r: r, schema=SCHEMA, parallelism=2).write_jsonl("o", "/x")
    with pytest.raises(RescaleError, match="forward"):
        with_parallelism(pipe.plan("j"), {"m": 3})
    jp = plan(tag=3)
    ops = tuple(
        dataclasses.replace(o, stateful=True, max_parallelism=None, slotted=False)
        if o.name == "tag"
        else o
        for o in jp.operators
    )
    with pytest.raises(RescaleError, match="not divided into key groups"):
        check_rescalable(dataclasses.replace(jp, operators=ops), "tag", 2)
