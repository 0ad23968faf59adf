"""The restorer with a fake checkpoint store: what it returns, and what it refuses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import ConfigError, TopologyMismatchError
from spillway.channels.ids import (
    JobId,
    Offset,
    OperatorName,
    SubtaskId,
    TopicPartition,
)
from spillway.offsets.checkpoint import Checkpoint
from spillway.recovery.restore.restorer import Restorer
from tests.unit.checkpointfakes import checkpoint

SUB = SubtaskId(JobId("j"), OperatorName("count"), 0)
A, B = TopicPartition("spillway.j.ch.a.count", 0), TopicPartition("spillway.j.ch.b.count", 0)
PROGRESS = TopicPartition("spillway.j.progress.count", 0)


@dataclass
class FakeStore:
    kept: list[Checkpoint] = field(default_factory=list)
    settled: list[int] = field(default_factory=list)  # partitions waited on, in order

    def settle(self, index: int) -> None:
        self.settled.append(index)

    def history(self, index: int, n: int) -> list[Checkpoint]:
        return self.kept[-n:]

    def get(self, index: int, n: int) -> Checkpoint | None:
        return next((c for c in self.kept if c.checkpoint_id == n), None)

    def tail(self, tp: TopicPartition, n: int) -> list[Any]:
        return []  # no read mark


def ckpt(n: int, **kw: Any) -> Checkpoint:
    return checkpoint(SUB, n, "fp", **kw)


def restorer(kept: list[Checkpoint], stateful: bool = False) -> Restorer:
    store = cast(Any, FakeStore(kept))
    return Restorer(SUB, store, KafkaSettings("127.0.0.1:1"), PROGRESS, stateful)


def test_a_fresh_start_restores_nothing_and_reads_from_zero() -> None:
    r = restorer([]).load("fp")
    assert r.checkpoint is None
    assert r.mark is None
    assert r.global_taken is None
    assert not r.finished
    assert r.start([A, B]) == {A: Offset(0), B: Offset(0)}
    assert (r.resume(), r.output("t"), r.watermark, dict(r.set_aside)) == (
        {},
        (None, None),
        None,
        {},
    )
    assert (dict(r.source_position), dict(r.sink_position)) == ({}, {})


def test_the_latest_checkpoint_gives_positions_counts_and_the_newest_global_one() -> None:
    latest = ckpt(
        9,
        inputs={A: Offset(40)},
        partial={A: (40, 3)},
        outputs={"t": (1, 2)},
        output_marks={"t": (5, 6)},
        watermark=77,
        source={"next": 8},
        global_id=4,
    )
    r = restorer([ckpt(7, global_id=3), ckpt(8), latest]).load("fp")
    assert r.checkpoint == latest
    assert r.start([A, B]) == {A: Offset(40), B: Offset(0)}
    assert r.resume() == {(A, 40): 3}
    assert r.output("t") == ((1, 2), (5, 6))
    assert r.watermark == 77
    assert dict(r.source_position) == {"next": 8}
    assert r.global_taken == (4, 9)


def test_global_checkpoints_before_a_rewind_are_not_announced_again() -> None:
    kept = [ckpt(5, global_id=7), ckpt(6, rewound_from=2), ckpt(7)]
    assert restorer(kept).load("fp").global_taken is None


def test_a_checkpoint_of_another_topology_is_refused() -> None:
    with pytest.raises(TopologyMismatchError, match="the pipeline changed"):
        restorer([ckpt(1)]).load("other")


def test_rewinding_one_subtask_needs_consent_and_no_state() -> None:
    kept = [ckpt(1), ckpt(2), ckpt(3)]
    with pytest.raises(ConfigError, match="--allow-duplicates"):
        restorer(kept).load("fp", from_checkpoint=2)
    with pytest.raises(ConfigError, match="cannot rewind a stateful operator"):
        restorer(kept, stateful=True).load("fp", from_checkpoint=2, allow_rewind=True)
    r = restorer(kept).load("fp", from_checkpoint=2, allow_rewind=True)
    assert r.checkpoint == ckpt(2)
    with pytest.raises(ConfigError, match=r"no retained checkpoint 9; retained: \[1, 2, 3\]"):
        restorer(kept).load("fp", from_checkpoint=9)


def test_the_restorer_waits_for_undecided_transactions_before_choosing() -> None:
    store = FakeStore([ckpt(3)])
    r = Restorer(SUB, cast(Any, store), KafkaSettings("127.0.0.1:1"), PROGRESS, False)
    assert r.load("fp").checkpoint == ckpt(3)
    assert store.settled == [SUB.index]
