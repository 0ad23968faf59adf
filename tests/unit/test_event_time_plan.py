"""plan() and event time: a window that could never get a watermark is a planning error."""

from __future__ import annotations

from typing import Any

import pytest

from spillway.channels.errors import PipelineDefinitionError
from spillway.spark_jobs.api.pipeline import Pipeline, Stream
from spillway.spark_jobs.api.windowspec import Tumbling
from spillway.spark_jobs.records.watermarks import Watermarks

EVENT = {
    "type": "record",
    "name": "Event",
    "fields": [{"name": "key", "type": "string"}, {"name": "ts", "type": "long"}],
}
COUNT = {
    "type": "record",
    "name": "Count",
    "fields": [{"name": "key", "type": "string"}, {"name": "n", "type": "long"}],
}


def make_event(i: int) -> dict[str, Any]:
    return {"key": f"k{i % 3}", "ts": i}


def window(stream: Stream, name: str = "win") -> Stream:
    return (
        stream.key_by(lambda r: r["key"])
        .window(name, Tumbling(1000), event_time=lambda r: r["ts"])
        .aggregate(
            init=lambda: 0,
            add=lambda n, _r: n + 1,
            result=lambda k, s, e, n: {"key": k, "n": n},
            schema=COUNT,
        )
    )


def problems(p: Pipeline) -> str:
    with pytest.raises(PipelineDefinitionError) as info:
        p.plan("j")
    return str(info.value)


KAFKA_FIX = (
    "read_kafka(..., watermarks=Watermarks.bounded(max_out_of_orderness_ms)) "
    "(event time: the Kafka record timestamp, or timestamp=fn)"
)


def test_window_behind_an_unbounded_kafka_source_without_event_time_is_rejected() -> None:
    p = Pipeline("w")
    window(p.read_kafka("clicks", "in", schema=EVENT)).write_jsonl("out", "/x")
    assert problems(p) == (
        "pipeline 'w' is invalid:\n  - window 'win' would never fire: source 'clicks' "
        "upstream of it is unbounded and has no event time, so no watermark reaches the "
        f"window; give 'clicks' a timestamp and watermark strategy, e.g. {KAFKA_FIX}"
    )


def test_the_source_is_found_through_any_chain_of_operators() -> None:
    p = Pipeline("w", chaining=True)
    src = p.read_kafka("clicks", "in", schema=EVENT, parallelism=2)
    mid = src.map("m", dict, schema=EVENT).filter("f", lambda r: True).rebalance()
    later = window(mid.map("m2", dict, schema=EVENT, parallelism=3), "win")
    again = later.map("again", lambda r: {"key": r["key"], "ts": 0}, schema=EVENT)
    window(again, "win2").write_jsonl("o2", "/x")
    msg = problems(p)
    assert "window 'win' would never fire: source 'clicks' upstream" in msg
    assert "window 'win2' would never fire: source 'clicks' upstream" in msg


def test_only_the_source_without_event_time_is_named() -> None:
    p = Pipeline("w")
    a = p.read_kafka("a", "in-a", schema=EVENT, watermarks=Watermarks.bounded(100))
    p.read_kafka("b", "in-b", schema=EVENT)
    win = window(a)
    p.add_edge("b", "win", "rebalance")
    win.write_jsonl("out", "/x")
    msg = problems(p)
    assert "source 'b' upstream of it" in msg
    assert "source 'a'" not in msg


def test_unbounded_generator_needs_a_timestamp_too() -> None:
    p = Pipeline("w")
    window(p.generate("g", make=make_event, schema=EVENT, count=None)).write_jsonl("o", "/x")
    assert (
        "give 'g' a timestamp and watermark strategy, e.g. "
        "generate(..., timestamp=fn, watermarks=Watermarks.bounded(ms))"
    ) in problems(p)


@pytest.mark.parametrize(
    "source",
    [
        lambda p: p.read_kafka("s", "in", schema=EVENT, watermarks=Watermarks.bounded(5000)),
        lambda p: p.read_kafka("s", "in", schema=EVENT, timestamp=lambda r: r["ts"]),
        lambda p: p.read_kafka("s", "in", schema=EVENT, bounded=True),  # its end fires them
        lambda p: p.generate(
            "s", make=make_event, schema=EVENT, count=None, timestamp=lambda r: r["ts"]
        ),
        lambda p: p.generate("s", make=make_event, schema=EVENT, count=None, timestamp_column="ts"),
        lambda p: p.read_files("s", "/x/*.jsonl", format="jsonl", schema=EVENT),
    ],
)
def test_windows_that_get_watermarks_or_an_end_plan(source: Any) -> None:
    p = Pipeline("w")
    window(source(p)).write_jsonl("out", "/x")
    assert [op.name for op in p.plan("j").operators] == ["s", "win", "out"]


def test_event_time_does_not_change_the_fingerprint_of_a_job_without_windows() -> None:
    def job(**kw: Any) -> str:
        p = Pipeline("w")
        p.read_kafka("s", "in", schema=EVENT, **kw).write_jsonl("out", "/x")
        return p.plan("j").fingerprint

    assert job() == job(watermarks=Watermarks.bounded(10))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"watermarks": Watermarks.bounded(10)},
            "source 'g': watermarks= needs timestamp_column= (a field) or timestamp= (a "
            "function) giving its event time in ms",
        ),
        (
            {"timestamp_column": "key"},
            "source 'g': timestamp_column 'key' must name an integer (int/long, ms) field of "
            "the schema; its fields are ['key', 'ts']",
        ),
        (
            {"watermarks": 5000},
            "source 'g': watermarks must be a Watermarks strategy, e.g. "
            "Watermarks.bounded(5000), got 5000",
        ),
        (
            {"timestamp": "ts"},
            "source 'g': timestamp must be a function of the record returning its event "
            "time in ms, got 'ts'; for the field 'ts' pass timestamp_column='ts'",
        ),
        (
            {"timestamp": lambda r: 0, "timestamp_column": "ts"},
            "source 'g': pass timestamp= (a function) or timestamp_column= (a field), not both",
        ),
    ],
)
def test_bad_event_time_arguments_are_named(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(PipelineDefinitionError) as info:
        Pipeline("w").generate("g", make=make_event, schema=EVENT, count=None, **kwargs)
    assert str(info.value) == message
