"""The columnar path through a subtask: batch operators over Arrow batches.

A batch operator's logic (``spillway.spark_jobs.operators.batchops``,
``spillway.spark_jobs.operators.batchagg``) has
:meth:`BatchLogic.run_batch` besides the record ``Logic``'s ``open`` / ``on_watermark`` /
``on_end`` / ``set_aside``. Its subtask reads its channels as batches
(``ChannelReader(batches=True)``: each message one Arrow batch, as it arrived), hands each
to ``run_batch`` with the message's origin, and writes the batches returned to its
channels as Arrow (``ChannelWriter.write_batch``). Positions, checkpoints, replay and
mid-message resumes are the record path's: a message's rows are counted and sliced as
its records would be (:class:`spillway.channels.wire.batchread.ArrowRows`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import pyarrow as pa

from spillway.channels.wire.batchread import one_batch
from spillway.channels.writer import ChannelWriter
from spillway.recovery.job.origins import Origin, Origins


class DeadLetterSink(Protocol):
    """Where rows that fail go (:class:`spillway.recovery.runtime.deadletter.DeadLetters` is
    one)."""

    def send(
        self,
        *,
        stage: str,
        error: BaseException | str,
        origin: Origin | None,
        record: Any = None,
        raw: bytes | None = None,
    ) -> None:
        """Dead-letter one record with its origin."""
        ...


@runtime_checkable
class BatchLogic(Protocol):
    """What the runtime calls on a batch operator, per input message."""

    def run_batch(
        self, batch: pa.RecordBatch, origins: Origins, dead_letters: DeadLetterSink | None
    ) -> list[pa.RecordBatch]:
        """The output batches of ``batch``; a failing row is dead-lettered with
        ``origins.at(row)`` (or, without ``dead_letters``, a ``RecordError`` naming it)."""
        ...


def is_batch_logic(logic: object) -> bool:
    """True if ``logic`` takes Arrow batches (its subtask reads its channels as batches)."""
    return isinstance(logic, BatchLogic)


@runtime_checkable
class BatchSink(Protocol):
    """A sink whose ``write`` takes :class:`spillway.channels.wire.batchread.ArrowRows` as well."""

    takes_batches: bool


def reads_batches(logic: object, sink: object) -> bool:
    """True if a subtask with ``logic`` and ``sink`` reads its channels as Arrow batches:
    its logic takes batches, or it is a sink alone that takes them."""
    if logic is not None:
        return is_batch_logic(logic)
    return isinstance(sink, BatchSink) and sink.takes_batches


class BatchSource(Protocol):
    """A source whose ``read`` returns Arrow record batches, not records."""

    returns_batches: bool


def source_reads_batches(source: object) -> bool:
    """True if ``source`` declares that its ``read`` returns record batches
    (:class:`BatchSource`). Asked as an attribute, not by ``isinstance``, so a source
    wrapped by one that forwards its attributes answers as the one it wraps."""
    return getattr(source, "returns_batches", False) is True


def as_batch_logic(logic: object) -> BatchLogic | None:
    """``logic`` if it takes Arrow batches, else ``None``."""
    return logic if isinstance(logic, BatchLogic) else None


def write_batches(writers: Sequence[ChannelWriter], batches: Sequence[pa.RecordBatch]) -> int:
    """Write ``batches`` (one operator call's output, one schema) to every writer as one
    batch; the number of rows written. All-or-nothing per writer, as ``write_many``."""
    batch = one_batch(batches, batches[0].schema)
    for w in writers:
        w.write_batch(batch)
    return int(batch.num_rows)


def rows_of(batches: Sequence[pa.RecordBatch]) -> list[Any]:
    """The rows of ``batches`` as dicts (to name or divert the ones a writer refuses)."""
    return [r for b in batches for r in b.to_pylist()]
