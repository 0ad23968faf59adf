"""Operator logic and in-memory keyed state. No broker: flush_to/restore are never called."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from spillway.channels.errors import RecordError, SpillwayError
from spillway.channels.ids import Offset, SubtaskId, TopicPartition
from spillway.recovery.restore.state import ChangelogState
from spillway.spark_jobs.operators.operators import (
    FilterLogic,
    FlatMapLogic,
    KeyedAggregateLogic,
    MapLogic,
    TumblingWindowLogic,
)
from tests.unit.operatorfakes import SUBTASK


@dataclass
class FakeContext:
    subtask: SubtaskId = SUBTASK
    state: ChangelogState = field(default_factory=lambda: ChangelogState(TopicPartition("t", 0)))
    watermark: int | None = None


def rec(key: Any, t: int = 0, v: int = 1) -> dict[str, Any]:
    return {"key": key, "t": t, "v": v}


# -- stateless ---------------------------------------------------------------------------


def test_map_applies_fn_in_order() -> None:
    logic = MapLogic(lambda r: r * 10)
    logic.open(FakeContext())
    assert logic.process([1, 2, 3]) == [10, 20, 30]
    assert logic.process([]) == []
    assert list(logic.on_watermark(100)) == []
    assert list(logic.on_end()) == []


def test_flat_map_emits_zero_or_more_per_record_in_order() -> None:
    logic = FlatMapLogic(lambda n: [n] * n)
    logic.open(FakeContext())
    assert logic.process([2, 0, 1, 3]) == [2, 2, 1, 3, 3, 3]
    assert list(logic.on_end()) == []


def test_filter_keeps_matching_records_in_order() -> None:
    logic = FilterLogic(lambda n: n % 2 == 0)
    logic.open(FakeContext())
    assert logic.process([1, 2, 3, 4, 6, 7]) == [2, 4, 6]
    assert logic.process([1, 3]) == []
    assert list(logic.on_watermark(5)) == []


def test_stateless_operators_touch_no_state() -> None:
    ctx = FakeContext()
    for logic in (MapLogic(str), FlatMapLogic(lambda r: [r]), FilterLogic(bool)):
        logic.open(ctx)
        logic.process([1, 2])
    assert ctx.state.dirty_count() == 0
    assert len(ctx.state) == 0


# -- keyed aggregate ---------------------------------------------------------------------


def summing(emit: str) -> tuple[KeyedAggregateLogic, FakeContext]:
    logic = KeyedAggregateLogic(
        key_fn=lambda r: r["key"],
        init=lambda: 0,
        add=lambda acc, r: acc + r["v"],
        result=lambda k, acc: {"key": k, "sum": acc},
        emit=emit,
    )
    ctx = FakeContext()
    logic.open(ctx)
    return logic, ctx


def test_aggregate_final_emits_nothing_until_the_end() -> None:
    logic, ctx = summing("final")
    assert logic.process([rec("b", v=1), rec("a", v=2), rec("b", v=3)]) == []
    assert logic.process([rec("c", v=5), rec("a", v=1)]) == []
    assert list(logic.on_watermark(10**12)) == []
    assert logic.on_end() == [
        {"key": "a", "sum": 3},
        {"key": "b", "sum": 4},
        {"key": "c", "sum": 5},
    ]
    assert sorted(ctx.state.items()) == [("a", 3), ("b", 4), ("c", 5)]


def test_aggregate_final_exactly_one_result_per_key() -> None:
    logic, _ = summing("final")
    for i in range(50):
        logic.process([rec(f"k{i % 7}", v=1) for _ in range(3)])
    out = logic.on_end()
    assert [r["key"] for r in out] == [f"k{i}" for i in range(7)]
    assert sum(r["sum"] for r in out) == 150


def test_aggregate_final_results_are_sorted_by_int_key() -> None:
    # on_end promises results "sorted by key"; it sorts by repr(key), so 10 comes before 9.
    logic, _ = summing("final")
    logic.process([rec(10), rec(9), rec(2), rec(100)])
    assert [r["key"] for r in logic.on_end()] == [2, 9, 10, 100]


def test_aggregate_updates_emits_after_every_record() -> None:
    logic, ctx = summing("updates")
    assert logic.process([rec("a", v=1), rec("b", v=10), rec("a", v=2)]) == [
        {"key": "a", "sum": 1},
        {"key": "b", "sum": 10},
        {"key": "a", "sum": 3},
    ]
    assert logic.process([rec("a", v=4)]) == [{"key": "a", "sum": 7}]
    assert logic.on_end() == []
    assert sorted(ctx.state.items()) == [("a", 7), ("b", 10)]


def test_aggregate_continues_from_restored_state() -> None:
    logic, ctx = summing("updates")
    ctx.state.put("a", 100)
    assert logic.process([rec("a", v=1)]) == [{"key": "a", "sum": 101}]


def test_aggregate_writes_state_once_per_key_per_batch() -> None:
    logic, ctx = summing("final")
    logic.process([rec("a"), rec("a"), rec("b"), rec("a")])
    assert ctx.state.dirty_count() == 2
    assert ctx.state.get("a") == 3


def test_aggregate_with_none_init_works_like_reduce() -> None:
    logic = KeyedAggregateLogic(
        key_fn=lambda r: r["key"],
        init=lambda: None,
        add=lambda acc, r: r if acc is None else {**r, "v": acc["v"] + r["v"]},
        result=lambda _k, acc: acc,
        emit="final",
    )
    logic.open(FakeContext())
    logic.process([rec("a", v=1), rec("a", v=2)])
    logic.process([rec("a", v=3)])
    assert logic.on_end() == [rec("a", v=6)]


def test_aggregate_with_tuple_keys() -> None:
    logic = KeyedAggregateLogic(
        key_fn=lambda r: (r["key"], r["t"]),
        init=lambda: 0,
        add=lambda acc, _r: acc + 1,
        result=lambda k, acc: {"key": k, "n": acc},
        emit="final",
    )
    logic.open(FakeContext())
    logic.process([rec("a", 1), rec("a", 2), rec("a", 1)])
    assert logic.on_end() == [{"key": ("a", 1), "n": 2}, {"key": ("a", 2), "n": 1}]


# -- tumbling windows --------------------------------------------------------------------


def windowed(size: int = 10) -> tuple[TumblingWindowLogic, FakeContext]:
    logic = TumblingWindowLogic(
        key_fn=lambda r: r["key"],
        time_fn=lambda r: r["t"],
        size=size,
        init=lambda: 0,
        add=lambda acc, r: acc + r["v"],
        result=lambda k, start, end, acc: {"key": k, "start": start, "end": end, "sum": acc},
    )
    ctx = FakeContext()
    logic.open(ctx)
    return logic, ctx


def test_window_assigns_records_to_aligned_windows() -> None:
    logic, ctx = windowed(10)
    assert logic.process([rec("a", 0), rec("a", 9), rec("a", 10), rec("b", 19), rec("b", 20)]) == []
    assert sorted(ctx.state.items()) == [
        (("a", 0), 2),
        (("a", 10), 1),
        (("b", 10), 1),
        (("b", 20), 1),
    ]


def test_window_fires_only_when_the_watermark_passes_its_end() -> None:
    logic, ctx = windowed(10)
    logic.process([rec("a", 1), rec("b", 5), rec("a", 12)])
    assert logic.on_watermark(9) == []
    assert logic.on_watermark(10) == [
        {"key": "a", "start": 0, "end": 10, "sum": 1},
        {"key": "b", "start": 0, "end": 10, "sum": 1},
    ]
    assert logic.on_watermark(10) == []
    assert logic.on_watermark(19) == []
    assert logic.on_watermark(25) == [{"key": "a", "start": 10, "end": 20, "sum": 1}]
    assert list(ctx.state.items()) == []


def test_fired_windows_are_deleted_from_state() -> None:
    logic, ctx = windowed(10)
    logic.process([rec("a", 1), rec("a", 15)])
    logic.on_watermark(10)
    assert [k for k, _ in ctx.state.items()] == [("a", 10)]
    assert ctx.state.get(("a", 0)) is None
    # two puts, then a tombstone for the fired window: still two dirty keys
    assert ctx.state.dirty_count() == 2


def test_late_records_are_dropped_and_counted() -> None:
    logic, ctx = windowed(10)
    logic.process([rec("a", 3, v=1)])
    assert logic.on_watermark(10) == [{"key": "a", "start": 0, "end": 10, "sum": 1}]
    # window [0, 10) has fired: records for it are late; [10, 20) is still open
    assert logic.process([rec("a", 9, v=100), rec("b", 0, v=100), rec("a", 10, v=2)]) == []
    assert logic.late == 2
    assert list(ctx.state.items()) == [(("a", 10), 2)]
    assert logic.on_end() == [{"key": "a", "start": 10, "end": 20, "sum": 2}]
    assert logic.late == 2


def test_records_are_not_late_before_any_watermark() -> None:
    logic, _ = windowed(10)
    logic.process([rec("a", 1000), rec("a", 0)])
    assert logic.late == 0


def test_on_end_flushes_every_remaining_window() -> None:
    logic, ctx = windowed(10)
    logic.process([rec("b", 3), rec("a", 4), rec("a", 7, v=2)])
    assert logic.on_watermark(5) == []
    assert logic.on_end() == [
        {"key": "a", "start": 0, "end": 10, "sum": 3},
        {"key": "b", "start": 0, "end": 10, "sum": 1},
    ]
    assert list(ctx.state.items()) == []
    assert logic.on_end() == []


def test_on_end_emits_windows_of_a_key_in_time_order() -> None:
    # Sorting by repr((key, start)) puts ("a", 100) before ("a", 20).
    logic, _ = windowed(10)
    logic.process([rec("a", 25), rec("a", 105), rec("a", 5)])
    assert [r["start"] for r in logic.on_end()] == [0, 20, 100]


def test_window_continues_from_restored_state() -> None:
    logic, ctx = windowed(10)
    ctx.state.put(("a", 0), 40)
    logic.process([rec("a", 2, v=2)])
    assert logic.on_end() == [{"key": "a", "start": 0, "end": 10, "sum": 42}]


# -- ChangelogState ----------------------------------------------------------------------


def new_state() -> ChangelogState:
    return ChangelogState(TopicPartition("t", 0))


def test_state_put_get_delete() -> None:
    s = new_state()
    assert s.get("a") is None
    assert s.get("a", 7) == 7
    s.put("a", {"n": 1})
    s.put("b", [1, 2])
    assert s.get("a") == {"n": 1}
    assert s.get("b") == [1, 2]
    assert len(s) == 2
    s.delete("a")
    assert s.get("a") is None
    assert s.get("a", "gone") == "gone"
    assert len(s) == 1
    assert list(s.items()) == [("b", [1, 2])]


def test_state_dirty_count_counts_changed_keys_not_writes() -> None:
    s = new_state()
    assert s.dirty_count() == 0
    s.put("a", 1)
    s.put("a", 2)
    s.put("b", 1)
    assert s.dirty_count() == 2
    s.delete("a")  # a tombstone replaces the pending put
    assert s.dirty_count() == 2
    s.delete("never-there")  # still logged as a tombstone
    assert s.dirty_count() == 3
    s.put("a", 3)
    assert s.dirty_count() == 3
    assert sorted(s.items()) == [("a", 3), ("b", 1)]


def test_state_keys_of_different_types_do_not_collide() -> None:
    s = new_state()
    s.put(1, "int")
    s.put("1", "str")
    s.put(True, "bool")
    s.put(None, "none")
    s.put((1,), "tuple")
    assert [s.get(k) for k in (1, "1", True, None, (1,))] == ["int", "str", "bool", "none", "tuple"]
    assert len(s) == 5


def test_state_tuple_keys_stay_hashable() -> None:
    s = new_state()
    s.put(("a", 1), 1)
    s.put(("a", ("b", 2)), 2)
    keys = [k for k, _ in s.items()]
    assert keys == [("a", 1), ("a", ("b", 2))]
    assert all(isinstance(k, tuple) for k in keys)
    assert {k: v for k, v in s.items()} == {("a", 1): 1, ("a", ("b", 2)): 2}
    assert s.get(("a", ("b", 2))) == 2
    s.delete(("a", 1))
    assert list(s.items()) == [(("a", ("b", 2)), 2)]


def test_state_items_is_a_snapshot() -> None:
    s = new_state()
    s.put("a", 1)
    s.put("b", 2)
    items = s.items()
    for k, _ in items:  # deleting while iterating must be safe (windows do this)
        s.delete(k)
    assert list(items) == [("a", 1), ("b", 2)]
    assert len(s) == 0


def test_state_rejects_keys_that_are_not_json() -> None:
    s = new_state()
    with pytest.raises(SpillwayError, match="is not JSON-serializable"):
        s.put(object(), 1)
    with pytest.raises(SpillwayError, match="frozenset"):
        s.get(frozenset({1}))
    assert s.dirty_count() == 0


def test_restored_window_operator_drops_records_its_first_incarnation_already_emitted() -> None:
    # First incarnation: window [0, 10) fired at watermark 10, then a late record is dropped.
    first = FakeContext()
    w = TumblingWindowLogic(
        lambda r: r["key"],
        lambda r: r["t"],
        10,
        lambda: 0,
        lambda a, r: a + 1,
        lambda k, s, e, a: (k, s, a),
    )
    w.open(first)
    w.process([rec("a", 1)])
    assert w.on_watermark(10) == [("a", 0, 1)]
    # Restart from a checkpoint taken after the watermark: same state, same watermark.
    again = TumblingWindowLogic(
        lambda r: r["key"],
        lambda r: r["t"],
        10,
        lambda: 0,
        lambda a, r: a + 1,
        lambda k, s, e, a: (k, s, a),
    )
    again.open(FakeContext(state=first.state, watermark=10))
    assert again.process([rec("a", 3)]) == []
    assert again.late == 1
    assert again.on_end() == []  # the window is not emitted a second time


def test_failed_call_does_not_change_state_even_if_add_mutates_in_place() -> None:
    def add(acc: list[int], r: dict[str, Any]) -> list[int]:
        if r["v"] < 0:
            raise ValueError("bad record")
        acc[0] += 1  # in place, as Flink's AggregateFunction may
        return acc

    ctx = FakeContext()
    agg = KeyedAggregateLogic(lambda r: r["key"], lambda: [0], add, lambda k, a: (k, a[0]), "final")
    agg.open(ctx)
    agg.process([rec("a")])
    with pytest.raises(ValueError, match="bad record"):
        agg.process([rec("a"), rec("a"), rec("a", v=-1)])
    agg.process([rec("a")])  # what a dead-letter retry of the good records would do
    assert agg.on_end() == [("a", 2)]


def test_state_values_have_their_restored_types_from_the_start() -> None:
    state = ChangelogState(TopicPartition("t", 0))
    state.put("k", {1: (2, 3)})
    assert state.get("k") == {"1": [2, 3]}  # exactly what a restore from the changelog gives
    with pytest.raises(RecordError, match="not JSON-serializable"):
        state.put("k", {1, 2})


class _ChangelogMsg:
    def __init__(self, off: int, key: str, value: bytes | None) -> None:
        self._off, self._key, self._value = off, key, value

    def offset(self) -> int:
        return self._off

    def key(self) -> bytes:
        return self._key.encode()

    def value(self) -> bytes | None:
        return self._value


class _ChangelogConsumer:
    """A changelog partition as a list, read in offset order from the assigned offset."""

    def __init__(self, log: list[tuple[str, bytes | None]], *, batch: int | None = None) -> None:
        self.log = [_ChangelogMsg(i, k, v) for i, (k, v) in enumerate(log)]
        self.next = 0
        self.batch = batch  # None: always 2 messages, whatever is asked for
        self.asked: list[int] = []

    def watermarks(self, tp: TopicPartition) -> tuple[int, int]:
        return 0, len(self.log)

    def assign(self, starts: dict[TopicPartition, int]) -> None:
        self.next = int(next(iter(starts.values())))

    def consume(self, n: int, timeout: float) -> list[_ChangelogMsg]:
        self.asked.append(n)
        size = 2 if self.batch is None else min(n, self.batch)  # small: positions matter
        out = self.log[self.next : self.next + size]
        self.next += len(out)
        return out

    def position(self, tp: TopicPartition) -> int:
        return self.next


CHANGELOG = [
    ('"a"', b"1"),
    ('["k",2]', b'{"n":2}'),
    ('"b"', b"5"),
    ('"a"', None),  # tombstone
    ('"c"', b"[1,2]"),
    # offsets >= 5: written by a run that a rewind abandoned
    ('"b"', b"99"),
    ('"z"', b"7"),
]


def test_state_restore_replays_below_upto_and_decodes_on_use() -> None:
    s = new_state()
    n = s.restore(cast(Any, _ChangelogConsumer(CHANGELOG)), Offset(5))
    assert n == 5
    assert len(s) == 3
    assert s.get(("k", 2)) == {"n": 2}
    assert s.get("a") is None
    assert sorted(s.items(), key=repr) == [("b", 5), ("c", [1, 2]), (("k", 2), {"n": 2})]
    assert s.dirty_count() == 0  # a plain restore writes nothing back


def test_state_restore_after_rewind_rewrites_every_key_and_buries_abandoned_ones() -> None:
    s = new_state()
    s.restore(cast(Any, _ChangelogConsumer(CHANGELOG)), Offset(5), rewrite=True)
    assert sorted(s.items(), key=repr) == [("b", 5), ("c", [1, 2]), (("k", 2), {"n": 2})]
    written: list[tuple[bytes, bytes | None]] = []

    class _Producer:
        def produce(self, topic: str, partition: int, key: bytes, value: bytes | None) -> None:
            written.append((key, value))

    assert s.flush_to(cast(Any, _Producer())) == 4
    # Every live key with its value at the checkpoint; a tombstone for "z", which only the
    # abandoned run wrote. "b"'s abandoned 99 is overwritten by 5.
    assert sorted(written) == [
        (b'"b"', b"5"),
        (b'"c"', b"[1,2]"),
        (b'"z"', None),
        (b'["k",2]', b'{"n":2}'),
    ]


@pytest.mark.parametrize("rewrite", [False, True])
def test_state_restore_never_asks_for_more_than_is_left(rewrite: bool) -> None:
    # A real consumer waits out its timeout when asked for more messages than will come,
    # so the last batch of a restore asks for exactly what is left below the end.
    consumer = _ChangelogConsumer(CHANGELOG, batch=3)
    s = new_state()
    assert s.restore(cast(Any, consumer), Offset(5), rewrite=rewrite) == 5
    assert consumer.asked == ([7, 4, 1] if rewrite else [5, 2])
    assert sorted(s.items(), key=repr) == [("b", 5), ("c", [1, 2]), (("k", 2), {"n": 2})]
    assert s.dirty_count() == (4 if rewrite else 0)


def test_state_corrupt_changelog_value_is_reported_on_first_use() -> None:
    s = new_state()
    s.restore(cast(Any, _ChangelogConsumer([('"a"', b"{not json")])), Offset(1))
    with pytest.raises(
        SpillwayError, match=r'changelog t\[0\] holds a corrupt record for state key "a"'
    ):
        s.get("a")
