"""The held generator of the integration tests (tests/integration/gates.py): it emits at full
speed up to a closed gate, reads nothing while held, and runs on once the gate is opened,
resuming from a checkpointed position like any generator."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from spillway.channels.ids import JobId, OperatorName, SubtaskId
from spillway.spark_jobs.api.pipeline import Pipeline
from spillway.spark_jobs.connectors.sources import GeneratorSource
from tests.integration.gates import GATES_ENV, Gates, HeldGenerator, held_generate, parse_gates

EVENT = {"type": "record", "name": "E", "fields": [{"name": "i", "type": "long"}]}


@dataclass
class FakeContext:
    subtask: SubtaskId
    restored_watermark: int | None = None


def ctx(index: int) -> FakeContext:
    return FakeContext(SubtaskId(JobId("j"), OperatorName("src"), index))


def make(i: int) -> dict[str, int]:
    return {"i": i}


def held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at: list[int]) -> Gates:
    return Gates(tmp_path / "gates", monkeypatch, at)


def test_parse_orders_gates_and_refuses_a_malformed_item(tmp_path: Path) -> None:
    gates = parse_gates(f"30={tmp_path}/b, 10={tmp_path}/a")
    assert [(g.at, g.path.name) for g in gates] == [(10, "a"), (30, "b")]
    assert parse_gates("") == ()
    with pytest.raises(ValueError, match="INDEX=PATH"):
        parse_gates("10")


def test_emits_below_the_gate_holds_then_runs_to_the_end_once_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gates = held(tmp_path, monkeypatch, [7, 12])
    src = HeldGenerator(parse_gates(os.environ[GATES_ENV]), make, 20, 2)
    src.open(ctx(1), {})
    assert src.read(100) == [{"i": 1}, {"i": 3}, {"i": 5}]  # 7 and above wait
    assert src.read(100) == []
    assert src.position()["next"] == 7
    gates.open(0)
    assert src.read(100) == [{"i": 7}, {"i": 9}, {"i": 11}]
    assert src.read(100) == []
    gates.open(1)
    assert src.read(2) == [{"i": 13}, {"i": 15}]
    assert src.read(100) == [{"i": 17}, {"i": 19}]
    assert src.read(100) is None


def test_a_restarted_generator_is_held_where_its_checkpoint_left_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gates = held(tmp_path, monkeypatch, [6])
    spec = parse_gates(os.environ[GATES_ENV])
    first = HeldGenerator(spec, make, 10, 2)
    first.open(ctx(0), {})
    assert first.read(2) == [{"i": 0}, {"i": 2}]
    position = first.position()
    again = HeldGenerator(spec, make, 10, 2)
    again.open(ctx(0), position)
    assert again.read(100) == [{"i": 4}]
    assert again.read(100) == []
    gates.open(0)
    assert again.read(100) == [{"i": 6}, {"i": 8}]
    assert again.read(100) is None


def test_held_generate_swaps_the_source_only_when_gates_are_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(GATES_ENV, raising=False)
    plain = Pipeline("p")
    held_generate(plain, "src", make=make, schema=EVENT, count=4).write_jsonl("out", str(tmp_path))
    make_plain = plain.plan("j").operators[0].make_source
    assert make_plain is not None
    assert type(make_plain()) is GeneratorSource

    held(tmp_path, monkeypatch, [2])
    p = Pipeline("p")
    held_generate(p, "src", make=make, schema=EVENT, count=4).write_jsonl("out", str(tmp_path))
    make_held = p.plan("j").operators[0].make_source
    assert make_held is not None
    src = make_held()
    assert isinstance(src, HeldGenerator)
    src.open(ctx(0), {})
    assert src.read(10) == [{"i": 0}, {"i": 1}]
    assert src.read(10) == []
