"""Named crash points for failure-injection tests (as Kafka's and Flink's EOS tests do).

``SPILLWAY_CRASH_AT`` lists where a subtask kills itself with SIGKILL — a real process
death, not an exception — as comma-separated ``OPERATOR:INDEX:POINT:ATTEMPT[:N[:GEN]]``:
die at the N-th (default 1st) time attempt ATTEMPT of ``OPERATOR[INDEX]`` reaches POINT,
in generation GEN of the operator's Spark job (default: in every generation). A live
rescale or upgrade starts a new generation whose attempts count from 0 again
(spillway.spark_jobs.spark.opjobs), so a crash meant for the first generation names it.
Points, in the order one checkpoint passes them:

* ``restore`` — state restored, inputs not yet assigned;
* ``before-produce`` — a transaction is open and the first output of it is about to be
  written (nothing of the transaction is on the broker yet);
* ``after-produce`` — every output and changelog record of the checkpoint is flushed to
  the broker, the checkpoint record not yet written;
* ``after-produce-read`` — as ``after-produce``, but counting only checkpoints that read
  records since the previous one: a crash there always leaves records to re-process
  (a test that asserts a replay cannot draw an interval in which upstream had committed
  nothing new, as happens on a loaded machine);
* ``after-produce-spanning`` — the same, in a checkpoint whose transaction holds the
  parts of a record that spans messages (spillway.channels.wire.spanning);
* ``before-commit`` — outputs and checkpoint record flushed, consumer offsets not yet sent;
* ``after-send-offsets`` — offsets added to the transaction, commit not yet called;
* ``during-commit`` — the commit request is in flight: a helper thread SIGKILLs the
  process ``DURING_COMMIT_DELAY_S`` after ``commit_transaction`` was called, so the
  EndTxn request may or may not have reached the coordinator (the outcome is unknown to
  the dying process; the restarted one learns it from its latest committed checkpoint);
* ``after-commit`` — committed, the next transaction not yet begun;
* ``after-final-commit`` — the finished checkpoint committed, its sink files not yet
  published;
* ``after-partial-commit`` — an unaligned checkpoint taken inside a channel message
  committed;
* ``after-commit-inside-record`` — a checkpoint committed while the reader held some
  parts of a record that spans messages (its position is at the record's first part).

Unset: no cost beyond one dictionary lookup per checkpoint.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass

from spillway.channels.errors import ConfigError
from spillway.channels.ids import SubtaskId

ENV = "SPILLWAY_CRASH_AT"
POINTS = (
    "restore",
    "before-produce",
    "after-produce",
    "after-produce-read",
    "after-produce-spanning",
    "before-commit",
    "after-send-offsets",
    "during-commit",
    "after-commit",
    "after-final-commit",
    "after-partial-commit",
    "after-commit-inside-record",
)
# Points only some runs pass: checkpoints that read records, the last checkpoint of a
# finishing subtask, checkpoints taken inside a channel message (unaligned mode), with or
# inside a record's parts. Every other point is passed by every running subtask,
# checkpoint after checkpoint.
OCCASIONAL_POINTS = (
    "after-produce-read",
    "after-final-commit",
    "after-partial-commit",
    "after-produce-spanning",
    "after-commit-inside-record",
)
# Long enough for the commit call to have flushed and sent EndTxn, short enough that the
# broker's answer (a few ms on loopback) often has not arrived yet.
DURING_COMMIT_DELAY_S = 0.002


@dataclass(frozen=True)
class CrashPoint:
    """One planned crash."""

    operator: str
    index: int
    point: str
    attempt: int
    nth: int = 1
    generation: int | None = None  # of the operator's Spark job; None: every generation


def parse(spec: str) -> list[CrashPoint]:
    """Parse a ``SPILLWAY_CRASH_AT`` value; :class:`ConfigError` if malformed."""
    out: list[CrashPoint] = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        parts = item.split(":")
        try:
            op, index, point, attempt = parts[:4]
            nth = int(parts[4]) if len(parts) > 4 else 1
            generation = int(parts[5]) if len(parts) > 5 else None
            if len(parts) > 6:
                raise ValueError(item)
            cp = CrashPoint(op, int(index), point, int(attempt), nth, generation)
        except ValueError:
            raise ConfigError(
                f"{ENV} item {item!r} must look like OPERATOR:INDEX:POINT:ATTEMPT[:N[:GEN]]"
            ) from None
        if cp.point not in POINTS:
            raise ConfigError(f"{ENV} point {cp.point!r} is not one of {', '.join(POINTS)}")
        out.append(cp)
    return out


class Faults:
    """The crash points that apply to one incarnation of one subtask."""

    def __init__(
        self, subtask: SubtaskId, attempt: int, spec: str | None = None, generation: int = 0
    ) -> None:
        spec = os.environ.get(ENV, "") if spec is None else spec
        self._points = {
            cp.point: cp.nth
            for cp in parse(spec)
            if cp.operator == subtask.operator
            and cp.index == subtask.index
            and cp.attempt == attempt
            and cp.generation in (None, generation)
        }
        self._seen: dict[str, int] = {}

    @property
    def armed(self) -> bool:
        """True if any crash is planned for this incarnation."""
        return bool(self._points)

    def reached(self, point: str) -> None:
        """Die here (SIGKILL) if this is a planned crash."""
        if self._due(point):
            _die()

    def reached_soon(self, point: str, delay_s: float = DURING_COMMIT_DELAY_S) -> None:
        """If this is a planned crash, die ``delay_s`` from now, from another thread, so the
        call the caller makes next (e.g. a commit) is in flight when the process dies."""
        if self._due(point):
            threading.Thread(target=_die_after, args=(delay_s,), daemon=True).start()

    def _due(self, point: str) -> bool:
        nth = self._points.get(point)
        if nth is None:
            return False
        self._seen[point] = self._seen.get(point, 0) + 1
        return self._seen[point] == nth


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _die_after(delay_s: float) -> None:
    time.sleep(delay_s)
    _die()
