"""Checkpoint records and offset bookkeeping. No broker."""

from __future__ import annotations

import json

import pytest

from spillway.channels.errors import CheckpointFormatError, RetentionGapError, TopologyMismatchError
from spillway.channels.ids import (
    CheckpointId,
    JobId,
    Offset,
    OperatorName,
    SubtaskId,
    TopicPartition,
)
from spillway.offsets.checkpoint import Checkpoint, fingerprint
from spillway.offsets.store import check_retention
from spillway.offsets.tracker import CheckpointSequence, OffsetRegressionError, PositionTracker
from tests.unit.checkpointfakes import checkpoint

SUB = SubtaskId(JobId("j"), OperatorName("count"), 1)
TP = TopicPartition("spillway.j.ch.a.count", 1)


def full_checkpoint() -> Checkpoint:
    return checkpoint(
        SUB,
        7,
        fingerprint({"ops": ["a", "count"]}),
        inputs={TP: Offset(42)},
        changelogs={TopicPartition("spillway.j.changelog.count", 1): Offset(9)},
        outputs={"spillway.j.ch.count.sink": (3, 4)},
        ended={TP: frozenset({0, 2})},
        channel_watermarks={TP: {1: 1000}},
        watermark=900,
        source={"emitted": 5},
        finished=True,
        wall_time=1.5,
        attempt=2,
    )


def test_checkpoint_round_trips() -> None:
    c = full_checkpoint()
    assert Checkpoint.from_bytes(c.to_bytes()) == c


def test_empty_checkpoint_round_trips() -> None:
    c = checkpoint(SUB, 0)
    assert Checkpoint.from_bytes(c.to_bytes()) == c


def test_newer_version_is_rejected_clearly() -> None:
    doc = json.loads(full_checkpoint().to_bytes())
    doc["v"] = 4  # a format newer than this code
    with pytest.raises(CheckpointFormatError, match="format version 4"):
        Checkpoint.from_bytes(json.dumps(doc).encode())


@pytest.mark.parametrize("data", [b"", b"{", b"[]", b'{"v": 1}'])
def test_corrupt_records_are_rejected(data: bytes) -> None:
    with pytest.raises(CheckpointFormatError):
        Checkpoint.from_bytes(data, where="at t[0] offset 3")


def test_changed_topology_is_refused() -> None:
    c = full_checkpoint()
    c.check_topology(fingerprint({"ops": ["a", "count"]}))
    with pytest.raises(TopologyMismatchError, match="pipeline changed") as e:
        c.check_topology(fingerprint({"ops": ["a", "count", "extra"]}))
    assert e.value.subtasks == {SUB}


def test_fingerprint_ignores_key_order() -> None:
    assert fingerprint({"a": 1, "b": [1, 2]}) == fingerprint({"b": [1, 2], "a": 1})


def test_positions_only_move_forward() -> None:
    t = PositionTracker([TP], {TP: Offset(5)})
    t.advance(TP, 5)
    t.advance(TP, 9)
    assert t.snapshot() == {TP: 9}
    with pytest.raises(OffsetRegressionError, match="back from 9 to 8"):
        t.advance(TP, 8)
    with pytest.raises(OffsetRegressionError, match="sentinel"):
        t.advance(TP, -1001)
    assert t.replay_debt({TP: 20}) == {TP: 11}


def test_checkpoint_ids_grow_after_restore() -> None:
    seq = CheckpointSequence(CheckpointId(4))
    assert [seq.next(), seq.next()] == [5, 6]
    assert CheckpointSequence(None).next() == 0


def test_retention_gap_names_the_numbers() -> None:
    check_retention(SUB, {TP: Offset(10)}, {TP: (10, 50)})
    with pytest.raises(RetentionGapError, match=r"needs offset 10 but the log starts at 25 \(15"):
        check_retention(SUB, {TP: Offset(10)}, {TP: (25, 50)})
