"""What every path with operator logic shares, records or batches alike.

Each call of the operator — on a message, on a read, at a watermark, at a processing-time
timer, at the end — is followed by the same two things: what the operator set aside
during it is taken (counted, and dead-lettered with the input message's origin when the
call had one), then its outputs are written in the path's form. :class:`OperatorPath`
holds that sequence once; :class:`spillway.recovery.runtime.recordpath.RecordPath` and
:mod:`spillway.recovery.runtime.arrowpath` add how a message or a read is run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from spillway.recovery.job.origins import UNKNOWN, Origins, Same
from spillway.recovery.job.plan import Logic
from spillway.recovery.runtime.path import PathParts

# Writes one call's outputs in the path's form
# (spillway.recovery.runtime.outputs.Outputs.records or .batches).
Write = Callable[[list[Any], Origins], None]


class OperatorPath:
    """The operator's calls that do not depend on the path's form, and its emit."""

    def __init__(self, parts: PathParts, write: Write) -> None:
        """``parts.logic`` must be set; ``write``: how this path's outputs are written."""
        assert parts.logic is not None, "an operator path runs logic"
        self._logic: Logic = parts.logic
        self._aside = parts.aside
        self._write = write
        # Processing-time timers (keyed process functions) need the clock, not input;
        # whether the logic has them is known now, not asked at every tick.
        self._timer: Callable[[int], Iterable[Any]] | None = getattr(
            parts.logic, "on_processing_time", None
        )

    def emit(self, outputs: Iterable[Any], origins: Origins = UNKNOWN) -> None:
        """Take what the operator set aside in the call that returned ``outputs``, then
        write them (``origins``: where each came from, if known)."""
        recs = outputs if isinstance(outputs, list) else list(outputs)
        # What it set aside comes from the same input message, when there was one.
        self._aside.take(
            self._logic.set_aside(), origins.origin if isinstance(origins, Same) else None
        )
        self._write(recs, origins)

    def watermark(self, watermark: int) -> None:
        """The operator's outputs at ``watermark``."""
        self.emit(self._logic.on_watermark(watermark))

    def timers(self) -> None:
        """The operator's processing-time timers, at the clock's time now (milliseconds);
        nothing for a logic without them."""
        if self._timer is not None:
            self.emit(self._timer(int(time.time() * 1000)))

    def end(self) -> None:
        """The operator's last outputs."""
        self.emit(self._logic.on_end())
