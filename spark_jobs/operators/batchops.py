"""Batch operators: ``map_batches(fn)`` and ``filter_batches(fn)`` over Arrow record batches,
and the row isolation every batch operator's failures go through.

``fn`` receives the input batch as it arrived (``frame="arrow"``), or the same rows as a
pandas DataFrame (``"pandas"``) or a Polars DataFrame (``"polars"``; neither is imported
unless asked for). ``map_batches``' ``fn`` returns a ``pyarrow.RecordBatch`` or ``Table``,
a pandas or a Polars DataFrame; ``filter_batches``' returns a boolean mask with one value
per row (an Arrow array, a pandas Series, a NumPy array, a list; a null drops the row).
Arrow results pass through untouched; the DataFrames convert through Arrow's own
converters, which copy only where the memory layouts differ.

A failing row: ``fn`` is applied to the whole batch; only if that raises is the batch
bisected (halves, then quarters, ...) until the rows that fail alone are found. So a clean
batch costs one call, and ``k`` bad rows among ``n`` about ``2k·log2(n)`` calls. The rows
that fail are dead-lettered with their origin and the rest of the batch goes on; without
a dead-letter channel the first of them stops the job with an error naming it. This is
exact when ``fn`` is row-wise — each output row depends on its input row alone — which is
what a batch operator whose rows may be dead-lettered one by one must be.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from spillway.channels.errors import PipelineDefinitionError, RecordError, SchemaMismatchError
from spillway.channels.routing.batchwrite import conform
from spillway.channels.wire.arrowcodec import short_repr
from spillway.recovery.job.origins import Origin, Origins
from spillway.recovery.job.plan import Context, SetAside

FRAMES = ("arrow", "pandas", "polars")
BatchFn = Callable[[pa.RecordBatch], list[pa.RecordBatch]]


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


@dataclass(frozen=True)
class BadRow:
    """Row ``index`` of a batch failed alone with ``error``."""

    index: int
    error: BaseException


def _module(name: str, where: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise PipelineDefinitionError(
            f"{where}: frame={name!r} needs the {name} package; install it (pip install "
            f"{name}) or use frame='arrow'"
        ) from e


def as_frame(batch: pa.RecordBatch, frame: str, where: str) -> Any:
    """``batch`` as ``fn`` asked for it: the batch itself, or a pandas / Polars DataFrame."""
    if frame == "arrow":
        return batch
    if frame == "pandas":
        return batch.to_pandas()
    return _module("polars", where).from_arrow(batch)


def to_batch(out: Any, where: str) -> pa.RecordBatch:
    """A function's result as one record batch: a ``RecordBatch`` as it is, a ``Table``
    combined, a pandas DataFrame (its index dropped) or a Polars DataFrame through Arrow."""
    if isinstance(out, pa.RecordBatch):
        return out
    module = type(out).__module__.split(".")[0]
    if module == "pandas" and hasattr(out, "columns"):
        out = pa.Table.from_pandas(out, preserve_index=False)
    elif module == "polars" and hasattr(out, "to_arrow"):
        out = out.to_arrow()
    if isinstance(out, pa.Table):
        if not out.num_rows:
            return pa.RecordBatch.from_pylist([], schema=out.schema)
        return out.combine_chunks().to_batches()[0]
    raise RecordError(
        f"{where}: the function returned {type(out).__name__}; return a pyarrow.RecordBatch "
        "or Table, a pandas DataFrame or a Polars DataFrame"
    )


def to_mask(mask: Any, rows: int, where: str) -> pa.Array:
    """A filter function's result as a boolean Arrow array of ``rows`` values."""
    if isinstance(mask, pa.ChunkedArray):
        mask = mask.combine_chunks()
    if not isinstance(mask, pa.Array):
        try:
            mask = pa.array(mask, pa.bool_())
        except (pa.ArrowException, TypeError, ValueError) as e:
            raise RecordError(f"{where}: the mask is not booleans: {e}") from e
    if not pa.types.is_boolean(mask.type) or len(mask) != rows:
        raise RecordError(
            f"{where}: the function must return one boolean per row ({rows}); it returned "
            f"{len(mask)} values of type {mask.type}"
        )
    return mask


class _Stateless:
    where: str

    def process_batch(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        """The outputs of one input batch (each operator's own)."""
        raise NotImplementedError

    def run_batch(
        self, batch: pa.RecordBatch, origins: Origins, dead_letters: DeadLetterSink | None
    ) -> list[pa.RecordBatch]:
        """:meth:`process_batch` with failing rows isolated (:func:`process_batch`); the
        runtime's entry point (spillway.recovery.runtime.batchpath.BatchLogic)."""
        return process_batch(self.process_batch, batch, origins, dead_letters, self.where)

    def open(self, ctx: Context) -> None:
        """Nothing to restore."""

    def on_watermark(self, watermark: int) -> Iterable[pa.RecordBatch]:
        """Stateless operators hold nothing back."""
        return ()

    def on_end(self) -> Iterable[pa.RecordBatch]:
        """Nothing pending at the end."""
        return ()

    def set_aside(self) -> list[SetAside]:
        """Every row is used."""
        return []


def _check_frame(frame: str, where: str) -> None:
    if frame not in FRAMES:
        raise PipelineDefinitionError(f"{where}: frame must be one of {FRAMES}, got {frame!r}")
    if frame != "arrow":
        _module(frame, where)  # a missing package is a definition error, not a row error


class MapBatchesLogic(_Stateless):
    """``fn`` over each input batch; its result is the output batch.

    ``schema``: the output channel's Arrow schema; a result with another schema is a
    :class:`SchemaMismatchError` (caught at the first batch, naming both schemas). Field
    nullability may differ where the values keep the schema's non-null fields.
    """

    def __init__(
        self, name: str, fn: Callable[[Any], Any], schema: pa.Schema | None, frame: str = "arrow"
    ) -> None:
        self.where = f"operator {name!r}"
        _check_frame(frame, self.where)
        self.fn, self.schema, self.frame = fn, schema, frame

    def process_batch(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        """``[fn(batch)]`` as a record batch (no output for an empty result)."""
        out = to_batch(self.fn(as_frame(batch, self.frame, self.where)), self.where)
        # Built without a schema, a batch's fields are all nullable: take it where the
        # values keep the declared schema's non-null fields.
        fit = conform(out, self.schema) if self.schema is not None else out
        if fit is None:
            raise SchemaMismatchError(
                f"{self.where}: the function returned a batch with schema {out.schema}, "
                f"the operator's output schema is {self.schema}"
            )
        return [fit] if fit.num_rows else []


class FilterBatchesLogic(_Stateless):
    """The rows of each batch for which ``fn``'s mask is true (null: dropped)."""

    def __init__(self, name: str, fn: Callable[[Any], Any], frame: str = "arrow") -> None:
        self.where = f"operator {name!r}"
        _check_frame(frame, self.where)
        self.fn, self.frame = fn, frame

    def process_batch(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        """The batch's selected rows, in order, with the input's schema."""
        mask = to_mask(self.fn(as_frame(batch, self.frame, self.where)), batch.num_rows, self.where)
        out = batch.filter(mask, null_selection_behavior="drop")
        return [out] if out.num_rows else []


def isolate_rows(
    process: BatchFn, batch: pa.RecordBatch
) -> tuple[list[pa.RecordBatch], list[BadRow]]:
    """``process`` over ``batch`` bisected until the failing rows stand alone.

    Returns the outputs of the parts that succeeded, in row order, and the rows that fail
    alone. A part that succeeds is never split further, so only failures pay.
    """
    good: list[pa.RecordBatch] = []
    bad: list[BadRow] = []
    todo = [(0, batch)]
    while todo:
        first, part = todo.pop()
        try:
            good.extend(process(part))
        except Exception as e:
            if part.num_rows <= 1:
                bad.append(BadRow(first, e))
                continue
            half = part.num_rows // 2
            # Pushed second half first: parts are taken (and outputs kept) in row order.
            todo.append((first + half, part.slice(half)))
            todo.append((first, part.slice(0, half)))
    return good, bad


def process_batch(
    process: BatchFn,
    batch: pa.RecordBatch,
    origins: Origins,
    dead_letters: DeadLetterSink | None,
    where: str,
) -> list[pa.RecordBatch]:
    """``process(batch)``; if it raises, the failing rows are found by bisection and
    dead-lettered (``stage="process"``, with ``origins.at(row)``) while the rest goes on.

    Without ``dead_letters`` a failure is a :class:`RecordError` naming ``where``, the first
    failing row, its origin and the fix. Keyed state stays consistent either way: batch
    logic writes state only after a whole call succeeds, so only good parts change it.
    """
    with contextlib.suppress(Exception):  # the rows that fail are found again below
        return process(batch)
    good, bad = isolate_rows(process, batch)
    if not bad:
        return good  # the batch failed as a whole but every part of it passes
    if dead_letters is None:
        row = bad[0]
        origin = origins.at(row.index)
        record = batch.slice(row.index, 1).to_pylist()[0]
        raise RecordError(
            f"{where}: row {row.index} of a batch of {batch.num_rows} (from "
            f"{origin or 'an unknown origin'}) failed: {type(row.error).__name__}: "
            f"{row.error}; the row was {short_repr(record)}. Fix the function or the input, "
            "or run with --dead-letter to divert such rows and go on",
            origin=None if origin is None else str(origin),
        ) from row.error
    for row in bad:
        record = batch.slice(row.index, 1).to_pylist()[0]
        dead_letters.send(
            stage="process", error=row.error, origin=origins.at(row.index), record=record
        )
    return good
