"""Windows as values: ``Tumbling(size)``, ``Hopping(size, hop)``, ``Session(gap)``,
``Count(n)``, taken by ``KeyedStream.window``.

Durations are a ``datetime.timedelta`` (whole milliseconds) or integer milliseconds.
A window value is checked when a window operator is declared with it
(:func:`resolve`), so that the error names the operator; constructing one checks nothing.

Flink's sliding windows are hopping windows (``Hopping(size, hop)``); there is no
separate sliding kind. Semantics: :mod:`spillway.spark_jobs.operators.windows`.
"""

from __future__ import annotations

from dataclasses import dataclass

from spillway.channels.errors import PipelineDefinitionError
from spillway.spark_jobs.records.durations import Duration as Duration
from spillway.spark_jobs.records.durations import millis as millis


@dataclass(frozen=True)
class Tumbling:
    """Event-time windows ``[start, start + size)``, one after another."""

    size: Duration


@dataclass(frozen=True)
class Hopping:
    """Event-time windows of ``size`` starting every ``hop`` (``hop <= size``); a record
    lies in ``size / hop`` of them. Flink's sliding windows."""

    size: Duration
    hop: Duration


@dataclass(frozen=True)
class Session:
    """Per-key sessions ``[first, last + gap)``, merged as records bridge them."""

    gap: Duration


@dataclass(frozen=True)
class Count:
    """Windows of ``n`` records per key, in arrival order (no event time)."""

    n: int


Window = Tumbling | Hopping | Session | Count


@dataclass(frozen=True)
class Resolved:
    """A checked window value in milliseconds: ``kind`` (the operator kind of the plan
    description), ``size`` (count windows: records; sessions: the gap) and ``hop``."""

    kind: str  # tumbling_window | hopping_window | session_window | count_window
    size: int
    hop: int


def resolve(window: object, where: str) -> Resolved:
    """``window`` checked and in milliseconds; :class:`PipelineDefinitionError` naming
    ``where`` (the operator) when it is not a window value or a size is not positive."""
    if isinstance(window, Tumbling):
        size = millis(window.size, "window size", where)
        return Resolved("tumbling_window", size, size)
    if isinstance(window, Hopping):
        size = millis(window.size, "window size", where)
        hop = millis(window.hop, "hop", where)
        if hop > size:
            raise PipelineDefinitionError(
                f"{where}: hop {hop} ms is larger than size {size} ms, so records between "
                "windows would belong to none; use hop <= size"
            )
        return Resolved("hopping_window", size, hop)
    if isinstance(window, Session):
        gap = millis(window.gap, "session gap", where)
        return Resolved("session_window", gap, gap)
    if isinstance(window, Count):
        n = window.n
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise PipelineDefinitionError(
                f"{where}: Count(n) needs an integer number of records >= 1, got {n!r}"
            )
        return Resolved("count_window", n, n)
    raise PipelineDefinitionError(
        f"{where}: {window!r} is not a window; pass Tumbling(size), Hopping(size, hop), "
        "Session(gap) or Count(n) (durations as datetime.timedelta or milliseconds)"
    )
