"""Event time at the sources: watermark strategies and their per-partition bookkeeping.

A source with event time gives every record a timestamp (milliseconds) and follows a
:class:`Watermarks` strategy, as Flink's ``WatermarkStrategy.forBoundedOutOfOrderness(b)
.withIdleness(t)``. A watermark ``w`` promises that no record with an event time below
``w`` follows (a window ``[s, e)`` is complete once ``e <= w``).

:class:`WatermarkTracker` is the pure bookkeeping of one source subtask: per input
partition the largest event time seen; the subtask's watermark is the minimum over its
partitions of ``largest - bound``, leaving out partitions quiet for longer than the idle
timeout; it never goes back. Its :meth:`~WatermarkTracker.position` goes into the
source's checkpointed position, so a restart resumes it. No I/O and no clock of its own:
callers pass ``now`` (monotonic seconds).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spillway.channels.errors import PipelineDefinitionError, RecordError
from spillway.spark_jobs.records.durations import Duration, millis


@dataclass(frozen=True)
class Watermarks:
    """A watermark strategy: bounded out-of-orderness, optionally with an idle timeout.

    ``max_out_of_orderness_ms``: how far (ms) a record's event time may lie behind the
    largest one already read from its partition and still be on time. ``idle_timeout_ms``:
    a partition that delivered nothing for this long stops holding the watermark back
    until it delivers again; a source subtask whose partitions are all idle (or that has
    none) is announced idle downstream, where it is left out of the minimum. ``None``:
    partitions never count as idle.
    """

    max_out_of_orderness_ms: int
    idle_timeout_ms: int | None = None

    def __post_init__(self) -> None:
        bound, idle = self.max_out_of_orderness_ms, self.idle_timeout_ms
        if isinstance(bound, bool) or not isinstance(bound, int) or bound < 0:
            raise PipelineDefinitionError(
                f"Watermarks: max_out_of_orderness_ms must be an integer >= 0 (ms), got {bound!r}"
            )
        if idle is not None and (isinstance(idle, bool) or not isinstance(idle, int) or idle < 1):
            raise PipelineDefinitionError(
                f"Watermarks: idle_timeout_ms must be an integer >= 1 (ms) or None, got {idle!r}"
            )

    @classmethod
    def bounded(
        cls, max_out_of_orderness_ms: Duration, idle_timeout_ms: Duration | None = None
    ) -> Watermarks:
        """Records may arrive up to ``max_out_of_orderness_ms`` behind the latest seen.
        Both durations are integer ms or a ``datetime.timedelta``."""
        return cls(
            millis(max_out_of_orderness_ms, "max_out_of_orderness_ms", "Watermarks", minimum=0),
            None if idle_timeout_ms is None else _idle(idle_timeout_ms),
        )

    @classmethod
    def monotonic(cls, idle_timeout_ms: Duration | None = None) -> Watermarks:
        """Event times never decrease within a partition (``bounded(0)``)."""
        return cls(0, None if idle_timeout_ms is None else _idle(idle_timeout_ms))


def _idle(value: Duration) -> int:
    return millis(value, "idle_timeout_ms", "Watermarks")


class WatermarkTracker:
    """Watermark bookkeeping of one source subtask over its input ``partitions``."""

    def __init__(self, strategy: Watermarks, partitions: Iterable[int], now: float) -> None:
        """Start with no event time seen; every partition's idle clock starts at ``now``."""
        self.bound = strategy.max_out_of_orderness_ms
        timeout = strategy.idle_timeout_ms
        self._idle_s = None if timeout is None else timeout / 1000
        self._partitions = tuple(partitions)
        self._max: dict[int, int] = {}
        self._heard: dict[int, float] = dict.fromkeys(self._partitions, now)
        self._wm: int | None = None

    def restore(self, position: Mapping[str, Any]) -> None:
        """Continue from :meth:`position` (empty: nothing seen yet).

        Partitions it does not list were at most ``watermark + bound``; taking exactly
        that for them changes no watermark this tracker will emit (the watermark only
        rises), so the position need not list them.
        """
        wm = position.get("watermark")
        self._wm = None if wm is None else int(wm)
        listed = {int(p): int(t) for p, t in position.get("event_time", {}).items()}
        self._max = {}
        for p in self._partitions:
            if p in listed:
                self._max[p] = listed[p]
            elif self._wm is not None:
                self._max[p] = self._wm + self.bound

    def observe(self, partition: int, event_time: int, now: float) -> None:
        """A record with ``event_time`` was read from ``partition`` at ``now``."""
        old = self._max.get(partition)
        if old is None or event_time > old:
            self._max[partition] = event_time
        self._heard[partition] = now

    def _active(self, now: float) -> list[int]:
        if self._idle_s is None:
            return list(self._partitions)
        limit = self._idle_s
        return [p for p in self._partitions if now - self._heard.get(p, now) < limit]

    def current(self, now: float) -> int | None:
        """The watermark at ``now``: min over active partitions of ``max - bound``, never
        lower than before; ``None`` until every active partition has delivered a record."""
        active = self._active(now)
        if active and all(p in self._max for p in active):
            candidate = min(self._max[p] for p in active) - self.bound
            if self._wm is None or candidate > self._wm:
                self._wm = candidate
        return self._wm

    def idle(self, now: float) -> bool:
        """True when the subtask has no partition, or every partition is idle at ``now``."""
        return not self._active(now)

    def position(self) -> dict[str, Any]:
        """JSON-able state for the source's checkpointed position (see :meth:`restore`)."""
        out: dict[str, Any] = {"watermark": self._wm}
        ahead = {
            str(p): t
            for p, t in sorted(self._max.items())
            if self._wm is None or t - self.bound > self._wm
        }
        if ahead:
            out["event_time"] = ahead
        return out


def event_time(fn: Callable[[Any], Any], record: Any) -> int:
    """``fn(record)``, the record's event time in integer milliseconds.

    :class:`RecordError` (saying why, not where: the caller adds that) when ``fn`` raises
    or returns anything but an integer.
    """
    try:
        t = fn(record)
    except Exception as e:
        raise RecordError(f"the source's timestamp function failed: {type(e).__name__}: {e}") from e
    if not isinstance(t, int) or isinstance(t, bool):  # bool is an int, but not a time
        raise RecordError(
            f"the source's timestamp function returned {t!r} ({type(t).__name__}); "
            "it must return the event time as integer milliseconds"
        )
    return t
