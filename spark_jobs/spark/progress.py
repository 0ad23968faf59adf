"""A one-line progress display of a running job, from the driver's metrics snapshots.

On a terminal (stderr is a tty) the line is redrawn in place about once a second; else a
plain line is written every ``plain_every_s`` seconds, so logs and CI output stay
readable. :func:`render` is pure.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from spillway.recovery.observe.metrics import UNKNOWN, Snapshot, as_of


def percent_done(snap: Snapshot) -> float | None:
    """Percent done of a bounded job: the mean over source subtasks of done/total (each
    in the source's own units: records, offsets or files); None if any source subtask has
    not reported a bound (unbounded, or not started yet) or reports a bound of 0 without
    having finished (a source that has not listed its files or fixed its ends yet)."""
    sources = [s for s in snap.subtasks if s.source]
    if not sources or any(s.progress is None for s in sources):
        return None
    fractions = []
    for s in sources:
        assert s.progress is not None
        done, total = s.progress
        if total <= 0 and s.state != "finished":
            return None
        fractions.append(min(1.0, done / total) if total > 0 else 1.0)
    return 100.0 * sum(fractions) / len(fractions)


def source_records(snap: Snapshot) -> int:
    """Records read by the sources so far (replays included)."""
    return sum(s.records_in for s in snap.subtasks if s.source)


def render(job: str, snap: Snapshot, prev: Snapshot | None, dt_s: float) -> str:
    """The progress line: records read and rate, checkpoints, restarts, lost subtasks and
    subtasks of unknown liveness (if any), finished subtasks and, for a bounded job,
    percent done. ``snap`` is shown as it is (:class:`ProgressLine` ages it first)."""
    n = source_records(snap)
    rate = (n - source_records(prev)) / dt_s if prev is not None and dt_s > 0 else 0.0
    restarts = snap.total("restarts")
    finished = sum(1 for s in snap.subtasks if s.state == "finished")
    parts = [
        f"{job}: {n:,} records ({rate:,.0f}/s)",
        f"{snap.total('checkpoints'):,} checkpoints",
        f"{restarts} restart{'' if restarts == 1 else 's'}",
        f"{finished}/{len(snap.subtasks)} subtasks finished",
    ]
    lost = sum(1 for s in snap.subtasks if s.state == "lost")
    if lost:  # killed and not restarted yet (or its machine is gone)
        parts.insert(3, f"{lost} lost")
    unknown = sum(1 for s in snap.subtasks if s.state == UNKNOWN)
    if unknown:  # the metrics feed is behind: no verdict
        parts.insert(3, f"{unknown} unknown (no fresh heartbeats read)")
    if snap.global_durations_s:
        parts.insert(2, f"{len(snap.global_durations_s)} global")
    pct = percent_done(snap)
    if pct is not None:
        parts.append(f"{pct:.0f}% done")
    return " · ".join(parts)


class ProgressLine:
    """Draws :func:`render` of ``snapshot()`` on ``out`` until :meth:`stop`.

    Each draw shows the snapshot as of ``clock()``
    (:func:`~spillway.recovery.observe.metrics.as_of`): if the feed has not read fresh
    heartbeats within the liveness limit, no subtask is shown running or lost.
    """

    def __init__(
        self,
        job: str,
        snapshot: Callable[[], Snapshot],
        out: TextIO | None = None,
        every_s: float = 1.0,
        plain_every_s: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._job = job
        self._clock = clock
        self._snapshot = snapshot
        self._out = out if out is not None else sys.stderr
        self._tty = self._out.isatty()
        self._every_s = every_s if self._tty else plain_every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="progress", daemon=True)
        self._prev: Snapshot | None = None
        self._rate_from: Snapshot | None = None  # the rate is measured from this one

    def start(self) -> None:
        """Start drawing (the first rate is measured from here)."""
        self._prev = self._snapshot()
        self._thread.start()

    def stop(self) -> None:
        """Draw the last line and end it."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        self._draw()
        if self._tty:
            self._out.write("\n")
            self._out.flush()

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            self._draw()

    def _draw(self) -> None:
        snap = self._snapshot()
        # The rate is measured between snapshots (taken about once a second by the metrics
        # feed); a snapshot not renewed since the last draw keeps the last line's rate.
        if self._rate_from is None or self._prev is None or snap.time != self._prev.time:
            self._rate_from, self._prev = self._prev, snap
        prev = self._rate_from
        line = render(
            self._job, as_of(snap, self._clock()), prev, snap.time - prev.time if prev else 0.0
        )
        # A terminal: redrawn in place ("erase to end of line"), and the cursor is left at
        # the line's start, so a log line written meanwhile by a Spark worker overwrites it
        # instead of being appended to it; the next draw comes back below.
        self._out.write(f"\r{line}\x1b[K\r" if self._tty else f"[progress] {line}\n")
        self._out.flush()
