"""Folding the batches of one poll together: one operator call per poll.

A keyed batch aggregate pays per call what does not depend on the batch's size — a
``group_by``, a state read and write per distinct key — and a keyed channel delivers
many small messages (one per key group and writer flush). :class:`PollFold` holds the
Arrow batches of the messages one poll returned and hands them on as one batch, with
each row's origin (:class:`Spans`), when the poll is over.

Correctness rests on when it is flushed: before anything that may checkpoint (the
runtime flushes at the end of every poll, before the cadence's after-poll step and
before the interval check between steps), so a checkpoint never records a position past
rows that are still held. The unaligned mode, which checkpoints between chunks of one
message, does not fold (:mod:`spillway.recovery.runtime.processor`).

Pure; no I/O.
"""

from __future__ import annotations

from bisect import bisect_right

import pyarrow as pa

from spillway.channels.wire.batchread import one_batch
from spillway.recovery.job.origins import UNKNOWN, Origin, Origins, Same


class Spans:
    """The origins of rows made of consecutive parts, each with origins of its own."""

    def __init__(self) -> None:
        self._ends: list[int] = []
        self._parts: list[Origins] = []

    def add(self, rows: int, origins: Origins) -> None:
        """The next ``rows`` rows have ``origins`` (by their index within the part)."""
        if rows > 0:
            self._ends.append((self._ends[-1] if self._ends else 0) + rows)
            self._parts.append(origins)

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def at(self, k: int) -> Origin | None:
        """The origin of row ``k`` (``None`` past the end)."""
        i = bisect_right(self._ends, k)
        if i == len(self._ends):
            return None
        return self._parts[i].at(k - (self._ends[i - 1] if i else 0))


class PollFold:
    """Batches held until the end of a poll, then taken as one (rows in arrival order)."""

    def __init__(self) -> None:
        self._batches: list[pa.RecordBatch] = []
        self._spans = Spans()
        self._messages: list[Origins] = []

    def add(self, batch: pa.RecordBatch, origins: Origins) -> None:
        """Hold ``batch`` (one message's rows, ``origins`` by row)."""
        if batch.num_rows:
            self._batches.append(batch)
            self._spans.add(batch.num_rows, origins)
            self._messages.append(origins)

    def take(self) -> tuple[pa.RecordBatch, Origins, Origins] | None:
        """The held rows as one batch, each row's origin, and the origin of the outputs
        (the message's, when they all came from one; else unknown); ``None`` if none."""
        if not self._batches:
            return None
        batch = one_batch(self._batches, self._batches[0].schema)
        single = self._messages[0] if len(self._messages) == 1 else None
        outputs: Origins = single if isinstance(single, Same) else UNKNOWN
        rows = self._spans
        self._batches, self._spans, self._messages = [], Spans(), []
        return batch, rows, outputs
