"""The join operators of two connected keyed streams: interval, as-of and lookup joins.

Each is a two-input keyed operator on the co-process wiring
(``connect(left, right).key_by(key_l, key_r).interval_join(...)``, see
:mod:`spillway.spark_jobs.api.coprocess`): records of both inputs with equal keys meet at one
subtask, the watermark is the minimum over both inputs. The pure bookkeeping
(buffers, expiry by a timer index, matching, lateness) is
:mod:`spillway.spark_jobs.operators.joinbook`;
these classes keep each buffered record in the operator's changelog-backed keyed state
as ``("j", key, side, ts, n) -> record`` and rebuild the bookkeeping from it in
:meth:`open`, so a restarted subtask continues exactly where its checkpoint was.

Too-late records (time below watermark − allowed lateness) are set aside whole: counted
in the checkpoint and dead-lettered with ``--dead-letter``, never silently dropped.
A batch is all-or-nothing: keys and times are taken (and user functions called)
before any state changes.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

from spillway.channels.errors import PipelineDefinitionError
from spillway.channels.wire.stamps import stamped, time_of
from spillway.recovery.job.plan import Context, Record, SetAside
from spillway.spark_jobs.operators.joinbook import (
    LEFT,
    RIGHT,
    AsOfBook,
    Book,
    Entry,
    IntervalBook,
    Row,
    too_late,
)
from spillway.spark_jobs.records.tombstones import DELETED

KeyFn = Callable[[Record], Any]
TimeFn = Callable[[Record], int]
Pair = Callable[[Any, Any], Record]  # (left, right) -> output record
TABLE, STREAM = "t", "s"


def _sk(e: Entry) -> tuple[Any, ...]:
    side, key, ts, n = e
    return ("j", key, side, ts, n)


class _TwoInputs:
    """What the joins share: which side each named input is, state, watermark, set-asides.

    ``sides`` maps each input's name (an upstream operator) to ``(side, key_fn,
    time_fn)``; ``name`` is the operator's, for messages.
    """

    def __init__(
        self,
        name: str,
        sides: Mapping[str, tuple[str, KeyFn, TimeFn | None]],
        book: Book | None = None,
    ) -> None:
        self.name, self.sides, self._book = name, dict(sides), book
        self._ctx: Context | None = None
        self._wm: int | None = None
        self._aside: list[SetAside] = []
        self.late = 0  # this incarnation's too-late records

    def open(self, ctx: Context) -> None:
        """Take the restored state and watermark; rebuild the bookkeeping from the state."""
        self._ctx, self._wm = ctx, ctx.watermark
        if self._book is not None:  # a lookup join's table needs no bookkeeping
            self._book.restore(
                ((sk[2], sk[1], sk[3], sk[4]), v) for sk, v in ctx.state.items() if len(sk) == 5
            )

    def _state(self) -> Any:
        assert self._ctx is not None, "open() was not called"
        return self._ctx.state

    def _input(self, input: str) -> tuple[str, KeyFn, TimeFn | None]:
        try:
            return self.sides[input]
        except KeyError:
            raise PipelineDefinitionError(
                f"join {self.name!r} got records of input {input!r}, but its inputs are "
                f"{sorted(self.sides)}; the job's plan and the running code differ"
            ) from None

    def _timed(
        self, input: str, records: Sequence[Record]
    ) -> tuple[str, list[tuple[Hashable, int, Record]]]:
        """The side of ``input`` and each of its records that is not too late with its key
        and time; the too-late ones are set aside (after every key and time was taken)."""
        side, key_fn, time_fn = self._input(input)
        assert time_fn is not None
        keyed = [(key_fn(r), time_fn(r), r) for r in records]
        wm, lateness = self._wm, self._lateness()
        late = [k for k in keyed if too_late(k[1], wm, lateness)]
        for key, ts, r in late:
            reason = (
                f"late: event time {ts} of key {key!r} on the {_SIDE[side]} input of join "
                f"{self.name!r} is more than its allowed lateness of {lateness} ms behind "
                f"the watermark {wm}; what it would join with may be gone"
            )
            self._aside.append(SetAside("late", reason, r))
        self.late += len(late)
        return side, [k for k in keyed if not too_late(k[1], wm, lateness)] if late else keyed

    def _lateness(self) -> int:
        return self._book.lateness if self._book is not None else 0

    def _drop(self, gone: Iterable[Entry]) -> None:
        state = self._state()
        for e in gone:
            state.delete(_sk(e))

    def process(self, records: Sequence[Record]) -> list[Record]:
        """Not used: every record of a join comes with its input's name."""
        raise TypeError(f"join {self.name!r} needs the input of each record: call process_input")

    def set_aside(self) -> list[SetAside]:
        """The too-late records since the last call."""
        out, self._aside = self._aside, []
        return out


_SIDE = {LEFT: "left", RIGHT: "right", TABLE: "table", STREAM: "stream"}


class IntervalJoinLogic(_TwoInputs):
    """Each pair ``(l, r)`` of one key with ``l.ts + lower <= r.ts <= l.ts + upper``, as
    ``result(l, r)``, once, when the second of the two arrives
    (spillway.spark_jobs.operators.joinbook)."""

    def __init__(
        self,
        name: str,
        sides: Mapping[str, tuple[str, KeyFn, TimeFn | None]],
        lower: int,
        upper: int,
        lateness: int,
        result: Pair,
    ) -> None:
        self.book = IntervalBook(lower, upper, lateness)
        super().__init__(name, sides, self.book)
        self.result = result
        # Its outputs carry event time (set by spillway.spark_jobs.operators.stamping):
        # a pair's is the larger of its two records' times, as Flink's interval join's.
        self.stamp_pairs = False

    def process_input(self, input: str, records: Sequence[Record]) -> list[Record]:
        """Join each record with the buffered ones of the other side, then buffer it."""
        side, keyed = self._timed(input, records)
        book, result = self.book, self.result
        out: list[Record] = []
        # A batch is one input's: its records never match each other, so every result
        # is made (and may fail) before the buffers change.
        for key, ts, r in keyed:
            for t, _n, p in book.partners(side, key, ts):
                pair = result(r, p) if side == LEFT else result(p, r)
                out.append(stamped(pair, max(ts, t)) if self.stamp_pairs else pair)
        state = self._state()
        for key, ts, r in keyed:
            e = book.add(side, key, ts, r, self._wm)
            if e is not None:
                state.put(_sk(e), r)
        return out

    def on_watermark(self, watermark: int) -> list[Record]:
        """Drop the buffered records no later record can match."""
        self._wm = watermark
        self._drop(self.book.expire(watermark))
        return []

    def on_end(self) -> list[Record]:
        """End of input: every pair was emitted when it arrived; the state goes."""
        self._drop(self.book.expire(2**62))
        return []


class AsOfJoinLogic(_TwoInputs):
    """Each left record, held until ``watermark > l.ts + lateness``, with the latest right
    record of its key at or before its time (spillway.spark_jobs.operators.joinbook);
    ``how="inner"`` leaves
    out left records without one, ``"left"`` passes ``None``."""

    def __init__(
        self,
        name: str,
        sides: Mapping[str, tuple[str, KeyFn, TimeFn | None]],
        lateness: int,
        retention: int | None,
        how: str,
        result: Pair,
    ) -> None:
        self.book = AsOfBook(lateness, retention)
        super().__init__(name, sides, self.book)
        self.how, self.result = how, result
        # Its outputs carry event time (set by spillway.spark_jobs.operators.stamping): the
        # left record's, never behind its right partner's (at or before it).
        self.stamp_pairs = False

    def process_input(self, input: str, records: Sequence[Record]) -> list[Record]:
        """Hold left records, keep right ones; nothing is emitted before the watermark."""
        side, keyed = self._timed(input, records)
        state = self._state()
        for key, ts, r in keyed:
            state.put(_sk(self.book.add(side, key, ts, r)), r)
        return []

    def _emit(self, due: list[tuple[Any, Row, Row | None]], gone: list[Entry]) -> list[Record]:
        out = [
            self.result(left[2], right[2] if right is not None else None)
            for _key, left, right in due
            if right is not None or self.how == "left"
        ]
        if self.stamp_pairs:
            kept = [left[0] for _key, left, right in due if right is not None or self.how == "left"]
            out = [stamped(o, t) for o, t in zip(out, kept, strict=True)]
        self._drop(gone)
        return out

    def on_watermark(self, watermark: int) -> list[Record]:
        """The left records due at ``watermark``, joined; prune the right history."""
        self._wm = watermark
        return self._emit(*self.book.advance(watermark))

    def on_end(self) -> list[Record]:
        """End of input: every held left record is due; the state goes."""
        return self._emit(*self.book.end())


class LookupJoinLogic(_TwoInputs):
    """Each stream record with the current table row of its key, as ``result(record,
    row)``, at once; table records replace their key's row (``("j", key, "t") -> row``
    in keyed state, so the table is restored with the operator), and a deletion record
    (``"_deleted": True``, from ``read_kafka(..., tombstones=True)``) removes it."""

    def __init__(
        self,
        name: str,
        sides: Mapping[str, tuple[str, KeyFn, TimeFn | None]],
        how: str,
        result: Pair,
    ) -> None:
        super().__init__(name, sides)
        self.how, self.result = how, result
        # Its outputs carry event time (set by spillway.spark_jobs.operators.stamping):
        # a result its stream record's.
        self.stamp_pairs = False

    def process_input(self, input: str, records: Sequence[Record]) -> list[Record]:
        """Table records update the table; stream records are joined with it."""
        side, key_fn, _ = self._input(input)
        keys = [key_fn(r) for r in records]
        state = self._state()
        if side == TABLE:
            for key, r in zip(keys, records, strict=True):
                if DELETED not in r:
                    state.put(("j", key, TABLE), r)
                elif r[DELETED]:
                    state.delete(("j", key, TABLE))  # the changelog gets a tombstone
                else:  # a row of a tombstones=True source: the marker is not the row's
                    state.put(("j", key, TABLE), {k: v for k, v in r.items() if k != DELETED})
            return []
        out: list[Record] = []
        stamp = self.stamp_pairs
        for key, r in zip(keys, records, strict=True):
            row = state.get(("j", key, TABLE))
            if row is not None or self.how == "left":
                res = self.result(r, row)
                out.append(stamped(res, time_of(r)) if stamp else res)
        return out

    def on_watermark(self, watermark: int) -> list[Record]:
        """Nothing waits for a watermark."""
        return []

    def on_end(self) -> list[Record]:
        """Nothing is held back."""
        return []
