"""Checkpoint format version 2: typed source and sink positions; other versions refused."""

from __future__ import annotations

import json

import pytest

from spillway.channels.errors import CheckpointFormatError, PositionRegressionError
from spillway.channels.ids import (
    CheckpointId,
    JobId,
    Offset,
    OperatorName,
    SubtaskId,
    TopicPartition,
)
from spillway.offsets.checkpoint import READS, VERSION, Checkpoint, check_forward

SUB = SubtaskId(JobId("j"), OperatorName("gen"), 0)
TP = TopicPartition("spillway.j.ch.a.gen", 0)


def test_positions_of_an_operator_without_source_or_sink_are_none() -> None:
    c = Checkpoint(SUB, CheckpointId(0), "fp", sink_position={"files": []})
    back = Checkpoint.from_bytes(c.to_bytes())
    assert back.source_position is None
    assert back.sink_position == {"files": []}
    assert back.source == {}


@pytest.mark.parametrize("version", [0, 1, 3, 99])
def test_other_versions_are_refused_naming_the_versions_read(version: int) -> None:
    doc = json.loads(Checkpoint(SUB, CheckpointId(0), "fp").to_bytes())
    doc["v"] = version
    with pytest.raises(CheckpointFormatError) as e:
        Checkpoint.from_bytes(json.dumps(doc).encode(), where="at t[0] offset 3")
    assert str(e.value).startswith(
        f"checkpoint of j/gen[0] at t[0] offset 3 has format version {version}; "
        "this version of Spillway reads format 2 only."
    )
    assert e.value.subtasks == {SUB}
    assert READS == (VERSION,) == (2,)


@pytest.mark.parametrize("field", ["owned", "changelogs", "source_position"])
def test_a_version_2_record_without_a_field_of_the_format_is_corrupt(field: str) -> None:
    doc = json.loads(Checkpoint(SUB, CheckpointId(0), "fp").to_bytes())
    del doc[field]
    with pytest.raises(CheckpointFormatError, match=f"corrupt checkpoint record at t.*{field}"):
        Checkpoint.from_bytes(json.dumps(doc).encode(), where="at t[0] offset 3")


def test_positions_only_move_forward() -> None:
    later = Checkpoint(SUB, CheckpointId(5), "fp", inputs={TP: Offset(7)})
    check_forward({TP: Offset(7)}, later)  # equal: a checkpoint inside the same message
    check_forward({}, later)  # a partition not seen before
    with pytest.raises(PositionRegressionError, match=r"j/gen\[0\].*a\.gen\[0\] back from 8 to 7"):
        check_forward({TP: Offset(8)}, later)


def test_the_handed_over_mark_round_trips_and_older_records_have_none() -> None:
    marked = Checkpoint(SUB, CheckpointId(4), "fp", handed_over=True)
    assert Checkpoint.from_bytes(marked.to_bytes()).handed_over
    doc = json.loads(marked.to_bytes())
    del doc["handed_over"]  # a version-2 record written before the mark existed
    assert not Checkpoint.from_bytes(json.dumps(doc).encode()).handed_over
