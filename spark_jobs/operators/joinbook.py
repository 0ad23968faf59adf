"""Join bookkeeping without I/O: the buffers, expiry and matching of the interval and
as-of joins (spillway.spark_jobs.operators.joins runs them against keyed state and the watermark).

Times are event times in ms. A watermark ``wm`` says no on-time record has a time below
it; ``L`` is the join's allowed lateness. The rules, chosen so that the output does not
depend on how the two inputs interleave or when watermarks arrive:

* A record is *too late* when its time is below ``wm - L``: it is set aside whole (never
  joined in part), because what it should meet may have expired.
* Interval join (``lower <= upper``): left ``l`` and right ``r`` of one key match when
  ``l.ts + lower <= r.ts <= l.ts + upper``; each pair is produced once, when the second
  of the two arrives. A left record is dropped once ``l.ts + upper < wm - L``, a right
  one once ``r.ts - lower < wm - L``: no record that is not too late can match them then.
* As-of join: a left record is held until ``wm > l.ts + L``, then joined with the right
  record of its key with the largest time at or before ``l.ts`` (the latest to arrive
  among equal times), within ``retention`` of it if one is set, or with none. A right
  record that is not too late cannot come after that. Right records are dropped once a
  newer one is at or below ``wm - L`` (no later left record can want them), and with a
  retention once ``r.ts + retention < wm - L``.

Each buffered record has a number ``n``, unique among the records of its key, side and
time, larger for later arrivals: ``(side, key, ts, n)`` names it in keyed state.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Hashable, Iterable
from typing import Any

from spillway.spark_jobs.operators.timers import TimerIndex

LEFT, RIGHT = "l", "r"
Row = tuple[int, int, Any]  # (ts, n, record)
Entry = tuple[str, Any, int, int]  # (side, key, ts, n): a record's name in keyed state
_END = 2**62  # the watermark at the end of bounded inputs: every time is below it


class TimedRows:
    """The buffered records of one key and side, ordered by ``(ts, n)``."""

    def __init__(self) -> None:
        self.keys: list[tuple[int, int]] = []
        self.records: list[Any] = []

    def __len__(self) -> int:
        return len(self.keys)

    def next_n(self, ts: int) -> int:
        """The number a new record at ``ts`` gets: one above the largest there."""
        i = bisect_left(self.keys, (ts + 1, 0))
        return self.keys[i - 1][1] + 1 if i and self.keys[i - 1][0] == ts else 0

    def add(self, ts: int, n: int, record: Any) -> None:
        """Insert ``record`` at ``(ts, n)``."""
        i = bisect_left(self.keys, (ts, n))
        self.keys.insert(i, (ts, n))
        self.records.insert(i, record)

    def between(self, lo: int, hi: int) -> list[Row]:
        """The rows with ``lo <= ts <= hi``, in order."""
        i, j = bisect_left(self.keys, (lo, -1)), bisect_left(self.keys, (hi + 1, -1))
        return [(*self.keys[k], self.records[k]) for k in range(i, j)]

    def latest_at_or_before(self, ts: int) -> Row | None:
        """The last row with a time at or before ``ts``, if any."""
        i = bisect_left(self.keys, (ts + 1, -1))
        return (*self.keys[i - 1], self.records[i - 1]) if i else None

    def drop_before_latest(self, ts: int) -> list[tuple[int, int]]:
        """Remove the rows before the last one at or before ``ts``; their ``(ts, n)``."""
        i = bisect_left(self.keys, (ts + 1, -1)) - 1
        if i <= 0:
            return []
        gone = self.keys[:i]
        del self.keys[:i], self.records[:i]
        return gone

    def drop_through(self, ts: int) -> list[tuple[int, int]]:
        """Remove the rows with a time at or before ``ts``; their ``(ts, n)``."""
        i = bisect_right(self.keys, (ts, 2**62))
        gone = self.keys[:i]
        del self.keys[:i], self.records[:i]
        return gone


def too_late(ts: int, wm: int | None, lateness: int) -> bool:
    """Whether a record at ``ts`` arrives too late at watermark ``wm`` (see the module
    docstring); nothing is late before the first watermark."""
    return wm is not None and ts < wm - lateness


class Book:
    """Buffers per ``(side, key)`` and a timer index of ``(time, (side, key))`` clean-ups."""

    def __init__(self, lateness: int) -> None:
        self.lateness = lateness
        self.buffers: dict[tuple[str, Hashable], TimedRows] = {}
        self.timers = TimerIndex()

    def _rows(self, side: str, key: Hashable) -> TimedRows:
        rows = self.buffers.get((side, key))
        if rows is None:
            rows = self.buffers[(side, key)] = TimedRows()
        return rows

    def _drop_through(self, side: str, key: Hashable, ts: int) -> list[Entry]:
        rows = self.buffers.get((side, key))
        if rows is None:
            return []
        gone = [(side, key, t, n) for t, n in rows.drop_through(ts)]
        if not rows:
            del self.buffers[(side, key)]
        return gone

    def restore(self, entries: Iterable[tuple[Entry, Any]]) -> None:
        """Take back the buffered records of a restored state (and their timers)."""
        raise NotImplementedError

    def size(self) -> int:
        """How many records are buffered (both sides, all keys)."""
        return sum(len(r) for r in self.buffers.values())


class IntervalBook(Book):
    """The buffers of an interval join (see the module docstring)."""

    def __init__(self, lower: int, upper: int, lateness: int) -> None:
        super().__init__(lateness)
        self.lower, self.upper = lower, upper

    def _last_use(self, side: str, ts: int) -> int:
        """The largest watermark ``- L`` at which a record may still be matched."""
        return ts + self.upper if side == LEFT else ts - self.lower

    def partners(self, side: str, key: Hashable, ts: int) -> list[Row]:
        """The buffered records of the other side that a ``side`` record at ``ts`` matches,
        by ``(ts, n)``."""
        other = RIGHT if side == LEFT else LEFT
        rows = self.buffers.get((other, key))
        if rows is None:
            return []
        if side == LEFT:
            return rows.between(ts + self.lower, ts + self.upper)
        return rows.between(ts - self.upper, ts - self.lower)

    def add(self, side: str, key: Hashable, ts: int, record: Any, wm: int | None) -> Entry | None:
        """Buffer a record that is not too late; its entry, or None when no later record
        can match it (then it is not kept)."""
        last = self._last_use(side, ts)
        if wm is not None and last < wm - self.lateness:
            return None
        rows = self._rows(side, key)
        n = rows.next_n(ts)
        rows.add(ts, n, record)
        self.timers.register(last + self.lateness + 1, (side, key))
        return (side, key, ts, n)

    def restore(self, entries: Iterable[tuple[Entry, Any]]) -> None:
        """Take back buffered records (after a restart) and their clean-up timers."""
        self.buffers.clear()
        timers = set()
        for (side, key, ts, n), record in entries:
            self._rows(side, key).add(ts, n, record)
            timers.add((self._last_use(side, ts) + self.lateness + 1, (side, key)))
        self.timers.rebuild(timers)

    def expire(self, wm: int) -> list[Entry]:
        """Drop what no record arriving at watermark ``wm`` or later can match."""
        limit = wm - self.lateness - 1  # drop where last use <= limit
        gone: list[Entry] = []
        for _t, (side, key) in self.timers.pop_due(wm):
            through = limit - self.upper if side == LEFT else limit + self.lower
            gone.extend(self._drop_through(side, key, through))
        return gone


class AsOfBook(Book):
    """The held left records and right history of an as-of join (module docstring).

    Timers ``(time, (side, key))``: a left one when held records become due, a right one
    when older right records may be pruned.
    """

    def __init__(self, lateness: int, retention: int | None) -> None:
        super().__init__(lateness)
        self.retention = retention

    def add(self, side: str, key: Hashable, ts: int, record: Any) -> Entry:
        """Hold a left record, or keep a right one; its entry."""
        rows = self._rows(side, key)
        n = rows.next_n(ts)
        rows.add(ts, n, record)
        self._register(side, key, ts)
        return (side, key, ts, n)

    def _register(self, side: str, key: Hashable, ts: int) -> None:
        if side == LEFT:
            self.timers.register(ts + self.lateness + 1, (LEFT, key))
            return
        # Once this record is at or below wm - L, the ones before it can go.
        self.timers.register(ts + self.lateness, (RIGHT, key))
        if self.retention is not None:
            self.timers.register(ts + self.retention + self.lateness + 1, (RIGHT, key))

    def restore(self, entries: Iterable[tuple[Entry, Any]]) -> None:
        """Take back held and kept records (after a restart) and their timers."""
        self.buffers.clear()
        self.timers.clear()
        for (side, key, ts, n), record in entries:
            self._rows(side, key).add(ts, n, record)
            self._register(side, key, ts)

    def match(self, key: Hashable, ts: int) -> Row | None:
        """The right record a left record at ``ts`` joins with, if any."""
        rows = self.buffers.get((RIGHT, key))
        got = rows.latest_at_or_before(ts) if rows is not None else None
        if got is None or (self.retention is not None and ts - got[0] > self.retention):
            return None
        return got

    def advance(self, wm: int) -> tuple[list[tuple[Any, Row, Row | None]], list[Entry]]:
        """At watermark ``wm``: the left records now due, each ``(key, left, right)``, per
        key in the order of its earliest due timer, and every entry dropped (those left
        records included)."""
        due = self.timers.pop_due(wm)
        limit = wm - self.lateness
        out: list[tuple[Any, Row, Row | None]] = []
        gone: list[Entry] = []
        for _t, (side, key) in due:  # every due left record first: pruning may follow
            rows = self.buffers.get((LEFT, key)) if side == LEFT else None
            if rows is None:  # a right timer, or an earlier timer took them all
                continue
            for row in rows.between(-_END, limit - 1):
                out.append((key, row, self.match(key, row[0])))
            gone.extend(self._drop_through(LEFT, key, limit - 1))
        for _t, (side, key) in due:
            if side == RIGHT and (RIGHT, key) in self.buffers:
                gone.extend(self._prune(key, limit))
        return out, gone

    def _prune(self, key: Hashable, limit: int) -> list[Entry]:
        rows = self.buffers[(RIGHT, key)]
        gone = [(RIGHT, key, t, n) for t, n in rows.drop_before_latest(limit)]
        if self.retention is not None:
            gone.extend(self._drop_through(RIGHT, key, limit - self.retention - 1))
        return gone

    def end(self) -> tuple[list[tuple[Any, Row, Row | None]], list[Entry]]:
        """The inputs ended: every held left record is due; everything is dropped."""
        out, gone = self.advance(_END)
        for side, key in list(self.buffers):
            gone.extend(self._drop_through(side, key, _END))
        self.timers.clear()
        return out, gone
