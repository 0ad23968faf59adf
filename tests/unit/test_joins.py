"""The joins without a broker: the pure bookkeeping (spillway.spark_jobs.operators.joinbook) and the
join
logic over keyed state (spillway.spark_jobs.operators.joins), each against a brute-force reference
on
shuffled input with watermarks that leave some records too late, restored midway."""

from __future__ import annotations

import random
from typing import Any

import pytest

from spillway.channels.errors import PipelineDefinitionError
from spillway.spark_jobs.api.pipeline import Pipeline, connect
from spillway.spark_jobs.operators.joinbook import LEFT, RIGHT, AsOfBook, IntervalBook, TimedRows
from spillway.spark_jobs.operators.joins import AsOfJoinLogic, IntervalJoinLogic, LookupJoinLogic
from tests.unit.multiinputfakes import EVENT, OTHER, gen
from tests.unit.operatorfakes import Ctx, restored

Rec = dict[str, Any]
SIDES = {"a": (LEFT, lambda r: r["k"], lambda r: r["ts"]),
         "b": (RIGHT, lambda r: r["k"], lambda r: r["ts"])}  # fmt: skip


def pair(left: Rec, right: Rec | None) -> Rec:
    return {"l": left["id"], "r": right["id"] if right is not None else None}


def test_timed_rows_keep_order_and_number_equal_times_by_arrival() -> None:
    rows = TimedRows()
    for ts, rec in [(5, "a"), (3, "b"), (5, "c"), (9, "d")]:
        rows.add(ts, rows.next_n(ts), rec)
    assert rows.keys == [(3, 0), (5, 0), (5, 1), (9, 0)]
    assert [r[2] for r in rows.between(4, 9)] == ["a", "c", "d"]
    assert rows.latest_at_or_before(8) == (5, 1, "c")
    assert rows.latest_at_or_before(2) is None
    assert rows.drop_before_latest(6) == [(3, 0), (5, 0)]
    assert rows.drop_through(5) == [(5, 1)]
    assert rows.keys == [(9, 0)]


def arrivals(seed: int, n: int, keys: list[str]) -> list[tuple[str, Rec]]:
    """``n`` records of both sides over a skewed key set (the first key holds half), in
    time order up to a random delay of 0..300 ms, and a few 2 s late."""
    rng = random.Random(seed)
    recs = []
    for i in range(n):
        k = keys[0] if rng.random() < 0.5 else rng.choice(keys)
        ts = i * 10
        delay = 2000 if rng.random() < 0.03 else rng.randrange(300)
        recs.append((ts + delay, rng.choice("ab"), {"id": i, "k": k, "ts": ts}))
    return [(side, r) for _arr, side, r in sorted(recs, key=lambda x: (x[0], x[2]["id"]))]


def run(
    make: Any, feed: list[tuple[str, Rec]], bound: int, restore_at: int
) -> tuple[list[Rec], list[Rec], Any]:
    """Feed the records in small batches of one input each, the watermark trailing the
    largest time seen by ``bound``; restart from a copy of the state at ``restore_at``."""
    logic, ctx = make(), Ctx()
    logic.open(ctx)
    out: list[Rec] = []
    late: list[Rec] = []
    top, i = 0, 0
    while i < len(feed):
        side = feed[i][0]
        j = i
        while j < len(feed) and feed[j][0] == side and j - i < 3:
            j += 1
        batch = [r for _s, r in feed[i:j]]
        out += logic.process_input(side, batch)
        late += [a.record for a in logic.set_aside()]
        top = max([top, *(r["ts"] for r in batch)])
        out += logic.on_watermark(top - bound)
        if i <= restore_at < j:  # a restart: only the state and the watermark survive
            ctx = restored(ctx, logic._wm)
            logic = make()
            logic.open(ctx)
        i = j
    out += logic.on_end()
    return out, late, ctx


@pytest.mark.parametrize("seed", range(4))
def test_interval_join_emits_each_pair_of_the_records_in_time_once(seed: int) -> None:
    feed = arrivals(seed, 600, ["hot", "k1", "k2", "k3"])
    lower, upper, lateness = -40, 60, 100

    def make() -> IntervalJoinLogic:
        return IntervalJoinLogic("ij", SIDES, lower, upper, lateness, pair)

    out, late, ctx = run(make, feed, 50, len(feed) // 2)
    assert late  # the 2 s late records
    kept = [(s, r) for s, r in feed if r not in late]
    lefts = [r for s, r in kept if s == "a"]
    rights = [r for s, r in kept if s == "b"]
    want = [
        {"l": a["id"], "r": b["id"]}
        for a in lefts
        for b in rights
        if a["k"] == b["k"] and a["ts"] + lower <= b["ts"] <= a["ts"] + upper
    ]
    key = lambda p: (p["l"], p["r"])  # noqa: E731
    assert sorted(out, key=key) == sorted(want, key=key)
    assert len({key(p) for p in out}) == len(out)
    assert list(ctx.state.items()) == []  # all expired at the end


def test_interval_buffers_stay_bounded_by_the_watermark() -> None:
    book = IntervalBook(0, 100, 0)
    for t in range(0, 100_000, 10):
        assert book.add(LEFT, "k", t, t, t) is not None
        book.add(RIGHT, "k", t, t, t)
        book.expire(t)
    # left kept for upper + 1 ms, right for -lower + 1: about 10 + 1 records.
    assert book.size() <= 13


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("retention", [None, 150])
def test_as_of_join_gives_each_left_record_the_latest_right_one_at_or_before_it(
    seed: int, retention: int | None
) -> None:
    feed = arrivals(seed, 600, ["hot", "k1", "k2", "k3", "k4"])
    lateness = 100

    def make() -> AsOfJoinLogic:
        return AsOfJoinLogic("asof", SIDES, lateness, retention, "left", pair)

    out, late, ctx = run(make, feed, 50, len(feed) // 3)
    assert late
    kept = [(s, r) for s, r in feed if r not in late]
    rights = [r for s, r in kept if s == "b"]
    want = []
    for s, a in kept:
        if s != "a":
            continue
        before = [
            b for b in rights
            if b["k"] == a["k"] and b["ts"] <= a["ts"]
            and (retention is None or a["ts"] - b["ts"] <= retention)
        ]  # fmt: skip
        # Equal times: the later arrival wins.
        best = max(before, key=lambda b: (b["ts"], rights.index(b))) if before else None
        want.append(pair(a, best))
    assert sorted(out, key=lambda p: p["l"]) == sorted(want, key=lambda p: p["l"])
    assert list(ctx.state.items()) == []


def test_as_of_right_history_is_pruned_to_what_later_left_records_can_want() -> None:
    book = AsOfBook(lateness=0, retention=None)
    for t in range(0, 10_000, 10):
        book.add(RIGHT, "k", t, t)
        book.advance(t)
    assert book.size() <= 2
    assert book.match("k", 10_000) == (9990, 0, 9990)
    book = AsOfBook(lateness=0, retention=50)
    book.add(RIGHT, "k", 0, "old")
    assert book.advance(100) == ([], [(RIGHT, "k", 0, 0)])


def test_as_of_inner_leaves_out_left_records_without_a_right_one() -> None:
    logic, ctx = AsOfJoinLogic("asof", SIDES, 0, None, "inner", pair), Ctx()
    logic.open(ctx)
    logic.process_input("a", [{"id": 1, "k": "x", "ts": 5}, {"id": 2, "k": "y", "ts": 5}])
    logic.process_input("b", [{"id": 3, "k": "x", "ts": 5}])
    assert logic.on_watermark(5) == []  # held until the watermark passes 5
    assert logic.on_watermark(6) == [{"l": 1, "r": 3}]


def test_lookup_join_uses_the_table_row_current_at_arrival_and_restores_it() -> None:
    sides = {"events": ("s", lambda r: r["k"], None), "table": ("t", lambda r: r["k"], None)}

    def make() -> LookupJoinLogic:
        return LookupJoinLogic("lk", sides, "left", lambda e, row: {**e, "v": row and row["v"]})

    logic, ctx = make(), Ctx()
    logic.open(ctx)
    assert logic.process_input("events", [{"k": "a", "id": 1}]) == [{"k": "a", "id": 1, "v": None}]
    logic.process_input("table", [{"k": "a", "v": 1}, {"k": "a", "v": 2}])
    ctx = restored(ctx, None)
    logic = make()
    logic.open(ctx)
    assert logic.process_input("events", [{"k": "a", "id": 2}]) == [{"k": "a", "id": 2, "v": 2}]
    inner = LookupJoinLogic("lk", sides, "inner", lambda e, row: e)
    inner.open(Ctx())
    assert inner.process_input("events", [{"k": "a", "id": 3}]) == []


def test_a_failing_result_leaves_the_buffers_as_they_were() -> None:
    def bad(left: Rec, right: Rec) -> Rec:
        raise ValueError("no")

    logic, ctx = IntervalJoinLogic("ij", SIDES, 0, 10, 0, bad), Ctx()
    logic.open(ctx)
    logic.process_input("a", [{"id": 1, "k": "x", "ts": 5}])
    with pytest.raises(ValueError, match="no"):
        logic.process_input("b", [{"id": 2, "k": "x", "ts": 7}])
    assert [k[2] for k, _v in ctx.state.items()] == [LEFT]


def test_joins_build_keyed_two_input_operators_and_check_their_arguments() -> None:
    p = Pipeline("j")
    a, b = gen(p, "a", EVENT), gen(p, "b", OTHER, 2)
    keyed = connect(a, b).key_by(lambda r: r["k"], lambda r: str(r["n"]))
    keyed.interval_join(
        "ij", lower=-5, upper=5, left_time=lambda r: 0, right_time=lambda r: 0,
        result=lambda x, y: x, schema=EVENT, parallelism=3,
    ).write_jsonl("out", "/x")  # fmt: skip
    plan = p.plan("j")
    op = plan.operator("ij")
    assert (op.parallelism, op.stateful, op.description["op"]) == (3, True, "interval_join")
    assert [(e.input_name, e.kind) for e in plan.inputs_of("ij")] == [("a", "hash"), ("b", "hash")]
    with pytest.raises(PipelineDefinitionError, match="lower bound 5 is above upper bound 1"):
        keyed.interval_join(
            "bad", lower=5, upper=1, left_time=lambda r: 0, right_time=lambda r: 0,
            result=lambda x, y: x, schema=EVENT,
        )  # fmt: skip
    with pytest.raises(PipelineDefinitionError, match="how must be 'inner' or 'left'"):
        keyed.lookup_join("lk", result=lambda x, y: x, how="outer", schema=EVENT)
    with pytest.raises(PipelineDefinitionError, match="allowed_lateness_ms must be"):
        keyed.asof_join(
            "aj", left_time=lambda r: 0, right_time=lambda r: 0, result=lambda x, y: x,
            allowed_lateness_ms=-1, schema=EVENT,
        )  # fmt: skip
