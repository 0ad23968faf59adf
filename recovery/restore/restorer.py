"""The restorer of one subtask: finds the checkpoint to continue from and rebuilds state.

It returns what it restored (:class:`Restored`) and sets nothing on anybody: the runner
hands the positions, counts and marks to the parts that continue from them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import ConfigError, RescaleError
from spillway.channels.ids import Offset, SubtaskId, TopicPartition
from spillway.channels.kafka.consumer import AssignedConsumer
from spillway.channels.progress import ReaderState
from spillway.offsets.checkpoint import Checkpoint
from spillway.offsets.store import CheckpointStore
from spillway.recovery.job.plan import JobPlan
from spillway.recovery.restore.handover import Unmarked, unmarked
from spillway.recovery.restore.progress import ReadMark, read_last_mark
from spillway.recovery.restore.rescale import (
    OperatorHandover,
    Rescale,
    accepts_fingerprint,
    handover_checkpoint,
)
from spillway.recovery.restore.state import ChangelogState

log = logging.getLogger("spillway.subtask")


@dataclass(frozen=True)
class Restored:
    """What a subtask continues from: its checkpoint (None: a fresh start), how far its
    previous attempt had read, and the newest global checkpoint it had taken."""

    checkpoint: Checkpoint | None
    mark: ReadMark | None
    global_taken: tuple[int, int] | None = None  # (global id, checkpoint id)
    # A live rescale's previous owners whose latest checkpoint has no handed-over mark.
    unmarked: Unmarked | None = None

    @property
    def finished(self) -> bool:
        """True if the subtask finished earlier (its final checkpoint committed)."""
        return self.checkpoint is not None and self.checkpoint.meta.finished

    def start(self, inputs: Iterable[TopicPartition]) -> dict[TopicPartition, Offset]:
        """The next offset to read on each input partition (0 where none was checkpointed)."""
        ckpt = self.checkpoint
        return {tp: ckpt.reader.inputs.get(tp, Offset(0)) if ckpt else Offset(0) for tp in inputs}

    def reader_state(self) -> ReaderState | None:
        """Ends, watermarks, skips and discards a restored reader continues from."""
        return self.checkpoint.reader_state() if self.checkpoint else None

    def resume(self) -> dict[tuple[TopicPartition, int], int]:
        """Records of message (tp, offset) already processed (a checkpoint inside it)."""
        if self.checkpoint is None:
            return {}
        return {(tp, off): done for tp, (off, done) in self.checkpoint.reader.partial.items()}

    def output(self, topic: str) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
        """(output sequence numbers, high-water marks) of an output channel, if recorded."""
        ckpt = self.checkpoint
        if ckpt is None:
            return None, None
        return ckpt.writers.outputs.get(topic), ckpt.writers.output_marks.get(topic)

    @property
    def watermark(self) -> int | None:
        """The operator's watermark at the checkpoint."""
        return self.checkpoint.operator.watermark if self.checkpoint else None

    @property
    def set_aside(self) -> Mapping[str, int]:
        """Records set aside since the job began."""
        return self.checkpoint.operator.set_aside if self.checkpoint else {}

    @property
    def source_position(self) -> Mapping[str, Any]:
        """The source's position (empty: from the beginning)."""
        return (self.checkpoint.source if self.checkpoint else None) or {}

    @property
    def sink_position(self) -> Mapping[str, Any]:
        """What the sink's last committed checkpoint recorded (empty: nothing)."""
        return (self.checkpoint.sink if self.checkpoint else None) or {}


class Restorer:
    """Reads a subtask's checkpoints and changelog; call :meth:`load`, then :meth:`state`."""

    def __init__(
        self,
        subtask: SubtaskId,
        store: CheckpointStore,
        settings: KafkaSettings,
        progress_tp: TopicPartition,
        stateful: bool,
    ) -> None:
        self.subtask = subtask
        self._store = store
        self._settings = settings
        self._progress_tp = progress_tp
        self._stateful = stateful

    def load(
        self,
        fingerprint: str,
        from_checkpoint: int | None = None,
        allow_rewind: bool = False,
        rescaled: tuple[JobPlan, Rescale] | None = None,
    ) -> Restored:
        """The checkpoint to continue from (the latest, or ``from_checkpoint``), checked
        against the job's topology ``fingerprint``.

        ``rescaled``: the plan and the job's latest rescale. If it changed this operator's
        parallelism and this subtask has not checkpointed since, the subtask continues
        from the checkpoints handed over
        (:func:`spillway.recovery.restore.rescale.handover_checkpoint`).
        """
        # Fenced already (the runner's producer started): wait out a transaction whose
        # commit markers are not all written, or its checkpoint would be missed.
        self._store.settle(self.subtask.index)
        # One read of the checkpoint tail serves both the latest checkpoint and the last
        # global checkpoint this subtask took.
        recent = self._store.history(self.subtask.index, 5)
        ckpt = self._choose(recent, from_checkpoint, allow_rewind)
        rescale = rescaled[1] if rescaled else None
        handover = rescale.operators.get(self.subtask.operator) if rescale else None
        # Not checkpointed since the rescale (at or below its floor): from the handover.
        pending = handover is not None and (ckpt is None or ckpt.checkpoint_id <= handover.floor)
        if rescaled is not None and handover is not None and pending and from_checkpoint is None:
            ckpt, missing = self._handover(rescaled[0], rescaled[1], handover)
            return Restored(ckpt, None, unmarked=missing)
        mark = read_last_mark(self._store, self._progress_tp)  # how far the last attempt read
        if ckpt is None:
            return Restored(None, mark)
        if ckpt.meta.topology not in accepts_fingerprint(rescale, fingerprint):
            ckpt.check_topology(fingerprint)
        return Restored(ckpt, mark, _last_global(recent))

    def _handover(
        self, plan: JobPlan, rescale: Rescale, handover: OperatorHandover
    ) -> tuple[Checkpoint, Unmarked | None]:
        """The checkpoint this subtask continues from after the rescale: built from the
        previous subtasks' checkpoints that the rescale recorded as handed over; and,
        after a live rescale, those without the handed-over mark
        (spillway.recovery.restore.handover)."""
        handed: dict[int, Checkpoint | None] = {}
        for j, cid in sorted(handover.checkpoints.items()):
            found = None if cid is None else self._store.get(j, cid)
            if cid is not None and found is None:
                raise RescaleError(
                    f"{self.subtask}: checkpoint {cid} of subtask {j}, handed over by rescale "
                    f"{rescale.number}, is no longer retained; rescale again from a savepoint",
                    subtasks=[self.subtask],
                )
            if found is not None and found.meta.topology not in rescale.fingerprints:
                found.check_topology(rescale.fingerprints[0])
            handed[j] = found
        ckpt = handover_checkpoint(plan, self.subtask, handover.previous, handed, handover.floor)
        log.info(
            "%s continues from rescale %d: %d -> %d subtasks, checkpoints %s handed over",
            self.subtask,
            rescale.number,
            handover.previous,
            plan.operator(self.subtask.operator).parallelism,
            dict(handover.checkpoints),
        )
        missing = unmarked(rescale, self.subtask.operator, handed)
        if missing is not None:
            log.warning(
                "%s: previous subtasks %s of rescale %d died before their handed-over "
                "checkpoint; continuing from their latest checkpoints %s",
                self.subtask,
                sorted(missing.checkpoints),
                rescale.number,
                dict(missing.checkpoints),
            )
        return ckpt, missing

    def state(self, state: ChangelogState, restored: Restored) -> int:
        """Rebuild ``state`` from the changelog up to the checkpoint; return records read."""
        ckpt = restored.checkpoint
        consumer = AssignedConsumer(self._settings, self.subtask.group_id + ".restore")
        try:
            n = state.restore(
                consumer,
                ckpt.changelog_positions() if ckpt else {},
                rewrite=ckpt is not None and ckpt.state.rewrite_state,
            )
        finally:
            consumer.close()
        log.info("%s restored %d keys from %d changelog records", self.subtask, len(state), n)
        return n

    def _choose(
        self, recent: list[Checkpoint], n: int | None, allow_rewind: bool
    ) -> Checkpoint | None:
        latest = recent[-1] if recent else None
        if n is None:
            return latest
        found = self._store.get(self.subtask.index, n)
        if found is not None and latest is not None and latest.checkpoint_id > n:
            if self._stateful:
                raise ConfigError(
                    f"{self.subtask}: cannot rewind a stateful operator to checkpoint {n}: its "
                    "changelog already holds the state of later checkpoints. Rewinding "
                    "stateful operators needs global checkpoints (whole-job rewind)",
                    subtasks=[self.subtask],
                )
            if not allow_rewind:
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
            kept = [int(c.checkpoint_id) for c in self._store.history(self.subtask.index, 100)]
            raise ConfigError(
                f"{self.subtask} has no retained checkpoint {n}; retained: {kept or 'none'}",
                subtasks=[self.subtask],
            )
        return found


def _last_global(recent: list[Checkpoint]) -> tuple[int, int] | None:
    """(global id, checkpoint id) of the newest global checkpoint in ``recent``, oldest first."""
    taken: list[tuple[int, int]] = []
    for c in recent:
        if c.meta.rewound_from is not None:
            taken = []  # global checkpoints of an abandoned run are not announced
        elif c.meta.global_id is not None:
            taken.append((c.meta.global_id, int(c.checkpoint_id)))
    return max(taken) if taken else None
