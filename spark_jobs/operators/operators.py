"""Operator logic behind the pipeline API: stateless transforms, keyed aggregates, windows."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from spillway.channels.wire.stamps import stamped, time_of
from spillway.recovery.job.plan import Context, Record, SetAside
from spillway.recovery.restore.state import restores_as_itself
from spillway.spark_jobs.modes import Emit


class Stateless:
    """A record operator without state: a call on a list of records is the same as a call
    on each of them in turn (what :mod:`spillway.spark_jobs.operators.stamping` relies on)."""

    def open(self, ctx: Context) -> None:
        """Nothing to restore."""

    def on_watermark(self, watermark: int) -> Iterable[Record]:
        """Stateless operators hold nothing back."""
        return ()

    def on_end(self) -> Iterable[Record]:
        """Nothing pending at the end."""
        return ()

    def set_aside(self) -> list[SetAside]:
        """Every record is used."""
        return []


class MapLogic(Stateless):
    """``fn`` applied to every record."""

    def __init__(self, fn: Callable[[Record], Record]) -> None:
        self.fn = fn

    def process(self, records: Sequence[Record]) -> list[Record]:
        """One output per input."""
        fn = self.fn
        return [fn(r) for r in records]


class FlatMapLogic(Stateless):
    """Every record becomes zero or more records."""

    def __init__(self, fn: Callable[[Record], Iterable[Record]]) -> None:
        self.fn = fn

    def process(self, records: Sequence[Record]) -> list[Record]:
        """All outputs of ``fn``, in input order."""
        fn = self.fn
        return [out for r in records for out in fn(r)]


class FilterLogic(Stateless):
    """Keeps records for which ``predicate`` is true."""

    def __init__(self, predicate: Callable[[Record], bool]) -> None:
        self.predicate = predicate

    def process(self, records: Sequence[Record]) -> list[Record]:
        """The records that pass, in order."""
        p = self.predicate
        return [r for r in records if p(r)]


class KeyedAggregateLogic:
    """Per-key accumulator in keyed state. Emits per update, or all results at the end."""

    def __init__(
        self,
        key_fn: Callable[[Record], Any],
        init: Callable[[], Any],
        add: Callable[[Any, Record], Any],
        result: Callable[[Any, Any], Record],
        emit: Emit,
    ) -> None:
        self.key_fn, self.init, self.add, self.result, self.emit = key_fn, init, add, result, emit
        self._ctx: Context | None = None
        # Its updates carry their input's event time (set by
        # spillway.spark_jobs.operators.stamping). Stamped here, within the one call that
        # writes state, so a failed call still leaves state as it was.
        self.carry_time = False

    def open(self, ctx: Context) -> None:
        """State arrives already restored in ``ctx.state``."""
        self._ctx = ctx

    def process(self, records: Sequence[Record]) -> list[Record]:
        """Fold each record into its key's accumulator."""
        assert self._ctx is not None
        state = self._ctx.state
        out: list[Record] = []
        # Fold the batch in memory first: one state write per key per batch, not per record.
        touched: dict[Any, Any] = {}
        for r in records:
            k = self.key_fn(r)
            acc = touched[k] if k in touched else _copy(state.get(k))
            if acc is None:
                acc = self.init()
            acc = self.add(acc, r)
            touched[k] = acc
            if self.emit == "updates":
                res = self.result(k, acc)
                out.append(stamped(res, time_of(r)) if self.carry_time else res)
        for k, acc in touched.items():
            state.put(k, acc)
        return out

    def on_watermark(self, watermark: int) -> Iterable[Record]:
        """Global aggregates are not windowed."""
        return ()

    def on_end(self) -> list[Record]:
        """With ``emit="final"``: every key's result once, sorted by key for stable output."""
        assert self._ctx is not None
        if self.emit != "final":
            return []
        return [self.result(k, acc) for k, acc in _by_key(self._ctx.state.items())]

    def set_aside(self) -> list[SetAside]:
        """Every record is folded in."""
        return []


class TumblingWindowLogic:
    """Event-time tumbling windows per key, emitted when the watermark passes their end.

    A record is *late* when its window ``[start, end)`` was already emitted, i.e.
    ``end <= watermark`` when it arrives (Flink's rule without allowed lateness; a record
    behind the watermark whose window is still open is counted in). Late records are left
    out of every window and handed to the runner through :meth:`set_aside`, which counts
    them in the checkpoint and dead-letters them with ``--dead-letter``. ``late`` counts
    this incarnation's.
    """

    def __init__(
        self,
        key_fn: Callable[[Record], Any],
        time_fn: Callable[[Record], int],
        size: int,
        init: Callable[[], Any],
        add: Callable[[Any, Record], Any],
        result: Callable[[Any, int, int, Any], Record],
    ) -> None:
        self.key_fn, self.time_fn, self.size = key_fn, time_fn, size
        self.init, self.add, self.result = init, add, result
        self.late = 0
        self._ctx: Context | None = None
        self._wm: int | None = None
        self._aside: list[SetAside] = []

    def open(self, ctx: Context) -> None:
        """State (open windows) and the watermark arrive restored."""
        self._ctx = ctx
        self._wm = ctx.watermark  # windows at or before it were emitted: later records are late

    def process(self, records: Sequence[Record]) -> list[Record]:
        """Add each record to its window; nothing is emitted before the watermark."""
        assert self._ctx is not None
        state = self._ctx.state
        touched: dict[Any, Any] = {}
        late: list[SetAside] = []  # kept only if the whole call succeeds, like state
        for r in records:
            t = self.time_fn(r)
            start = t - t % self.size
            if self._wm is not None and start + self.size <= self._wm:
                late.append(SetAside("late", self._late_reason(r, t, start), r))
                continue
            k = (self.key_fn(r), start)
            acc = touched[k] if k in touched else _copy(state.get(k))
            touched[k] = self.add(self.init() if acc is None else acc, r)
        for k, acc in touched.items():
            state.put(k, acc)
        self.late += len(late)
        self._aside.extend(late)
        return []

    def _late_reason(self, r: Record, t: int, start: int) -> str:
        return (
            f"late: event time {t} of key {self.key_fn(r)!r} falls in window "
            f"[{start}, {start + self.size}), already emitted at watermark {self._wm}"
        )

    def set_aside(self) -> list[SetAside]:
        """The late records since the last call (see the class docstring)."""
        out, self._aside = self._aside, []
        return out

    def on_watermark(self, watermark: int) -> list[Record]:
        """Emit and forget every window that ends at or before ``watermark``."""
        assert self._ctx is not None
        self._wm = watermark
        return self._fire(lambda end: end <= watermark)

    def on_end(self) -> list[Record]:
        """End of input: every remaining window is complete."""
        return self._fire(lambda end: True)

    def _fire(self, due: Callable[[int], bool]) -> list[Record]:
        assert self._ctx is not None
        state = self._ctx.state
        ready = _by_key((k, acc) for k, acc in state.items() if due(k[1] + self.size))
        out = []
        for (key, start), acc in ready:
            out.append(self.result(key, start, start + self.size, acc))
            state.delete((key, start))
        return out


def _copy(value: Any) -> Any:
    """A private copy of a mutable accumulator: ``add`` may change it in place (as Flink's
    AggregateFunction may), and a call that fails half-way must not change state.

    Flat lists and dicts of immutable values (the usual accumulator) are copied shallowly,
    which is a deep copy for them and far cheaper than ``copy.deepcopy``.
    """
    if not isinstance(value, (list, dict)):
        return value
    return value.copy() if restores_as_itself(value) else copy.deepcopy(value)


def _by_key(items: Iterable[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """Items sorted by their key's value; by its text only when keys are not comparable."""
    items = list(items)
    try:
        return sorted(items, key=lambda kv: kv[0])
    except TypeError:  # mixed key types
        return sorted(items, key=lambda kv: repr(kv[0]))


class ChainedLogic:
    """Transforms fused into one subtask (operator chaining over forward edges).

    Each member's output is the next member's input within the same call, so no channel
    lies between them. At most the last member is stateful (``Pipeline`` checks this): a
    call that fails half-way must leave keyed state untouched, and only the last member's
    state writes come after every other member has succeeded.
    """

    def __init__(self, members: Sequence[Any]) -> None:
        self.members = list(members)

    def open(self, ctx: Context) -> None:
        """Open every member; they share the subtask's context (and its one keyed state)."""
        for m in self.members:
            m.open(ctx)

    def process(self, records: Sequence[Record]) -> list[Record]:
        """Records through every member in order."""
        out = list(records)
        for m in self.members:
            if not out:
                break
            out = list(m.process(out))
        return out

    def on_watermark(self, watermark: int) -> list[Record]:
        """What each member emits for ``watermark`` goes through the later members first,
        then they see the watermark themselves (as they would behind a channel)."""
        out: list[Record] = []
        for m in self.members:
            out = list(m.process(out)) if out else []
            out.extend(m.on_watermark(watermark))
        return out

    def on_end(self) -> list[Record]:
        """End of input, member by member, with earlier members' final outputs passed on."""
        out: list[Record] = []
        for m in self.members:
            out = list(m.process(out)) if out else []
            out.extend(m.on_end())
        return out

    def on_processing_time(self, now: int) -> list[Record]:
        """The clock for members with processing-time timers; their outputs go through
        the later members."""
        out: list[Record] = []
        for m in self.members:
            out = list(m.process(out)) if out else []
            tick = getattr(m, "on_processing_time", None)
            if tick is not None:
                out.extend(tick(now))
        return out

    def set_aside(self) -> list[SetAside]:
        """What every member set aside, in member order."""
        return [a for m in self.members for a in m.set_aside()]


def make_chain(factories: Sequence[Callable[[], Any]]) -> ChainedLogic:
    """A :class:`ChainedLogic` of fresh members (a plan's ``make_logic`` for a chain)."""
    return ChainedLogic([f() for f in factories])
