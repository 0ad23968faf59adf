"""Event-time windows per key: tumbling, hopping (= sliding), session and count windows.

Semantics (Flink's, in milliseconds of event time):

* A window is ``[start, end)``. Tumbling windows of ``size`` start at multiples of
  ``size``; hopping windows of ``size`` start every ``hop`` ms (multiples of ``hop``), so
  a record lies in ``size / hop`` of them. *Sliding* windows are Flink's
  ``SlidingEventTimeWindows``, i.e. hopping windows (not Kafka Streams' record-aligned
  sliding windows). A session of a key is ``[first, last + gap)``: a record at ``t``
  opens ``[t, t + gap)``, and sessions that overlap or touch it merge (their
  accumulators through ``merge``). Count windows hold the ``size`` next records of a key
  in arrival order, and have no event time.
* A window fires when the watermark ``w`` reaches its end (``end <= w``): with
  ``emit="final"`` its result is emitted then; with ``emit="updates"`` a result is
  emitted after every record instead and nothing at firing.
* ``allowed_lateness_ms = L``: a window's state is kept until ``end + L <= w``. A record
  for a fired window still within ``L`` is added, and (``emit="final"``) the window's
  updated result is emitted at once. A record all of whose windows are past
  ``end + L`` is *late*: left out, counted and dead-lettered (``--dead-letter``) through
  :meth:`set_aside` — never silently dropped.
* Firing uses a :class:`~spillway.spark_jobs.operators.timers.TimerIndex` of ``(time, window)``
  beside the
  keyed state, so a watermark advance costs per fired window, not per open one. The index
  is rebuilt from the restored state in :meth:`open` (a window's timer is its end, or its
  end + L once it fired, which the restored watermark tells).
* At the end of a bounded input, every window not yet emitted fires (count windows too,
  with fewer than ``size`` records).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from spillway.recovery.job.plan import Context, Record, SetAside
from spillway.spark_jobs.modes import Emit
from spillway.spark_jobs.operators.operators import _copy
from spillway.spark_jobs.operators.timers import TimerIndex, sorted_timers

Result = Callable[[Any, int, int, Any], Record]  # (key, start, end, acc) -> record


def _keys(state: Any) -> Iterable[Any]:
    """The state's keys; without decoding restored values where the state can do that
    (``ChangelogState.keys``), which is most of a restore's cost at a million windows."""
    keys = getattr(state, "keys", None)
    return keys() if keys is not None else (k for k, _v in state.items())


class _EventTimeWindows:
    """What every event-time window kind shares: watermark, lateness, set-asides."""

    def __init__(self, allowed_lateness_ms: int, emit: Emit) -> None:
        self.lateness, self.emit = allowed_lateness_ms, emit
        self.late = 0  # this incarnation's late records
        self.timers = TimerIndex()
        self._ctx: Context | None = None
        self._wm: int | None = None
        self._aside: list[SetAside] = []

    def _state(self) -> Any:
        assert self._ctx is not None, "open() was not called"
        return self._ctx.state

    def _fired(self, end: int) -> bool:
        """Whether a window ending at ``end`` has fired (its result emitted, ``final``)."""
        return self._wm is not None and end <= self._wm

    def _expired(self, end: int) -> bool:
        """Whether a window ending at ``end`` is past its allowed lateness."""
        return self._wm is not None and end + self.lateness <= self._wm

    def _timer_time(self, end: int) -> int:
        """When a window's next timer is due: its end, or its clean-up once fired."""
        return end + self.lateness if self._fired(end) else end

    def _set_aside(self, late: list[SetAside]) -> None:
        self.late += len(late)
        self._aside.extend(late)

    def set_aside(self) -> list[SetAside]:
        """The late records since the last call (see the module docstring)."""
        out, self._aside = self._aside, []
        return out


class FixedWindowLogic(_EventTimeWindows):
    """Tumbling (``hop == size``) and hopping/sliding windows per key.

    State: ``(key, start) -> accumulator``; timers: ``(time, (key, start))``.
    """

    def __init__(
        self,
        key_fn: Callable[[Record], Any],
        time_fn: Callable[[Record], int],
        size: int,
        hop: int,
        init: Callable[[], Any],
        add: Callable[[Any, Record], Any],
        result: Result,
        allowed_lateness_ms: int = 0,
        emit: Emit = "final",
    ) -> None:
        super().__init__(allowed_lateness_ms, emit)
        self.key_fn, self.time_fn, self.size, self.hop = key_fn, time_fn, size, hop
        self.init, self.add, self.result = init, add, result

    def open(self, ctx: Context) -> None:
        """Take the restored state and watermark; rebuild the timer index from the state."""
        self._ctx, self._wm = ctx, ctx.watermark
        size, late, wm = self.size, self.lateness, self._wm
        self.timers.rebuild(
            (s + size + (late if wm is not None and s + size <= wm else 0), (k, s))
            for k, s in _keys(ctx.state)
        )

    def process(self, records: Sequence[Record]) -> list[Record]:
        """Add each record to its open windows; emit what ``emit`` asks for."""
        state, size, hop = self._state(), self.size, self.hop
        time_fn, key_fn, add, init, result = (
            self.time_fn, self.key_fn, self.add, self.init, self.result
        )  # fmt: skip
        wm = self._wm
        # Bounds on a window's start instead of per-window calls (the hot loop): a window
        # is alive while start > alive_above, and has fired once start <= fired_upto.
        alive_above = None if wm is None else wm - size - self.lateness
        fired_upto = None if wm is None or self.emit == "updates" else wm - size
        every = self.emit == "updates"
        touched: dict[tuple[Any, int], Any] = {}
        late: list[SetAside] = []
        out: list[Record] = []
        for r in records:
            t = time_fn(r)
            last = t - t % hop
            if alive_above is not None and last <= alive_above:  # its latest window too
                late.append(SetAside("late", self._late_reason(r, t), r))
                continue
            first = last - (last - (t - size) - 1) // hop * hop
            if alive_above is not None and first <= alive_above:
                first += ((alive_above - first) // hop + 1) * hop
            k = key_fn(r)
            for s in range(first, last + 1, hop):
                sk = (k, s)
                acc = touched[sk] if sk in touched else _copy(state.get(sk))
                acc = add(init() if acc is None else acc, r)
                touched[sk] = acc
                if every or (fired_upto is not None and s <= fired_upto):
                    out.append(result(k, s, s + size, acc))
        # State and timers change only once the whole call succeeded.
        register, timer_time = self.timers.register, self._timer_time
        for sk, acc in touched.items():
            state.put(sk, acc)
            register(timer_time(sk[1] + size), sk)
        self._set_aside(late)
        return out

    def _late_reason(self, r: Record, t: int) -> str:
        s = t - t % self.hop
        return (
            f"late: event time {t} of key {self.key_fn(r)!r} falls in window "
            f"[{s}, {s + self.size}) (and earlier ones), past its allowed lateness of "
            f"{self.lateness} ms at watermark {self._wm}"
        )

    def on_watermark(self, watermark: int) -> list[Record]:
        """Fire the windows ending at or before ``watermark``; drop expired ones."""
        state, size = self._state(), self.size
        before, self._wm = self._wm, watermark
        out: list[Record] = []
        for _t, (key, start) in self.timers.pop_due(watermark):
            sk = (key, start)
            acc = state.get(sk)
            if acc is None:
                continue
            end = start + size
            if self.emit == "final" and (before is None or end > before):
                out.append(self.result(key, start, end, acc))
            if self._expired(end):
                state.delete(sk)
            else:
                self.timers.register(end + self.lateness, sk)
        return out

    def on_end(self) -> list[Record]:
        """End of input: every window not yet emitted fires; all state goes."""
        state, size = self._state(), self.size
        out: list[Record] = []
        for _end, (key, start) in sorted_timers((s + size, (k, s)) for (k, s), _ in state.items()):
            if self.emit == "final" and not self._fired(start + size):
                out.append(self.result(key, start, start + size, state.get((key, start))))
            state.delete((key, start))
        self.timers.clear()
        return out


class SessionWindowLogic(_EventTimeWindows):
    """Gap-based, merging session windows per key.

    State: ``key -> [[start, end, acc], ...]`` (sorted, disjoint); timers:
    ``(time, key)``, one per session (its end, or end + L once fired).
    """

    def __init__(
        self,
        key_fn: Callable[[Record], Any],
        time_fn: Callable[[Record], int],
        gap: int,
        init: Callable[[], Any],
        add: Callable[[Any, Record], Any],
        merge: Callable[[Any, Any], Any],
        result: Result,
        allowed_lateness_ms: int = 0,
        emit: Emit = "final",
    ) -> None:
        super().__init__(allowed_lateness_ms, emit)
        self.key_fn, self.time_fn, self.gap = key_fn, time_fn, gap
        self.init, self.add, self.merge, self.result = init, add, merge, result

    def open(self, ctx: Context) -> None:
        """Take the restored state and watermark; rebuild the timer index from the state."""
        self._ctx, self._wm = ctx, ctx.watermark
        self.timers.rebuild(
            (self._timer_time(end), key)
            for key, sessions in ctx.state.items()
            for _start, end, _acc in sessions
        )

    def process(self, records: Sequence[Record]) -> list[Record]:
        """Merge each record into its key's sessions; emit what ``emit`` asks for."""
        state = self._state()
        touched: dict[Any, list[list[Any]]] = {}
        before: dict[Any, list[list[Any]]] = {}
        late: list[SetAside] = []
        out: list[Record] = []
        for r in records:
            t, k = self.time_fn(r), self.key_fn(r)
            if k not in touched:
                stored = state.get(k) or []
                before[k] = stored
                touched[k] = [[s, e, _copy(a)] for s, e, a in stored]
            sessions = touched[k]
            hit = [x for x in sessions if x[0] <= t + self.gap and t <= x[1]]
            start = min([t] + [x[0] for x in hit])
            end = max([t + self.gap] + [x[1] for x in hit])
            if self._expired(end):
                late.append(SetAside("late", self._late_reason(k, t, end), r))
                continue
            acc = self.init()
            for x in hit:
                acc = self.merge(acc, x[2])
            acc = self.add(acc, r)
            merged = [start, end, acc]
            touched[k] = sorted([x for x in sessions if x not in hit] + [merged])
            if self.emit == "updates" or self._fired(end):
                out.append(self.result(k, start, end, acc))
        for k, sessions in touched.items():
            for _s, e, _a in before[k]:
                self.timers.delete(e, k)
                self.timers.delete(e + self.lateness, k)
            state.put(k, sessions)
            for _s, e, _a in sessions:
                self.timers.register(self._timer_time(e), k)
        self._set_aside(late)
        return out

    def _late_reason(self, key: Any, t: int, end: int) -> str:
        return (
            f"late: event time {t} of key {key!r} falls in session ending {end}, past its "
            f"allowed lateness of {self.lateness} ms at watermark {self._wm}"
        )

    def on_watermark(self, watermark: int) -> list[Record]:
        """Fire the sessions ending at or before ``watermark``; drop expired ones."""
        state = self._state()
        before, self._wm = self._wm, watermark
        fired: list[tuple[int, tuple[Any, int, Any]]] = []
        done: set[Any] = set()
        for _t, key in self.timers.pop_due(watermark):
            if key in done:  # one pass handles every due session of the key
                continue
            done.add(key)
            kept = []
            for start, end, acc in state.get(key) or []:
                if end <= watermark and self.emit == "final" and (before is None or end > before):
                    fired.append((end, (key, start, acc)))
                if not self._expired(end):
                    kept.append([start, end, acc])
                    self.timers.register(self._timer_time(end), key)
            if kept:
                state.put(key, kept)
            else:
                state.delete(key)
        # By end, key and start, like fixed windows (a key's sessions fire in one pass).
        return [self.result(k, s, e, a) for e, (k, s, a) in sorted_timers(fired)]

    def on_end(self) -> list[Record]:
        """End of input: every session not yet emitted fires; all state goes."""
        state = self._state()
        every = [(e, (k, s, a)) for k, ss in state.items() for s, e, a in ss]
        out = [
            self.result(k, s, e, a)
            for e, (k, s, a) in sorted_timers(every)
            if self.emit == "final" and not self._fired(e)
        ]
        for k in {k for _e, (k, _s, _a) in every}:
            state.delete(k)
        self.timers.clear()
        return out


class CountWindowLogic:
    """Tumbling count windows per key: every ``size`` records of a key (in the order they
    arrive) form a window ``[n*size, (n+1)*size)`` of record numbers. No event time, so
    no watermark, lateness or timers. State: ``key -> [window number, records, acc]``."""

    def __init__(
        self,
        key_fn: Callable[[Record], Any],
        size: int,
        init: Callable[[], Any],
        add: Callable[[Any, Record], Any],
        result: Result,
        emit: Emit = "final",
    ) -> None:
        self.key_fn, self.size, self.emit = key_fn, size, emit
        self.init, self.add, self.result = init, add, result
        self._ctx: Context | None = None

    def open(self, ctx: Context) -> None:
        """State arrives restored."""
        self._ctx = ctx

    def process(self, records: Sequence[Record]) -> list[Record]:
        """Count each record into its key's window; a full window is emitted and reset."""
        assert self._ctx is not None
        state, size = self._ctx.state, self.size
        touched: dict[Any, list[Any]] = {}
        out: list[Record] = []
        for r in records:
            k = self.key_fn(r)
            if k not in touched:
                stored = state.get(k)
                touched[k] = (
                    [0, 0, None] if stored is None else [stored[0], stored[1], _copy(stored[2])]
                )
            w = touched[k]
            w[2] = self.add(self.init() if w[1] == 0 else w[2], r)
            w[1] += 1
            if self.emit == "updates" or w[1] == size:
                out.append(self.result(k, w[0] * size, (w[0] + 1) * size, w[2]))
            if w[1] == size:
                touched[k] = [w[0] + 1, 0, None]
        for k, w in touched.items():
            state.put(k, w)
        return out

    def on_watermark(self, watermark: int) -> list[Record]:
        """Count windows do not depend on time."""
        return []

    def on_end(self) -> list[Record]:
        """End of input: incomplete windows are emitted (``final``) with what they hold."""
        assert self._ctx is not None
        state, size = self._ctx.state, self.size
        out = []
        for _n, (k, w) in sorted_timers((0, (k, w)) for k, w in state.items()):
            if w[1] and self.emit == "final":
                out.append(self.result(k, w[0] * size, (w[0] + 1) * size, w[2]))
            state.delete(k)
        return out

    def set_aside(self) -> list[SetAside]:
        """Every record is counted in."""
        return []
