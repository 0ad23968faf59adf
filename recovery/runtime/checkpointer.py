"""The checkpointer of one subtask: asks each part for its contribution, commits, in order.

The order of :meth:`Checkpointer.take` is fixed (the comments in it say why):

1. writers flush their batches, the output collector makes outputs durable;
2. the source states its position, the sink prepares (two-phase commit, first phase);
3. state writes its changes to the changelog, which gives the changelog position;
4. the reader states its positions and what a restart must carry (ends, watermarks,
   skips, discards), the task its watermark and set-aside counts;
5. the read mark (spillway.recovery.restore.progress) is written, in case the commit never happens;
6. record, consumer positions and outputs commit in one transaction;
7. the sink publishes, old checkpoints are pruned, the next transaction opens.

It says when an interval checkpoint is due; the cadence it is given
(spillway.recovery.runtime.cadence) hears of the numbered global checkpoints of the aligned
and unaligned modes as they commit. Only the task loop calls :meth:`Checkpointer.take`.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from spillway.channels.ids import CheckpointId, Offset, SubtaskId, TopicPartition
from spillway.channels.progress import ReaderState, Spans
from spillway.channels.routing.keygroups import Ownership
from spillway.offsets.checkpoint import (
    Checkpoint,
    CheckpointMeta,
    OperatorProgress,
    ReaderPositions,
    StatePositions,
    WriterCounts,
    check_forward,
)
from spillway.offsets.tracker import CheckpointSequence
from spillway.recovery.runtime.cadence import Cadence, Triggers
from spillway.recovery.runtime.crashpoints import CrashPoints
from spillway.recovery.runtime.lifecycle import Lifecycle, Phase
from spillway.recovery.runtime.livestats import LiveStats
from spillway.recovery.runtime.options import RunOptions, SubtaskResult
from spillway.recovery.runtime.requests import CheckpointRequest, InsideMessage, Partial

log = logging.getLogger("spillway.subtask")


class ReaderPart(Protocol):
    """A channel reader's contribution: positions and what a restart must carry."""

    state: ReaderState

    def positions(self) -> dict[TopicPartition, Offset]: ...
    def discard_state(self) -> dict[TopicPartition, dict[int, Spans]]: ...
    def skip_state(self) -> dict[TopicPartition, dict[int, int]]: ...
    def open_records(self) -> int: ...


class WriterPart(Protocol):
    """A channel writer's contribution: output sequence numbers and high-water marks."""

    @property
    def counts(self) -> list[int]: ...
    @property
    def topic(self) -> str: ...
    @property
    def spanned(self) -> int: ...
    def flush_batches(self) -> None: ...
    def marks(self) -> tuple[int, ...]: ...
    def barrier(self, n: int) -> None: ...


class StatePart(Protocol):
    """Keyed state: its changes since the last checkpoint go to the changelog."""

    @property
    def tps(self) -> tuple[TopicPartition, ...]:
        """The changelog partitions it owns."""

    def flush_to(self, producer: Any) -> int: ...


class SourcePart(Protocol):
    """A source's position after everything it returned."""

    def position(self) -> dict[str, Any]: ...


class SinkPart(Protocol):
    """A two-phase-commit sink."""

    def prepare(self, checkpoint_id: int) -> dict[str, Any]: ...
    def committed(self, info: Mapping[str, Any]) -> None: ...


class TaskProducer(Protocol):
    """The subtask's transactional producer (state, checkpoints, exactly-once outputs)."""

    txn_bytes: int

    def flush(self, timeout_s: float = 30.0) -> None: ...
    def last_offset(self, tp: TopicPartition) -> Offset | None: ...
    def begin(self) -> None: ...


class CollectorPart(Protocol):
    """The output collector (spillway.recovery.runtime.collector)."""

    def prepare_commit(self, has_writers: bool) -> None: ...


class Events(Protocol):
    """Where the checkpointer announces global checkpoints."""

    def emit(self, kind: str, **fields: Any) -> None: ...


class Store(Protocol):
    """The checkpoint store, for pruning."""

    def prune(self, index: int, keep: int, keep_global: int = 0) -> None: ...


Commit = Callable[[TaskProducer, Checkpoint, object, Callable[[str], None] | None], None]


@dataclass
class Parts:
    """The parts a checkpoint asks for their contribution (None / empty: not in this subtask)."""

    reader: ReaderPart | None = None
    writers: Sequence[WriterPart] = ()
    state: StatePart | None = None
    source: SourcePart | None = None
    sink: SinkPart | None = None
    watermark: Callable[[], int | None] = lambda: None
    set_aside: Callable[[], dict[str, int]] = dict
    group_metadata: Callable[[], object] = lambda: None
    # write the read mark (spillway.recovery.restore.progress)
    mark: Callable[[], None] = lambda: None
    owned: Ownership = field(default_factory=Ownership)  # recorded in every checkpoint
    # False while older checkpoints must stay (a rescale's handover still in use).
    prunable: Callable[[], bool] = lambda: True
    # True when a stop hands the subtask over (its operator alone stopped: a live rescale
    # or upgrade); the stop checkpoint then carries the mark (docs/architecture.md, Handover).
    handing_over: Callable[[], bool] = lambda: False


@dataclass
class Observers:
    """Who hears of checkpoints: the phase table, the live stats, the result, the events."""

    lifecycle: Lifecycle
    live: LiveStats
    result: SubtaskResult
    events: Events
    crash: CrashPoints


class Checkpointer:
    """Builds and commits one subtask's checkpoints, continuing after a restored one."""

    def __init__(
        self,
        subtask: SubtaskId,
        topology: str,
        attempt: int,
        producer: TaskProducer,
        collector: CollectorPart,
        commit: Commit,
        store: Store,
        options: RunOptions,
        triggers: Triggers | None,
        observers: Observers,
        cadence: Cadence,
        parts: Parts,
        restored: Checkpoint | None,
    ) -> None:
        """``cadence``: the mode's (it hears of each global checkpoint committed);
        ``parts``: what each checkpoint asks for its contribution; ``restored``: the
        checkpoint the subtask continues after (None: a fresh start)."""
        self.subtask = subtask
        self._topology = topology
        self._attempt = attempt
        self._producer = producer
        self._collector = collector
        self._commit = commit
        self._store = store
        self._options = options
        self._triggers = triggers
        self._obs = observers
        self.cadence = cadence
        self.parts = parts
        self.seq = CheckpointSequence(restored.checkpoint_id if restored else None)
        self.last_time = time.monotonic()
        # next offset per owned partition
        self.changelogs: dict[TopicPartition, Offset] = (
            restored.changelog_positions() if restored else {}
        )
        self._last_inputs: dict[TopicPartition, Offset] = (
            dict(restored.reader.inputs) if restored else {}
        )
        self._records_in_at_last = 0  # records read when the last checkpoint committed
        # records written as parts (spillway.channels.wire.spanning) until the last commit
        self._spanned = 0
        # Bytes of the last checkpoint: its own (state changes, record) and the channel data
        # its transaction had spilled since the previous one.
        self.bytes = (0, 0)
        self._pruning: threading.Thread | None = None

    def due(self, now: float) -> bool:
        """True when an interval checkpoint is due at ``now`` (monotonic seconds)."""
        return now - self.last_time >= self._options.checkpoint_interval_s

    def take(
        self,
        finished: bool = False,
        stopping: bool = False,
        request: CheckpointRequest | None = None,
    ) -> Checkpoint:
        """Build and commit one checkpoint, in the order of the module docstring: the final
        one (``finished``), the last before a stop (``stopping``), global checkpoint
        ``request`` (neither of those), or else an interval checkpoint."""
        if request is None:
            return self._commit_one(finished, stopping, None, None)
        return self._take_global(request)

    def _commit_one(
        self,
        finished: bool,
        stopping: bool,
        global_id: int | None,
        partial: Partial | None,
    ) -> Checkpoint:
        self._obs.lifecycle.to(Phase.CHECKPOINTING)
        t0 = time.monotonic()
        cid = self.seq.next()
        p = self.parts
        for w in p.writers:
            w.flush_batches()
        # Acknowledged offsets give the output high-water marks a rewind needs; and
        # at-least-once: outputs are durable before the checkpoint says so.
        self._collector.prepare_commit(bool(p.writers))
        spilled = self._producer.txn_bytes  # channel data written since the last checkpoint
        source_position = p.source.position() if p.source is not None else None
        sink_position = p.sink.prepare(int(cid)) if p.sink is not None else None
        self._flush_state()
        ckpt = self._build(cid, finished, global_id, partial, source_position, sink_position)
        if stopping and p.handing_over():
            ckpt = dataclasses.replace(ckpt, meta=dataclasses.replace(ckpt.meta, handed_over=True))
        check_forward(self._last_inputs, ckpt)
        p.mark()  # what this checkpoint read, in case the commit never happens
        crash = self._obs.crash
        if crash.armed:
            crash.flush_and_reach("after-produce")
            if self._obs.result.records_in != self._records_in_at_last:
                crash.reached("after-produce-read")  # flushed just above
            spanned = sum(w.spanned for w in p.writers)
            if spanned > self._spanned:
                crash.reached("after-produce-spanning")
            self._spanned = spanned
        t1 = time.monotonic()
        self._commit(
            self._producer, ckpt, p.group_metadata(), crash.commit_point if crash.armed else None
        )
        t2 = time.monotonic()
        self._last_inputs = dict(ckpt.reader.inputs)
        self._records_in_at_last = self._obs.result.records_in
        self._obs.live.checkpointed(cid, ckpt.meta.wall_time, t2 - t0, t2 - t1, ckpt.reader.inputs)
        self.bytes = (self._producer.txn_bytes - spilled, spilled)
        crash.reached("after-final-commit" if finished else "after-commit")
        if crash.armed and p.reader is not None and p.reader.open_records():
            crash.reached("after-commit-inside-record")
        if p.sink is not None and sink_position is not None:
            p.sink.committed(sink_position)
        self._obs.result.checkpoints += 1
        self.last_time = time.monotonic()
        self._prune(cid)
        if stopping:
            self._obs.lifecycle.to(Phase.STOPPED)
            return ckpt
        if not finished:
            self._producer.begin()
            crash.transaction_opened()
        self._obs.lifecycle.after_checkpoint()
        return ckpt

    def _flush_state(self) -> None:
        state = self.parts.state
        if state is not None and state.flush_to(self._producer):
            self._producer.flush()
            for ctp in state.tps:
                last = self._producer.last_offset(ctp)
                if last is not None:
                    self.changelogs[ctp] = Offset(last + 1)

    def _build(
        self,
        cid: int,
        finished: bool,
        global_id: int | None,
        partial: Partial | None,
        source_position: dict[str, Any] | None,
        sink_position: dict[str, Any] | None,
    ) -> Checkpoint:
        p = self.parts
        reader = p.reader
        rstate = reader.state if reader is not None else None
        inputs = reader.positions() if reader is not None else {}
        skip = reader.skip_state() if reader is not None else {}
        partials: dict[TopicPartition, tuple[int, int]] = {}
        if partial is not None:
            tp, off, done = partial  # the message is re-read; its first `done` records skipped
            inputs, skip = cut_inside_message(inputs, skip, partial)
            partials[tp] = (off, done)
        return Checkpoint(
            subtask=self.subtask,
            checkpoint_id=CheckpointId(cid),
            meta=CheckpointMeta(
                topology=self._topology,
                attempt=self._attempt,
                wall_time=time.time(),
                global_id=global_id,
                finished=finished,
                owned=self.parts.owned,
            ),
            reader=ReaderPositions(
                inputs=inputs,
                skip=skip,
                partial=partials,
                ended={tp: frozenset(v) for tp, v in rstate.ended.items()} if rstate else {},
                channel_watermarks=(
                    {tp: dict(v) for tp, v in rstate.watermarks.items()} if rstate else {}
                ),
                widths=dict(rstate.widths) if rstate else {},
                discard=reader.discard_state() if reader is not None else {},
            ),
            writers=WriterCounts(
                outputs={w.topic: tuple(w.counts) for w in p.writers},
                output_marks={w.topic: w.marks() for w in p.writers},
            ),
            state=StatePositions(changelogs=dict(self.changelogs)),
            operator=OperatorProgress(watermark=p.watermark(), set_aside=p.set_aside()),
            source=source_position,
            sink=sink_position,
        )

    def _take_global(self, request: CheckpointRequest) -> Checkpoint:
        """Checkpoint ``n`` of the job, with barrier n forwarded in the same transaction."""
        n = request.n
        partial = request.at if isinstance(request, InsideMessage) else None
        start, start_mono = time.time(), time.monotonic()
        seen = self._triggers.seen_at(n) if self._triggers is not None else None
        for w in self.parts.writers:
            w.barrier(n)
        ckpt = self._commit_one(False, False, n, partial)
        self.cadence.taken(n)
        # Wall times of the phases (the coordinator reports them per checkpoint);
        # last_time is set right after the commit returned.
        timing = {
            "via": "barrier" if seen is None else "trigger",
            "seen": start if seen is None else seen,
            "start": start,
            "committed": start + (self.last_time - start_mono),
        }
        self._obs.events.emit(
            "checkpointed",
            bytes=self.bytes[0],
            spilled_bytes=self.bytes[1],
            timing=timing,
            **{"global": n, "checkpoint": self.seq.last},
        )
        if partial is not None:
            self._obs.crash.reached("after-partial-commit")
        return ckpt

    def _prune(self, cid: int) -> None:
        """Every tenth checkpoint, delete the checkpoint records no longer kept.

        In a thread of its own: a prune reads the checkpoint tail and asks the broker to
        delete (~0.2 s, now and then 1-3 s when a Kafka client stalls), which neither
        processing nor the next global checkpoint should wait for. It deletes only records
        older than those kept, so checkpoints committed meanwhile change nothing; during
        the run only the prune uses the store's reader and admin client.
        """
        if cid % 10 != 0 or (self._pruning is not None and self._pruning.is_alive()):
            return  # one at a time: the next tenth checkpoint prunes what this one left
        self._pruning = threading.Thread(
            target=self._prune_now, name=f"prune {self.subtask}", daemon=True
        )
        self._pruning.start()

    def _prune_now(self) -> None:
        t0 = time.monotonic()
        try:
            if not self.parts.prunable():
                return
            self._store.prune(
                self.subtask.index,
                self._options.keep_checkpoints,
                self._options.keep_global if self.cadence.is_global else 0,
            )
        except Exception:  # pruning is housekeeping: retry at the next tenth checkpoint
            log.warning("%s could not prune old checkpoints", self.subtask, exc_info=True)
        if time.monotonic() - t0 > 0.5:
            log.info("%s: pruning checkpoints took %.2fs", self.subtask, time.monotonic() - t0)

    def close(self, timeout_s: float) -> None:
        """Wait for a prune in flight (before the store it uses is closed)."""
        if self._pruning is not None:
            self._pruning.join(timeout_s)


def cut_inside_message(
    inputs: Mapping[TopicPartition, Offset],
    skip: Mapping[TopicPartition, Mapping[int, int]],
    partial: Partial,
) -> tuple[dict[TopicPartition, Offset], dict[TopicPartition, dict[int, int]]]:
    """Positions and skip state of a checkpoint taken inside the message ``partial``
    names, whose first ``done`` records are processed (spillway.recovery.runtime.cadence).

    The message is read again: the position goes back to it, or stays lower where a
    record that spans messages is incomplete (spillway.channels.wire.spanning), and its writer's
    skip
    entry, which counts it as processed (its offset + 1, an entry no other message can
    have), stops at it; the restore skips its first ``done`` records instead.
    """
    tp, off, _done = partial
    positions = dict(inputs)
    positions[tp] = Offset(min(positions.get(tp, Offset(off)), off))
    cut = {t: dict(per) for t, per in skip.items()}
    if tp in cut:
        cut[tp] = {w: (off if s == off + 1 else s) for w, s in cut[tp].items()}
    return positions, cut
