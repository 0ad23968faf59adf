"""Built-in aggregations (spillway.spark_jobs.records.aggregations) on both paths, window
values (spillway.spark_jobs.api.windowspec) and windows that read their source's event
time (spillway.spark_jobs.api.recordtime). Every result is checked against a brute-force
computation over the records themselves, on random data."""

from __future__ import annotations

import datetime
import random
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

import spillway
from spillway import Agg, Count, Hopping, Pipeline, Session, Tumbling, count, mean, testing
from spillway.channels.errors import PipelineDefinitionError
from spillway.channels.wire.stamps import stamped
from spillway.spark_jobs.api.streams import KeyedStream, Stream
from tests.unit.aggfakes import Ctx

EVENT = {
    "type": "record",
    "name": "Event",
    "fields": [
        {"name": "key", "type": "string"},
        {"name": "ts", "type": "long"},
        {"name": "x", "type": ["null", "long"]},
        {"name": "f", "type": "double"},
        {"name": "s", "type": "string"},
    ],
}
ARROW = pa.schema(
    [
        pa.field("key", pa.string(), nullable=False),
        pa.field("ts", pa.int64(), nullable=False),
        pa.field("x", pa.int64()),
        pa.field("f", pa.float64(), nullable=False),
        pa.field("s", pa.string(), nullable=False),
    ]
)
AGGS: dict[str, Agg] = {
    "n": count(),
    "nx": count("x"),
    "sx": spillway.sum("x"),
    "sf": spillway.sum("f"),
    "mn": spillway.min("x"),
    "mx": spillway.max("f"),
    "ms": spillway.min("s"),
    "avg": mean("f"),
    "avgx": mean("x"),
}


def records(seed: int, n: int = 400) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {
            "key": rng.choice("abcd"),
            "ts": rng.randrange(1_000),
            "x": None if rng.random() < 0.2 else rng.randrange(-50, 50),
            "f": rng.randrange(-40, 40) / 4,  # quarters: sums are exact in any order
            "s": rng.choice(["pear", "apple", "fig", "kiwi"]),
        }
        for _ in range(n)
    ]


def expected(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """Every aggregation of AGGS over ``rs``, written plainly (SQL semantics)."""
    xs = [r["x"] for r in rs if r["x"] is not None]
    fs = [r["f"] for r in rs]
    return {
        "n": len(rs),
        "nx": len(xs),
        "sx": sum(xs) if xs else None,
        "sf": sum(fs),
        "mn": min(xs) if xs else None,
        "mx": max(fs),
        "ms": min(r["s"] for r in rs),
        "avg": sum(fs) / len(fs),
        "avgx": sum(xs) / len(xs) if xs else None,
    }


def source(p: Pipeline, **kw: Any) -> Stream:
    return p.generate("src", make=lambda i: {}, schema=EVENT, count=1, **kw)


def run(p: Pipeline, name: str, rs: list[dict[str, Any]], step: int = 37) -> list[Any]:
    """Operator ``name`` of ``p`` over ``rs`` in calls of ``step`` records, then its end."""
    Stream(p, name).write_jsonl(f"{name}-out", "/nowhere")
    make = p.plan("j").operator(name).make_logic
    assert make is not None
    logic = make()
    logic.open(Ctx())
    out: list[Any] = []
    for i in range(0, len(rs), step):
        out.extend(logic.process(rs[i : i + step]))
    out.extend(logic.on_end())
    return out


@pytest.mark.parametrize("seed", range(5))
def test_keyed_aggregations_equal_the_brute_force_reference(seed: int) -> None:
    rs = records(seed)
    p = Pipeline("a")
    source(p).key_by("key").agg("totals", **AGGS)
    got = {r["key"]: {k: v for k, v in r.items() if k != "key"} for r in run(p, "totals", rs)}
    keys = sorted({r["key"] for r in rs})
    assert got == {k: expected([r for r in rs if r["key"] == k]) for k in keys}


@pytest.mark.parametrize("seed", range(5))
def test_the_batch_path_takes_the_same_values_and_gives_the_same_results(seed: int) -> None:
    rs = records(seed)
    p = Pipeline("b")
    src = p.read_files("src", "/nowhere/*.csv", format="csv", schema=EVENT, batches=True)
    src.key_by("key").aggregate_batches("totals", AGGS).write_jsonl("out", "/nowhere")
    batches = [pa.RecordBatch.from_pylist(rs[i : i + 50], schema=ARROW) for i in range(0, 400, 50)]
    make = p.plan("j").operator("totals").make_logic
    assert make is not None
    logic = make()
    logic.open(Ctx())
    for b in batches:
        logic.process_batch(b)
    rows = [row for b in logic.on_end() for row in b.to_pylist()]
    got = {r["key"]: {k: v for k, v in r.items() if k != "key"} for r in rows}
    keys = sorted({r["key"] for r in rs})
    assert got == {k: expected([r for r in rs if r["key"] == k]) for k in keys}


def test_updates_emit_the_running_result_after_every_record() -> None:
    rs = records(7, 60)
    p = Pipeline("u")
    source(p).key_by("key").agg("running", emit="updates", n=count(), avg=mean("f"))
    out = run(p, "running", rs)
    assert len(out) == len(rs)
    for i, row in enumerate(out):
        seen = [r for r in rs[: i + 1] if r["key"] == rs[i]["key"]]
        assert row == {"key": rs[i]["key"], "n": len(seen), "avg": expected(seen)["avg"]}


def fixed_reference(
    rs: list[dict[str, Any]], size: int, hop: int
) -> list[tuple[str, int, int, dict[str, Any]]]:
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in rs:
        t = r["ts"]
        for start in range(t - t % hop - size + hop, t + 1, hop):
            if start <= t < start + size:
                groups.setdefault((r["key"], start), []).append(r)
    return sorted((k, s, s + size, expected(g)) for (k, s), g in groups.items())


def session_reference(
    rs: list[dict[str, Any]], gap: int
) -> list[tuple[str, int, int, dict[str, Any]]]:
    out = []
    for key in sorted({r["key"] for r in rs}):
        mine = sorted((r for r in rs if r["key"] == key), key=lambda r: r["ts"])
        group = [mine[0]]
        for r in mine[1:]:
            if r["ts"] > group[-1]["ts"] + gap:
                out.append((key, group[0]["ts"], group[-1]["ts"] + gap, expected(group)))
                group = []
            group.append(r)
        out.append((key, group[0]["ts"], group[-1]["ts"] + gap, expected(group)))
    return sorted(out)


def as_tuples(rows: list[dict[str, Any]]) -> list[tuple[str, int, int, dict[str, Any]]]:
    rest = ("key", "start", "end")
    return sorted(
        (r["key"], r["start"], r["end"], {k: v for k, v in r.items() if k not in rest})
        for r in rows
    )


WINDOWS: list[tuple[Any, Callable[[list[dict[str, Any]]], Any]]] = [
    (Tumbling(100), lambda rs: fixed_reference(rs, 100, 100)),
    (Tumbling(datetime.timedelta(milliseconds=250)), lambda rs: fixed_reference(rs, 250, 250)),
    (Hopping(100, 25), lambda rs: fixed_reference(rs, 100, 25)),
    (Hopping(datetime.timedelta(milliseconds=90), 30), lambda rs: fixed_reference(rs, 90, 30)),
    (Session(7), lambda rs: session_reference(rs, 7)),
    (Session(datetime.timedelta(milliseconds=40)), lambda rs: session_reference(rs, 40)),
]


@pytest.mark.parametrize(("window", "reference"), WINDOWS)
@pytest.mark.parametrize("seed", range(3))
def test_window_aggregations_equal_the_brute_force_reference(
    window: Any, reference: Callable[[list[dict[str, Any]]], Any], seed: int
) -> None:
    rs = records(seed)
    p = Pipeline("w")
    src = source(p, timestamp_column="ts")  # the window reads it: no event_time= below
    src.key_by("key").window("win", window).agg(**AGGS)
    assert as_tuples(run(p, "win", rs)) == reference(rs)


@pytest.mark.parametrize("seed", range(3))
def test_count_window_aggregations_equal_the_reference(seed: int) -> None:
    rs = records(seed, 100)
    p = Pipeline("c")
    source(p).key_by("key").window("every5", Count(5)).agg(n=count(), sx=spillway.sum("x"))
    got = as_tuples(run(p, "every5", rs))
    want = []
    for key in sorted({r["key"] for r in rs}):
        mine = [r for r in rs if r["key"] == key]
        for i in range(0, len(mine), 5):
            e = expected(mine[i : i + 5])
            want.append((key, i, i + 5, {"n": e["n"], "sx": e["sx"]}))
    assert got == sorted(want)


def test_result_schemas_are_derived_from_the_input() -> None:
    p = Pipeline("s")
    keyed = source(p, timestamp_column="ts").key_by("key")
    keyed.window("win", Tumbling(10)).agg(**AGGS)
    keyed.agg("per_key", n=count(), top=spillway.max("x"))

    def typed(k: dict[str, Any]) -> int:
        return len(k["key"])

    by_fn = source(Pipeline("s2")).key_by(typed)
    fields = {f["name"]: f["type"] for f in p._nodes["win"].schema["fields"]}  # type: ignore[index]
    assert fields == {
        "key": "string",
        "start": "long",
        "end": "long",
        "n": "long",
        "nx": "long",
        "sx": ["null", "long"],  # nullable field: a window may hold no value of it
        "sf": "double",
        "mn": ["null", "long"],
        "mx": "double",
        "ms": "string",
        "avg": "double",
        "avgx": ["null", "double"],
    }
    assert p._nodes["per_key"].schema == {
        "type": "record",
        "name": "per_key",
        "fields": [
            {"name": "key", "type": "string"},
            {"name": "n", "type": "long"},
            {"name": "top", "type": ["null", "long"]},
        ],
    }
    out = by_fn.agg("by_len", n=count())
    assert out._schema() == {
        "type": "record",
        "name": "by_len",
        "fields": [{"name": "key", "type": "long"}, {"name": "n", "type": "long"}],
    }
    # The aggregations are in the plan's description: a changed definition is a new plan.
    assert p._nodes["per_key"].description["aggs"] == {"n": ["count", None], "top": ["max", "x"]}


def keyed(p: Pipeline | None = None, **kw: Any) -> KeyedStream:
    return source(p or Pipeline("e"), **kw).key_by("key")


@pytest.mark.parametrize(
    ("define", "message"),
    [
        (
            lambda: keyed().agg("a", bad=spillway.sum("s")),
            "operator 'a': sum('s') needs a numeric field (int, long, float, double), but "
            "'s' is 'string'",
        ),
        (
            lambda: keyed().agg("a", m=mean("nope")),
            "operator 'a': mean('nope'): the input has no field 'nope'; its fields are "
            "['key', 'ts', 'x', 'f', 's']",
        ),
        (
            lambda: keyed().agg("a"),
            "operator 'a': no aggregations given; name each output, e.g. "
            'agg(n=count(), total=sum("cents"))',
        ),
        (
            lambda: keyed().agg("a", key=count()),
            "operator 'a': output field 'key' is also the key field; name the aggregation "
            "otherwise",
        ),
        (
            lambda: keyed(timestamp_column="ts").window("w", Tumbling(5)).agg(end=count()),
            "operator 'w': output field 'end' is also the window field; name the "
            "aggregation otherwise",
        ),
        (
            lambda: keyed().agg("a", n=lambda r: 1),
            "operator 'a': n=<function",
        ),
        (
            lambda: source(Pipeline("e")).key_by(lambda r: r["key"]).agg("a", n=count()),
            "operator 'a': the output's key type is unknown: key_by a column name "
            '(key_by("user")), or annotate the key function\'s return type',
        ),
        (
            lambda: spillway.sum(None),  # type: ignore[arg-type]
            'sum() needs the field it aggregates, e.g. sum("cents")',
        ),
    ],
)
def test_aggregations_that_cannot_work_are_refused_naming_the_operator(
    define: Callable[[], Any], message: str
) -> None:
    with pytest.raises(PipelineDefinitionError) as info:
        define()
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    ("window", "message"),
    [
        (Tumbling(0), "operator 'w': window size must be >= 1 ms, got 0"),
        (Tumbling(-3), "operator 'w': window size must be >= 1 ms, got -3"),
        (
            Tumbling(datetime.timedelta(0)),
            "operator 'w': window size must be >= 1 ms, got datetime.timedelta(0)",
        ),
        (
            Tumbling(datetime.timedelta(microseconds=1500)),
            "operator 'w': window size datetime.timedelta(microseconds=1500) is not a whole "
            "number of milliseconds",
        ),
        (
            Tumbling(1.5),  # type: ignore[arg-type]
            "operator 'w': window size must be a datetime.timedelta or integer "
            "milliseconds, got 1.5",
        ),
        (Tumbling(True), "operator 'w': window size must be a datetime.timedelta"),
        (Hopping(10, 0), "operator 'w': hop must be >= 1 ms, got 0"),
        (Hopping(10, 20), "operator 'w': hop 20 ms is larger than size 10 ms"),
        (Session(0), "operator 'w': session gap must be >= 1 ms, got 0"),
        (Count(0), "operator 'w': Count(n) needs an integer number of records >= 1, got 0"),
        (
            Count(datetime.timedelta(seconds=1)),  # type: ignore[arg-type]
            "operator 'w': Count(n) needs an integer number of records",
        ),
        ("1m", "operator 'w': '1m' is not a window; pass Tumbling(size), Hopping(size, hop)"),
    ],
)
def test_bad_window_values_are_refused_naming_the_operator(window: Any, message: str) -> None:
    with pytest.raises(PipelineDefinitionError) as info:
        keyed(timestamp_column="ts").window("w", window)
    assert str(info.value).startswith(message)


def test_window_values_are_frozen_and_durations_become_milliseconds() -> None:
    w = Hopping(datetime.timedelta(minutes=5), datetime.timedelta(minutes=1))
    with pytest.raises(AttributeError):
        w.size = 1  # type: ignore[misc]
    p = Pipeline("d")
    keyed(p, timestamp_column="ts").window(
        "w", w, allowed_lateness=datetime.timedelta(seconds=30)
    ).agg(n=count())
    assert p._nodes["w"].description == {
        "op": "hopping_window",
        "size": 300_000,
        "hop": 60_000,
        "lateness": 30_000,
        "mode": "final",
        "aggs": {"n": ["count", None]},
    }
    with pytest.raises(PipelineDefinitionError, match="a Count window has no event time"):
        keyed(p).window("c", Count(3), allowed_lateness=5)


# -- event time, declared once at the source ----------------------------------------------


def windows(p: Pipeline, window: str, rs: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """(start, n) of window ``window``'s results when ``rs`` go through ``p`` from its
    source ``src`` (spillway.testing: source, operators and channels as on Spark)."""
    Stream(p, window).write_jsonl("out", "/nowhere")
    return [(r["start"], r["n"]) for r in testing.run(p, {"src": rs})["out"]]


def test_a_window_reads_the_time_the_source_declared_through_operators_that_keep_it() -> None:
    p = Pipeline("t")
    src = source(p, timestamp_column="ts")
    kept = src.map("m", lambda r: {**r, "x": 1}, schema=EVENT).filter("f", lambda r: True)
    kept.key_by("key").window("win", Tumbling(100)).agg(n=count())
    rs = [{"key": "a", "ts": t, "x": 0, "f": 0.0, "s": ""} for t in (5, 150, 160, 420)]
    assert windows(p, "win", rs) == [(0, 1), (100, 2), (400, 1)]


def test_through_filters_alone_the_window_reads_the_fields_and_nothing_is_carried() -> None:
    p = Pipeline("t")
    src = source(p, timestamp=lambda r: r["ts"] * 10)
    src.filter("f", lambda r: True).key_by("key").window("win", Tumbling(100)).agg(n=count())
    rs = [{"key": "a", "ts": t, "x": 0, "f": 0.0, "s": ""} for t in (1, 9, 10, 25)]
    assert [(r["start"], r["n"]) for r in run(p, "win", rs)] == [(0, 2), (100, 1), (200, 1)]
    assert not any(e.carries_time for e in p.plan("j").edges)


NARROW = {"type": "record", "name": "N", "fields": [{"name": "key", "type": "string"}]}


def test_the_time_travels_with_each_record_where_operators_change_the_records() -> None:
    # A map that drops the time field, one that changes it (Flink: the record timestamp
    # is the source's, whatever the fields say), a source whose time is a function of
    # fields the records lose, and a union of sources that read time differently.
    rs = [{"key": "a", "ts": t, "x": 0, "f": 0.0, "s": ""} for t in (5, 150, 160, 420)]
    want = [(0, 1), (100, 2), (400, 1)]
    changed = {**EVENT, "name": "C"}
    builds: list[Callable[[Pipeline], Stream]] = [
        lambda p: source(p, timestamp_column="ts").map("narrow", _narrow, schema=NARROW),
        lambda p: source(p, timestamp=lambda r: r["ts"]).map("narrow", _narrow, schema=NARROW),
        lambda p: source(p, timestamp_column="ts").map(
            "shift", lambda r: {**r, "ts": r["ts"] + 1_000}, schema=changed
        ),
        lambda p: (
            source(p, timestamp_column="ts")
            .map("narrow", _narrow, schema=NARROW)
            .flat_map("twice", lambda r: [r, r], schema=NARROW)
            .filter("odd", _every_other())
        ),
    ]
    for build in builds:
        p = Pipeline("t")
        build(p).key_by("key").window("win", Tumbling(100)).agg(n=count())
        assert windows(p, "win", rs) == want
        assert all(e.carries_time for e in p.plan("j").edges if e.downstream != "out")
    p = Pipeline("u")
    other = p.generate("other", make=lambda i: {}, schema=EVENT, count=1, timestamp=_tenfold)
    both = source(p, timestamp_column="ts").union(other).map("narrow", _narrow, schema=NARROW)
    both.key_by("key").window("win", Tumbling(100)).agg(n=count())
    Stream(p, "win").write_jsonl("out", "/nowhere")
    out = testing.run(p, {"src": rs[:2], "other": [{**rs[0], "ts": 12}]})["out"]
    # src: 5 and 150; other: 12 * 10 = 120
    assert [(r["start"], r["n"]) for r in out] == [(0, 1), (100, 2)]


def _narrow(r: dict[str, Any]) -> dict[str, Any]:
    return {"key": r["key"]}


def _tenfold(r: dict[str, Any]) -> int:
    return int(r["ts"]) * 10


def _every_other() -> Callable[[dict[str, Any]], bool]:
    seen = [0]

    def keep(_r: dict[str, Any]) -> bool:
        seen[0] += 1
        return seen[0] % 2 == 1

    return keep


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda p: source(p),
            "operator 'win': source 'src' has no event time; declare it there "
            "(timestamp_column= or timestamp=, and watermarks=), or pass event_time= to the "
            "window",
        ),
        (
            lambda p: p.read_kafka(
                "src", "t", schema=EVENT, batches=True, timestamp_column="ts"
            ).map_batches("narrow", lambda b: b.select(["key"]), schema=NARROW),
            "operator 'win': the event time declared at source 'src' does not reach it: "
            "operator 'narrow' changes the records (its output has no integer field 'ts')",
        ),
    ],
)
def test_a_window_that_cannot_read_the_sources_time_is_refused_saying_why(
    build: Callable[[Pipeline], Stream], message: str
) -> None:
    p = Pipeline("t")
    stream = build(p)
    with pytest.raises(PipelineDefinitionError) as info:
        stream.key_by("key").window("win", Tumbling(100))
    assert str(info.value).startswith(message)
    # event_time= overrides: another time, or one the records no longer carry as read.
    stream.key_by("key").window("win", Tumbling(100), event_time=lambda r: 0)


def test_batch_sources_name_their_time_column_timestamp_column() -> None:
    p = Pipeline("b")
    src = p.read_kafka("src", "t", schema=EVENT, batches=True, timestamp_column="ts")
    src.key_by("key").window("win", Tumbling(100)).agg(n=count())
    with pytest.raises(PipelineDefinitionError, match="pass timestamp_column='<field>'"):
        Pipeline("b").read_kafka("src", "t", schema=EVENT, batches=True, timestamp="ts")  # type: ignore[arg-type]


def test_window_results_carry_their_windows_last_instant_to_the_next_window() -> None:
    p = Pipeline("cascade")
    minutes = keyed(p, timestamp_column="ts").window("per10", Tumbling(10)).agg(n=count())
    minutes.key_by("key").window("per100", Tumbling(100)).agg(windows=count(), n=spillway.sum("n"))
    per10 = [{"key": "a", "start": s, "end": s + 10, "n": 1} for s in (0, 90, 100, 250)]
    got = [(r["start"], r["windows"], r["n"]) for r in run(p, "per100", per10)]
    # [90, 100) ends at 100: its last instant, 99, lies in [0, 100) — not in [100, 200).
    assert got == [(0, 2, 2), (100, 1, 1), (200, 1, 1)]


def test_kafka_timestamp_field_carries_the_kafka_time_in_the_records_to_windows() -> None:
    p = Pipeline("k")
    src = p.read_kafka("src", "t", schema=EVENT, kafka_timestamp_field="kts")
    assert src._schema()["fields"][-1] == {"name": "kts", "type": "long"}  # type: ignore[index]
    narrow = {"type": "record", "name": "N", "fields": [
        {"name": "key", "type": "string"}, {"name": "kts", "type": "long"}]}  # fmt: skip
    kept = src.map("narrow", lambda r: {"key": r["key"], "kts": r["kts"]}, schema=narrow)
    kept.key_by("key").window("win", Tumbling(100)).agg(n=count())
    rs = [{"key": "a", "kts": t} for t in (5, 150, 160)]
    assert [(r["start"], r["n"]) for r in run(p, "win", [stamped(r, r["kts"]) for r in rs])] == [
        (0, 1),
        (100, 2),
    ]
    assert p.plan("j").edges[0].carries_time  # a map on the way: the time is carried
    assert p._nodes["src"].event_time  # monotonic watermarks unless given
    for kw, message in [
        ({"timestamp_column": "ts"}, "makes the Kafka timestamp the event time"),
        ({"batches": True}, "kafka_timestamp_field= is for records"),
    ]:
        with pytest.raises(PipelineDefinitionError, match=message):
            Pipeline("k").read_kafka("src", "t", schema=EVENT, kafka_timestamp_field="k", **kw)
    with pytest.raises(PipelineDefinitionError, match="'ts' is already a field of the schema"):
        Pipeline("k").read_kafka("src", "t", schema=EVENT, kafka_timestamp_field="ts")


def test_a_process_function_sees_the_sources_time_as_ctx_timestamp() -> None:
    seen: list[int | None] = []

    def note(r: dict[str, Any], ctx: Any) -> None:
        seen.append(ctx.timestamp)

    timed, untimed = Pipeline("timed"), Pipeline("untimed")
    keyed(timed, timestamp_column="ts").process("p", note, schema=NARROW)
    keyed(untimed).process("p", note, schema=NARROW)  # no event time: None, as before
    rs = [{"key": "a", "ts": t, "x": 0, "f": 0.0, "s": ""} for t in (7, 3)]
    run(timed, "p", rs)
    run(untimed, "p", rs)
    assert seen == [7, 3, None, None]
