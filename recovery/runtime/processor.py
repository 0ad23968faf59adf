"""One step of a subtask: poll its input, run the operator, emit to its outputs.

The processor reads from a source or from a channel reader and hands each message (or
read) to the subtask's path (spillway.recovery.runtime.path): records or Arrow batches
through the operator's logic to the channel writers (and a chained sink), chosen once when
the processor is built (spillway.recovery.runtime.pathchoice); it forwards watermarks and
idleness, and fails or dead-letters what cannot be decoded or read. When to checkpoint is
not its business: it asks the cadence's hooks (spillway.recovery.runtime.cadence) where a
checkpoint may fall, and reports what they ask for in its step's result
(spillway.recovery.runtime.requests); the task loop takes it. Everything it works with is
given when it is built, after the restore.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field

from spillway.channels.ids import SubtaskId, TopicPartition
from spillway.channels.reader import ChannelReader
from spillway.channels.wire.envelope import Kind
from spillway.channels.writer import ChannelWriter
from spillway.recovery.job.origins import TopicOffset
from spillway.recovery.job.plan import Logic, Record, Sink, Source
from spillway.recovery.restore.progress import ProgressLog, Replay, SourceReplay
from spillway.recovery.runtime.cadence import Cadence
from spillway.recovery.runtime.crashpoints import CrashPoints
from spillway.recovery.runtime.deadletter import DeadLetters
from spillway.recovery.runtime.eventtime import IdleAnnouncer, SetAsides
from spillway.recovery.runtime.failures import source_failure
from spillway.recovery.runtime.options import RunOptions, SubtaskResult
from spillway.recovery.runtime.outputs import Outputs
from spillway.recovery.runtime.path import Path, PathParts
from spillway.recovery.runtime.pathchoice import choose_path
from spillway.recovery.runtime.requests import AtBarrier, CheckpointRequest, InsideMessage, Step

# One poll's work, stopping where a checkpoint falls; returns True when every input ended.
Turn = Generator[CheckpointRequest, None, bool]


@dataclass(frozen=True)
class Continuation:
    """Where a processor continues from after the restore (the defaults: a fresh start).

    ``replay``: what its reader re-reads; ``source_replay``: what its source re-reads;
    ``resume``: records of message (tp, offset) to skip (a checkpoint inside it);
    ``watermark``: the operator's restored watermark."""

    replay: Replay = field(default_factory=lambda: Replay({}, {}, None))
    source_replay: SourceReplay = field(default_factory=lambda: SourceReplay(None, None))
    resume: Mapping[tuple[TopicPartition, int], int] = field(default_factory=dict)
    watermark: int | None = None


class Processor:
    """Moves records from one subtask's input through its operator to its outputs."""

    def __init__(
        self,
        subtask: SubtaskId,
        operator: str,
        options: RunOptions,
        parts: tuple[Source | None, Logic | None, Sink | None],
        dead_letters: DeadLetters | None,
        aside: SetAsides,
        crash: CrashPoints,
        result: SubtaskResult,
        progress: ProgressLog,
        caught_up: Callable[[], None],
        reader: ChannelReader | None,
        writers: Sequence[ChannelWriter],
        cadence: Cadence,
        continuation: Continuation,
    ) -> None:
        """``parts``: the operator's source, logic and sink (each may be absent), from which
        its path is chosen here, once; ``reader``: None for a source, which reads itself;
        ``writers``: one per output channel; ``continuation``: what the restore left to
        continue from."""
        self.subtask = subtask
        self.operator = operator
        self.options = options
        source, logic, sink = parts
        self.source = source
        make_path = choose_path(source, logic, sink, chunked=cadence.chunk is not None)
        outputs = Outputs(subtask, operator, writers, sink, dead_letters, crash, result)
        # Asked only of a message for a multi-input operator (input_call), so bound late.
        input_of = (lambda tp: reader.input_of(tp)) if reader is not None else None
        self.path: Path = make_path(
            PathParts(subtask, operator, logic, sink, outputs, aside, dead_letters, input_of)
        )
        self.dead_letters = dead_letters
        self.aside = aside
        self.crash = crash
        self.result = result
        self.progress = progress
        self._caught_up = caught_up
        self.reader = reader
        self.writers = list(writers)
        self._cadence = cadence
        self.replay = continuation.replay
        self.source_replay = continuation.source_replay
        # Records of message (tp, offset) to skip after a restore (mid-message checkpoint).
        self.resume: dict[tuple[TopicPartition, int], int] = dict(continuation.resume)
        self.watermark_out: int | None = continuation.watermark
        self._last_wm_check = 0.0
        self._idle = IdleAnnouncer()
        self._turn: Turn | None = None  # a poll's work stopped at a checkpoint request

    def step(self) -> Step:
        """Process one poll of input, or the rest of one stopped at a checkpoint request.

        Returns whether every input has ended and the global checkpoint, if any, to take
        before the next step (:mod:`spillway.recovery.runtime.requests`)."""
        if self.source is not None:
            return Step(self._step_source(self.source))
        if self._turn is None:
            assert self.reader is not None, "a processor without a source reads channels"
            self._turn = self._poll_turn(self.reader, self._cadence)
        try:
            request = next(self._turn)
        except StopIteration as done:
            self._turn = None
            return Step(bool(done.value))
        return Step(False, request)

    def _poll_turn(self, reader: ChannelReader, cadence: Cadence) -> Turn:
        """One poll, yielding where a checkpoint must be taken before it goes on."""
        barrier: int | None = None
        batch, wait_s, stop = cadence.poll_shape(self.options.poll_messages)
        for d in reader.poll(batch, wait_s, stop_after_barrier=stop):
            if d.kind is Kind.BARRIER and d.value is not None and cadence.newer(d.value):
                barrier = d.value  # the reader stopped here: checkpoint exactly at it
            if d.error is not None and self.dead_letters is not None:
                origin = TopicOffset(d.tp.topic, d.tp.partition, d.offset)
                self.dead_letters.send(stage="decode", error=d.error, origin=origin, raw=d.raw)
            elif d.kind is Kind.DATA:
                done = self.resume.pop((d.tp, d.offset), 0)
                records = d.records[done:] if done else d.records
                self.result.records_in += len(records)
                if self.replay.pending:
                    self.replay.count(d.tp, d.offset, len(records))
                if cadence.chunk is None:
                    self._deliver(records, d.tp, d.offset)
                else:
                    yield from self._deliver_chunks(records, d.tp, d.offset, done, cadence)
        start = time.perf_counter()
        self.path.poll_done()  # before anything below may checkpoint
        self.result.busy_s += time.perf_counter() - start
        if (
            self.replay.pending
            and self.result.catchup_s is None
            and self.replay.done(reader.positions())
        ):
            self._caught_up()
        n = cadence.after_poll(reader, barrier)
        if n is not None:
            yield AtBarrier(n)
            cadence.after_checkpoint(reader, n)
        self._maybe_forward_watermark(reader.watermark())
        self._announce_idle(reader.idle())
        return reader.finished()

    def _deliver_chunks(
        self,
        records: Sequence[Record],
        tp: TopicPartition,
        offset: int,
        done: int,
        cadence: Cadence,
    ) -> Generator[CheckpointRequest, None, None]:
        """One message in chunks of ``cadence.chunk`` records; between two chunks, a
        triggered checkpoint inside the message (``done``: its records processed before)."""
        chunk = cadence.chunk
        assert chunk is not None
        for start in range(0, len(records), chunk):
            if start:
                n = cadence.between_chunks()
                if n is not None:
                    yield InsideMessage(n, (tp, offset, done + start))
            self._deliver(records[start : start + chunk], tp, offset)

    def _deliver(self, records: Sequence[Record], tp: TopicPartition, offset: int) -> None:
        """One message (or chunk of one) through the path, its time counted as busy: the
        autoscaler's true rate is records per busy second, not per second waiting for input."""
        start = time.perf_counter()
        try:
            self.path.message(records, tp, offset)
        finally:
            self.result.busy_s += time.perf_counter() - start

    def _step_source(self, source: Source) -> bool:
        """One read of the source, through the path."""
        recs = source.read(self.options.poll_records)
        for bad in source.rejected():  # read past: fail, or divert in this transaction
            if self.dead_letters is None:
                raise source_failure(self.subtask, self.operator, bad)
            self.dead_letters.send(stage="source", error=bad.error, raw=bad.raw, origin=bad.origin)
        if recs is None:
            return True
        self.result.records_in += self.path.rows(recs)  # a batch source returns batches
        if self.source_replay.pending and self.source_replay.caught_up():
            self._caught_up()
        # A source chained with transforms: they run here, before anything is written.
        self.path.read(recs, source.origins())
        self._maybe_forward_watermark(source.watermark())
        self._announce_idle(source.idle())
        return False

    def tick(self, ended: bool) -> None:
        """Between steps: processing-time timers fire, the read mark is written when due,
        writers send what lingered."""
        if not ended:
            self.path.timers()
        if self.progress.due(time.monotonic()):
            self.mark()
        for w in self.writers:
            w.tick()

    def end(self) -> None:
        """Every input ended: the operator's last outputs, then end-of-stream downstream."""
        self.path.end()
        for w in self.writers:
            w.end_of_stream()

    def _maybe_forward_watermark(self, wm: int | None) -> None:
        now = time.monotonic()
        if wm is None or now - self._last_wm_check < self.options.watermark_interval_s:
            return
        self._last_wm_check = now
        if self.watermark_out is not None and wm <= self.watermark_out:
            return
        self.watermark_out = wm
        self.path.watermark(wm)
        for w in self.writers:
            w.watermark(wm)

    def _announce_idle(self, idle: bool) -> None:
        if self._idle.due(idle, time.monotonic()):
            for w in self.writers:
                w.idle()

    def mark(self) -> None:
        """Record how far this attempt has read (spillway.recovery.restore.progress)."""
        self.progress.write(
            self.result.attempt,
            self.reader.positions() if self.reader else {},
            self.source.position() if self.source else None,
        )
