"""Runs one subtask: fence, restore, run, checkpoint, finish.

Why a restart of one subtask is exactly-once: downstream subtasks only ever saw this
subtask's committed outputs, which match the state and input offsets of its last
committed checkpoint (one transaction holds all of them). A restart fences the previous
incarnation (its open transaction is aborted), rebuilds that state from the changelog,
and re-reads its inputs from those offsets. Upstream subtasks never notice: channels are
durable, and nothing they need comes from this subtask.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from channels.config import ChannelSettings, KafkaSettings
from channels.envelope import Kind
from channels.errors import ConfigError, RecordError
from channels.ids import CheckpointId, Offset, SubtaskId, TopicPartition
from channels.kafka.consumer import AssignedConsumer
from channels.kafka.producer import IdempotentProducer, TransactionalProducer
from channels.reader import ChannelReader, InputChannel
from channels.writer import ChannelWriter, OutputChannel
from offsets.checkpoint import Checkpoint
from offsets.store import CheckpointStore, check_retention, commit_checkpoint
from offsets.tracker import CheckpointSequence
from recovery.deadletter import PRODUCER_CONFIG, DeadLetters
from recovery.events import EventLog, JobSignals
from recovery.eventtime import IdleAnnouncer, SetAsides
from recovery.failures import emit_failure, failure_fields, process_failure, source_failure
from recovery.faults import Faults
from recovery.gcpolicy import streaming_collector
from recovery.lifecycle import Lifecycle, Phase
from recovery.livestats import LiveStats
from recovery.origins import UNKNOWN, Origins, Same, TopicOffset
from recovery.ownership import owned_partitions, owned_state
from recovery.phases import PhaseClock
from recovery.phases import merge as merge_phases
from recovery.plan import JobPlan, Logic, Record, Sink, Source
from recovery.progress import ProgressLog, Replay, SourceReplay, read_last_mark, replay_ends
from recovery.state import ChangelogState

log = logging.getLogger("spillway.subtask")

GUARANTEES = ("exactly-once", "at-least-once")


@dataclass(frozen=True)
class RunOptions:
    """Per-subtask runtime settings (one place, with defaults)."""

    checkpoint_interval_s: float = 1.0
    keep_checkpoints: int = 5
    keep_global: int = 10  # global checkpoints a job can still be rewound to
    poll_records: int = 2000  # records a source emits per step
    poll_messages: int = 8  # channel messages (batches of records) a reader takes per step
    transaction_timeout_ms: int = 60_000
    channel: ChannelSettings = field(default_factory=ChannelSettings)
    from_checkpoint: int | None = None
    allow_rewind: bool = False  # from_checkpoint older than the latest: outputs repeat downstream
    run_id: str | None = None  # honour stop requests of this run (SIGTERM to the driver)
    dead_letter: bool = False  # bad records go to the job's dead-letter channel, not fail
    checkpoint_mode: str = "interval"  # "unaligned" / "aligned": numbered global checkpoints too
    watermark_interval_s: float = 0.2
    # Unaligned mode: records a subtask processes between looks for a checkpoint trigger,
    # so a checkpoint need not wait for a whole channel message (~1000 records).
    trigger_chunk: int = 256
    # "exactly-once": outputs are written in the checkpoint's transaction. "at-least-once":
    # outputs go out without a transaction and are flushed before the checkpoint commits,
    # so a restart re-sends (duplicates) what followed the last checkpoint, loses nothing.
    guarantee: str = "exactly-once"


class GlobalCadence:
    """When the next global checkpoint is due, judged from the spacing of the last two.

    A subtask's own interval checkpoint falling just before a global trigger makes the
    global one wait for that commit; while global checkpoints keep coming, they are the
    subtask's checkpoints. If they stop (the coordinator died), interval checkpoints
    resume after 1.5 spacings.
    """

    def __init__(self) -> None:
        self._last: float | None = None
        self._gap: float | None = None

    def taken(self, now: float) -> None:
        """A global checkpoint was committed at ``now`` (monotonic seconds)."""
        if self._last is not None:
            self._gap = now - self._last
        self._last = now

    def expected_soon(self, now: float) -> bool:
        """True while the next global checkpoint is expected within 1.5 spacings."""
        if self._last is None or self._gap is None:
            return False
        return now - self._last < 1.5 * self._gap


@dataclass
class SubtaskResult:
    """What one incarnation did; returned to the Spark driver and logged as an event."""

    subtask: str
    attempt: int
    status: str
    restored_from: int | None = None
    checkpoints: int = 0
    records_in: int = 0
    records_out: int = 0
    replay: dict[str, list[int]] = field(default_factory=dict)  # tp -> [from, to, records]
    replay_basis: str | None = None  # recovery.progress: "read" or "upper-bound"
    source_replay: dict[str, Any] = field(default_factory=dict)  # what its source re-reads
    restore_s: float = 0.0
    catchup_s: float | None = None
    set_aside: dict[str, int] = field(default_factory=dict)  # e.g. late records, job totals
    error: str | None = None  # status "failed": the one line the job stops with
    phases: dict[str, float] = field(default_factory=dict)  # recovery.phases, wall times


class _Ctx:
    def __init__(
        self, subtask: SubtaskId, state: ChangelogState | None, kafka: KafkaSettings
    ) -> None:
        self._subtask = subtask
        self._state = state
        self._kafka = kafka
        self.restored_watermark: int | None = None

    @property
    def kafka(self) -> KafkaSettings:
        return self._kafka

    @property
    def watermark(self) -> int | None:
        """The operator's watermark restored from its checkpoint (None: none yet)."""
        return self.restored_watermark

    @property
    def subtask(self) -> SubtaskId:
        return self._subtask

    @property
    def state(self) -> ChangelogState:
        if self._state is None:
            raise RuntimeError(f"{self._subtask}: operator is not stateful")
        return self._state


class SubtaskRunner:
    """One incarnation of one subtask. Call :meth:`run` once."""

    def __init__(
        self,
        plan: JobPlan,
        subtask: SubtaskId,
        settings: KafkaSettings,
        options: RunOptions,
        attempt: int = 0,
        should_stop: Callable[[], bool] = lambda: False,
        phases: PhaseClock | None = None,
    ) -> None:
        self.phases = phases if phases is not None else PhaseClock()
        self.plan = plan
        self.subtask = subtask
        self.settings = settings
        self.options = options
        self.attempt = attempt
        if options.guarantee not in GUARANTEES:
            raise ConfigError(
                f"guarantee must be one of {', '.join(GUARANTEES)}, got {options.guarantee!r}"
            )
        self.lifecycle = Lifecycle()
        self._signals = JobSignals(settings, plan.job, options.run_id) if options.run_id else None
        self._should_stop = self._signals.requested if self._signals else should_stop
        self._global = options.checkpoint_mode in ("unaligned", "aligned") and bool(self._signals)
        self._aligned = self._global and options.checkpoint_mode == "aligned"
        self._unaligned = self._global and not self._aligned
        self._global_last = -1
        op = plan.operator(subtask.operator)
        self.op = op
        self.store = CheckpointStore(settings, plan.job, op.name, op.parallelism)
        self.producer = TransactionalProducer(
            settings,
            subtask.transactional_id,
            transaction_timeout_ms=options.transaction_timeout_ms,
            extra=PRODUCER_CONFIG if options.dead_letter else None,  # room for big dead letters
        )
        # Channel and sink outputs go through ``out``: the transactional producer itself,
        # or (at-least-once) a plain idempotent one. State and checkpoints stay transactional.
        self.out: TransactionalProducer = (
            IdempotentProducer(settings, f"{subtask.transactional_id}.out")
            if options.guarantee == GUARANTEES[1]
            else self.producer
        )
        self.events = EventLog(settings, subtask, attempt, options.run_id)
        self.live = LiveStats()
        self.events.extra = lambda: self.live.doc(self.result, self.reader, self.state, self.source)
        self.faults = Faults(subtask, attempt)
        self.result = SubtaskResult(str(subtask), attempt, "created")
        # Partition ownership (recovery/ownership.py): what this subtask reads and restores.
        self.owned = owned_partitions(plan, subtask)
        self.state = owned_state(plan, subtask, self.owned)
        self.ctx = _Ctx(subtask, self.state, settings)
        self.source: Source | None = op.make_source() if op.make_source else None
        self.logic: Logic | None = op.make_logic() if op.make_logic else None
        self.sink: Sink | None = op.make_sink() if op.make_sink else None
        self.inputs = [
            InputChannel(plan.topic_of(e), part, e.schema, plan.operator(e.upstream).parallelism)
            for e in plan.inputs_of(op.name)
            for part in self.owned.of_topic(plan.topic_of(e))
        ]
        self.dead_letters = DeadLetters(self.producer, subtask) if options.dead_letter else None
        self.aside = SetAsides(subtask, self.dead_letters)
        self._idle = IdleAnnouncer()
        self.consumer: AssignedConsumer | None = None
        self.reader: ChannelReader | None = None
        self.writers: list[ChannelWriter] = []
        self._seq = CheckpointSequence(None)
        self._rewound_past = CheckpointId(-1)
        self._changelog_next: dict[TopicPartition, Offset] = {}
        self._sink_info: dict[str, Any] = {}
        self._last_ckpt = time.monotonic()
        self._last_wm_check = 0.0
        self._wm_out: int | None = None
        self.progress = ProgressLog(settings, subtask)
        self.replay = Replay({}, {}, None)
        self.source_replay = SourceReplay(None, None)
        self._started = 0.0
        # Bytes of the last checkpoint: its own (state changes, record) and the channel data
        # its transaction had spilled since the previous one.
        self._ckpt_bytes = (0, 0)
        self._global_times = GlobalCadence()
        # (tp, offset, records done) while a checkpoint is taken inside a message, and the
        # restored counterpart: records of message (tp, offset) to skip after a restore.
        self._partial: tuple[TopicPartition, int, int] | None = None
        self._resume: dict[tuple[TopicPartition, int], int] = {}
        self._produced = False  # anything written in the open transaction (crash points)
        self._pruning: threading.Thread | None = None
        self.phases.lap("clients")

    # -- life ----------------------------------------------------------------------------

    def run(self) -> SubtaskResult:
        """Run to the end (bounded), until asked to stop, or until an error is raised."""
        try:
            self.lifecycle.to(Phase.RESTORING)
            if not self._restore():
                return self.result
            self.lifecycle.to(Phase.RUNNING)
            self.producer.begin()
            with streaming_collector():
                return self._loop()
        except BaseException as e:
            self.lifecycle.phase = Phase.FAILED
            self.result.status = "failed"
            log.exception("%s attempt %d failed", self.subtask, self.attempt)
            try:
                fields = failure_fields(self.subtask, e)
                self.events.emit("failed", error=f"{type(e).__name__}: {e}", **fields)
            except Exception:  # the event is best-effort; the original error matters
                log.warning("could not record the failure of %s", self.subtask)
            raise
        finally:
            self._close()

    def _loop(self) -> SubtaskResult:
        """Step, tick the writers, checkpoint when due; returns when finished or stopped."""
        # Processing-time timers (keyed process functions) need the clock, not input.
        tick = getattr(self.logic, "on_processing_time", None)
        while True:
            ended = self._step()
            if tick is not None and not ended:
                self._emit(tick(int(time.time() * 1000)))
            if self.progress.due(time.monotonic()):
                self._mark()
            for w in self.writers:
                w.tick()
            # Aligned mode: only sources act on the trigger; the others on barriers.
            if self._global and not ended and not (self._aligned and self.reader):
                assert self._signals is not None
                n = self._signals.trigger()
                if n > self._global_last:
                    self._global_checkpoint(n)
            if ended:
                self._finish()
                return self.result
            now = time.monotonic()
            if now - self._last_ckpt >= self.options.checkpoint_interval_s:
                stopping = self._should_stop()
                if not stopping and self._global_times.expected_soon(now):
                    continue  # the next global checkpoint will do; see GlobalCadence
                self._checkpoint(finished=False, stopping=stopping)
                if stopping:
                    self.result.status = "stopped"
                    self.result.set_aside = self.aside.counts()
                    self.events.emit(
                        "stopped", checkpoint=self._seq.last, set_aside=self.result.set_aside
                    )
                    return self.result

    def _restore(self) -> bool:
        t0 = time.monotonic()
        self.producer.start()  # fences the previous incarnation, aborts its open transaction
        self.phases.mark("fenced")
        self.phases.lap("fence")
        self.events.emit("fencing")  # tells a fenced older copy it was replaced (driver._task)
        if self.out is not self.producer:
            self.out.start()
        self.phases.lap("announce")
        # One read of the checkpoint tail serves both the latest checkpoint and the last
        # global checkpoint this subtask took.
        recent = self.store.history(self.subtask.index, 5)
        ckpt = self._load_checkpoint(recent)
        mark = read_last_mark(self.store, self.progress.tp)  # how far the last attempt read
        self.phases.lap("history")
        if ckpt is not None:
            ckpt.check_topology(self.plan.fingerprint)
            self.result.restored_from = int(ckpt.checkpoint_id)
            # After a rewind, new checkpoints continue after the newest one, so ids stay
            # unique and "latest" stays the newest.
            self._seq = CheckpointSequence(max(ckpt.checkpoint_id, self._rewound_past))
            if ckpt.finished:
                if self.sink is not None:
                    # The final commit may have happened without its files being
                    # published (crash between commit and rename): publish them now.
                    self.sink.open(self.ctx, self._split_position(ckpt.source)[1], self.out)
                self.lifecycle.to(Phase.FINISHED)
                self.result.status = "skipped"
                log.info(
                    "%s finished earlier (checkpoint %s); skipping",
                    self.subtask,
                    ckpt.checkpoint_id,
                )
                self.events.emit("skipped", checkpoint=int(ckpt.checkpoint_id))
                return False
        self._changelog_next = ckpt.changelog_positions() if ckpt else {}
        if self.state is not None:
            restore_consumer = AssignedConsumer(self.settings, self.subtask.group_id + ".restore")
            try:
                n = self.state.restore(
                    restore_consumer,
                    self._changelog_next,
                    rewrite=ckpt is not None and ckpt.rewrite_state,
                )
            finally:
                restore_consumer.close()
            log.info(
                "%s restored %d keys from %d changelog records", self.subtask, len(self.state), n
            )
        self.phases.lap("state")
        self.faults.reached("restore")
        if self.inputs:
            self.consumer = AssignedConsumer(self.settings, self.subtask.group_id)
            self.reader = ChannelReader(
                self.consumer,
                self.inputs,
                tolerate_bad=self.dead_letters is not None,
                align=self._aligned,
            )
            start = {
                ch.tp: (ckpt.inputs.get(ch.tp, Offset(0)) if ckpt else Offset(0))
                for ch in self.inputs
            }
            marks = {ch.tp: self.consumer.watermarks(ch.tp) for ch in self.inputs}
            check_retention(self.subtask, start, marks)
            self.reader.start(start, ckpt.reader_state() if ckpt else None)
            if ckpt is not None:
                self._resume = {(tp, off): done for tp, (off, done) in ckpt.partial.items()}
            ends, basis = replay_ends(
                start, {tp: m[1] for tp, m in marks.items()}, mark, ckpt is not None
            )
            self.replay = Replay(start, ends, basis)
            self.result.replay, self.result.replay_basis = self.replay.figure, basis
        for e in self.plan.outputs_of(self.op.name):
            p = self.plan.partitions_of(e)  # key groups on a keyed edge (ownership.py)
            topic = self.plan.topic_of(e)
            w = ChannelWriter(
                self.out,
                OutputChannel(topic, e.schema, e.make_partitioner(self.subtask.index, p), p),
                self.subtask.index,
                self.options.channel,
            )
            if ckpt is not None and topic in ckpt.outputs:
                w.restore_counts(ckpt.outputs[topic])
            if ckpt is not None and topic in ckpt.output_marks:
                w.restore_marks(ckpt.output_marks[topic])
            self.writers.append(w)
        self.ctx.restored_watermark = ckpt.watermark if ckpt else None
        self.aside.restore(ckpt.set_aside if ckpt else {})
        self.phases.lap("inputs")
        restored_global: tuple[int, int] | None = None
        if ckpt is not None:
            taken: list[tuple[int, int]] = []
            for c in recent:
                if c.rewound_from is not None:
                    taken = []  # global checkpoints of an abandoned run are not announced
                elif c.global_id is not None:
                    taken.append((c.global_id, int(c.checkpoint_id)))
            if taken:
                restored_global = max(taken)
                self._global_last = restored_global[0]
        source_position, sink_position = self._split_position(ckpt.source if ckpt else {})
        if self.source is not None:
            self.source.open(self.ctx, source_position)
            self.source_replay = SourceReplay(self.source, mark.source if mark else None)
            self.result.source_replay = self.source_replay.span
        if self.sink is not None:
            self.sink.open(self.ctx, sink_position, self.out)
        if self.logic is not None:
            self.logic.open(self.ctx)
        self._wm_out = ckpt.watermark if ckpt else None
        self.result.restore_s = time.monotonic() - t0
        self._started = time.monotonic()
        self.phases.lap("opened")
        self.phases.mark("restored")
        if not self.replay.pending and not self.source_replay.pending:
            self.result.catchup_s = 0.0 if ckpt else None
            if ckpt is not None:
                self.phases.mark("caught_up", self.phases.times["restored"])
        self.result.phases = self._phases()
        self.events.emit(
            "started",
            restored_from=self.result.restored_from,
            replay=self.result.replay,
            restore_s=round(self.result.restore_s, 3),
            phases=self.result.phases,
            steps=self.phases.steps_dict(),
            replay_basis=self.result.replay_basis,
            source_replay=self.result.source_replay,
            replay_read_by={"attempt": mark.attempt, "time": mark.time} if mark else None,
            # A checkpoint taken inside a message: how many of its records were done.
            resumed_mid_message={str(tp): [o, d] for (tp, o), d in self._resume.items()},
        )
        if restored_global is not None:
            # The previous incarnation may have died between committing global checkpoint
            # n and announcing it; announce it again (coordinators count it once).
            g, cid = restored_global
            self.events.emit("checkpointed", **{"global": g, "checkpoint": cid})
        log.info(
            "%s attempt %d restored from checkpoint %s in %.2fs; replaying %s",
            self.subtask,
            self.attempt,
            self.result.restored_from,
            self.result.restore_s,
            self.result.replay or "nothing",
        )
        return True

    def _load_checkpoint(self, recent: list[Checkpoint]) -> Checkpoint | None:
        latest = recent[-1] if recent else None
        n = self.options.from_checkpoint
        if n is None:
            return latest
        found = self.store.get(self.subtask.index, n)
        if found is not None and latest is not None and latest.checkpoint_id > n:
            if self.op.stateful:
                raise ConfigError(
                    f"{self.subtask}: cannot rewind a stateful operator to checkpoint {n}: its "
                    "changelog already holds the state of later checkpoints. Rewinding "
                    "stateful operators needs global checkpoints (whole-job rewind)",
                    subtasks=[self.subtask],
                )
            if not self.options.allow_rewind:
                raise ConfigError(
                    f"{self.subtask}: checkpoint {n} is older than its latest "
                    f"({latest.checkpoint_id}); "
                    "rewinding one subtask alone re-sends outputs its downstream already has. "
                    "Pass --allow-duplicates if that is what you want",
                    subtasks=[self.subtask],
                )
            log.warning(
                "%s rewinds to checkpoint %d: outputs after it will repeat", self.subtask, n
            )
        if found is None:
            kept = [int(c.checkpoint_id) for c in self.store.history(self.subtask.index, 100)]
            raise ConfigError(
                f"{self.subtask} has no retained checkpoint {n}; retained: {kept or 'none'}",
                subtasks=[self.subtask],
            )
        return found

    # -- one step ------------------------------------------------------------------------

    def _step(self) -> bool:
        """Process one batch of input; True when every input has ended."""
        if self.source is not None:
            recs = self.source.read(self.options.poll_records)
            for bad in self.source.rejected():  # read past: fail, or divert in this transaction
                if self.dead_letters is None:
                    raise source_failure(self.subtask, self.op.name, bad)
                self.dead_letters.send(
                    stage="source", error=bad.error, raw=bad.raw, origin=bad.origin
                )
            if recs is None:
                return True
            self.result.records_in += len(recs)
            if self.source_replay.pending and self.source_replay.caught_up():
                self._caught_up()
            # A source chained with transforms: they run here, before anything is written
            # (their outputs have no per-record origin: a function may emit 0..n per input).
            if self.logic is not None:
                self._emit(self._process(recs, self.source.origins()))
            else:
                self._emit(recs, self.source.origins())
            self._maybe_forward_watermark(self.source.watermark())
            self._announce_idle(self.source.idle())
            return False
        assert self.reader is not None
        barrier: int | None = None
        # Unaligned: one message per poll, so a checkpoint can fall between any two, and a
        # short wait, so an idle reader looks for a trigger every 10 ms (not every 50).
        batch, wait_s = (1, 0.01) if self._unaligned else (self.options.poll_messages, 0.05)
        for d in self.reader.poll(batch, wait_s, stop_after_barrier=self._unaligned):
            if d.kind is Kind.BARRIER and d.value is not None and d.value > self._global_last:
                barrier = d.value  # the reader stopped here: checkpoint exactly at it
            if d.error is not None and self.dead_letters is not None:
                origin = TopicOffset(d.tp.topic, d.tp.partition, d.offset)
                self.dead_letters.send(stage="decode", error=d.error, origin=origin, raw=d.raw)
            elif d.kind is Kind.DATA:
                # Records of this message processed before a restore (mid-message checkpoint).
                done = self._resume.pop((d.tp, d.offset), 0)
                records = d.records[done:] if done else d.records
                self.result.records_in += len(records)
                if self.replay.pending:
                    self.replay.count(d.tp, d.offset, len(records))
                if self._unaligned:
                    self._deliver_in_chunks(records, d.tp, d.offset, done)
                else:
                    self._deliver(records, d.tp, d.offset)
        if (
            self.replay.pending
            and self.result.catchup_s is None
            and self.replay.done(self.reader.positions())
        ):
            self._caught_up()
        if barrier is not None and self._global:
            self._global_checkpoint(barrier)
        if self._aligned:
            n = self.reader.aligned()
            if n is not None:
                self.reader.consume_barrier(n)
                if n > self._global_last:
                    self._global_checkpoint(n)
                self.reader.release(n)
        self._maybe_forward_watermark(self.reader.watermark())
        self._announce_idle(self.reader.idle())
        return self.reader.finished()

    def _deliver(self, records: list[Record], tp: TopicPartition, offset: int) -> None:
        if self.logic is not None:
            origins = Same(TopicOffset(tp.topic, tp.partition, offset))
            self._emit(self._process(records, origins), origins)
        elif self.sink is not None:
            if self.faults.armed and records:
                self._before_output()
            self.sink.write(records)

    def _deliver_in_chunks(
        self, records: list[Record], tp: TopicPartition, offset: int, done: int
    ) -> None:
        """Unaligned mode: take a triggered checkpoint between chunks of one message.

        The checkpoint then records ``offset`` as the input position and how many of the
        message's records are done (``partial``); a restore skips exactly those. The cut
        stays consistent: the message was committed upstream before the trigger.
        """
        assert self._signals is not None
        step = self.options.trigger_chunk
        for start in range(0, len(records), step):
            if start:
                n = self._signals.trigger()
                if n > self._global_last:
                    self._partial = (tp, offset, done + start)
                    try:
                        self._global_checkpoint(n)
                    finally:
                        self._partial = None
                    self.faults.reached("after-partial-commit")
            self._deliver(records[start : start + step], tp, offset)

    def _phases(self) -> dict[str, float]:
        """This attempt's restart phases so far, with Spark's (driver-side) ones once known."""
        spark = None
        if self._signals is not None and self.attempt > 0:
            spark = self._signals.spark_phases(self.subtask, self.attempt)
        return merge_phases(spark, self.phases.as_dict())

    def _caught_up(self) -> None:
        """Re-read everything the previous attempt had read: record it (once)."""
        self.result.catchup_s = time.monotonic() - self._started
        self.phases.mark("caught_up")
        self.result.phases = self._phases()
        self.events.emit(
            "caught-up",
            catchup_s=round(self.result.catchup_s, 3),
            phases=self.result.phases,
            replay=self.result.replay,
            replay_basis=self.result.replay_basis,
            source_replay=self.result.source_replay,
        )

    def _mark(self) -> None:
        """Record how far this attempt has read (recovery.progress)."""
        self.progress.write(
            self.attempt,
            self.reader.positions() if self.reader else {},
            self.source.position() if self.source else None,
        )

    def _process(self, records: list[Record], origins: Origins) -> list[Record]:
        """Run the operator on one input message's records, or on what the chained source
        just read (``origins``: where each came from); isolate failures if dead-lettering."""
        assert self.logic is not None
        try:
            return list(self.logic.process(records))
        except Exception as e:
            if self.dead_letters is None:
                raise process_failure(
                    self.subtask, self.op.name, records, origins, e, self._process_alone
                ) from e
        # Record by record, so only the bad ones are diverted. A failed call leaves keyed
        # state as it was: the operators write state only after a whole call succeeds.
        out: list[Record] = []
        for k, r in enumerate(records):
            try:
                out.extend(self.logic.process([r]))
            except Exception as e:
                self.dead_letters.send(stage="process", error=e, origin=origins.at(k), record=r)
        return out

    def _emit(self, records: Iterable[Record], origins: Origins = UNKNOWN) -> None:
        """Write records to every output (``origins``: where each came from, if known)."""
        recs = records if isinstance(records, list) else list(records)
        if self.logic is not None:  # what it set aside comes from the same input message
            self.aside.take(
                self.logic.set_aside(), origins.origin if isinstance(origins, Same) else None
            )
        if not recs:
            return
        if self.faults.armed:
            self._before_output()
        try:
            for w in self.writers:
                w.write_many(recs)  # all-or-nothing per call
        except RecordError as e:
            if self.dead_letters is None:
                raise emit_failure(
                    self.subtask, self.op.name, recs, origins, e, self._write_all
                ) from e
            good = []
            for k, r in enumerate(recs):
                try:
                    self._write_all([r])
                    good.append(r)
                except RecordError as e1:
                    self.dead_letters.send(stage="emit", error=e1, origin=origins.at(k), record=r)
            recs = good
        self.result.records_out += len(recs)
        if self.sink is not None:  # the end of a chain (a sink alone is fed by _deliver)
            self.sink.write(recs)

    def _process_alone(self, records: list[Record]) -> list[Record]:
        assert self.logic is not None
        return list(self.logic.process(records))

    def _write_all(self, records: list[Record]) -> None:
        for w in self.writers:
            w.write_many(records)

    def _maybe_forward_watermark(self, wm: int | None) -> None:
        now = time.monotonic()
        if wm is None or now - self._last_wm_check < self.options.watermark_interval_s:
            return
        self._last_wm_check = now
        if self._wm_out is not None and wm <= self._wm_out:
            return
        self._wm_out = wm
        if self.logic is not None:
            self._emit(self.logic.on_watermark(wm))
        for w in self.writers:
            w.watermark(wm)

    def _announce_idle(self, idle: bool) -> None:
        if self._idle.due(idle, time.monotonic()):
            for w in self.writers:
                w.idle()

    # -- checkpoints ---------------------------------------------------------------------

    def _checkpoint(
        self, finished: bool, stopping: bool = False, global_id: int | None = None
    ) -> None:
        self.lifecycle.to(Phase.CHECKPOINTING)
        t0 = time.monotonic()
        cid = self._seq.next()
        for w in self.writers:
            w.flush_batches()
        if self.writers or self.out is not self.producer:
            # Acknowledged offsets give the output high-water marks a rewind needs; and
            # at-least-once: outputs are durable before the checkpoint says so.
            self.out.flush()
        spilled = self.producer.txn_bytes  # channel data written since the last checkpoint
        source_position = self.source.position() if self.source is not None else {}
        sink_position = self.sink.prepare(int(cid)) if self.sink is not None else {}
        position = self._join_position(source_position, sink_position)
        if self.state is not None and self.state.flush_to(self.producer):
            self.producer.flush()
            for ctp in self.state.tps:
                last = self.producer.last_offset(ctp)
                if last is not None:
                    self._changelog_next[ctp] = Offset(last + 1)
        reader_state = self.reader.state if self.reader else None
        inputs = self.reader.positions() if self.reader else {}
        partial: dict[TopicPartition, tuple[int, int]] = {}
        if self._partial is not None:
            tp, off, done = self._partial
            inputs[tp] = Offset(off)  # the message is re-read; its first `done` records skipped
            partial[tp] = (off, done)
        ckpt = Checkpoint(
            subtask=self.subtask,
            checkpoint_id=CheckpointId(cid),
            topology=self.plan.fingerprint,
            inputs=inputs,
            partial=partial,
            changelogs=dict(self._changelog_next),
            owned=self.owned,
            outputs={w.channel.topic: tuple(w.counts) for w in self.writers},
            output_marks={w.channel.topic: w.marks() for w in self.writers},
            discard=self.reader.discard_state() if self.reader else {},
            ended={tp: frozenset(v) for tp, v in reader_state.ended.items()}
            if reader_state
            else {},
            channel_watermarks=(
                {tp: dict(v) for tp, v in reader_state.watermarks.items()} if reader_state else {}
            ),
            watermark=self._wm_out,
            source=position,
            finished=finished,
            wall_time=time.time(),
            attempt=self.attempt,
            global_id=global_id,
            skip=self.reader.skip_state() if self.reader else {},
            set_aside=self.aside.counts(),
        )
        metadata = self.consumer.group_metadata() if self.consumer else None
        self._mark()  # what this checkpoint read, in case the commit never happens
        if self.faults.armed:
            self._flush_and_reach("after-produce")
        reached = self._crash_point if self.faults.armed else None
        t1 = time.monotonic()
        commit_checkpoint(self.producer, self.store, ckpt, metadata, reached)
        t2 = time.monotonic()
        self.live.checkpointed(cid, ckpt.wall_time, t2 - t0, t2 - t1, inputs)
        self._ckpt_bytes = (self.producer.txn_bytes - spilled, spilled)
        self.faults.reached("after-final-commit" if finished else "after-commit")
        if self.sink is not None:
            self.sink.committed(sink_position)
        self.result.checkpoints += 1
        self._last_ckpt = time.monotonic()
        self._prune(cid)
        if stopping:
            self.lifecycle.to(Phase.STOPPED)
            return
        if not finished:
            self.producer.begin()
            self._produced = False
        self.lifecycle.after_checkpoint()

    # A checkpoint's ``source`` field holds the source's position, or the sink's, or, for a
    # chain from a source to a sink, both side by side.
    def _join_position(self, source: dict[str, Any], sink: dict[str, Any]) -> dict[str, Any]:
        if self.source is not None and self.sink is not None:
            return {"source": source, "sink": sink}
        return sink if self.sink is not None else source

    def _split_position(self, position: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(source's, sink's) part of a checkpoint's ``source`` field (see _join_position)."""
        if self.source is not None and self.sink is not None:
            return dict(position.get("source", {})), dict(position.get("sink", {}))
        return dict(position), dict(position)

    def _global_checkpoint(self, n: int) -> None:
        """Checkpoint ``n`` of the job, with barrier n forwarded in the same transaction."""
        start, start_mono = time.time(), time.monotonic()
        seen = self._signals.seen_at(n) if self._signals else None
        for w in self.writers:
            w.barrier(n)
        self._checkpoint(finished=False, global_id=n)
        self._global_last = n
        self._global_times.taken(time.monotonic())
        # Wall times of the phases (the coordinator reports them per checkpoint);
        # _last_ckpt is set right after the commit returned.
        timing = {
            "via": "barrier" if seen is None else "trigger",
            "seen": start if seen is None else seen,
            "start": start,
            "committed": start + (self._last_ckpt - start_mono),
        }
        self.events.emit(
            "checkpointed",
            bytes=self._ckpt_bytes[0],
            spilled_bytes=self._ckpt_bytes[1],
            timing=timing,
            **{"global": n, "checkpoint": self._seq.last},
        )

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
            self.store.prune(
                self.subtask.index,
                self.options.keep_checkpoints,
                self.options.keep_global if self._global else 0,
            )
        except Exception:  # pruning is housekeeping: retry at the next tenth checkpoint
            log.warning("%s could not prune old checkpoints", self.subtask, exc_info=True)
        if time.monotonic() - t0 > 0.5:
            log.info("%s: pruning checkpoints took %.2fs", self.subtask, time.monotonic() - t0)

    def _crash_point(self, point: str) -> None:
        if point == "during-commit":
            self.faults.reached_soon(point)  # dies while the commit call runs
        else:
            self._flush_and_reach(point)

    def _flush_and_reach(self, point: str) -> None:
        # Make the planned crash land with everything on the broker, still uncommitted.
        self.out.flush()
        self.producer.flush()
        self.progress.flush()
        self.faults.reached(point)

    def _before_output(self) -> None:
        if not self._produced:
            self._produced = True
            self.faults.reached("before-produce")

    def _finish(self) -> None:
        self.lifecycle.to(Phase.FINISHING)
        if self.logic is not None:
            self._emit(self.logic.on_end())
        for w in self.writers:
            w.end_of_stream()
        self._checkpoint(finished=True)
        self.lifecycle.to(Phase.FINISHED)
        self.result.status = "finished"
        self.result.set_aside = self.aside.counts()
        if self.result.catchup_s is None and (self.replay.pending or self.source_replay.pending):
            self._caught_up()
        self.result.phases = self._phases()  # Spark's phases, if they came after caught_up
        self.events.emit(
            "finished",
            checkpoint=self._seq.last,
            records_in=self.result.records_in,
            records_out=self.result.records_out,
            replay=self.result.replay,
            replay_basis=self.result.replay_basis,
            source_replay=self.result.source_replay,
            catchup_s=self.result.catchup_s,
            set_aside=self.result.set_aside,
            phases=self.result.phases,
        )

    def _close(self) -> None:
        if self._pruning is not None:
            self._pruning.join(self.settings.request_timeout_s)  # before its store closes
        closers = [self.events.close, self.producer.close, self.store.close, self.progress.close]
        if self.out is not self.producer:
            closers.append(self.out.close)
        if self._signals is not None:
            closers.append(self._signals.close)
        for closer in closers:
            try:
                closer()
            except Exception:  # closing must not hide the real outcome
                log.warning("closing %s failed", self.subtask, exc_info=True)
        if self.reader is not None:
            try:
                self.reader.close()
            except Exception:
                log.warning("closing reader of %s failed", self.subtask, exc_info=True)
