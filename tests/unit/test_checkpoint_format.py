"""Checkpoint format version 2: typed source and sink positions, version 1 read on load."""

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
from spillway.offsets.checkpoint import VERSION, Checkpoint, check_forward

SUB = SubtaskId(JobId("j"), OperatorName("gen"), 0)
TP = TopicPartition("spillway.j.ch.a.gen", 0)

# Written by the version-1 code (offsets/checkpoint.py at 0d30576): a source chained to a
# sink kept both positions side by side in one "source" field.
V1_CHAIN = (
    b'{"attempt":1,"changelog":null,"channel_watermarks":[],"discard":[],"ended":[],'
    b'"finished":false,"global":3,"id":12,"index":0,"inputs":[],"job":"j","operator":"gen",'
    b'"output_marks":{},"outputs":{},"partial":[],"rewound_from":null,"rewrite_state":false,'
    b'"set_aside":{},"skip":[],"source":{"sink":{"staged":["part-12"]},"source":{"next":500}},'
    b'"topology":"fp","v":1,"wall_time":1.5,"watermark":null}'
)
V1_SOURCE = V1_CHAIN.replace(
    b'"source":{"sink":{"staged":["part-12"]},"source":{"next":500}}', b'"source":{"next":500}'
)


def test_a_version_1_chain_record_is_split_into_source_and_sink_positions() -> None:
    c = Checkpoint.from_bytes(V1_CHAIN)
    assert (c.source_position, c.sink_position) == ({"next": 500}, {"staged": ["part-12"]})
    assert (c.checkpoint_id, c.global_id, c.attempt) == (CheckpointId(12), 3, 1)
    assert c.source == {"next": 500}


def test_a_version_1_record_with_one_position_gives_it_to_either_part() -> None:
    c = Checkpoint.from_bytes(V1_SOURCE)
    # Version 1 did not say whose it was; the operator's own part reads it (as before).
    assert c.source_position == {"next": 500}
    assert c.sink_position == {"next": 500}


def test_a_converted_record_is_written_back_as_version_2() -> None:
    c = Checkpoint.from_bytes(V1_CHAIN)
    doc = json.loads(c.to_bytes())
    assert doc["v"] == VERSION == 2
    assert "source" not in doc
    assert Checkpoint.from_bytes(c.to_bytes()) == c


def test_positions_of_an_operator_without_source_or_sink_are_none() -> None:
    c = Checkpoint(SUB, CheckpointId(0), "fp", sink_position={"files": []})
    back = Checkpoint.from_bytes(c.to_bytes())
    assert back.source_position is None
    assert back.sink_position == {"files": []}
    assert back.source == {}


@pytest.mark.parametrize("version", [0, 3, 99])
def test_unknown_versions_are_refused_with_the_versions_read(version: int) -> None:
    doc = json.loads(Checkpoint(SUB, CheckpointId(0), "fp").to_bytes())
    doc["v"] = version
    with pytest.raises(
        CheckpointFormatError, match=f"format version {version}.*reads versions 1, 2"
    ):
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
    assert not Checkpoint.from_bytes(V1_SOURCE).handed_over
