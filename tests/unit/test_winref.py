"""The windows benchmark's references and checker (bench.winref), without a broker."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from bench import joinref, windowpeers, winref
from bench.winref import Window


def _naive_hopping(entries: list[winref.Entry], size: int, hop: int) -> Counter[Window]:
    """By the definition: every start (a multiple of hop) and every key, the entries in it."""
    out: Counter[Window] = Counter()
    hi = max(t for _k, t, _v in entries)
    for key in {k for k, _t, _v in entries}:
        for start in range(0, hi + 1, hop):
            inside = [v for k, t, v in entries if k == key and start <= t < start + size]
            if inside:
                out[Window(key, start, start + size, sum(inside))] += 1
    return out


def _naive_record_aligned(entries: list[winref.Entry], size: int) -> Counter[Window]:
    out: Counter[Window] = Counter()
    for key, t, _v in entries:
        total = sum(v for k, u, v in entries if k == key and t - size <= u <= t)
        out[Window(key, max(0, t - size), t, total)] += 1
    return out


def _random_entries(seed: int, n: int = 300) -> list[winref.Entry]:
    rng = random.Random(seed)
    t = 0
    out = []
    for _ in range(n):
        t += rng.randint(1, 7)  # strictly increasing overall, so per key too
        out.append((rng.choice("abcd"), t, rng.randint(0, 9)))
    return out


def test_hopping_by_hand() -> None:
    entries = [("a", 3, 1), ("a", 7, 2), ("b", 12, 4)]
    assert winref.hopping(entries, 10, 5) == Counter(
        [
            Window("a", 0, 10, 3),
            Window("a", 5, 15, 2),
            Window("b", 5, 15, 4),
            Window("b", 10, 20, 4),
        ]
    )


@pytest.mark.parametrize(("size", "hop"), [(10, 10), (10, 5), (12, 4), (9, 2), (5, 1)])
@pytest.mark.parametrize("seed", [1, 2])
def test_hopping_matches_the_definition(size: int, hop: int, seed: int) -> None:
    entries = _random_entries(seed)
    assert winref.hopping(entries, size, hop) == _naive_hopping(entries, size, hop)


def test_hopping_rejects_a_hop_larger_than_the_size() -> None:
    with pytest.raises(ValueError, match="hop"):
        winref.hopping([("a", 1, 1)], 5, 6)


def test_record_aligned_by_hand() -> None:
    entries = [("a", 0, 1), ("a", 5, 2), ("a", 10, 3), ("b", 11, 9), ("a", 16, 4)]
    assert winref.record_aligned(entries, 10) == Counter(
        [
            Window("a", 0, 0, 1),
            Window("a", 0, 5, 3),
            Window("a", 0, 10, 6),  # both ends included: the record at 0 is in
            Window("b", 1, 11, 9),
            Window("a", 6, 16, 7),
        ]
    )


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_record_aligned_matches_the_definition(seed: int) -> None:
    entries = _random_entries(seed)
    assert winref.record_aligned(entries, 20) == _naive_record_aligned(entries, 20)


def test_record_aligned_refuses_unordered_keys() -> None:
    with pytest.raises(ValueError, match="key 'a': event time 5 after 5"):
        winref.record_aligned([("a", 5, 1), ("b", 1, 1), ("a", 5, 1)], 10)


def test_closed_by_key_open_and_closed_ends() -> None:
    windows = Counter([Window("a", 0, 10, 1), Window("a", 10, 20, 1), Window("b", 0, 10, 1)])
    latest = {"a": 20, "b": 9}
    assert winref.closed_by_key(windows, latest, grace=0, closed_end=False) == Counter(
        [Window("a", 0, 10, 1), Window("a", 10, 20, 1)]
    )
    # A window that includes its end closes only after it; grace delays both.
    assert winref.closed_by_key(windows, latest, grace=0, closed_end=True) == Counter(
        [Window("a", 0, 10, 1)]
    )
    assert winref.closed_by_key(windows, latest, grace=5, closed_end=False) == Counter(
        [Window("a", 0, 10, 1)]
    )


def test_latest_per_key() -> None:
    assert winref.latest_per_key([("a", 5, 0), ("b", 2, 0), ("a", 3, 0)]) == {"a": 5, "b": 2}


def test_check_exact_output() -> None:
    want = Counter([Window("a", 0, 10, 3), Window("b", 0, 10, 4)])
    verdict = winref.check([Window("b", 0, 10, 4), Window("a", 0, 10, 3)], want)
    assert verdict == winref.WindowCheck(2, 2, 0, 0, 0, True, "")


def test_check_counts_missing_wrong_duplicate_and_extra_rows() -> None:
    want = Counter([Window("a", 0, 10, 3), Window("b", 0, 10, 4), Window("c", 0, 10, 1)])
    rows = [
        Window("a", 0, 10, 3),
        Window("a", 0, 10, 3),  # duplicate
        Window("b", 0, 10, 5),  # wrong value: b missing, this row extra
        Window("d", 0, 10, 1),  # extra
    ]  # c missing
    verdict = winref.check(rows, want)
    assert (verdict.rows, verdict.expected) == (4, 3)
    assert (verdict.missing, verdict.extra, verdict.duplicates) == (2, 2, 1)
    assert not verdict.ok
    assert "2 expected windows missing" in verdict.problem


def test_benchmark_input_closes_every_measured_window_for_quix() -> None:
    """The closing records make Quix's expected output every window holding a measured
    event; Spillway's adds the closing records' own windows, and nothing else."""
    s = windowpeers.Settings(records=3000, size_ms=600, hop_ms=200, slide_ms=100)
    events = windowpeers.make_input(s.records, 60_000, 1)
    ents = windowpeers.entries(events)
    last = 60_000 + s.records - 1
    for kind in ("hopping", "sliding"):
        spillway = windowpeers.expected("spillway", kind, s, ents)
        measured = Counter({w: n for w, n in spillway.items() if w.start <= last})
        closing = spillway - measured
        assert sum(closing.values()) > 0
        assert all(w.start > last for w in closing)
        quix = windowpeers.expected("quix", kind, s, ents)
        if kind == "hopping":
            assert quix == measured
        else:  # record-aligned: one window per measured event
            assert sum(quix.values()) == s.records
            assert all(w.end <= last for w in quix)


def test_interval_join_reference_pairs_every_record_within_the_bounds() -> None:
    left = [("a", 100, 0), ("a", 200, 1), ("b", 100, 2)]
    right = [("a", 99, 10), ("a", 150, 11), ("a", 301, 12), ("b", 40, 13), ("a", 50, 14)]
    got = joinref.interval(left, right, backward=50, forward=100)
    assert got == Counter(
        {
            joinref.Pair("a", 0, 10): 1,
            joinref.Pair("a", 0, 11): 1,
            joinref.Pair("a", 0, 14): 1,
            joinref.Pair("a", 1, 11): 1,
        }
    )
    assert winref.check(list(got), got).ok
