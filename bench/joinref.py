"""Plain-Python reference of the interval-join benchmark (:mod:`bench.joinengines`). Pure.

Input: ``(key, event time ms, seq)`` of each left and right record; output: one
:class:`Pair` per left and right record of one key with ``l.ts - backward <= r.ts <=
l.ts + forward``. Output rows are compared as multisets by :func:`bench.winref.check`.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable
from typing import NamedTuple

Entry = tuple[str, int, int]  # (key, event time ms, seq)


class Pair(NamedTuple):
    """One output row: the key and the ``seq`` of the left and the right record."""

    key: str
    l: int  # noqa: E741
    r: int


def interval(
    left: Iterable[Entry], right: Iterable[Entry], backward: int, forward: int
) -> Counter[Pair]:
    """Every pair of one key whose times are within ``[-backward, +forward]`` of the left."""
    by_key: dict[str, list[tuple[int, int]]] = {}
    for key, ts, seq in right:
        by_key.setdefault(key, []).append((ts, seq))
    for rows in by_key.values():
        rows.sort()
    out: Counter[Pair] = Counter()
    for key, ts, seq in left:
        rows = by_key.get(key, [])
        i = bisect.bisect_left(rows, (ts - backward, -1))
        while i < len(rows) and rows[i][0] <= ts + forward:
            out[Pair(key, seq, rows[i][1])] += 1
            i += 1
    return out
