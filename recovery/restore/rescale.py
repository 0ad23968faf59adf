"""Restoring an operator under a new parallelism (docs/architecture.md, Key groups,
Changing a running job). Pure: no I/O.

A rescale changes the parallelism of some operators between two runs of a job. Each
subtask of a rescaled operator continues from the checkpoints of the subtasks that owned
its partitions before (:func:`handover_checkpoint`): its keyed state is the changelog
partitions of its key groups up to the offsets their previous owners checkpointed, and it
reads each owned channel partition from the position its previous owner checkpointed.
The result is one checkpoint-shaped record the runner restores from as from its own.

What moves between owners is whole partitions (ownership never splits one), so:

* **Keyed edges** (``max_parallelism`` partitions, partition = key group): any
  parallelism up to the key-group count, up or down.
* **Keyed state** moves with its changelog partitions (one per key group).
* **Round-robin edges into a slotted operator** (not keyed, no state: ``max_parallelism``
  partitions, *slots*, each written a batch at a time,
  ``spillway.channels.routing.partitioners.Sticky``)
  move like key groups: any parallelism up to the slot count, up or down.
* **Other non-keyed edges** (forward; round-robin into an operator without slots: one
  partition per downstream subtask) may grow: the topic gets partitions for the new
  subtasks (empty, read from 0), the old ones keep their owners. They cannot shrink: the
  retired subtasks' partitions still hold records no subtask would read, and handing them
  to another subtask would mix writers across partitions behind the watermark
  (rescaling never rewrites data already in a channel). Refused
  (:class:`RescaleError`).
* **Refused** as well: a *broadcast* input (a new subtask would miss what was broadcast
  before), a source (its position belongs to one subtask's split of the input), state
  without key groups (it cannot be divided), an operator with a finished subtask, and a
  retired sink subtask with prepared output not yet published.

A record of the rescale (:class:`Rescale`) stays with the job until the next one: which
checkpoint of each previous subtask was handed over, the topology fingerprint those
checkpoints were taken under, and the newest checkpoint id before the rescale (``floor``):
a subtask whose own newest checkpoint lies above the floor has checkpointed since and
restores from it as usual; otherwise it restores (again) from the handover.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from spillway.channels.errors import RescaleError
from spillway.channels.ids import CheckpointId, Offset, OperatorName, SubtaskId, TopicPartition
from spillway.channels.progress import Spans
from spillway.channels.routing.keygroups import MAX_PARALLELISM_LIMIT
from spillway.offsets.checkpoint import (
    Checkpoint,
    CheckpointMeta,
    OperatorProgress,
    ReaderPositions,
    StatePositions,
    WriterCounts,
)
from spillway.recovery.job.evolution import with_earlier_schemas
from spillway.recovery.job.plan import JobPlan, OperatorPlan
from spillway.recovery.job.plandoc import PlanDoc
from spillway.recovery.restore.ownership import (
    adopted_max_parallelism,
    owned_partitions,
    with_max_parallelism,
)


@dataclass(frozen=True)
class OperatorHandover:
    """How one operator was rescaled: from ``previous`` subtasks, whose checkpoints
    ``checkpoints[j]`` (None: subtask j had none) were handed over; ``floor``: the newest
    checkpoint id of any of its subtasks before the rescale; ``live``: while the job ran
    (each previous subtask stopped with a checkpoint marked handed over,
    :mod:`spillway.recovery.restore.handover`)."""

    previous: int
    checkpoints: Mapping[int, int | None]
    floor: int
    live: bool = False


@dataclass(frozen=True)
class Rescale:
    """The job's latest rescale: its number, the topology fingerprints of the plans before
    it (newest first: checkpoints an unchanged or finished subtask took under one of them
    stay valid), and the handover of each operator whose parallelism changed."""

    number: int
    fingerprints: tuple[str, ...]
    operators: Mapping[str, OperatorHandover]

    def to_json(self) -> dict[str, Any]:
        """JSON form (recorded in the ``submitted`` event)."""
        return {
            "number": self.number,
            "fingerprints": list(self.fingerprints),
            "operators": {
                name: {
                    "previous": h.previous,
                    "checkpoints": {str(j): c for j, c in sorted(h.checkpoints.items())},
                    "floor": h.floor,
                    "live": h.live,
                }
                for name, h in sorted(self.operators.items())
            },
        }

    @staticmethod
    def from_json(doc: Mapping[str, Any], origin: str) -> Rescale:
        """Parse :meth:`to_json`'s form; :class:`RescaleError` naming ``origin`` if malformed."""
        try:
            return Rescale(
                int(doc["number"]),
                tuple(str(f) for f in doc["fingerprints"]),
                {
                    str(name): OperatorHandover(
                        int(h["previous"]),
                        {
                            int(j): None if c is None else int(c)
                            for j, c in h["checkpoints"].items()
                        },
                        int(h["floor"]),
                        bool(h.get("live", False)),  # absent: recorded before the mark
                    )
                    for name, h in doc["operators"].items()
                },
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise RescaleError(f"{origin}: malformed rescale record ({e!r})") from None


@dataclass(frozen=True)
class PlanShape:
    """What a task applies to the plan it rebuilds from the pipeline, so it runs the plan
    the driver decided: key-group counts, parallelism per operator, the latest rescale,
    and the earlier schemas of each channel (upstream, downstream) its readers resolve."""

    key_groups: Mapping[str, int]
    parallelism: Mapping[str, int]
    rescale: Rescale | None = None
    earlier_schemas: Mapping[tuple[str, str], tuple[dict[str, Any], ...]] = dataclasses.field(
        default_factory=dict
    )
    # A live rescale's request whose handover the task waits for before it runs: its
    # subtasks are launched while the driver still takes the handover, and ``rescale``
    # comes from the driver's ``rescaled`` answer (spillway.spark_jobs.spark.handoverwait).
    awaiting: str | None = None

    @staticmethod
    def of(plan: JobPlan, rescale: Rescale | None, awaiting: str | None = None) -> PlanShape:
        """The shape of the driver's ``plan`` (``awaiting``: see the field)."""
        return PlanShape(
            adopted_max_parallelism(plan), {op.name: op.parallelism for op in plan.operators},
            rescale,
            {(e.upstream, e.downstream): e.earlier_schemas for e in plan.edges
             if e.earlier_schemas},
            awaiting,
        )  # fmt: skip

    def apply(self, plan: JobPlan) -> JobPlan:
        """``plan`` in this shape."""
        shaped = with_max_parallelism(plan, self.key_groups)
        return with_parallelism(
            with_earlier_schemas(shaped, self.earlier_schemas), self.parallelism
        )


def with_parallelism(plan: JobPlan, parallelism: Mapping[str, int]) -> JobPlan:
    """``plan`` with operator ``name`` at ``parallelism[name]`` subtasks.

    :class:`RescaleError` for an unknown operator, a value below 1 or above a keyed
    operator's key-group count, or a forward edge left between different widths.
    """
    names = {op.name for op in plan.operators}
    unknown = sorted(set(parallelism) - names)
    if unknown:
        raise RescaleError(
            f"--parallelism names {', '.join(unknown)}, not operators of job {plan.job}; "
            f"its operators: {', '.join(sorted(names))}"
        )
    ops = []
    for op in plan.operators:
        p = parallelism.get(op.name, op.parallelism)
        limit = op.max_parallelism if op.max_parallelism is not None else MAX_PARALLELISM_LIMIT
        if isinstance(p, bool) or not isinstance(p, int) or not 1 <= p <= limit:
            unit = "slot" if op.slotted else "key-group"
            why = f" (its {unit} count, fixed since the job first ran)"
            raise RescaleError(
                f"operator {op.name!r} of job {plan.job}: parallelism {p!r} must be between 1 "
                f"and {limit}{why if op.max_parallelism is not None else ''}"
            )
        ops.append(dataclasses.replace(op, parallelism=p) if p != op.parallelism else op)
    out = dataclasses.replace(plan, operators=tuple(ops))
    for e in out.edges:
        up, down = out.operator(e.upstream), out.operator(e.downstream)
        if e.kind == "forward" and up.parallelism != down.parallelism:
            raise RescaleError(
                f"edge {e.upstream} -> {e.downstream} of job {plan.job} is forward (subtask i "
                f"feeds subtask i), so both need the same parallelism, got {up.parallelism} "
                f"and {down.parallelism}; give both the same --parallelism"
            )
    return out


def previous_parallelism(plan: JobPlan, recorded: PlanDoc | None) -> dict[str, int]:
    """Operators of ``plan`` whose parallelism differs from the recorded plan's: name → the
    recorded parallelism (empty: a first run, or no change)."""
    if recorded is None:
        return {}
    before = {op.name: op.parallelism for op in recorded.operators}
    return {
        op.name: before[op.name]
        for op in plan.operators
        if op.name in before and before[op.name] != op.parallelism
    }


def check_rescalable(plan: JobPlan, operator: str, previous: int) -> None:
    """:class:`RescaleError` unless ``operator`` of ``plan`` can continue at its plan
    parallelism from ``previous`` subtasks (the rules of the module docstring that the plan
    alone decides)."""
    op = plan.operator(operator)
    now = op.parallelism
    where = f"operator {op.name!r} of job {plan.job} ({previous} -> {now} subtasks)"
    if op.make_source is not None:
        raise RescaleError(
            f"{where}: a source cannot be rescaled (each subtask's position belongs to its own "
            "share of the input); keep its parallelism"
        )
    if op.stateful and (op.max_parallelism is None or op.slotted):
        raise RescaleError(
            f"{where}: its state is not divided into key groups, so it cannot be divided among "
            "another number of subtasks; keep its parallelism"
        )
    for e in plan.inputs_of(op.name):
        if plan.width_free(e):  # key groups or slots: whole partitions move
            continue
        if e.kind == "broadcast":
            raise RescaleError(
                f"{where}: input {e.upstream} is broadcast; a new subtask would miss what "
                "was broadcast before. Keep its parallelism"
            )
        if now < previous:
            raise RescaleError(
                f"{where}: input {e.upstream} is not keyed ({e.kind}); partitions "
                f"{now}..{previous - 1} of {plan.topic_of(e)} belong to the retired subtasks "
                "and would be read by nobody. Key the input (key_by), or keep the parallelism"
            )


def handover_checkpoint(
    plan: JobPlan,
    subtask: SubtaskId,
    previous: int,
    handed: Mapping[int, Checkpoint | None],
    floor: int,
) -> Checkpoint:
    """What subtask ``subtask`` of ``plan`` (new parallelism) restores from after a
    rescale from ``previous`` subtasks whose handed-over checkpoints are ``handed``
    (by previous index; None or absent: that subtask had none).

    Per owned partition, the position, end-of-stream, watermarks, skips, discards and
    changelog offset come from the previous owner of that partition (none: a partition new
    in this rescale, read from 0). Output counts and marks, set-aside counts and the sink's
    position continue those of the previous subtask with the same index (it wrote as the
    same writer and transactional id). The operator watermark is the lowest of the
    previous owners'. The id is ``floor``, so the subtask's next checkpoint lies above it.
    """
    op = plan.operator(subtask.operator)
    check_rescalable(plan, op.name, previous)
    before = dataclasses.replace(
        plan,
        operators=tuple(
            dataclasses.replace(o, parallelism=previous) if o.name == op.name else o
            for o in plan.operators
        ),
    )
    old_owned = {
        j: owned_partitions(before, SubtaskId(subtask.job, OperatorName(op.name), j))
        for j in range(previous)
    }
    _check_previous(op, op.parallelism, handed)
    owner = {
        TopicPartition(t, p): j
        for j, own in old_owned.items()
        for t, ps in own.partitions.items()
        for p in ps
    }
    owned = owned_partitions(plan, subtask)
    mine = [TopicPartition(t, p) for t, ps in owned.partitions.items() for p in ps]
    sources = {tp: handed.get(owner[tp]) if tp in owner else None for tp in mine}
    owners = {owner[tp] for tp, c in sources.items() if c is not None}
    same = handed.get(subtask.index) if subtask.index < previous else None
    return Checkpoint(
        subtask=subtask,
        checkpoint_id=CheckpointId(floor),
        meta=CheckpointMeta(
            topology=plan.fingerprint,
            wall_time=max((c.meta.wall_time for c in sources.values() if c), default=0.0),
            owned=owned,
        ),
        reader=ReaderPositions(
            inputs=_per_partition(sources, lambda c: c.reader.inputs),
            skip=_per_partition(sources, lambda c: c.reader.skip),
            partial=_per_partition(sources, lambda c: c.reader.partial),
            ended=_per_partition(sources, lambda c: c.reader.ended),
            channel_watermarks=_per_partition(sources, lambda c: c.reader.channel_watermarks),
            widths=_per_partition(sources, lambda c: c.reader.widths),
            discard=_discard(sources),
        ),
        writers=same.writers if same else WriterCounts(),
        state=StatePositions(
            changelogs=_changelogs(sources),
            rewrite_state=any(c.state.rewrite_state for c in sources.values() if c),
        ),
        operator=OperatorProgress(
            watermark=_lowest([handed[j] for j in sorted(owners)]),
            set_aside=dict(same.operator.set_aside) if same else {},
        ),
        sink=same.sink if same else None,
    )


_V = TypeVar("_V")


def _per_partition(
    sources: Mapping[TopicPartition, Checkpoint | None],
    part: Callable[[Checkpoint], Mapping[TopicPartition, _V]],
) -> dict[TopicPartition, _V]:
    """Per partition, its entry in ``part`` of the checkpoint of its previous owner."""
    return {tp: part(c)[tp] for tp, c in sources.items() if c and tp in part(c)}


def _check_previous(op: OperatorPlan, now: int, handed: Mapping[int, Checkpoint | None]) -> None:
    """Refuse handed-over checkpoints that cannot be continued (finished, unpublished)."""
    done = sorted(j for j, c in handed.items() if c is not None and c.meta.finished)
    if done:
        raise RescaleError(
            f"operator {op.name!r}: subtasks {done} finished; a finished operator cannot be "
            "rescaled (its inputs ended). Keep its parallelism"
        )
    for j, c in sorted(handed.items()):
        if j >= now and c is not None and c.sink:
            raise RescaleError(
                f"{c.subtask} (retired by the rescale) committed sink output its checkpoint "
                f"{c.checkpoint_id} still has to publish; run the job once more with its "
                "old parallelism so it publishes, or keep the parallelism"
            )


def _changelogs(
    sources: Mapping[TopicPartition, Checkpoint | None],
) -> dict[TopicPartition, Offset]:
    out: dict[TopicPartition, Offset] = {}
    for tp, c in sources.items():
        if c is not None:
            at = c.changelog_positions().get(tp)
            if at is not None:
                out[tp] = at
    return out


def _discard(
    sources: Mapping[TopicPartition, Checkpoint | None],
) -> dict[TopicPartition, Mapping[int, Spans]]:
    return {tp: c.reader.discard[tp] for tp, c in sources.items() if c and tp in c.reader.discard}


def _lowest(checkpoints: list[Checkpoint | None]) -> int | None:
    """The lowest watermark of ``checkpoints`` (None if one has none, or there are none)."""
    marks = [c.operator.watermark for c in checkpoints if c is not None]
    if not marks or any(m is None for m in marks):
        return None
    return min(m for m in marks if m is not None)


def accepts_fingerprint(rescale: Rescale | None, fingerprint: str) -> tuple[str, ...]:
    """The topology fingerprints a subtask's own checkpoint may carry: the plan's, and
    those of the plans before the job's rescales (taken by a subtask that has not
    checkpointed since: unchanged, or finished)."""
    return (fingerprint, *(rescale.fingerprints if rescale else ()))


def plan_rescale(
    plan: JobPlan,
    before: Mapping[str, int],
    recorded: Rescale | None,
    latest: Mapping[str, Mapping[int, Checkpoint | None]],
    floors: Mapping[str, int],
    evolved_from: str | None = None,
) -> Rescale:
    """The record of rescaling ``plan``'s operators from ``before`` (name → previous
    parallelism), given each previous subtask's latest checkpoint (``latest[name][j]``) and
    the newest checkpoint id of each operator (``floors``). ``recorded``: the job's
    previous rescale, if any. :class:`RescaleError` if an operator cannot be rescaled.
    ``evolved_from``: the fingerprint of the last run's topology when the code changed
    since (:mod:`spillway.recovery.job.evolution`); checkpoints taken under it are accepted too.
    """
    old = with_parallelism(plan, before)
    accepted = accepts_fingerprint(recorded, old.fingerprint)
    if evolved_from is not None:
        accepted = (evolved_from, *accepted)
    number = (recorded.number if recorded else 0) + 1
    for name, p in sorted(before.items()):
        check_rescalable(plan, name, p)
        prior = recorded.operators.get(name) if recorded else None
        for j, c in sorted(latest[name].items()):
            if prior is not None and (c is None or c.checkpoint_id <= prior.floor):
                raise RescaleError(
                    f"operator {name!r} of job {plan.job}: subtask {j} has not checkpointed "
                    f"since rescale {number - 1}; run the job "
                    "once without changing parallelism until it has, then rescale"
                )
            if c is not None and c.meta.topology not in accepted:
                raise RescaleError(
                    f"{c.subtask}: its latest checkpoint {c.checkpoint_id} was taken by another "
                    f"topology ({c.meta.topology[:12]}) than the job's last run "
                    f"({accepted[0][:12]}); "
                    "it has not checkpointed since an earlier change. Run the job once "
                    "without changing parallelism, then rescale"
                )
        _check_previous(plan.operator(name), plan.operator(name).parallelism, latest[name])
    return Rescale(
        number,
        accepted,
        {
            name: OperatorHandover(
                p,
                {
                    j: None if c is None else int(c.checkpoint_id)
                    for j, c in sorted(latest[name].items())
                },
                floors[name],
            )
            for name, p in sorted(before.items())
        },
    )


def describe(rescale: Rescale, widths: Mapping[str, int]) -> str:
    """One line for ``spillway status``: the job's latest rescale, with each operator's
    width before it and now (``widths``: operator → parallelism of the plan now)."""
    parts = [
        f"{name} {h.previous} -> {widths.get(name, '?')} subtasks "
        f"(from checkpoints {', '.join(f'{j}:{c}' for j, c in sorted(h.checkpoints.items()))})"
        for name, h in sorted(rescale.operators.items())
    ]
    return f"rescale {rescale.number}: " + "; ".join(parts)


def handover_released(
    rescale: Rescale | None,
    operator: str,
    parallelism: int,
    latest: Callable[[int], Checkpoint | None],
) -> bool:
    """False while a subtask of ``operator`` (``parallelism`` wide) may still restore from
    the checkpoints ``rescale`` handed over: one of them (``latest(i)``: subtask i's newest
    checkpoint) has none above the rescale's floor. Until then no subtask may prune its
    checkpoint partition, which holds a handed-over checkpoint a retry would need."""
    handover = rescale.operators.get(operator) if rescale else None
    if handover is None:
        return True
    for i in range(parallelism):
        ckpt = latest(i)
        if ckpt is None or ckpt.checkpoint_id <= handover.floor:
            return False
    return True
