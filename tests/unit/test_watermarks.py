"""Watermark strategies and their bookkeeping at the sources (no broker, no clock)."""

from __future__ import annotations

import datetime
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from spillway.channels.errors import PipelineDefinitionError, RecordError
from spillway.channels.ids import JobId, OperatorName, SubtaskId
from spillway.recovery.job.origins import FileLine
from spillway.spark_jobs.connectors.sources import FileSource, GeneratorSource
from spillway.spark_jobs.records.watermarks import Watermarks, WatermarkTracker, event_time
from tests.unit.kafkasourcefakes import SRC0, Broker, SourceMsg, ctx0, kafka_source

# -- the strategy ------------------------------------------------------------------------


def test_bounded_and_monotonic_strategies() -> None:
    assert Watermarks.bounded(5000) == Watermarks(5000, None)
    assert Watermarks.bounded(5000, idle_timeout_ms=30_000) == Watermarks(5000, 30_000)
    assert Watermarks.monotonic() == Watermarks(0, None)


@pytest.mark.parametrize(
    ("bound", "idle", "message"),
    [
        (-1, None, "max_out_of_orderness_ms must be >= 0 ms, got -1"),
        (
            1.5,
            None,
            "max_out_of_orderness_ms must be a datetime.timedelta or integer milliseconds, got 1.5",
        ),
        (
            True,
            None,
            "max_out_of_orderness_ms must be a datetime.timedelta or integer milliseconds, "
            "got True",
        ),
        (10, 0, "idle_timeout_ms must be >= 1 ms, got 0"),
        (
            10,
            "5s",
            "idle_timeout_ms must be a datetime.timedelta or integer milliseconds, got '5s'",
        ),
    ],
)
def test_strategy_rejects_bad_values(bound: Any, idle: Any, message: str) -> None:
    with pytest.raises(PipelineDefinitionError) as info:
        Watermarks.bounded(bound, idle)
    assert str(info.value) == f"Watermarks: {message}"
    with pytest.raises(PipelineDefinitionError):  # built directly: integers only, as before
        Watermarks(bound, idle)


def test_strategy_durations_may_be_timedeltas() -> None:
    seconds = datetime.timedelta(seconds=1)
    assert Watermarks.bounded(5 * seconds, 30 * seconds) == Watermarks(5_000, 30_000)
    assert Watermarks.monotonic(seconds) == Watermarks(0, 1_000)


# -- WatermarkTracker --------------------------------------------------------------------


def test_watermark_is_largest_event_time_minus_the_bound() -> None:
    t = WatermarkTracker(Watermarks.bounded(5), [0], now=0.0)
    assert t.current(0.0) is None  # nothing read yet
    t.observe(0, 10, 0.0)
    assert t.current(0.0) == 5
    t.observe(0, 8, 0.0)  # out of order, within the bound: the watermark stays
    assert t.current(0.0) == 5
    t.observe(0, 20, 0.0)
    assert t.current(0.0) == 15


def test_watermark_is_the_minimum_over_partitions_and_waits_for_each() -> None:
    t = WatermarkTracker(Watermarks.bounded(10), [0, 1, 2], now=0.0)
    t.observe(0, 100, 0.0)
    t.observe(2, 300, 0.0)
    assert t.current(0.0) is None  # partition 1 has not delivered: it could be far behind
    t.observe(1, 50, 0.0)
    assert t.current(0.0) == 40
    t.observe(1, 500, 0.0)
    assert t.current(0.0) == 90  # now partition 0 is the slowest


def test_watermark_never_goes_back() -> None:
    t = WatermarkTracker(Watermarks.bounded(0, idle_timeout_ms=1000), [0, 1], now=0.0)
    t.observe(0, 100, 0.0)
    t.observe(1, 200, 0.6)
    assert t.current(0.7) == 100
    assert t.current(1.2) == 200  # partition 0 idle since 1.0: left out
    t.observe(0, 50, 1.3)  # back, behind: the minimum would be 100 again
    assert t.current(1.3) == 200
    assert t.current(5.0) == 200  # both idle: held where it was
    assert t.idle(5.0) is True


def test_idle_partitions_stop_holding_the_watermark_back() -> None:
    t = WatermarkTracker(Watermarks.bounded(10, idle_timeout_ms=1000), [0, 1], now=0.0)
    t.observe(0, 100, 0.2)
    assert t.current(0.9) is None  # partition 1 never delivered, not idle yet
    assert t.current(1.0) == 90  # 1 s after the start partition 1 is idle: left out
    t.observe(0, 200, 1.1)
    assert t.current(1.5) == 190
    t.observe(1, 150, 1.6)  # back: counts again (and holds the watermark at 190)
    t.observe(0, 400, 1.7)
    assert t.current(1.8) == 190
    assert t.current(2.6) == 390  # partition 1 quiet since 1.6: idle again
    assert t.idle(2.6) is False
    assert t.idle(2.7) is True  # and partition 0 since 1.7: the whole subtask is idle


def test_without_idle_timeout_a_quiet_partition_holds_back_for_ever() -> None:
    t = WatermarkTracker(Watermarks.bounded(0), [0, 1], now=0.0)
    t.observe(0, 100, 0.0)
    assert t.current(1e9) is None
    assert t.idle(1e9) is False


def test_a_subtask_without_partitions_is_idle_at_once() -> None:
    t = WatermarkTracker(Watermarks.bounded(0), [], now=0.0)
    assert t.idle(0.0) is True
    assert t.current(0.0) is None


def test_position_restores_the_watermark_and_what_is_ahead_of_it() -> None:
    t = WatermarkTracker(Watermarks.bounded(10, idle_timeout_ms=1000), [0, 1], now=0.0)
    t.observe(0, 100, 0.0)
    t.observe(1, 300, 0.0)
    assert t.current(0.0) == 90
    position = json.loads(json.dumps(t.position()))  # positions travel as JSON
    assert position == {"watermark": 90, "event_time": {"1": 300}}
    again = WatermarkTracker(Watermarks.bounded(10, idle_timeout_ms=1000), [0, 1], now=50.0)
    again.restore(position)
    assert again.current(50.0) == 90
    again.observe(0, 400, 50.1)
    assert again.current(50.1) == 290  # partition 1's 300 was restored, not forgotten
    fresh = WatermarkTracker(Watermarks.bounded(10), [0, 1], now=0.0)
    fresh.restore({})
    assert fresh.current(0.0) is None


@pytest.mark.parametrize("seed", range(30))
def test_a_restored_tracker_emits_exactly_what_the_original_would(seed: int) -> None:
    """The position lists only partitions ahead of the watermark; that must lose nothing.

    (No idle timeout here: a restore restarts the idle clocks, on purpose.)
    """
    rng = random.Random(seed)
    parts = list(range(rng.randint(1, 4)))
    strategy = Watermarks.bounded(rng.randint(0, 50))
    steps = [(rng.choice(parts), rng.randint(0, 1000)) for _ in range(200)]
    cut = rng.randint(0, len(steps))
    original = WatermarkTracker(strategy, parts, 0.0)
    for p, ts in steps[:cut]:
        original.observe(p, ts, 0.0)
        original.current(0.0)
    restored = WatermarkTracker(strategy, parts, 0.0)
    restored.restore(json.loads(json.dumps(original.position())))
    emitted_original, emitted_restored = [original.current(0.0)], [restored.current(0.0)]
    for p, ts in steps[cut:]:
        original.observe(p, ts, 0.0)
        restored.observe(p, ts, 0.0)
        emitted_original.append(original.current(0.0))
        emitted_restored.append(restored.current(0.0))
    assert emitted_restored == emitted_original
    seen = [w for w in emitted_original if w is not None]
    assert seen == sorted(seen)  # it only moves forward


# -- timestamps at the sources -----------------------------------------------------------


def test_event_time_must_be_integer_milliseconds() -> None:
    assert event_time(lambda r: r["ts"], {"ts": 7}) == 7
    with pytest.raises(RecordError, match=r"returned '7' \(str\); it must return the event"):
        event_time(lambda r: r["ts"], {"ts": "7"})
    with pytest.raises(RecordError, match=r"returned True \(bool\)"):
        event_time(lambda r: r["ts"], {"ts": True})
    with pytest.raises(RecordError, match="the source's timestamp function failed: KeyError"):
        event_time(lambda r: r["ts"], {})


@dataclass
class _Ctx:
    subtask: SubtaskId = SRC0
    state: Any = None


def _shuffled(i: int) -> dict[str, Any]:
    return {"i": i, "ts": 1000 + i * 10 - (i % 3) * 25}  # up to 50 ms out of order


def test_generator_watermark_follows_the_strategy_and_resumes() -> None:
    src = GeneratorSource(
        _shuffled, None, 1, event_time=lambda r: r["ts"], watermarks=Watermarks.bounded(50)
    )
    src.open(_Ctx(), {})
    records = src.read(10)
    assert records is not None
    assert src.watermark() == max(r["ts"] for r in records) - 50
    before = src.watermark()
    assert all(r["ts"] >= before for r in src.read(10) or [])  # none late
    position = json.loads(json.dumps(src.position()))
    again = GeneratorSource(
        _shuffled, None, 1, event_time=lambda r: r["ts"], watermarks=Watermarks.bounded(50)
    )
    again.open(_Ctx(), position)
    assert again.watermark() == src.watermark()
    assert again.read(5) == src.read(5)
    assert again.watermark() == src.watermark()


def test_generator_names_the_record_whose_timestamp_is_bad() -> None:
    src = GeneratorSource(
        lambda i: {"ts": None if i == 7 else i}, 10, 2, event_time=lambda r: r["ts"]
    )
    src.open(_Ctx(subtask=SubtaskId(JobId("j"), OperatorName("src"), 1)), {})
    with pytest.raises(
        RecordError, match=r"^generated record 7: the source's timestamp function returned None"
    ):
        src.read(10)


def test_file_source_watermark_and_a_bad_timestamp_is_a_bad_line(tmp_path: Path) -> None:
    rows = [{"ts": 100}, {"ts": 90}, {"ts": "x"}, {"ts": 300}, {"ts": 250}]
    path = tmp_path / "a.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    schema = {
        "type": "record",
        "name": "T",
        "fields": [{"name": "ts", "type": ["null", "long", "string"]}],
    }
    src = FileSource(str(path), "jsonl", 1, schema, lambda r: r["ts"], Watermarks.bounded(20))
    src.open(_Ctx(), {})
    assert src.read(2) == rows[:2]
    assert src.watermark() == 80
    assert src.read(2) == [rows[3]]
    [bad] = src.rejected()
    assert (bad.origin, bad.raw) == (FileLine(str(path), 3), b'{"ts": "x"}')
    assert "returned 'x' (str)" in bad.error
    assert src.watermark() == 280
    position = json.loads(json.dumps(src.position()))
    assert position["watermark"] == 280
    again = FileSource(str(path), "jsonl", 1, schema, lambda r: r["ts"], Watermarks.bounded(20))
    again.open(_Ctx(), position)
    assert again.watermark() == 280
    assert again.read(5) == [rows[4]]
    assert again.watermark() == 280  # 250 is within the bound: no step back


# -- KafkaTopicSource, with the broker replaced by a script ------------------------------


def test_kafka_source_takes_the_record_timestamp_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    src = kafka_source(monkeypatch, watermarks=Watermarks.bounded(10))
    src.open(ctx0(), {})
    Broker.batches = [
        [SourceMsg(0, 0, {"n": 1}, 500), SourceMsg(1, 0, {"n": 2}, 300)],
        [SourceMsg(2, 0, {"n": 3}, 900), SourceMsg(0, 1, {"n": 4}, 450)],
    ]
    assert src.read(10) == [{"n": 1}, {"n": 2}]
    assert src.watermark() is None  # partition 2 has not delivered yet
    assert src.read(10) == [{"n": 3}, {"n": 4}]
    assert src.watermark() == 290  # min(500, 300, 900) - 10
    position = json.loads(json.dumps(src.position()))
    assert position["watermarks"] == {"watermark": 290, "event_time": {"0": 500, "2": 900}}
    again = kafka_source(monkeypatch, watermarks=Watermarks.bounded(10))
    again.open(ctx0(), position)
    assert again.watermark() == 290
    assert not again.idle()


def test_kafka_source_puts_the_kafka_timestamp_into_its_time_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    src = kafka_source(monkeypatch, watermarks=Watermarks.bounded(0), time_field="kts")
    src.open(ctx0(), {})
    Broker.batches = [[SourceMsg(0, 0, {"n": 1}, 500), SourceMsg(1, 0, {"n": 2}, None)]]
    assert src.read(10) == [{"n": 1, "kts": 500}]  # no Kafka time: a bad input, rejected
    [bad] = src.rejected()
    assert str(bad.origin) == "in[1]@0"
    assert bad.error.startswith("the message has no Kafka timestamp")


def test_kafka_source_with_a_timestamp_function_and_missing_timestamps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    src = kafka_source(monkeypatch, timestamp=lambda r: r["t"], watermarks=Watermarks.bounded(0))
    src.open(ctx0(), {})
    Broker.batches = [[SourceMsg(p, 0, {"t": 70 + p}, None) for p in range(3)]]
    src.read(10)
    assert src.watermark() == 70  # the record's time, not Kafka's (there is none)
    plain = kafka_source(monkeypatch, watermarks=Watermarks.bounded(0))
    plain.open(ctx0(), {})
    Broker.batches = [[SourceMsg(1, 5, {"t": 1}, None)]]
    assert plain.read(10) == []  # a message without event time is a bad input, with its origin
    [bad] = plain.rejected()
    assert str(bad.origin) == "in[1]@5"
    assert bad.error.startswith("the message has no Kafka timestamp; pass timestamp=")


def test_kafka_source_without_partitions_is_idle_and_without_event_time_never(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import spillway.spark_jobs.connectors.sources as sources

    monkeypatch.setattr(sources, "Admin", Broker)
    monkeypatch.setattr(sources, "AssignedConsumer", Broker)
    sixth = sources.KafkaTopicSource("in", 6, False, watermarks=Watermarks.bounded(0))
    ctx = ctx0()
    ctx.subtask = SubtaskId(JobId("j"), OperatorName("src"), 5)  # topic "in" has 3 partitions
    sixth.open(ctx, {})
    assert sixth.idle()
    plain = sources.KafkaTopicSource("in", 6, False)
    plain.open(ctx, {})
    assert not plain.idle()
    assert plain.watermark() is None
