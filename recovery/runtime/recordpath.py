"""The record path: record logic (``Logic.process``) over lists of dict records.

A channel message's records go to the operator with the message as every record's origin
(a record that fails is named or dead-lettered with it); a multi-input operator is told
which input the message came from (:func:`spillway.recovery.job.inputs.input_call`). What
a chained source read goes to ``process`` with each record's origin from the source; the
outputs then have no origin of their own (a function may emit 0..n per input).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spillway.channels.ids import TopicPartition
from spillway.recovery.job.inputs import input_call
from spillway.recovery.job.origins import Origins, Same, TopicOffset
from spillway.recovery.job.plan import Record
from spillway.recovery.runtime.failures import run_diverting
from spillway.recovery.runtime.operatorpath import OperatorPath
from spillway.recovery.runtime.path import PathParts


class RecordPath(OperatorPath):
    """Runs record logic on each message (or read) and writes its records."""

    def __init__(self, parts: PathParts) -> None:
        """``parts.logic``: a record logic."""
        super().__init__(parts, parts.outputs.records)
        self._subtask = parts.subtask
        self._operator = parts.operator
        self._dead_letters = parts.dead_letters
        self._input_of = parts.input_of

    def message(self, records: Sequence[Record], tp: TopicPartition, offset: int) -> None:
        """``process`` (or ``process_input``) on the message's records; a failing call is
        isolated record by record (:func:`spillway.recovery.runtime.failures.run_diverting`)."""
        origins = Same(TopicOffset(tp.topic, tp.partition, offset))
        input_of = self._input_of
        call = input_call(self._logic, (lambda: input_of(tp)) if input_of else None)
        out = run_diverting(
            call, records, origins, self._subtask, self._operator, self._dead_letters
        )
        self.emit(out, origins)

    def poll_done(self) -> None:
        """Nothing is held across messages."""

    def rows(self, read: Sequence[Any]) -> int:
        """A record source reads records."""
        return len(read)

    def read(self, read: list[Any], origins: Origins) -> None:
        """``process`` on what the chained source read (``origins``: each record's)."""
        out = run_diverting(
            self._logic.process, read, origins, self._subtask, self._operator, self._dead_letters
        )
        self.emit(out)
