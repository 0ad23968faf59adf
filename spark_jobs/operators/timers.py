"""A timer index: pending timers ordered by time, so firing costs per fired timer.

Windows and process functions keep one :class:`TimerIndex` beside their keyed state
(docs/architecture.md). A watermark (or clock) advance pops only the timers at or below it, in
O(fired · log n), instead of scanning every key. The index itself is not written
anywhere: each operator rebuilds it in ``open`` from its restored keyed state, which
holds everything a timer is derived from (a window's end, a persisted user timer).
"""

from __future__ import annotations

import gc
import heapq
from collections.abc import Hashable, Iterable
from typing import Any

# Lazy deletion leaves stale heap entries; compact when they outnumber live ones by this.
_COMPACT_SLACK = 1024


class TimerIndex:
    """A set of ``(time, key)`` timers; keys must be hashable. Registering a timer that is
    already pending is a no-op (one firing per ``(time, key)``, as Flink's timer service)."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Hashable]] = []
        self._live: set[tuple[int, Hashable]] = set()
        self._seq = 0  # tie-break: keys need not be comparable with each other

    def register(self, time: int, key: Hashable) -> None:
        """Fire ``key`` once ``time`` is reached (see :meth:`pop_due`)."""
        entry = (time, key)
        if entry in self._live:
            return
        self._live.add(entry)
        heapq.heappush(self._heap, (time, self._seq, key))
        self._seq += 1

    def rebuild(self, timers: Iterable[tuple[int, Hashable]]) -> None:
        """Replace every timer with ``timers`` at once (a restore): one ``heapify``, with
        the garbage collector paused, since millions of new tuples would otherwise set off
        full collections that walk the whole restored state."""
        paused = gc.isenabled()
        gc.disable()
        try:
            self._live = set(timers)
            self._heap = [(t, i, k) for i, (t, k) in enumerate(self._live)]
            heapq.heapify(self._heap)
            self._seq = len(self._heap)
        finally:
            if paused:
                gc.enable()

    def delete(self, time: int, key: Hashable) -> None:
        """Cancel the timer ``(time, key)`` if it is pending."""
        self._live.discard((time, key))
        if len(self._heap) > 2 * len(self._live) + _COMPACT_SLACK:
            self._heap = [e for e in self._heap if (e[0], e[2]) in self._live]
            heapq.heapify(self._heap)

    def pending(self, time: int, key: Hashable) -> bool:
        """Whether ``(time, key)`` is registered and has not fired."""
        return (time, key) in self._live

    def next_time(self) -> int | None:
        """The earliest pending time, if any."""
        heap = self._heap
        while heap and (heap[0][0], heap[0][2]) not in self._live:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def pop_due(self, upto: int) -> list[tuple[int, Any]]:
        """Remove and return every timer with ``time <= upto``, ordered by time, then by
        key (by its text where keys do not compare), so output order does not depend on
        the order timers were registered in (which a restore changes)."""
        heap, live = self._heap, self._live
        out: list[tuple[int, Any]] = []
        while heap and heap[0][0] <= upto:
            t, _, key = heapq.heappop(heap)
            if (t, key) in live:
                live.remove((t, key))
                out.append((t, key))
        return sorted_timers(out)

    def clear(self) -> None:
        """Forget every timer."""
        self._heap.clear()
        self._live.clear()

    def __len__(self) -> int:
        return len(self._live)


def sorted_timers(items: Iterable[tuple[int, Any]]) -> list[tuple[int, Any]]:
    """``(time, key)`` pairs by time, then key (its ``repr`` if keys are not comparable)."""
    items = list(items)
    try:
        return sorted(items)
    except TypeError:
        return sorted(items, key=lambda tk: (tk[0], repr(tk[1])))
