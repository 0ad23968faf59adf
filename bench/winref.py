"""Plain-Python references for the windows benchmark (:mod:`bench.windowpeers`). Pure.

Input: ``(key, event time ms, value)`` triples; a window's result is the *sum* of the
values of its records. Two definitions of a window, and which of them each engine emits:

* **Hopping** (Spillway's ``hopping_window`` and ``sliding_window``, which is Flink's
  hopping-with-slide; Quix Streams' ``hopping_window``): windows ``[start, start + size)``
  with ``start`` a multiple of ``hop``; a record lies in ``size / hop`` of them.
* **Record-aligned sliding** (Quix Streams' ``sliding_window``, Kafka Streams' sliding
  windows): windows closed at both ends, ``[t - size, t]``, one per record at ``t``. For a
  key whose event times strictly increase in arrival order, that is exactly what
  Quix's ``.final()`` emits (its right windows only ever show up as the left window of a
  later record, which is the same window). Other inputs need Quix's whole algorithm, so
  :func:`record_aligned` refuses them.

Spillway fires every window at the end of a bounded input. Quix's ``.final()`` (closing
strategy ``"key"``) emits a window only once a later record *of the same key* closes it
(:func:`closed_by_key`); the benchmark ends the input with one far-future record per key
so every window holding the measured records closes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar


class Window(NamedTuple):
    """One emitted window result: key, bounds (as the engine writes them) and sum."""

    key: str
    start: int
    end: int
    value: int


Entry = tuple[str, int, int]  # (key, event time ms, value)
Row = TypeVar("Row", bound=tuple[Any, ...])  # a Window, or a joinref.Pair


def hopping(entries: Iterable[Entry], size: int, hop: int) -> Counter[Window]:
    """Every hopping window ``[start, start + size)`` (``start`` a multiple of ``hop``,
    ``start >= 0``) holding at least one entry, with the sum of its entries' values."""
    if not 0 < hop <= size:
        raise ValueError(f"need 0 < hop ({hop}) <= size ({size})")
    sums: dict[tuple[str, int], int] = {}
    for key, t, value in entries:
        last = t - t % hop
        for start in range(last, max(t - size, -1), -hop):
            sums[(key, start)] = sums.get((key, start), 0) + value
    return Counter(Window(k, s, s + size, v) for (k, s), v in sums.items())


def record_aligned(entries: Iterable[Entry], size: int) -> Counter[Window]:
    """One window ``[max(0, t - size), t]`` per entry at ``t``: the sum of the values of
    its key's entries with event time in that closed interval.

    Raises ``ValueError`` if a key's event times do not strictly increase in the order
    given (see the module docstring).
    """
    if size <= 0:
        raise ValueError(f"need size > 0, got {size}")
    per_key: dict[str, list[tuple[int, int]]] = {}
    for key, t, value in entries:
        seen = per_key.setdefault(key, [])
        if seen and t <= seen[-1][0]:
            raise ValueError(
                f"key {key!r}: event time {t} after {seen[-1][0]}; the record-aligned "
                "reference needs strictly increasing event times per key"
            )
        seen.append((t, value))
    out: Counter[Window] = Counter()
    for key, seen in per_key.items():
        lo, total = 0, 0  # seen[lo:i+1] is the window of entry i; total its sum
        for t, value in seen:
            total += value
            while seen[lo][0] < t - size:
                total -= seen[lo][1]
                lo += 1
            out[Window(key, max(0, t - size), t, total)] += 1
    return out


def latest_per_key(entries: Iterable[Entry]) -> dict[str, int]:
    """The largest event time of each key."""
    out: dict[str, int] = {}
    for key, t, _v in entries:
        if t > out.get(key, t - 1):
            out[key] = t
    return out


def closed_by_key(
    windows: Counter[Window], latest: Mapping[str, int], grace: int, closed_end: bool
) -> Counter[Window]:
    """The windows Quix's ``.final()`` has emitted once each key's latest event time is
    ``latest[key]``: ``end + grace <= latest`` for windows open at the end
    (``closed_end=False``, hopping), ``end + grace < latest`` for windows that include
    their end (``closed_end=True``, record-aligned sliding)."""
    slack = 1 if closed_end else 0
    return Counter({w: n for w, n in windows.items() if w.end + grace + slack <= latest[w.key]})


@dataclass(frozen=True)
class WindowCheck:
    """An engine's output against its reference: exact when ``ok``."""

    rows: int
    expected: int
    missing: int  # expected windows not in the output (or with another value)
    extra: int  # output rows not expected (a wrong value counts here and in missing)
    duplicates: int  # rows beyond the first of an expected window
    ok: bool
    problem: str = ""


def check(rows: Iterable[Row], expected: Counter[Row]) -> WindowCheck:
    """Compare output rows with the reference, as multisets; ``ok`` iff equal (windows,
    or the pairs of the interval join, bench.joinref)."""
    got = Counter(rows)
    missing = expected - got
    surplus = got - expected
    duplicates = sum(n for w, n in surplus.items() if w in expected)
    extra = sum(n for w, n in surplus.items() if w not in expected)
    ok = not missing and not surplus
    problem = ""
    if not ok:
        problem = (
            f"{sum(missing.values())} expected windows missing (e.g. {sorted(missing)[:2]}), "
            f"{extra} unexpected rows (e.g. {sorted(w for w in surplus if w not in expected)[:2]}),"
            f" {duplicates} duplicates"
        )
    return WindowCheck(
        rows=sum(got.values()),
        expected=sum(expected.values()),
        missing=sum(missing.values()),
        extra=extra,
        duplicates=duplicates,
        ok=ok,
        problem=problem,
    )
