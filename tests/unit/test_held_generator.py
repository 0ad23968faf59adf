"""The held sources of the integration tests (tests/integration/gates.py): a generator emits
at full speed up to a closed gate, reads nothing while held, and runs on once the gate is
opened, resuming from a checkpointed position like any generator; a bounded Kafka source
holds once it has read the gate's index of its offsets. And the test's side: each gate
opened once its event came, every gate once one did not."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from spillway.channels.ids import JobId, OperatorName, SubtaskId
from spillway.spark_jobs.api.pipeline import Pipeline, Stream
from spillway.spark_jobs.connectors.batchsources import BatchKafkaSource
from spillway.spark_jobs.connectors.sources import GeneratorSource, KafkaTopicSource
from tests.integration.gates import (
    GATES_ENV,
    Gates,
    HeldBatchKafkaSource,
    HeldGenerator,
    HeldKafkaSource,
    held_generate,
    hold,
    parse_gates,
)

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


def kafka_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batches: bool) -> object:
    """The source the plan of a pipeline reading a bounded topic builds, after hold()."""
    p = Pipeline("p")
    p.read_kafka("src", "in", schema=EVENT, parallelism=2, bounded=True, batches=batches)
    hold(p, "src")
    Stream(p, "src").write_jsonl("out", str(tmp_path))
    make_source = p.plan("j").operators[0].make_source
    assert make_source is not None
    return make_source()


@pytest.mark.parametrize(
    ("batches", "held_type", "plain_type"),
    [(False, HeldKafkaSource, KafkaTopicSource), (True, HeldBatchKafkaSource, BatchKafkaSource)],
)
def test_hold_swaps_a_bounded_kafka_source_only_when_gates_are_set(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    batches: bool,
    held_type: type,
    plain_type: type,
) -> None:
    monkeypatch.delenv(GATES_ENV, raising=False)
    assert type(kafka_source(tmp_path, monkeypatch, batches)) is plain_type
    held(tmp_path, monkeypatch, [5])
    src = kafka_source(tmp_path, monkeypatch, batches)
    assert type(src) is held_type
    assert isinstance(src, plain_type)
    assert src.topic == "in"


def test_a_held_kafka_source_reads_until_it_has_read_the_gate_index_of_its_offsets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gates = held(tmp_path, monkeypatch, [5, 8])
    src = HeldKafkaSource(parse_gates(os.environ[GATES_ENV]), "in", 2, True)
    reads: list[int] = []

    # What the consumer would do, without a broker: each read takes the next 3 offsets of
    # the subtask's one partition (0, log start 0, end 10).
    def read(self: KafkaTopicSource, max_records: int) -> list[dict[str, int]]:
        reads.append(self._next[0])
        self._next[0] = min(self._next[0] + 3, 10)
        return [{"i": reads[-1]}]

    monkeypatch.setattr(KafkaTopicSource, "read", read)
    src._next, src._low, src._ends = {0: 0}, {0: 0}, {0: 10}
    assert src.read(100) == [{"i": 0}]
    assert src.read(100) == [{"i": 3}]  # 3 read, below 5: reads on (and passes 5)
    src._rejected = [object()]  # type: ignore[list-item]  # what the last read rejected
    assert src.read(100) == []  # 6 read: held
    assert src.rejected() == []  # a held read rejects nothing (else dead-lettered twice)
    gates.open(0)
    assert src.read(100) == [{"i": 6}]
    assert src.read(100) == []  # 9 read: at the second gate
    gates.open(1)
    assert src.read(100) == [{"i": 9}]
    assert src.progress() == (10, 10)
    gates_at_end = held(tmp_path / "end", monkeypatch, [10])
    done = HeldKafkaSource(parse_gates(os.environ[GATES_ENV]), "in", 2, True)
    done._next, done._low, done._ends = {0: 10}, {0: 0}, {0: 10}
    assert done.read(100) == [{"i": 10}]  # read to its end: never held, so it can finish
    assert not gates_at_end.paths[0].exists()


def test_start_opens_each_gate_once_its_event_came_and_every_gate_when_one_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gates = held(tmp_path, monkeypatch, [1, 2, 3])
    first, never = threading.Event(), threading.Event()
    gates.start(("first", first.is_set), ("never", never.is_set), ("third", lambda: True),
                timeout_s=0.5)  # fmt: skip
    time.sleep(0.4)
    assert [p.exists() for p in gates.paths] == [False, False, False]
    first.set()
    deadline = time.monotonic() + 5
    while not gates.paths[2].exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert gates.missed == ["not within 0.5 s: never"]
    assert [p.exists() for p in gates.paths] == [True, True, True]


def test_start_keeps_what_a_condition_raised_and_opens_every_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gates = held(tmp_path, monkeypatch, [1, 2])

    def broken() -> bool:
        raise RuntimeError("no broker")

    gates.on_running(("ok", lambda: True), ("broken", broken))(object())
    deadline = time.monotonic() + 5
    while not gates.missed:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.1)  # the thread opens every gate right after keeping the error
    assert gates.missed == ["RuntimeError: no broker"]
    assert [p.exists() for p in gates.paths] == [True, True]
