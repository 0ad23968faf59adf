"""Window kinds against plain-Python references on out-of-order input with late records;
the timer index; restore of windows from their keyed state. No broker."""

from __future__ import annotations

import random
from typing import Any, cast

import pytest

from bench.windows import _Changelog
from spillway.channels.errors import PipelineDefinitionError
from spillway.channels.ids import Offset, TopicPartition
from spillway.recovery.restore.state import ChangelogState
from spillway.spark_jobs.api.pipeline import Pipeline
from spillway.spark_jobs.api.windowspec import Count, Hopping, Session, Tumbling
from spillway.spark_jobs.operators.timers import TimerIndex
from spillway.spark_jobs.operators.windows import (
    CountWindowLogic,
    FixedWindowLogic,
    SessionWindowLogic,
)
from tests.unit.operatorfakes import Ctx

Event = tuple[str, Any]
REC = {
    "type": "record",
    "name": "R",
    "fields": [{"name": "k", "type": "long"}],
}  # ("r", record) or ("w", watermark)


def add(acc: list[int], r: dict[str, Any]) -> list[int]:
    return [acc[0] + 1, acc[1] + r["seq"]]


def merge(a: list[int], b: list[int]) -> list[int]:
    return [a[0] + b[0], a[1] + b[1]]


def result(key: str, start: int, end: int, acc: list[int]) -> dict[str, Any]:
    return {"key": key, "start": start, "end": end, "n": acc[0], "seqs": acc[1]}


def summary(key: str, start: int, end: int, recs: list[dict[str, Any]]) -> dict[str, Any]:
    """What the reference computes from the records themselves (not from ``add``)."""
    return {
        "key": key,
        "start": start,
        "end": end,
        "n": len(recs),
        "seqs": sum(r["seq"] for r in recs),
    }


def events(
    seed: int, n: int = 600, keys: int = 4, bound: int = 300, late_every: int = 17
) -> list[Event]:
    """Out-of-order records (within ``bound`` of the frontier), a watermark every few
    records (frontier - bound), and every ``late_every``-th record far behind it."""
    rng = random.Random(seed)
    out: list[Event] = []
    frontier = 1000
    for seq in range(n):
        frontier += rng.randrange(0, 40)
        t = frontier - rng.randrange(bound)
        if seq % late_every == late_every - 1:
            t = frontier - bound - rng.randrange(1, 2000)  # behind the watermark: maybe late
        out.append(("r", {"seq": seq, "key": f"k{rng.randrange(keys)}", "t": t}))
        if seq % 5 == 4:
            out.append(("w", frontier - bound))
    return out


def run(logic: Any, evs: list[Event], restart_at: int | None = None) -> tuple[list[Any], list[int]]:
    """Feed ``evs`` (one record per call, watermarks when they rise); with ``restart_at``,
    continue from there in a fresh logic over a copy of the state, as after a restore."""
    ctx = Ctx()
    logic.open(ctx)
    out: list[Any] = []
    late: list[int] = []
    wm: int | None = None
    for i, (kind, x) in enumerate(evs):
        if i == restart_at:
            restored = ChangelogState(TopicPartition("t", 0))
            for k, v in ctx.state.items():
                restored.put(k, v)
            ctx = Ctx(state=restored, watermark=wm)
            logic = type(logic)(*logic.args)
            logic.open(ctx)
        if kind == "r":
            out += logic.process([x])
            late += [a.record["seq"] for a in logic.set_aside()]
        elif wm is None or x > wm:
            wm = x
            out += logic.on_watermark(x)
    out += logic.on_end()
    return out, late


def _keep_args(cls: type, *args: Any) -> Any:
    logic = cls(*args)
    logic.args = args
    return logic


def ref_fixed(
    evs: list[Event], size: int, hop: int, lateness: int, emit: str
) -> tuple[list[Any], list[int]]:
    """Brute force: every window's records, every watermark scans every window."""
    windows: dict[tuple[str, int], list[dict[str, Any]]] = {}
    gone: set[tuple[str, int]] = set()
    out: list[Any] = []
    late: list[int] = []
    wm: int | None = None
    for kind, x in evs:
        if kind == "r":
            t, k = x["t"], x["key"]
            starts = [s for s in range(t - t % hop, t - size, -hop)]
            live = [s for s in starts if wm is None or s + size + lateness > wm]
            if not live:
                late.append(x["seq"])
                continue
            for s in sorted(live):
                windows.setdefault((k, s), []).append(x)
                if emit == "updates" or (wm is not None and s + size <= wm):
                    out.append(summary(k, s, s + size, windows[(k, s)]))
        elif wm is None or x > wm:
            before, wm = wm, x
            for k, s in sorted(windows, key=lambda ks: (ks[1] + size, ks)):
                end = s + size
                if emit == "final" and end <= wm and (before is None or end > before):
                    out.append(summary(k, s, end, windows[(k, s)]))
                if end + lateness <= wm:
                    gone.add((k, s))
            windows = {ks: v for ks, v in windows.items() if ks not in gone}
    for k, s in sorted(windows, key=lambda ks: (ks[1] + size, ks)):
        if emit == "final" and (wm is None or s + size > wm):
            out.append(summary(k, s, s + size, windows[(k, s)]))
    return out, late


@pytest.mark.parametrize(("size", "hop"), [(500, 500), (600, 200), (500, 300)])
@pytest.mark.parametrize("lateness", [0, 250])
@pytest.mark.parametrize("emit", ["final", "updates"])
def test_fixed_windows_match_the_reference(size: int, hop: int, lateness: int, emit: str) -> None:
    evs = events(seed=size + hop + lateness)
    args = (
        lambda r: r["key"],
        lambda r: r["t"],
        size,
        hop,
        lambda: [0, 0],
        add,
        result,
        lateness,
        emit,
    )
    got, late = run(_keep_args(FixedWindowLogic, *args), evs)
    want, want_late = ref_fixed(evs, size, hop, lateness, emit)
    assert late == want_late
    assert len(want_late) >= 5  # the input does hold late records
    assert got == want
    # A restart in the middle (state and watermark restored, timers rebuilt) changes nothing.
    again, late2 = run(_keep_args(FixedWindowLogic, *args), evs, restart_at=len(evs) // 2)
    assert (again, late2) == (got, late)


def test_lateness_re_emits_updated_results_and_only_later_records_are_set_aside() -> None:
    logic = FixedWindowLogic(
        lambda r: r["key"], lambda r: r["t"], 100, 100, lambda: [0, 0], add, result, 50
    )
    logic.open(Ctx())
    assert logic.process([{"key": "a", "t": 10, "seq": 1}]) == []
    assert logic.on_watermark(120) == [result("a", 0, 100, [1, 1])]
    # within lateness: the window's updated result, at once
    assert logic.process([{"key": "a", "t": 20, "seq": 2}]) == [result("a", 0, 100, [2, 3])]
    assert logic.set_aside() == []
    assert logic.on_watermark(150) == []  # clean-up only
    assert logic.process([{"key": "a", "t": 30, "seq": 4}]) == []
    (aside,) = logic.set_aside()
    assert aside.kind == "late"
    assert aside.record["seq"] == 4
    assert "past its allowed lateness of 50 ms at watermark 150" in aside.reason
    assert logic.late == 1
    assert len(logic._state()) == 0
    assert len(logic.timers) == 0


def ref_sessions(
    evs: list[Event], gap: int, lateness: int, emit: str
) -> tuple[list[Any], list[int]]:
    """Sessions as lists of records, merged by scanning every session of the key."""
    live: dict[str, list[list[dict[str, Any]]]] = {}
    out: list[Any] = []
    late: list[int] = []
    wm: int | None = None

    def bounds(recs: list[dict[str, Any]]) -> tuple[int, int]:
        return min(r["t"] for r in recs), max(r["t"] for r in recs) + gap

    for kind, x in evs:
        if kind == "r":
            t, k = x["t"], x["key"]
            sessions = live.setdefault(k, [])
            hit = [s for s in sessions if bounds(s)[0] <= t + gap and t <= bounds(s)[1]]
            merged = [r for s in hit for r in s] + [x]
            start, end = bounds(merged)
            if wm is not None and end + lateness <= wm:
                late.append(x["seq"])
                continue
            live[k] = [s for s in sessions if s not in hit] + [merged]
            if emit == "updates" or (wm is not None and end <= wm):
                out.append(summary(k, start, end, merged))
        elif wm is None or x > wm:
            before, wm = wm, x
            fired = []
            for k, sessions in live.items():
                for s in sessions:
                    start, end = bounds(s)
                    if emit == "final" and end <= wm and (before is None or end > before):
                        fired.append(((end, k, start), summary(k, start, end, s)))
                live[k] = [s for s in sessions if bounds(s)[1] + lateness > wm]
            out += [o for _, o in sorted(fired, key=lambda f: f[0])]
    rest = sorted(((bounds(s)[1], k, bounds(s)[0]), s) for k, ss in live.items() for s in ss)
    out += [
        summary(k, st, e, s) for (e, k, st), s in rest if emit == "final" and (wm is None or e > wm)
    ]
    return out, late


@pytest.mark.parametrize("gap", [30, 120])
@pytest.mark.parametrize("lateness", [0, 200])
@pytest.mark.parametrize("emit", ["final", "updates"])
def test_session_windows_match_the_reference(gap: int, lateness: int, emit: str) -> None:
    evs = events(seed=gap * 7 + lateness, keys=3)
    args = (
        lambda r: r["key"],
        lambda r: r["t"],
        gap,
        lambda: [0, 0],
        add,
        merge,
        result,
        lateness,
        emit,
    )
    got, late = run(_keep_args(SessionWindowLogic, *args), evs)
    want, want_late = ref_sessions(evs, gap, lateness, emit)
    assert late == want_late
    assert len(want_late) >= 3
    assert got == want
    assert any(o["n"] > 2 for o in got)  # sessions did merge records
    again, late2 = run(_keep_args(SessionWindowLogic, *args), evs, restart_at=len(evs) // 3)
    assert (again, late2) == (got, late)


def test_a_record_bridging_two_sessions_merges_them() -> None:
    logic = SessionWindowLogic(
        lambda r: "k", lambda r: r["t"], 10, lambda: [0, 0], add, merge, result
    )
    logic.open(Ctx())
    logic.process([{"t": 0, "seq": 1}, {"t": 20, "seq": 2}])
    assert logic._state().get("k") == [[0, 10, [1, 1]], [20, 30, [1, 2]]]
    assert len(logic.timers) == 2
    logic.process([{"t": 10, "seq": 4}])  # [10, 20) touches both: one session (Flink's rule)
    assert logic._state().get("k") == [[0, 30, [3, 7]]]
    assert len(logic.timers) == 1
    assert logic.on_watermark(29) == []
    assert logic.on_watermark(30) == [result("k", 0, 30, [3, 7])]


@pytest.mark.parametrize("emit", ["final", "updates"])
def test_count_windows_match_the_reference(emit: str) -> None:
    evs = [e for e in events(seed=3) if e[0] == "r"]
    args = (lambda r: r["key"], 4, lambda: [0, 0], add, result, emit)
    got, late = run(_keep_args(CountWindowLogic, *args), evs)
    seen: dict[str, list[dict[str, Any]]] = {}
    want = []
    for _, r in evs:
        recs = seen.setdefault(r["key"], [])
        recs.append(r)
        n = (len(recs) - 1) // 4
        if emit == "updates" or len(recs) % 4 == 0:
            want.append(summary(r["key"], n * 4, n * 4 + 4, recs[n * 4 :]))
    if emit == "final":
        want += [
            summary(k, len(v) // 4 * 4, len(v) // 4 * 4 + 4, v[len(v) // 4 * 4 :])
            for k, v in sorted(seen.items())
            if len(v) % 4
        ]
    assert late == []
    assert got == want
    again, _ = run(_keep_args(CountWindowLogic, *args), evs, restart_at=len(evs) // 2)
    assert again == got


def test_timer_index_fires_in_time_then_key_order_once_and_honours_deletes() -> None:
    idx = TimerIndex()
    for t, k in [(5, "b"), (5, "a"), (3, "z"), (9, "c"), (5, "a")]:
        idx.register(t, k)
    idx.delete(9, "c")
    idx.register(7, ("tuple", 1))
    assert len(idx) == 4
    assert idx.next_time() == 3
    assert idx.pop_due(5) == [(3, "z"), (5, "a"), (5, "b")]
    assert idx.pop_due(6) == []
    assert idx.pop_due(100) == [(7, ("tuple", 1))]
    assert idx.next_time() is None
    assert len(idx) == 0
    for i in range(5000):  # lazy deletes are compacted away
        idx.register(i, "k")
        idx.delete(i, "k")
    assert len(idx._heap) <= 1024 + 2


def test_window_arguments_are_checked() -> None:
    keyed = (
        Pipeline("p")
        .generate("g", count=1, make=lambda i: {"k": i}, schema=REC)
        .key_by(lambda r: r)
    )

    def at(r: Any) -> int:
        return 0

    with pytest.raises(PipelineDefinitionError, match="'h': hop 20 ms is larger than size 10"):
        keyed.window("h", Hopping(10, 20), event_time=at)
    with pytest.raises(PipelineDefinitionError, match="'s': allowed_lateness must be >= 0 ms"):
        keyed.window("s", Hopping(10, 5), allowed_lateness=-1, event_time=at)
    with pytest.raises(PipelineDefinitionError, match="'x': session gap must be >= 1 ms, got 0"):
        keyed.window("x", Session(0), event_time=at)
    with pytest.raises(PipelineDefinitionError, match=r"'x': a Session window .* needs merge="):
        keyed.window("x", Session(5), event_time=at).aggregate(init=list, add=add, result=result)
    with pytest.raises(
        PipelineDefinitionError, match="'c': emit must be one of 'final', 'updates', got 'all'"
    ):
        keyed.window("c", Count(3)).aggregate(init=list, add=add, result=result, emit="all")


def test_every_event_time_window_behind_a_source_without_watermarks_is_rejected() -> None:
    p = Pipeline("w")
    events = p.read_kafka("clicks", "in", schema=REC)
    keyed = events.key_by(lambda r: r["k"])
    common: dict[str, Any] = {
        "init": list,
        "add": add,
        "result": result,
        "schema": {"type": "record", "name": "W", "fields": [{"name": "key", "type": "long"}]},
    }

    def at(r: Any) -> int:
        return 0

    keyed.window("tumble", Tumbling(10), event_time=at).aggregate(**common).write_jsonl("o1", "/x")
    keyed.window("hop", Hopping(10, 5), event_time=at).aggregate(**common).write_jsonl("o2", "/x")
    keyed.window("sess", Session(5), event_time=at).aggregate(merge=merge, **common).write_jsonl(
        "o3", "/x"
    )
    keyed.window("count", Count(3)).aggregate(**common).write_jsonl("o4", "/x")
    with pytest.raises(PipelineDefinitionError) as info:
        p.plan("j")
    msg = str(info.value)
    for name in ("tumble", "hop", "sess"):
        assert f"window {name!r} would never fire: source 'clicks'" in msg
    assert "'count' would never fire" not in msg  # count windows need no event time


def test_windows_restored_from_changelog_bytes_fire_as_before() -> None:
    args = (lambda r: r["key"], lambda r: r["t"], 100, 50, lambda: [0, 0], add, result, 100)
    logic, ctx = FixedWindowLogic(*args), Ctx()
    logic.open(ctx)
    logic.process([{"key": k, "t": t, "seq": t} for k in ("a", ("t", 1)) for t in (10, 60, 140)])
    assert len(logic.on_watermark(100)) == 4  # [-50, 50) and [0, 100) of both keys
    log = _Changelog()
    ctx.state.flush_to(cast(Any, log))
    state = ChangelogState(TopicPartition("t", 0))
    state.restore(cast(Any, log), Offset(len(log.log)))
    assert sorted(state.keys(), key=repr) == sorted((k for k, _ in ctx.state.items()), key=repr)
    again = FixedWindowLogic(*args)
    again.open(Ctx(state=state, watermark=100))
    assert len(again.timers) == len(logic.timers) == 8
    # within lateness: fired windows update at once; the rest fire later, as without restore
    for w in (again, logic):
        assert w.process([{"key": "a", "t": 20, "seq": 1}]) == [
            result("a", -50, 50, [2, 11]),
            result("a", 0, 100, [3, 71]),
        ]
    fired = logic.on_watermark(250)
    assert again.on_watermark(250) == fired
    assert [(w["start"], w["n"]) for w in fired] == [(50, 2), (50, 2), (100, 1), (100, 1)]
    assert again.on_watermark(400) == logic.on_watermark(400) == []
    assert len(again.timers) == len(again._state()) == 0
