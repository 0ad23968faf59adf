"""The keyed process function: user code with keyed state, timers and state TTL.

``key_by(k).process(name, fn, on_timer=..., schema=...)`` calls ``fn(record, ctx)`` per
record and ``on_timer(ts, ctx)`` per fired timer; both return (or yield) output records.
``ctx`` is bound to the current key:

* ``ctx.value(name)`` (``value()``/``update(v)``/``clear()``), ``ctx.list(name)``
  (``get()``/``add(v)``/``update(vs)``/``clear()``), ``ctx.map(name)``
  (``get``/``put``/``remove``/``contains``/``items``/``clear``; keys are strings).
  Values must be JSON-able: they live in the operator's changelog-backed keyed state.
* ``ctx.timers.register_event_time(ts)`` fires once the watermark reaches ``ts``
  (``ts <= watermark``); ``register_processing_time(ts)`` once the wall clock (ms since
  the epoch) does; ``delete_event_time`` / ``delete_processing_time`` cancel. One timer
  per (key, domain, time). Timers are keyed state too, so they are checkpointed and
  restored exactly with the rest. At the end of a bounded input every pending event-time
  timer fires (the watermark becomes infinite); processing-time timers do not.
* ``ttl_ms={name: ms}``: state called ``name`` expires ``ms`` after its last write
  (processing time, as Flink's state TTL): once expired it reads as empty, and a
  processing-time timer removes it from state.
* ``ctx.key``, ``ctx.timestamp`` (the record's event time: ``event_time=``'s, else the
  one its source declared if the records carry it, else None; the timer's time in
  ``on_timer``), ``ctx.watermark``, ``ctx.time_domain``
  (``"event"`` or ``"processing"`` in ``on_timer``, else None).

A call's state and timer changes apply only when it returns, so a record that fails
(and is dead-lettered) leaves no trace.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from spillway.channels.wire.stamps import stamped, time_of
from spillway.recovery.job.plan import Context, Record, SetAside
from spillway.spark_jobs.operators.operators import _copy
from spillway.spark_jobs.operators.timers import TimerIndex

_GONE = object()
EVENT, PROCESSING = "e", "p"


def wall_ms() -> int:
    """Processing time: the wall clock in ms since the epoch."""
    return int(time.time() * 1000)


class _Writes:
    """The state and timer changes of one call, applied only if it succeeds."""

    def __init__(self, state: Any, ttl: Mapping[str, int], now: int) -> None:
        self.state, self.ttl, self.now = state, ttl, now
        self.puts: dict[Any, Any] = {}
        self.timers: dict[tuple[str, Any, int], bool] = {}  # (domain, key, ts) -> register?

    def get(self, sk: tuple[Any, ...]) -> Any:
        v = self.puts[sk] if sk in self.puts else _copy(self.state.get(sk))
        if v is None or v is _GONE:
            return None
        ttl = self.ttl.get(sk[2])
        if ttl is None:
            return v
        written, value = v
        return None if written + ttl <= self.now else value  # expired: invisible

    def put(self, sk: tuple[Any, ...], value: Any) -> None:
        self.puts[sk] = [self.now, value] if sk[2] in self.ttl else value


class ValueState:
    """One value per key."""

    def __init__(self, w: _Writes, sk: tuple[Any, ...]) -> None:
        self._w, self._sk = w, sk

    def value(self, default: Any = None) -> Any:
        """The value, or ``default`` when unset (or expired)."""
        v = self._w.get(self._sk)
        return default if v is None else v

    def update(self, value: Any) -> None:
        """Set the value (``None`` clears it)."""
        if value is None:
            self.clear()
        else:
            self._w.put(self._sk, value)

    def clear(self) -> None:
        """Remove the value."""
        self._w.puts[self._sk] = _GONE


class ListState:
    """A list per key."""

    def __init__(self, w: _Writes, sk: tuple[Any, ...]) -> None:
        self._w, self._sk = w, sk

    def get(self) -> list[Any]:
        """A copy of the list (empty when unset or expired)."""
        return list(self._w.get(self._sk) or [])

    def add(self, value: Any) -> None:
        """Append ``value``."""
        self._w.put(self._sk, [*self.get(), value])

    def update(self, values: Iterable[Any]) -> None:
        """Replace the list."""
        self._w.put(self._sk, list(values))

    def clear(self) -> None:
        """Empty the list."""
        self._w.puts[self._sk] = _GONE


class MapState:
    """A string-keyed map per key."""

    def __init__(self, w: _Writes, sk: tuple[Any, ...]) -> None:
        self._w, self._sk = w, sk

    def _get(self) -> dict[str, Any]:
        return dict(self._w.get(self._sk) or {})

    def get(self, k: str, default: Any = None) -> Any:
        """The value at ``k``, or ``default``."""
        return self._get().get(k, default)

    def contains(self, k: str) -> bool:
        """Whether ``k`` is set."""
        return k in self._get()

    def put(self, k: str, value: Any) -> None:
        """Set ``k`` (a string: map state is stored as a JSON object)."""
        if not isinstance(k, str):
            raise TypeError(f"map state {self._sk[2]!r}: keys must be strings, got {k!r}")
        self._w.put(self._sk, {**self._get(), k: value})

    def remove(self, k: str) -> None:
        """Unset ``k``."""
        m = self._get()
        m.pop(k, None)
        if m:
            self._w.put(self._sk, m)
        else:
            self.clear()

    def items(self) -> list[tuple[str, Any]]:
        """Every (key, value), sorted by key."""
        return sorted(self._get().items())

    def clear(self) -> None:
        """Remove every entry."""
        self._w.puts[self._sk] = _GONE


class Timers:
    """The timer service of the current key."""

    def __init__(self, w: _Writes, key: Any) -> None:
        self._w, self._key = w, key

    def register_event_time(self, ts: int) -> None:
        """Call ``on_timer(ts, ctx)`` once the watermark reaches ``ts``."""
        self._w.timers[(EVENT, self._key, int(ts))] = True

    def register_processing_time(self, ts: int) -> None:
        """Call ``on_timer(ts, ctx)`` once the wall clock (ms) reaches ``ts``."""
        self._w.timers[(PROCESSING, self._key, int(ts))] = True

    def delete_event_time(self, ts: int) -> None:
        """Cancel the event-time timer at ``ts`` of this key, if any."""
        self._w.timers[(EVENT, self._key, int(ts))] = False

    def delete_processing_time(self, ts: int) -> None:
        """Cancel the processing-time timer at ``ts`` of this key, if any."""
        self._w.timers[(PROCESSING, self._key, int(ts))] = False


class ProcessContext:
    """What ``fn`` and ``on_timer`` see (see the module docstring)."""

    def __init__(
        self,
        w: _Writes,
        key: Any,
        timestamp: int | None,
        watermark: int | None,
        time_domain: str | None,
    ) -> None:
        self._w, self.key, self.timestamp = w, key, timestamp
        self.watermark, self.time_domain = watermark, time_domain
        self.timers = Timers(w, key)

    def value(self, name: str) -> ValueState:
        """The value state ``name`` of the current key."""
        return ValueState(self._w, ("v", self.key, name))

    def list(self, name: str) -> ListState:
        """The list state ``name`` of the current key."""
        return ListState(self._w, ("l", self.key, name))

    def map(self, name: str) -> MapState:
        """The map state ``name`` of the current key."""
        return MapState(self._w, ("m", self.key, name))


class ProcessLogic:
    """Runs a keyed process function (see the module docstring).

    Keyed state holds ``(kind, key, name) -> value`` for user state (``[written, value]``
    with a TTL) and ``("t", key, domain, ts) -> 1`` per pending timer. The two timer
    indexes are rebuilt from it in :meth:`open`; the processing-time one also holds the
    TTL clean-ups (``("x", state key)`` at write time + TTL).
    """

    def __init__(
        self,
        key_fn: Callable[[Record], Any],
        fn: Callable[[Record, ProcessContext], Iterable[Record] | None],
        on_timer: Callable[[int, ProcessContext], Iterable[Record] | None] | None = None,
        time_fn: Callable[[Record], int | None] | None = None,
        ttl_ms: Mapping[str, int] | None = None,
        clock: Callable[[], int] = wall_ms,
    ) -> None:
        self.key_fn, self.fn, self.on_timer_fn, self.time_fn = key_fn, fn, on_timer, time_fn
        self.ttl = dict(ttl_ms or {})
        self.clock = clock
        self.event = TimerIndex()  # (ts, key)
        self.processing = TimerIndex()  # (ts, ("u", key)) user timer | (ts, ("x", sk)) TTL
        self._ctx: Context | None = None
        self._wm: int | None = None
        # Its outputs carry event time (spillway.spark_jobs.operators.stamping, which sets
        # this): a record's outputs its carried time, an event-time timer's outputs the
        # timer's. Stamped here, within the one call that writes state (_apply), so a
        # failed call still leaves state as it was.
        self.carry_time = False

    def open(self, ctx: Context) -> None:
        """Take the restored state and watermark; rebuild both timer indexes from it."""
        self._ctx, self._wm = ctx, ctx.watermark
        self.event.clear()
        self.processing.clear()
        for sk, v in ctx.state.items():
            if sk[0] == "t":
                _t, key, domain, ts = sk
                self._index(domain, key, ts, True)
            elif sk[2] in self.ttl:
                self.processing.register(v[0] + self.ttl[sk[2]], ("x", sk))

    def _index(self, domain: str, key: Any, ts: int, register: bool) -> None:
        idx, entry = (self.event, key) if domain == EVENT else (self.processing, ("u", key))
        if register:
            idx.register(ts, entry)
        else:
            idx.delete(ts, entry)

    def _apply(self, w: _Writes) -> None:
        state = w.state
        for sk, v in w.puts.items():
            if v is _GONE:
                state.delete(sk)
                continue
            state.put(sk, v)
            if sk[2] in self.ttl:
                self.processing.register(v[0] + self.ttl[sk[2]], ("x", sk))
        for (domain, key, ts), register in w.timers.items():
            tk = ("t", key, domain, ts)
            if register:
                state.put(tk, 1)
            else:
                state.delete(tk)
            self._index(domain, key, ts, register)

    def _state(self) -> Any:
        assert self._ctx is not None, "open() was not called"
        return self._ctx.state

    def process(self, records: Sequence[Record]) -> list[Record]:
        """``fn`` for each record, bound to its key; changes apply when all succeeded."""
        return self._run(records, self.key_fn, self.fn, self.time_fn)

    def _run(
        self,
        records: Sequence[Record],
        key_fn: Callable[[Record], Any],
        fn: Callable[[Record, ProcessContext], Iterable[Record] | None],
        time_fn: Callable[[Record], int | None] | None,
    ) -> list[Record]:
        w = _Writes(self._state(), self.ttl, self.clock())
        out: list[Record] = []
        carry = self.carry_time
        for r in records:
            ts = time_fn(r) if time_fn is not None else None
            got = fn(r, ProcessContext(w, key_fn(r), ts, self._wm, None))
            if got is not None and carry:
                t = time_of(r)
                out.extend(stamped(o, t) for o in got)
            elif got is not None:
                out.extend(got)
        self._apply(w)
        return out

    def _fire(self, domain: str, ts: int, key: Any, now: int) -> list[Record]:
        w = _Writes(self._state(), self.ttl, now)
        w.timers[(domain, key, ts)] = False  # fired: no longer pending
        out: list[Record] = []
        if self.on_timer_fn is not None:
            kind = "event" if domain == EVENT else "processing"
            got = self.on_timer_fn(ts, ProcessContext(w, key, ts, self._wm, kind))
            if got is not None and self.carry_time and domain == EVENT:
                out.extend(stamped(o, ts) for o in got)
            elif got is not None:
                out.extend(got)
        self._apply(w)
        return out

    def on_watermark(self, watermark: int) -> list[Record]:
        """Fire every event-time timer at or below ``watermark``, in time order (timers
        registered meanwhile at or below it too)."""
        self._wm = watermark
        out: list[Record] = []
        while due := self.event.pop_due(watermark):
            for ts, key in due:
                out.extend(self._fire(EVENT, ts, key, self.clock()))
        return out

    def on_processing_time(self, now: int) -> list[Record]:
        """Fire processing-time timers at or below ``now`` (ms); remove expired state."""
        nxt = self.processing.next_time()
        if nxt is None or nxt > now:
            return []
        state = self._state()
        out: list[Record] = []
        for ts, (kind, x) in self.processing.pop_due(now):
            if kind == "u":
                out.extend(self._fire(PROCESSING, ts, x, now))
                continue
            v = state.get(x)  # a TTL clean-up: only if no write renewed it meanwhile
            if v is not None and v[0] + self.ttl[x[2]] <= now:
                state.delete(x)
        return out

    def on_end(self) -> list[Record]:
        """End of input: the watermark is infinite, so every event-time timer fires."""
        out: list[Record] = []
        while (nxt := self.event.next_time()) is not None:
            out.extend(self.on_watermark(max(nxt, self._wm or nxt)))
        return out

    def set_aside(self) -> list[SetAside]:
        """Every record goes to ``fn`` (late ones too: ``ctx.watermark`` tells)."""
        return []
