"""A one-line progress display of a running job, from the driver's metrics snapshots.

On a terminal (stderr is a tty) the line is redrawn in place about once a second; else a
plain line is written every ``plain_every_s`` seconds, so logs and CI output stay
readable. :func:`render` is pure.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import TextIO

from spillway.recovery.observe.metrics import Snapshot


def percent_done(snap: Snapshot) -> float | None:
    """Percent done of a bounded job: the mean over source subtasks of done/total (each
    in the source's own units: records, offsets or files); None if any source subtask has
    not reported a bound (unbounded, or not started yet)."""
    sources = [s for s in snap.subtasks if s.source]
    if not sources or any(s.progress is None for s in sources):
        return None
    fractions = [
        min(1.0, done / total) if total > 0 else 1.0
        for done, total in (s.progress for s in sources if s.progress is not None)
    ]
    return 100.0 * sum(fractions) / len(fractions)


def source_records(snap: Snapshot) -> int:
    """Records read by the sources so far (replays included)."""
    return sum(s.records_in for s in snap.subtasks if s.source)


def render(job: str, snap: Snapshot, prev: Snapshot | None, dt_s: float) -> str:
    """The progress line: records read and rate, checkpoints, restarts, lost subtasks (if
    any), finished subtasks and, for a bounded job, percent done."""
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
    if snap.global_durations_s:
        parts.insert(2, f"{len(snap.global_durations_s)} global")
    pct = percent_done(snap)
    if pct is not None:
        parts.append(f"{pct:.0f}% done")
    return " · ".join(parts)


class ProgressLine:
    """Draws :func:`render` of ``snapshot()`` on ``out`` until :meth:`stop`."""

    def __init__(
        self,
        job: str,
        snapshot: Callable[[], Snapshot],
        out: TextIO | None = None,
        every_s: float = 1.0,
        plain_every_s: float = 10.0,
    ) -> None:
        self._job = job
        self._snapshot = snapshot
        self._out = out if out is not None else sys.stderr
        self._tty = self._out.isatty()
        self._every_s = every_s if self._tty else plain_every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="progress", daemon=True)
        self._prev: Snapshot | None = None
        self._line: str | None = None

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
        prev = self._prev
        # The rate is measured between snapshots (taken about once a second by the metrics
        # feed); a snapshot not renewed since the last draw keeps the last line's rate.
        if self._line is None or prev is None or snap.time != prev.time:
            self._line = render(self._job, snap, prev, snap.time - prev.time if prev else 0.0)
            self._prev = snap
        # A terminal: redrawn in place ("erase to end of line"), and the cursor is left at
        # the line's start, so a log line written meanwhile by a Spark worker overwrites it
        # instead of being appended to it; the next draw comes back below.
        self._out.write(f"\r{self._line}\x1b[K\r" if self._tty else f"[progress] {self._line}\n")
        self._out.flush()
