"""Ownership bookkeeping without a broker: recovery/restore/ownership.py, the checkpoint's new
fields, keyed changelog state and the recorded plan."""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import pytest

from spillway.channels.errors import ConfigError, PipelineDefinitionError, SpillwayError
from spillway.channels.ids import (
    JobId,
    Offset,
    OperatorName,
    SubtaskId,
    TopicPartition,
)
from spillway.channels.routing.keygroups import Ownership, key_group
from spillway.offsets.checkpoint import Checkpoint
from spillway.recovery.job.plan import JobPlan
from spillway.recovery.job.plandoc import PlanDoc
from spillway.recovery.restore.ownership import (
    adopted_max_parallelism,
    keep_recorded_max_parallelism,
    owned_partitions,
    owned_state,
    with_max_parallelism,
)
from spillway.spark_jobs.api.pipeline import Pipeline
from tests.unit.checkpointfakes import checkpoint

EVENT = {
    "type": "record",
    "name": "E",
    "fields": [{"name": "key", "type": "string"}, {"name": "n", "type": "long"}],
}


def plan(m: int | None = 16, p: int = 3) -> JobPlan:
    """src(2) -[keyed, m groups]-> count(p) -> out(2)."""
    pipe = Pipeline("own")
    src = pipe.generate("src", make=lambda i: {"key": f"k{i}", "n": i}, schema=EVENT, count=9,
                        parallelism=2)  # fmt: skip
    src.key_by(lambda r: r["key"], max_parallelism=m).aggregate(
        "count", init=lambda: 0, add=lambda n, _r: n + 1,
        result=lambda k, n: {"key": k, "n": n}, schema=EVENT, parallelism=p,
    ).write_jsonl("out", "/x", parallelism=2)  # fmt: skip
    return pipe.plan("j")


def sub(op: str, i: int) -> SubtaskId:
    return SubtaskId(JobId("j"), OperatorName(op), i)


def test_a_keyed_subtask_owns_its_range_of_channel_and_changelog_partitions() -> None:
    jp = plan()
    ranges = [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10], [11, 12, 13, 14, 15]]
    for i, r in enumerate(ranges):
        assert owned_partitions(jp, sub("count", i)).to_json() == {
            "spillway.j.ch.src.count": r,
            "spillway.j.changelog.count": r,
        }
    # A round-robin input into a stateless sink: slots, owned in ranges as key groups.
    assert owned_partitions(jp, sub("out", 1)).to_json() == {
        "spillway.j.ch.count.out": list(range(16, 32))
    }
    assert owned_partitions(jp, sub("src", 0)).to_json() == {}


def test_keyed_state_logs_each_key_to_its_key_groups_partition() -> None:
    jp = plan()
    s = sub("count", 1)
    state = owned_state(jp, s, owned_partitions(jp, s))
    assert state is not None
    assert [tp.partition for tp in state.tps] == [6, 7, 8, 9, 10]
    mine = [k for k in (f"k{i}" for i in range(200)) if 6 <= key_group(k, 16) <= 10]
    for k in mine[:20]:
        state.put(k, 1)
    state.delete(mine[20])
    sent: list[tuple[int, bytes]] = []

    class Producer:
        def produce(self, topic: str, partition: int, key: bytes, value: Any) -> None:
            sent.append((partition, key))

    assert state.flush_to(cast(Any, Producer())) == 21
    assert sent == [(key_group(k, 16), f'"{k}"'.encode()) for k in mine[:21]]
    other = next(k for k in (f"k{i}" for i in range(200)) if key_group(k, 16) < 6)
    state.put(other, 1)  # a key whose record should have gone to count[0]
    not_mine = r"partition \d+ of spillway.j.changelog.count, which this subtask does not own"
    with pytest.raises(SpillwayError, match=not_mine):
        state.flush_to(cast(Any, Producer()))


def test_checkpoint_carries_ownership_and_changelog_positions() -> None:
    own = Ownership.of({"ch": [6, 7], "cl": [6, 7]})
    c = checkpoint(
        sub("count", 1),
        4,
        "f",
        owned=own,
        changelogs={TopicPartition("cl", 6): Offset(3), TopicPartition("cl", 7): Offset(9)},
    )
    back = Checkpoint.from_bytes(c.to_bytes())
    assert back.meta.owned == own
    assert back.changelog_positions() == {
        TopicPartition("cl", 6): Offset(3),
        TopicPartition("cl", 7): Offset(9),
    }


def test_a_restart_keeps_the_recorded_key_group_count() -> None:
    recorded = PlanDoc.of(plan(None))  # defaulted, then recorded by the driver
    assert recorded.operators[1].max_parallelism == plan(None).operator("count").max_parallelism
    assert PlanDoc.from_json(recorded.to_json(), "t") == recorded
    # Recorded 16; the pipeline leaves it to the (maybe changed) default: 16 is kept.
    kept = keep_recorded_max_parallelism(plan(None), PlanDoc.of(plan(16)))
    assert kept.operator("count").max_parallelism == 16
    assert kept.fingerprint == plan(16).fingerprint
    # Set explicitly to something else: refused, naming both values and the fix.
    with pytest.raises(ConfigError, match=r"max_parallelism 8 differs from 16.*max_parallelism=16"):
        keep_recorded_max_parallelism(plan(8), PlanDoc.of(plan(16)))
    # What the driver hands its tasks, and how they rebuild the plan from it.
    counts = adopted_max_parallelism(kept)
    assert counts == {"count": 16, "out": 32}  # out: slots behind its round-robin input
    assert with_max_parallelism(plan(None), counts).fingerprint == kept.fingerprint


def test_plan_doc_gives_status_the_owned_input_partitions() -> None:
    doc = PlanDoc.of(plan())
    count = next(op for op in doc.operators if op.name == "count")
    assert [tp.partition for tp in count.owned_inputs(2)] == [11, 12, 13, 14, 15]
    out = next(op for op in doc.operators if op.name == "out")
    # A round-robin input into a stateless sink: slots, owned in ranges as key groups.
    assert out.owned_inputs(1) == [
        TopicPartition("spillway.j.ch.count.out", s) for s in range(16, 32)
    ]


class _Msg:
    def __init__(self, p: int, off: int, key: str, value: bytes | None) -> None:
        self.p, self.off, self.k, self.v = p, off, key, value

    def partition(self) -> int:
        return self.p

    def offset(self) -> int:
        return self.off

    def key(self) -> bytes:
        return self.k.encode()

    def value(self) -> bytes | None:
        return self.v


class _Changelogs:
    """Changelog partitions as lists; consume() interleaves them, 3 messages at a time."""

    def __init__(self, logs: dict[int, list[tuple[str, bytes | None]]]) -> None:
        self.logs = {
            p: [_Msg(p, i, k, v) for i, (k, v) in enumerate(log)] for p, log in logs.items()
        }
        self.pos: dict[int, int] = {}

    def watermarks(self, tp: TopicPartition) -> tuple[int, int]:
        return 0, len(self.logs[tp.partition])

    def assign(self, starts: dict[TopicPartition, int]) -> None:
        self.pos = {tp.partition: int(o) for tp, o in starts.items()}

    def consume(self, n: int, timeout: float) -> list[_Msg]:
        out: list[_Msg] = []
        while len(out) < 3 and any(self.pos[p] < len(self.logs[p]) for p in self.pos):
            for p in sorted(self.pos):
                if self.pos[p] < len(self.logs[p]) and len(out) < 3:
                    out.append(self.logs[p][self.pos[p]])
                    self.pos[p] += 1
        return out

    def position(self, tp: TopicPartition) -> int:
        return self.pos[tp.partition]


def test_keyed_state_restores_each_owned_partition_up_to_its_own_offset() -> None:
    from spillway.recovery.restore.state import ChangelogState

    logs: dict[int, list[tuple[str, bytes | None]]] = {
        6: [('"a"', b"1"), ('"b"', b"2"), ('"a"', None), ('"c"', b"3")],
        7: [('"x"', b"7"), ('"y"', b"8"), ('"x"', b"9")],
    }
    state = ChangelogState.keyed("cl", [6, 7], lambda k: 6)
    upto = {TopicPartition("cl", 6): Offset(3), TopicPartition("cl", 7): Offset(2)}
    n = state.restore(cast(Any, _Changelogs(logs)), upto)
    assert n == 5  # 3 of partition 6, 2 of partition 7: "c" and the second "x" come later
    assert sorted(state.items()) == [("b", 2), ("x", 7), ("y", 8)]
    # A partition without a checkpointed offset restores nothing.
    again = ChangelogState.keyed("cl", [6, 7], lambda k: 6)
    assert again.restore(cast(Any, _Changelogs(logs)), {TopicPartition("cl", 7): Offset(3)}) == 3
    assert sorted(again.items()) == [("x", 9), ("y", 8)]


def test_state_without_key_groups_is_refused_not_given_one_partition_per_subtask() -> None:
    jp = plan()
    ops = tuple(
        dataclasses.replace(o, max_parallelism=None) if o.name == "count" else o
        for o in jp.operators
    )
    unkeyed = dataclasses.replace(jp, operators=ops)
    with pytest.raises(PipelineDefinitionError, match="'count' of job j keeps state but has no"):
        owned_state(unkeyed, sub("count", 0), owned_partitions(jp, sub("count", 0)))
    with pytest.raises(PipelineDefinitionError, match="a stateful operator follows key_by"):
        unkeyed.topics({}, {})
