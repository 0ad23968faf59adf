"""Which path a subtask's records take: chosen once, from its operator's objects.

Pure: looks at the objects the plan made (their types and declared flags), calls
nothing on them and builds nothing; the caller builds the chosen path with its
:class:`~spillway.recovery.runtime.path.PathParts`.
"""

from __future__ import annotations

from spillway.channels.errors import PipelineDefinitionError
from spillway.recovery.job.plan import Logic, Sink, Source
from spillway.recovery.runtime.arrowpath import BatchPath, FoldingBatchPath
from spillway.recovery.runtime.batchpath import as_batch_logic, source_reads_batches
from spillway.recovery.runtime.passthrough import ForwardBatches, ForwardRecords, SinkPath
from spillway.recovery.runtime.path import PathMaker
from spillway.recovery.runtime.recordpath import RecordPath


def choose_path(
    source: Source | None, logic: Logic | None, sink: Sink | None, *, chunked: bool
) -> PathMaker:
    """The path for a subtask with these objects (``chunked``: its checkpoints may fall
    between chunks of one message, the unaligned mode).

    Batch logic takes the batch path, folded per poll if it asks to be
    (``folds_per_poll``) and no checkpoint may fall inside a poll; other logic the record
    path; with no logic, a source's reads are written out in the form it reads
    (:func:`~spillway.recovery.runtime.batchpath.source_reads_batches`), and a sink alone
    writes each message itself. Raises :class:`PipelineDefinitionError` for a subtask
    with none of the three."""
    if as_batch_logic(logic) is not None:
        folds = bool(getattr(logic, "folds_per_poll", False)) and not chunked
        return FoldingBatchPath if folds else BatchPath
    if logic is not None:
        return RecordPath
    if source is not None:
        return ForwardBatches if source_reads_batches(source) else ForwardRecords
    if sink is not None:
        return SinkPath
    raise PipelineDefinitionError("a subtask needs a source, an operator or a sink to run")
