"""spillway.testing.TestDriver: a pipeline in-process, each semantic against a reference.

Every test builds a pipeline with the public API, runs it through the driver (no broker,
no Spark) and compares what the sinks received with a hand-computed or brute-force
reference, exactly.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import spillway
from spillway import Pipeline, RecordError, Session, Tumbling, Watermarks, connect
from spillway.channels.errors import PipelineDefinitionError
from spillway.channels.routing.keygroups import key_group, key_group_range
from spillway.examples import clicks
from spillway.spark_jobs.operators.process import ProcessContext
from spillway.testing import DeadLetter, TestDriver, run

EVENT = {
    "type": "record",
    "name": "Event",
    "fields": [
        {"name": "key", "type": "string"},
        {"name": "ts", "type": "long"},
        {"name": "v", "type": "long"},
    ],
}
COUNT = {
    "type": "record",
    "name": "Count",
    "fields": [{"name": "key", "type": "string"}, {"name": "n", "type": "long"}],
}
WINDOW = {
    "type": "record",
    "name": "Window",
    "fields": [
        {"name": "key", "type": "string"},
        {"name": "start", "type": "long"},
        {"name": "end", "type": "long"},
        {"name": "vs", "type": {"type": "array", "items": "long"}},
    ],
}
PAIR = {
    "type": "record",
    "name": "Pair",
    "fields": [{"name": "l", "type": "long"}, {"name": "r", "type": "long"}],
}
FIRED = {
    "type": "record",
    "name": "Fired",
    "fields": [
        {"name": "key", "type": "string"},
        {"name": "domain", "type": "string"},
        {"name": "at", "type": "long"},
        {"name": "n", "type": "long"},
    ],
}


def ev(key: str, ts: int, v: int = 0) -> dict[str, Any]:
    return {"key": key, "ts": ts, "v": v}


def events(p: Pipeline, name: str = "events", parallelism: int = 1, bound: int = 0) -> Any:
    """A Kafka source with event time from the "ts" field (the driver feeds it)."""
    return p.read_kafka(
        name,
        f"topic-{name}",
        schema=EVENT,
        parallelism=parallelism,
        timestamp=lambda r: r["ts"],
        watermarks=Watermarks.bounded(bound),
    )


def window_row(key: str, start: int, end: int, vs: list[int]) -> dict[str, Any]:
    return {"key": key, "start": start, "end": end, "vs": vs}


def add_v(acc: list[int], r: dict[str, Any]) -> list[int]:
    return [*acc, r["v"]]


# -- stateless ------------------------------------------------------------------------


def test_map_and_filter_over_a_rebalance_equal_the_list_comprehension() -> None:
    p = Pipeline("mapfilter")
    src = p.read_kafka("in", "t", schema=EVENT, parallelism=2, bounded=True)
    doubled = src.rebalance().map(
        "double", lambda r: {**r, "v": r["v"] * 2}, schema=EVENT, parallelism=3
    )
    doubled.filter("odd-keys", lambda r: int(r["key"][1:]) % 2 == 1).write_jsonl("out", "/x")
    records = [ev(f"k{i % 7}", i, i) for i in range(200)]
    t = TestDriver(p)
    t.send("in", records[:120], subtask=0)
    t.send("in", records[120:], subtask=1)
    t.end()
    want = [{**r, "v": r["v"] * 2} for r in records if int(r["key"][1:]) % 2 == 1]
    got = t.output("out")
    key = lambda r: r["ts"]  # noqa: E731
    assert sorted(got, key=key) == sorted(want, key=key)
    assert t.dead_letters() == []


def test_forward_chain_keeps_the_order_sent() -> None:
    p = Pipeline("ordered", chaining=True)
    src = p.read_kafka("in", "t", schema=EVENT, bounded=True)
    src.map("inc", lambda r: {**r, "v": r["v"] + 1}, schema=EVENT).write_jsonl("out", "/x")
    records = [ev("k", i, random.Random(i).randrange(100)) for i in range(50)]
    got = run(p, {"in": records})
    assert got == {"out": [{**r, "v": r["v"] + 1} for r in records]}


# -- keyed ----------------------------------------------------------------------------


def test_keyed_aggregate_routes_keys_to_their_key_groups_and_counts_exactly() -> None:
    p = Pipeline("counts")
    src = p.read_kafka("in", "t", schema=EVENT, parallelism=2, bounded=True)
    src.key_by(lambda r: r["key"]).aggregate(
        "count",
        init=lambda: 0,
        add=lambda n, _r: n + 1,
        result=lambda k, n: {"key": k, "n": n},
        schema=COUNT,
        parallelism=3,
    ).write_jsonl("out", "/x")
    rng = random.Random(7)
    records = [ev(f"k{rng.randrange(40)}", i) for i in range(500)]
    t = TestDriver(p)
    t.send("in", records[::2], subtask=0)
    t.send("in", records[1::2], subtask=1)
    assert t.output("out") == []  # emit="final": nothing before the input ends
    m = t.plan.operator("count").max_parallelism
    assert m is not None
    for i in range(3):  # each key's state lives on the subtask owning its key group
        owned = key_group_range(i, 3, m)
        assert all(key_group(k, m) in owned for k in t.state("count", i))
    t.end()
    want = Counter(r["key"] for r in records)
    got = t.output("out")
    assert len(got) == len(want)
    assert {r["key"]: r["n"] for r in got} == dict(want)


def test_keyed_updates_follow_each_record_in_order_per_key() -> None:
    p = Pipeline("updates")
    src = p.read_kafka("in", "t", schema=EVENT)
    src.key_by(lambda r: r["key"]).aggregate(
        "sum",
        init=lambda: 0,
        add=lambda n, r: n + r["v"],
        result=lambda k, n: {"key": k, "n": n},
        schema=COUNT,
        emit="updates",
        parallelism=2,
    ).write_jsonl("out", "/x")
    records = [ev("a", 1, 5), ev("b", 2, 1), ev("a", 3, 2), ev("b", 4, 10), ev("a", 5, 1)]
    with TestDriver(p) as t:
        t.send("in", records)
        got = t.take("out")
        assert t.take("out") == []
    per_key: dict[str, list[int]] = {}
    for r in got:
        per_key.setdefault(r["key"], []).append(r["n"])
    assert per_key == {"a": [5, 7, 8], "b": [1, 11]}


# -- windows --------------------------------------------------------------------------


def tumbling(lateness: int) -> Pipeline:
    p = Pipeline("tumbling")
    events(p).key_by(lambda r: r["key"]).window(
        "win", Tumbling(1000), allowed_lateness=lateness, event_time=lambda r: r["ts"]
    ).aggregate(
        init=list,
        add=add_v,
        result=window_row,
        schema=WINDOW,
        parallelism=2,
    ).write_jsonl("out", "/x")
    return p


def test_tumbling_window_fires_at_the_watermark_and_drops_late_records() -> None:
    t = TestDriver(tumbling(0))
    t.send("events", [ev("a", 100, 1), ev("a", 900, 2), ev("b", 500, 3)])
    assert t.output("out") == []  # watermark 900: [0, 1000) is still open
    t.send("events", [ev("a", 1000, 4)])  # watermark 1000 closes [0, 1000)
    assert sorted(t.take("out"), key=lambda r: r["key"]) == [
        window_row("a", 0, 1000, [1, 2]),
        window_row("b", 0, 1000, [3]),
    ]
    t.send("events", [ev("a", 999, 5)])  # late: its window fired, no lateness
    assert t.output("out") == []
    (late,) = t.dead_letters()
    assert (late.operator, late.stage, late.record) == ("win", "late", ev("a", 999, 5))
    assert late.origin is not None
    assert late.origin.startswith("spillway.test.ch.events.win[")
    t.advance_event_time(2000)
    assert t.take("out") == [window_row("a", 1000, 2000, [4])]


def test_tumbling_window_within_allowed_lateness_emits_the_updated_result() -> None:
    t = TestDriver(tumbling(500))
    t.send("events", [ev("a", 100, 1), ev("a", 1200, 2)])  # watermark 1200 fires [0, 1000)
    assert t.take("out") == [window_row("a", 0, 1000, [1])]
    t.send("events", [ev("a", 300, 3)])  # 1000 + 500 > 1200: still within lateness
    assert t.take("out") == [window_row("a", 0, 1000, [1, 3])]
    t.send("events", [ev("a", 1600, 4)])  # watermark 1600 expires [0, 1000)
    t.send("events", [ev("a", 400, 5)])
    assert t.take("out") == []
    assert [(d.stage, d.record) for d in t.dead_letters()] == [("late", ev("a", 400, 5))]
    assert t.set_aside("win") == {"late": 1}
    t.end()  # the open window [1000, 2000) fires at the end of input
    assert t.take("out") == [window_row("a", 1000, 2000, [2, 4])]


def test_session_windows_merge_records_within_the_gap() -> None:
    p = Pipeline("sessions")
    events(p).key_by(lambda r: r["key"]).window(
        "sess", Session(100), event_time=lambda r: r["ts"]
    ).aggregate(
        init=list,
        add=add_v,
        merge=lambda a, b: sorted(a + b),
        result=window_row,
        schema=WINDOW,
    ).write_jsonl("out", "/x")
    t = TestDriver(p)
    # a: 0 and 50 open [0, 150), 120 extends it to [0, 220), 300 opens another; b: 10
    # and 250 are two sessions (their gap is over 100).
    t.send("events", [ev("a", 0, 1), ev("b", 10, 2), ev("a", 50, 3), ev("a", 120, 4)])
    t.send("events", [ev("b", 250, 5), ev("a", 300, 6)])
    # watermark 300: [0, 220) of a and [10, 110) of b are closed.
    assert sorted(t.take("out"), key=lambda r: (r["key"], r["start"])) == [
        window_row("a", 0, 220, [1, 3, 4]),
        window_row("b", 10, 110, [2]),
    ]
    t.end()
    assert sorted(t.take("out"), key=lambda r: (r["key"], r["start"])) == [
        window_row("a", 300, 400, [6]),
        window_row("b", 250, 350, [5]),
    ]


def test_windows_behind_a_wider_source_wait_for_every_source_subtask() -> None:
    p = Pipeline("wide")
    p.read_kafka(
        "events",
        "t",
        schema=EVENT,
        parallelism=2,
        timestamp=lambda r: r["ts"],
        watermarks=Watermarks.bounded(0, idle_timeout_ms=5_000),
    ).key_by(lambda r: r["key"]).window(
        "win", Tumbling(1000), event_time=lambda r: r["ts"]
    ).aggregate(
        init=list,
        add=add_v,
        result=window_row,
        schema=WINDOW,
    ).write_jsonl("out", "/x")
    t = TestDriver(p)
    t.send("events", [ev("a", 10, 1), ev("a", 3000, 2)], subtask=0)
    # events[1] has read nothing: it holds the window's watermark back (None).
    assert t.output("out") == []
    assert t.watermark("win") is None
    t.advance_processing_time(4_999)
    assert t.output("out") == []
    t.advance_processing_time(1)  # events[1] idle for 5 s: left out of the minimum
    assert t.take("out") == [window_row("a", 0, 1000, [1])]
    assert t.watermark("win") == 3000
    # events[1] reads again: it counts again, and its watermark (3500) holds the window's
    # back while events[0] moves on to 6000; idle again, it lets the window's follow.
    t.send("events", [ev("b", 3500, 3)], subtask=1)
    t.send("events", [ev("a", 6000, 4)], subtask=0)
    assert t.take("out") == []
    assert t.watermark("win") == 3500
    t.advance_processing_time(5_000)  # both idle now: the largest they reported
    assert sorted(t.take("out"), key=lambda r: r["key"]) == [
        window_row("a", 3000, 4000, [2]),
        window_row("b", 3000, 4000, [3]),
    ]
    assert t.watermark("win") == 6000


# -- process functions ----------------------------------------------------------------


def remind(r: dict[str, Any], ctx: ProcessContext) -> None:
    """Count a key's records; an event-time timer 1 s after each record's time and a
    processing-time timer 10 s after the clock."""
    ctx.value("n").update(ctx.value("n").value(0) + 1)
    assert ctx.timestamp is not None
    ctx.timers.register_event_time(ctx.timestamp + 1000)
    ctx.timers.register_processing_time(r["v"])


def fired(ts: int, ctx: ProcessContext) -> list[dict[str, Any]]:
    assert ctx.time_domain is not None
    return [{"key": ctx.key, "domain": ctx.time_domain, "at": ts, "n": ctx.value("n").value()}]


def test_process_function_timers_fire_on_event_time_and_on_the_processing_clock() -> None:
    p = Pipeline("timers")
    events(p).key_by(lambda r: r["key"]).process(
        "proc", remind, on_timer=fired, event_time=lambda r: r["ts"], schema=FIRED
    ).write_jsonl("out", "/x")
    t = TestDriver(p, start_ms=1_000_000)
    # v: when the processing-time timer is due (ms of the driver's clock).
    t.send("events", [ev("a", 100, 1_005_000), ev("b", 200, 1_020_000)])
    assert t.output("out") == []
    t.send("events", [ev("a", 1100, 1_030_000)])  # watermark 1100: a's 1100 timer fires
    assert t.take("out") == [{"key": "a", "domain": "event", "at": 1100, "n": 2}]
    t.advance_processing_time(4_999)
    assert t.take("out") == []
    t.advance_processing_time(1)  # 1 005 000
    assert t.take("out") == [{"key": "a", "domain": "processing", "at": 1_005_000, "n": 2}]
    t.advance_event_time(1200)  # b's 1200 timer
    assert t.take("out") == [{"key": "b", "domain": "event", "at": 1200, "n": 1}]
    t.advance_processing_time(30_000)  # both remaining processing-time timers, in time order
    assert t.take("out") == [
        {"key": "b", "domain": "processing", "at": 1_020_000, "n": 1},
        {"key": "a", "domain": "processing", "at": 1_030_000, "n": 2},
    ]
    t.end()  # the end of input fires a's last event-time timer (2100)
    assert t.take("out") == [{"key": "a", "domain": "event", "at": 2100, "n": 2}]


# -- joins ----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_interval_join_equals_the_brute_force_pairs(seed: int) -> None:
    lower, upper = -30, 50
    p = Pipeline("join")
    left, right = events(p, "left", bound=1000), events(p, "right", bound=1000)
    connect(left, right).key_by(lambda r: r["key"], lambda r: r["key"]).interval_join(
        "ij",
        lower=lower,
        upper=upper,
        left_time=lambda r: r["ts"],
        right_time=lambda r: r["ts"],
        result=lambda a, b: {"l": a["v"], "r": b["v"]},
        schema=PAIR,
        parallelism=2,
    ).write_jsonl("out", "/x")
    rng = random.Random(seed)
    keys = ["k0", "k1", "k2"]
    lefts = [ev(rng.choice(keys), rng.randrange(0, 2000), i) for i in range(150)]
    rights = [ev(rng.choice(keys), rng.randrange(0, 2000), 1000 + i) for i in range(150)]
    t = TestDriver(p)
    # Interleaved in small batches; the bound (1000 ms) covers the shuffled times, so no
    # record is late and every pair must come out exactly once.
    lefts.sort(key=lambda r: r["ts"] + rng.randrange(0, 900))
    rights.sort(key=lambda r: r["ts"] + rng.randrange(0, 900))
    for i in range(0, 150, 10):
        t.send("left", lefts[i : i + 10])
        t.send("right", rights[i : i + 10])
    t.end()
    want = sorted(
        (a["v"], b["v"])
        for a in lefts
        for b in rights
        if a["key"] == b["key"] and a["ts"] + lower <= b["ts"] <= a["ts"] + upper
    )
    got = sorted((r["l"], r["r"]) for r in t.output("out"))
    assert got == want
    assert t.dead_letters() == []


def keep_latest(r: dict[str, Any], ctx: ProcessContext) -> list[dict[str, Any]]:
    """Input b: the key's latest v; releases the a records waiting for one."""
    ctx.value("b").update(r["v"])
    waiting = ctx.list("waiting").get()
    ctx.list("waiting").clear()
    return [{"key": ctx.key, "ts": t, "v": r["v"]} for t in waiting]


def enrich_a(r: dict[str, Any], ctx: ProcessContext) -> list[dict[str, Any]]:
    """Input a: joined with b's latest v of the key, else waits until its time + 100."""
    v = ctx.value("b").value()
    if v is not None:
        return [{"key": ctx.key, "ts": r["ts"], "v": v}]
    ctx.list("waiting").add(r["ts"])
    ctx.timers.register_event_time(r["ts"] + 100)
    return []


def give_up(ts: int, ctx: ProcessContext) -> list[dict[str, Any]]:
    waiting = ctx.list("waiting").get()
    ctx.list("waiting").clear()
    return [{"key": ctx.key, "ts": t, "v": -1} for t in waiting]


def test_co_process_timers_follow_the_watermark_of_both_inputs() -> None:
    p = Pipeline("co")
    a, b = events(p, "a"), events(p, "b")
    connect(a, b).key_by(lambda r: r["key"], lambda r: r["key"]).process(
        "enrich", enrich_a, keep_latest, on_timer=give_up, schema=EVENT, parallelism=2
    ).write_jsonl("out", "/x")
    t = TestDriver(p)
    t.send("a", [ev("x", 10), ev("y", 20)])
    t.send("b", [ev("y", 5, 7)])  # releases y's waiting record
    assert t.take("out") == [ev("y", 20, 7)]
    t.send("a", [ev("y", 500), ev("z", 600)])  # y joins at once; a's watermark: 600
    assert t.take("out") == [ev("y", 500, 7)]
    assert t.watermark("enrich") == 5  # b's watermark holds the timers back
    t.send("b", [ev("q", 300, 1)])  # watermark 300: x's timer (110) fires, not z's (700)
    assert t.take("out") == [ev("x", 10, -1)]
    t.end("b")  # b ended: a alone sets the watermark (600)
    assert t.take("out") == []
    assert t.watermark("enrich") == 600
    t.end()  # z's timer fires at the end of input
    assert t.take("out") == [ev("z", 600, -1)]


def test_lookup_join_takes_the_current_row_of_the_table_input() -> None:
    p = Pipeline("lookup")
    orders = p.read_kafka("orders", "o", schema=EVENT)
    prices = p.read_kafka("prices", "p", schema=EVENT)
    connect(orders, prices).key_by(lambda r: r["key"], lambda r: r["key"]).lookup_join(
        "priced",
        result=lambda o, row: {"l": o["v"], "r": -1 if row is None else row["v"]},
        schema=PAIR,
        parallelism=3,
    ).write_jsonl("out", "/x")
    t = TestDriver(p)
    t.send("orders", [ev("apple", 0, 1)])  # no row yet (how="left")
    t.send("prices", [ev("apple", 0, 100), ev("pear", 0, 50)])
    t.send("orders", [ev("apple", 0, 2), ev("pear", 0, 3)])
    t.send("prices", [ev("apple", 0, 120)])  # replaces apple's row
    t.send("orders", [ev("apple", 0, 4)])
    assert sorted((r["l"], r["r"]) for r in t.output("out")) == [
        (1, -1),
        (2, 100),
        (3, 50),
        (4, 120),
    ]


# -- dead letters ---------------------------------------------------------------------


def fragile(r: dict[str, Any]) -> dict[str, Any]:
    if r["v"] == 13:
        raise ValueError("unlucky record")
    return {"key": r["key"], "n": r["v"] if r["v"] != 7 else "seven"}


def fragile_pipeline() -> Pipeline:
    p = Pipeline("fragile")
    src = p.read_kafka("in", "t", schema=EVENT, bounded=True)
    src.map("parse", fragile, schema=COUNT).write_jsonl("out", "/x")
    return p


def test_bad_records_are_dead_lettered_with_origin_stage_and_error() -> None:
    records = [ev("k", i, i) for i in range(20)]
    t = TestDriver(fragile_pipeline())
    t.send("in", records)
    t.end()
    assert t.output("out") == [{"key": "k", "n": i} for i in range(20) if i not in (7, 13)]
    # The map raised on 13 (its record is dead-lettered first, by the record-by-record
    # retry), then its output for 7 did not fit the schema (the output is dead-lettered).
    # The source and the map run in separate subtasks: the origin is the channel message
    # (all 20 records went in one message, at offset 0).
    thirteen, seven = t.dead_letters()
    origin = "spillway.test.ch.in.parse[0]@0"
    assert thirteen == DeadLetter(
        "parse", 0, "process", "ValueError: unlucky record", origin, ev("k", 13, 13)
    )
    assert seven == DeadLetter("parse", 0, "emit", seven.error, origin, {"key": "k", "n": "seven"})
    assert seven.error.startswith("SchemaMismatchError:")
    assert "'n' expects long" in seven.error


def test_without_a_dead_letter_channel_a_bad_record_stops_the_run() -> None:
    t = TestDriver(fragile_pipeline(), dead_letter=False)
    with pytest.raises(RecordError, match="unlucky record"):
        t.send("in", [ev("k", 1, 1), ev("k", 13, 13)])


def test_a_timestamp_that_fails_is_dead_lettered_by_the_source() -> None:
    p = Pipeline("ts")
    src = p.read_kafka(
        "in", "t", schema=EVENT, timestamp=lambda r: r["ts"] // 0 if r["v"] else r["ts"]
    )
    src.map("id", lambda r: r, schema=EVENT).write_jsonl("out", "/x")
    t = TestDriver(p)
    t.send("in", [ev("k", 5, 0), ev("k", 6, 1)])
    assert t.output("out") == [ev("k", 5, 0)]
    (d,) = t.dead_letters()
    assert (d.operator, d.stage, d.origin, d.record) == ("in", "source", "in[0]@1", ev("k", 6, 1))


def test_a_sent_record_that_does_not_fit_the_source_schema_is_refused_by_its_channel() -> None:
    # As with a real Kafka source, whose channel writer checks the field types.
    t = TestDriver(fragile_pipeline())
    t.send("in", [ev("k", 1, 1), {"key": "k", "ts": "soon", "v": 2}, ev("k", 3, 3)])
    assert t.output("out") == [{"key": "k", "n": 1}, {"key": "k", "n": 3}]
    (d,) = t.dead_letters()
    assert (d.operator, d.stage, d.origin) == ("in", "emit", "in[0]@1")
    assert d.record == {"key": "k", "ts": "soon", "v": 2}


# -- declared sources, and the same output as the Spark run ----------------------------


def test_clicks_example_equals_the_reference_the_spark_run_is_checked_against() -> None:
    """tests/integration/test_spark_jobs.py checks the clicks job's output on Spark
    against ``clicks.reference``; the driver's output of the same pipeline equals it."""
    records = 5_000
    for chaining in (False, True):
        t = TestDriver(clicks.build(records, "/unused", parallelism=2, chaining=chaining))
        t.run_source("clicks")
        rows = t.output("out")
        got = {r["page"]: (r["section"], r["views"]) for r in rows}
        assert len(rows) == len(got)
        assert got == clicks.reference(records)


def test_a_declared_file_source_runs_with_its_bad_lines_dead_lettered(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text(
        '{"key": "a", "ts": 1, "v": 1}\nnot json\n{"key": "b", "ts": 2, "v": 2}\n'
    )
    (tmp_path / "b.jsonl").write_text('{"key": "a", "ts": 3, "v": 4}\n')
    p = Pipeline("files")
    rows = p.read_files("rows", str(tmp_path / "*.jsonl"), format="jsonl", schema=EVENT)
    rows.key_by(lambda r: r["key"]).aggregate(
        "sum",
        init=lambda: 0,
        add=lambda n, r: n + r["v"],
        result=lambda k, n: {"key": k, "n": n},
        schema=COUNT,
    ).write_jsonl("out", "/x")
    t = TestDriver(p)
    t.run_source("rows")
    assert sorted(t.output("out"), key=lambda r: r["key"]) == [
        {"key": "a", "n": 5},
        {"key": "b", "n": 2},
    ]
    (d,) = t.dead_letters()
    assert (d.operator, d.stage, d.record, d.raw) == ("rows", "source", None, b"not json")
    assert d.origin == f"{tmp_path / 'a.jsonl'}:2"


def test_unsupported_and_unknown_names_say_so() -> None:
    p = Pipeline("batchy")
    src = p.read_kafka("in", "t", schema=EVENT, bounded=True)
    src.map_batches("b", lambda b: b, schema=EVENT).write_jsonl("out", "/x")
    with pytest.raises(PipelineDefinitionError, match="batch operators"):
        TestDriver(p)
    t = TestDriver(fragile_pipeline())
    with pytest.raises(KeyError):
        t.send("nope", [])
    with pytest.raises(ValueError, match=r"subtasks 0\.\.0"):
        t.send("in", [], subtask=1)
    with pytest.raises(ValueError, match="reads Kafka"):
        t.run_source("in")
    with pytest.raises(ValueError, match="cannot go back"):
        t.advance_processing_time(-1)
    endless = Pipeline("endless")
    endless.generate("gen", make=lambda i: ev("k", i, i), schema=EVENT, count=None).key_by(
        lambda r: r["key"]
    ).aggregate(
        "sum",
        init=lambda: 0,
        add=lambda n, r: n + r["v"],
        result=lambda k, n: {"key": k, "n": n},
        schema=COUNT,
        emit="updates",
    ).write_jsonl("out", "/x")
    t = TestDriver(endless)
    with pytest.raises(ValueError, match="without end"):
        t.run_source("gen")
    t.send("gen", [ev("k", 0, 2), ev("k", 1, 3)])  # an endless source can be fed instead
    assert t.output("out") == [{"key": "k", "n": 2}, {"key": "k", "n": 5}]


def test_the_user_page_example_runs() -> None:
    page = (Path(__file__).parents[2] / "docs" / "testing.md").read_text()
    code = page.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(code, "docs/testing.md", "exec"), {"__name__": "docs_testing"})


NARROW = {
    "type": "record",
    "name": "Narrow",
    "fields": [{"name": "key", "type": "string"}, {"name": "v", "type": "long"}],
}
SUMS = {
    "type": "record",
    "name": "Sums",
    "fields": [
        {"name": "key", "type": "string"},
        {"name": "start", "type": "long"},
        {"name": "end", "type": "long"},
        {"name": "total", "type": "long"},
        {"name": "n", "type": "long"},
    ],
}


@pytest.mark.parametrize("kafka_time", [False, True], ids=["timestamp_column", "kafka_time"])
def test_the_sources_time_travels_past_a_map_that_drops_it_to_the_window(
    kafka_time: bool,
) -> None:
    # The map keeps neither "ts" nor anything a time could be read from; the window has
    # no event_time=: it uses the time each record carries from the source.
    p = Pipeline("carried")
    if kafka_time:  # the Kafka record timestamp, which no field holds
        src = p.read_kafka("events", "t", schema=EVENT, watermarks=Watermarks.bounded(100))
    else:
        src = p.read_kafka("events", "t", schema=EVENT, timestamp_column="ts",
                           watermarks=Watermarks.bounded(100))  # fmt: skip
    narrow = src.map("narrow", lambda r: {"key": r["key"], "v": r["v"] * 10}, schema=NARROW)
    narrow.key_by("key").window("win", Tumbling(1000)).agg(
        total=spillway.sum("v"), n=spillway.count(), parallelism=2
    ).write_jsonl("out", "/x")
    sent = [ev("a", 100, 1), ev("b", 950, 2), ev("a", 999, 3), ev("a", 1000, 4),
            ev("b", 2500, 5), ev("a", 1100, 6), ev("b", 3000, 7)]  # fmt: skip
    t = TestDriver(p)
    times = [r["ts"] for r in sent] if kafka_time else None
    t.send("events", sent[:5], timestamps=times[:5] if times else None)
    # Watermark 2500 - 100 fires [0, 1000) and [1000, 2000), by hand:
    assert sorted(t.take("out"), key=lambda r: (r["start"], r["key"])) == [
        {"key": "a", "start": 0, "end": 1000, "total": 40, "n": 2},  # 100, 999
        {"key": "b", "start": 0, "end": 1000, "total": 20, "n": 1},  # 950
        {"key": "a", "start": 1000, "end": 2000, "total": 40, "n": 1},  # 1000
    ]
    t.send("events", sent[5:], timestamps=times[5:] if times else None)
    t.end()
    assert sorted(t.take("out"), key=lambda r: (r["start"], r["key"])) == [
        {"key": "b", "start": 2000, "end": 3000, "total": 50, "n": 1},
        {"key": "b", "start": 3000, "end": 4000, "total": 70, "n": 1},
    ]
    # 1100 came after [1000, 2000) fired: late by its carried time (the record has no field
    # with it any more).
    assert [(d.stage, d.record) for d in t.dead_letters()] == [("late", {"key": "a", "v": 60})]


JOINED = {
    "type": "record",
    "name": "Joined",
    "fields": [{"name": "key", "type": "string"}, {"name": "l", "type": "long"}],
}


def test_an_interval_joins_pair_carries_the_larger_of_its_records_times_to_a_window() -> None:
    # The pair keeps neither time; the window behind it has no event_time=.
    p = Pipeline("joined")
    left, right = events(p, "left", bound=1000), events(p, "right", bound=1000)
    pairs = connect(left, right).key_by(lambda r: r["key"], lambda r: r["key"]).interval_join(
        "ij", lower=0, upper=100, left_time=lambda r: r["ts"], right_time=lambda r: r["ts"],
        result=lambda a, b: {"key": a["key"], "l": a["v"]}, schema=JOINED,
    )  # fmt: skip
    pairs.key_by("key").window("win", Tumbling(100)).agg(n=spillway.count()).write_jsonl(
        "out", "/x"
    )
    t = TestDriver(p)
    t.send("left", [ev("a", 50, 1), ev("a", 120, 2)])
    t.send("right", [ev("a", 60, 0), ev("a", 150, 0), ev("a", 210, 0)])
    t.end()
    # Pairs (l, r): (50, 60) at 60, (50, 150) at 150, (120, 150) at 150, (120, 210) at 210.
    got = [(r["start"], r["n"]) for r in t.output("out")]
    assert sorted(got) == [(0, 1), (100, 2), (200, 1)]


def test_an_as_of_joins_result_carries_its_left_records_time_to_a_window() -> None:
    p = Pipeline("asof")
    left, right = events(p, "left", bound=1000), events(p, "right", bound=1000)
    joined = connect(left, right).key_by(lambda r: r["key"], lambda r: r["key"]).asof_join(
        "aj", left_time=lambda r: r["ts"], right_time=lambda r: r["ts"],
        result=lambda a, b: {"key": a["key"], "l": a["v"]}, schema=JOINED,
    )  # fmt: skip
    joined.key_by("key").window("win", Tumbling(100)).agg(n=spillway.count()).write_jsonl(
        "out", "/x"
    )
    t = TestDriver(p)
    t.send("right", [ev("a", 60, 0)])
    t.send("left", [ev("a", 150, 1), ev("a", 170, 2), ev("a", 230, 3)])
    t.end()
    # Each left record with right 60: at 150, 170 and 230, whatever its partner's time.
    assert sorted((r["start"], r["n"]) for r in t.output("out")) == [(100, 2), (200, 1)]
