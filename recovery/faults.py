"""Named crash points for failure-injection tests (as Kafka's and Flink's EOS tests do).

``SPILLWAY_CRASH_AT`` lists where a subtask kills itself with SIGKILL — a real process
death, not an exception — as comma-separated ``OPERATOR:INDEX:POINT:ATTEMPT[:N]``:
die at the N-th (default 1st) time attempt ATTEMPT of ``OPERATOR[INDEX]`` reaches POINT.
Points: ``restore`` (state restored, inputs not yet assigned), ``before-commit`` (outputs
and checkpoint record produced, not committed), ``after-commit``, ``after-final-commit``
(the finished checkpoint committed, its sink files not yet published),
``after-partial-commit`` (an unaligned checkpoint taken inside a channel message).
Unset: no cost beyond one dictionary lookup per checkpoint.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

from channels.errors import ConfigError
from channels.ids import SubtaskId

ENV = "SPILLWAY_CRASH_AT"
POINTS = ("restore", "before-commit", "after-commit", "after-final-commit", "after-partial-commit")


@dataclass(frozen=True)
class CrashPoint:
    """One planned crash."""

    operator: str
    index: int
    point: str
    attempt: int
    nth: int = 1


def parse(spec: str) -> list[CrashPoint]:
    """Parse a ``SPILLWAY_CRASH_AT`` value; :class:`ConfigError` if malformed."""
    out: list[CrashPoint] = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        parts = item.split(":")
        try:
            op, index, point, attempt = parts[:4]
            nth = int(parts[4]) if len(parts) > 4 else 1
            cp = CrashPoint(op, int(index), point, int(attempt), nth)
        except ValueError:
            raise ConfigError(
                f"{ENV} item {item!r} must look like OPERATOR:INDEX:POINT:ATTEMPT[:N]"
            ) from None
        if cp.point not in POINTS:
            raise ConfigError(f"{ENV} point {cp.point!r} is not one of {', '.join(POINTS)}")
        out.append(cp)
    return out


class Faults:
    """The crash points that apply to one incarnation of one subtask."""

    def __init__(self, subtask: SubtaskId, attempt: int, spec: str | None = None) -> None:
        spec = os.environ.get(ENV, "") if spec is None else spec
        self._points = {
            cp.point: cp.nth
            for cp in parse(spec)
            if cp.operator == subtask.operator
            and cp.index == subtask.index
            and cp.attempt == attempt
        }
        self._seen: dict[str, int] = {}

    @property
    def armed(self) -> bool:
        """True if any crash is planned for this incarnation."""
        return bool(self._points)

    def reached(self, point: str) -> None:
        """Die here (SIGKILL) if this is a planned crash."""
        nth = self._points.get(point)
        if nth is None:
            return
        self._seen[point] = self._seen.get(point, 0) + 1
        if self._seen[point] == nth:
            os.kill(os.getpid(), signal.SIGKILL)
