"""Checkpoint format version 3: one record grouped by part; other versions refused."""

from __future__ import annotations

import json
from typing import Any

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
from spillway.channels.routing.keygroups import Ownership
from spillway.offsets.checkpoint import (
    VERSION,
    Checkpoint,
    CheckpointMeta,
    OperatorProgress,
    ReaderPositions,
    StatePositions,
    WriterCounts,
    check_forward,
)

SUB = SubtaskId(JobId("j"), OperatorName("gen"), 0)
TP = TopicPartition("spillway.j.ch.a.gen", 0)
TP2 = TopicPartition("spillway.j.ch.a.gen", 3)
LOG = TopicPartition("spillway.j.state.gen", 1)

# Every field set to a value other than its default, so a field lost on the way fails.
FULL = Checkpoint(
    subtask=SUB,
    checkpoint_id=CheckpointId(12),
    meta=CheckpointMeta(
        topology="fp",
        attempt=2,
        wall_time=1234.5,
        global_id=7,
        finished=True,
        handed_over=True,
        rewound_from=5,
        owned=Ownership({TP.topic: (0, 3), LOG.topic: (1,)}),
    ),
    reader=ReaderPositions(
        inputs={TP: Offset(40), TP2: Offset(9)},
        skip={TP: {1: 44}},
        partial={TP2: (9, 3)},
        ended={TP: frozenset({0, 1})},
        channel_watermarks={TP: {0: 100, 1: 90}},
        widths={TP2: 4},
        discard={TP: {0: ((50, 60), (70, 80))}},
    ),
    writers=WriterCounts(outputs={"out": (3, 0, 5)}, output_marks={"out": (4, 0, 6)}),
    state=StatePositions(changelogs={LOG: Offset(17)}, rewrite_state=True),
    operator=OperatorProgress(watermark=88, set_aside={"late": 2}),
    source={"next": 41, "files": ["a", "b"]},
    sink={"files": ["part-0"]},
)

# A record of format version 2 as that version wrote it (flat fields).
V2 = {
    "v": 2, "job": "j", "operator": "gen", "index": 0, "id": 3, "topology": "fp",
    "inputs": [[TP.topic, 0, 5]], "outputs": {}, "ended": [], "channel_watermarks": [],
    "watermark": None, "source_position": None, "sink_position": None, "finished": False,
    "wall_time": 1.0, "attempt": 0, "global": None, "skip": [], "output_marks": {},
    "discard": [], "rewound_from": None, "partial": [], "rewrite_state": False,
    "set_aside": {}, "owned": {}, "changelogs": [], "widths": [], "handed_over": False,
}  # fmt: skip


def test_version_3_round_trips_every_field() -> None:
    assert VERSION == 3
    assert Checkpoint.from_bytes(FULL.to_bytes()) == FULL


def test_the_record_is_grouped_by_part_on_the_wire() -> None:
    doc = json.loads(FULL.to_bytes())
    assert sorted(doc) == [
        "id", "meta", "operator", "reader", "sink", "source", "state", "subtask", "v", "writers",
    ]  # fmt: skip
    assert doc["v"] == 3
    assert doc["subtask"] == {"job": "j", "operator": "gen", "index": 0}
    assert doc["reader"]["inputs"] == [[TP.topic, 0, 40], [TP.topic, 3, 9]]
    assert doc["writers"] == {"outputs": {"out": [3, 0, 5]}, "output_marks": {"out": [4, 0, 6]}}
    assert doc["state"] == {"changelogs": [[LOG.topic, 1, 17]], "rewrite_state": True}
    assert doc["operator"] == {"watermark": 88, "set_aside": {"late": 2}}
    assert doc["meta"]["global"] == 7


def test_a_minimal_record_round_trips_with_defaults() -> None:
    c = Checkpoint(SUB, CheckpointId(0), CheckpointMeta("fp"), sink={"files": []})
    back = Checkpoint.from_bytes(c.to_bytes())
    assert back == c
    assert back.source is None
    assert back.sink == {"files": []}
    assert back.reader == ReaderPositions()
    assert back.meta.owned == Ownership()


def test_a_version_2_record_is_refused_saying_what_to_do() -> None:
    with pytest.raises(CheckpointFormatError) as e:
        Checkpoint.from_bytes(json.dumps(V2).encode(), where="at t[0] offset 3")
    assert str(e.value) == (
        "checkpoint of j/gen[0] at t[0] offset 3 has format version 2; this version of "
        "Spillway reads format 3 only. Older formats are not converted: reset the job with "
        "`spillway reset --job j` (its state and positions are lost), or run it under a new "
        "--job-id"
    )
    assert e.value.subtasks == {SUB}


@pytest.mark.parametrize("version", [0, 1, 4, 99, "3", None])
def test_unknown_versions_are_refused_naming_the_version_found(version: Any) -> None:
    doc = json.loads(FULL.to_bytes())
    doc["v"] = version
    with pytest.raises(CheckpointFormatError) as e:
        Checkpoint.from_bytes(json.dumps(doc).encode())
    assert str(e.value).startswith(
        f"checkpoint of j/gen[0] has format version {version!r}; this version of Spillway "
        "reads format 3 only. Older formats are not converted: reset the job with "
        "`spillway reset --job j`"
    )
    assert e.value.subtasks == {SUB}


def test_a_record_naming_no_subtask_is_refused_all_the_same() -> None:
    with pytest.raises(CheckpointFormatError) as e:
        Checkpoint.from_bytes(b'{"v": 1}')
    assert str(e.value).startswith(
        "checkpoint of an unknown subtask has format version 1; this version of Spillway "
        "reads format 3 only."
    )
    assert "`spillway reset --job JOB`" in str(e.value)
    assert e.value.subtasks == frozenset()


@pytest.mark.parametrize(
    ("part", "field"),
    [("meta", "owned"), ("state", "changelogs"), ("reader", "inputs"), (None, "source")],
)
def test_a_version_3_record_without_a_field_is_corrupt(part: str | None, field: str) -> None:
    doc = json.loads(FULL.to_bytes())
    del (doc[part] if part else doc)[field]
    with pytest.raises(CheckpointFormatError, match=f"corrupt checkpoint record at t.*{field}"):
        Checkpoint.from_bytes(json.dumps(doc).encode(), where="at t[0] offset 3")


@pytest.mark.parametrize("data", [b"not json", b"[]", b"{}"])
def test_garbage_is_a_corrupt_record(data: bytes) -> None:
    with pytest.raises(CheckpointFormatError, match="corrupt checkpoint record at x"):
        Checkpoint.from_bytes(data, where="at x")


def test_positions_only_move_forward() -> None:
    later = Checkpoint(
        SUB, CheckpointId(5), CheckpointMeta("fp"), reader=ReaderPositions(inputs={TP: Offset(7)})
    )
    check_forward({TP: Offset(7)}, later)  # equal: a checkpoint inside the same message
    check_forward({}, later)  # a partition not seen before
    with pytest.raises(PositionRegressionError, match=r"j/gen\[0\].*a\.gen\[0\] back from 8 to 7"):
        check_forward({TP: Offset(8)}, later)
