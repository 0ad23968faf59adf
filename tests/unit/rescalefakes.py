"""A job plan to rescale, its subtasks, and a restorer over a store of retained checkpoints
(no broker): test_rescale_plan and test_handover share them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, OperatorName, SubtaskId, TopicPartition
from spillway.offsets.checkpoint import Checkpoint
from spillway.recovery.job.plan import JobPlan
from spillway.recovery.restore.restorer import Restorer
from spillway.spark_jobs.api.pipeline import Pipeline

M = 8
EVENT = {
    "type": "record",
    "name": "E",
    "fields": [{"name": "key", "type": "string"}, {"name": "n", "type": "long"}],
}


def plan(count: int = 2, tag: int = 2) -> JobPlan:
    """src(2) -[keyed, 8 groups]-> count(count, stateful) -[rebalance]-> tag(tag) -> out."""
    pipe = Pipeline("rescale")
    src = pipe.generate("src", make=lambda i: {"key": f"k{i}", "n": i}, schema=EVENT, count=9,
                        parallelism=2)  # fmt: skip
    counted = src.key_by(lambda r: r["key"], max_parallelism=M).aggregate(
        "count", init=lambda: 0, add=lambda n, _r: n + 1,
        result=lambda k, n: {"key": k, "n": n}, schema=EVENT, parallelism=count,
    )  # fmt: skip
    counted.rebalance().map("tag", lambda r: r, schema=EVENT, parallelism=tag).write_jsonl(
        "out", "/x", parallelism=1
    )
    return pipe.plan("j")


def sub(op: str, i: int) -> SubtaskId:
    """Subtask ``op[i]`` of job ``j``."""
    return SubtaskId(JobId("j"), OperatorName(op), i)


@dataclass
class IndexedStore:
    """A checkpoint store fake: retained checkpoints per subtask index, oldest first."""

    kept: dict[int, list[Checkpoint]]
    settled: list[int] = field(default_factory=list)  # partitions waited on, in order

    def settle(self, index: int) -> None:
        self.settled.append(index)

    def history(self, index: int, n: int) -> list[Checkpoint]:
        return self.kept.get(index, [])[-n:]

    def get(self, index: int, n: int) -> Checkpoint | None:
        return next((c for c in self.kept.get(index, []) if c.checkpoint_id == n), None)

    def tail(self, tp: TopicPartition, n: int) -> list[Any]:
        return []  # no read mark


def restorer_of(s: SubtaskId, kept: dict[int, list[Checkpoint]]) -> Restorer:
    """A :class:`Restorer` of subtask ``s`` over the retained checkpoints ``kept`` (per
    subtask index, oldest first), with no broker behind it."""
    progress = TopicPartition("spillway.j.progress", s.index)
    store = cast(Any, IndexedStore(kept))
    return Restorer(s, store, KafkaSettings("127.0.0.1:1"), progress, True)
