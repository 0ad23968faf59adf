"""The batch path: batch logic (``BatchLogic.run_batch``) over Arrow record batches.

Its subtask reads its channels as batches (each message one
:class:`~spillway.channels.wire.batchread.ArrowRows`), or its chained source returns
record batches; the operator returns batches, written as Arrow
(:mod:`spillway.recovery.runtime.batchpath`). :class:`BatchPath` runs the operator once per
message; :class:`FoldingBatchPath`, for an operator that pays per call rather than per
row (``folds_per_poll``), once per poll on the messages of the poll folded together
(:mod:`spillway.recovery.runtime.pollfold`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from spillway.channels.ids import TopicPartition
from spillway.channels.wire.batchread import ArrowRows, one_batch
from spillway.recovery.job.origins import Origins, Same, TopicOffset
from spillway.recovery.job.plan import Record
from spillway.recovery.runtime.batchpath import BatchLogic, as_batch_logic
from spillway.recovery.runtime.operatorpath import OperatorPath
from spillway.recovery.runtime.path import PathParts
from spillway.recovery.runtime.pollfold import PollFold


class BatchPath(OperatorPath):
    """Runs batch logic on each message's batch (or a read's) and writes its batches."""

    def __init__(self, parts: PathParts) -> None:
        """``parts.logic``: a batch logic."""
        super().__init__(parts, parts.outputs.batches)
        batch_logic = as_batch_logic(parts.logic)
        assert batch_logic is not None, "a batch path runs batch logic"
        self._batch_logic: BatchLogic = batch_logic
        self._dead_letters = parts.dead_letters

    def message(self, records: Sequence[Record], tp: TopicPartition, offset: int) -> None:
        """``run_batch`` on the message's batch (``records``: ArrowRows, the reader's form
        for this path), every row's origin the message."""
        origins = Same(TopicOffset(tp.topic, tp.partition, offset))
        batch = cast(ArrowRows, records).batch
        self.emit(self._batch_logic.run_batch(batch, origins, self._dead_letters), origins)

    def poll_done(self) -> None:
        """Nothing is held across messages."""

    def rows(self, read: Sequence[Any]) -> int:
        """A batch source reads record batches."""
        return sum(int(b.num_rows) for b in read)

    def read(self, read: list[Any], origins: Origins) -> None:
        """``run_batch`` on what the chained batch source read, as one batch; nothing to
        run on a read of no batches (only rejected rows, or none yet), but what the
        operator set aside is still taken, as after every call."""
        if read:
            batch = one_batch(read, read[0].schema)
            self.emit(self._batch_logic.run_batch(batch, origins, self._dead_letters))
        else:
            self.emit([])


class FoldingBatchPath(BatchPath):
    """A :class:`BatchPath` that holds a poll's messages and runs them in one call when
    the poll is over. Not for unaligned checkpoints (which may fall between chunks of a
    message, where nothing may be held): the chooser does not pick it there."""

    def __init__(self, parts: PathParts) -> None:
        """As :class:`BatchPath`; the fold starts empty."""
        super().__init__(parts)
        self._fold = PollFold()

    def message(self, records: Sequence[Record], tp: TopicPartition, offset: int) -> None:
        """Hold the message's batch, its rows' origin the message."""
        origins = Same(TopicOffset(tp.topic, tp.partition, offset))
        self._fold.add(cast(ArrowRows, records).batch, origins)

    def poll_done(self) -> None:
        """``run_batch`` once on the poll's rows (each with its own message's origin);
        the outputs' origin is the message's when one message fed them all."""
        taken = self._fold.take()
        if taken is not None:
            batch, rows, outputs = taken
            self.emit(self._batch_logic.run_batch(batch, rows, self._dead_letters), outputs)
