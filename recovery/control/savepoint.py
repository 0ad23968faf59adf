"""Starting a stopped job with other parallelisms (``spillway run --parallelism OP=N``).

The savepoint a rescale starts from is the set of the latest committed checkpoints of
the stopped job, or, with ``--from-savepoint N``, completed global checkpoint N (the
job is first rewound to it, :mod:`spillway.recovery.control.rewind`, which makes N's parts the
latest
checkpoints). Either set is a consistent cut (docs/architecture.md): a subtask has only consumed
what its upstreams committed, and what lies between is still in the channels.

:func:`prepare_rescale` runs in the driver before any subtask starts: it fences every
subtask of the operators whose parallelism changes (no zombie can commit after the
handover is read, no transaction of a retired id stays open to hold readers at the last
stable offset), reads their latest checkpoints, records the handover
(:class:`spillway.recovery.restore.rescale.Rescale`) and adds the partitions the new subtasks need.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import EvolutionError, SavepointNotFoundError
from spillway.channels.ids import JobId, OperatorName, SubtaskId
from spillway.channels.kafka.admin import Admin, TopicSpec
from spillway.channels.naming import checkpoint_topic
from spillway.offsets.checkpoint import Checkpoint
from spillway.offsets.store import CheckpointStore
from spillway.recovery.control.globalckpt import checkpoints_topic, read_completed
from spillway.recovery.control.liverescale import announce_width, latest_shape
from spillway.recovery.control.rewind import fence_subtasks, rewind_job
from spillway.recovery.job.evolution import recorded_plan, recorded_topologies
from spillway.recovery.job.plan import JobPlan
from spillway.recovery.job.plandoc import PlanDoc
from spillway.recovery.observe.events import events_topic, last_submission, read_events
from spillway.recovery.restore.progress import progress_topic
from spillway.recovery.restore.rescale import (
    Rescale,
    plan_rescale,
    previous_parallelism,
    with_parallelism,
)

log = logging.getLogger("spillway.rescale")


def prepare_rescale(
    settings: KafkaSettings,
    plan: JobPlan,
    before: Mapping[str, int],
    recorded: Rescale | None,
    evolved_from: str | None = None,
) -> Rescale | None:
    """Hand over the operators of ``plan`` whose parallelism was ``before[name]`` (the
    job must be stopped); return the job's rescale record (``recorded`` when nothing
    changes). :class:`spillway.channels.errors.RescaleError` if an operator cannot be rescaled.
    ``evolved_from``: the code changed since the last run, whose checkpoints carry that
    topology fingerprint (:mod:`spillway.recovery.job.evolution`); the record accepts it.
    """
    if not before:
        if evolved_from is None:
            return recorded
        return Rescale(
            (recorded.number if recorded else 0) + 1,
            (evolved_from, *(recorded.fingerprints if recorded else ())),
            recorded.operators if recorded else {},  # handovers not yet taken stay
        )
    admin = Admin(settings)
    counts = admin.partition_counts()
    fence_subtasks(
        settings,
        plan.job,
        [
            SubtaskId(plan.job, OperatorName(name), j)
            for name, p in sorted(before.items())
            for j in range(max(p, counts.get(checkpoint_topic(plan.job, OperatorName(name)), 0)))
        ],
        "rescale",
    )
    latest: dict[str, dict[int, Checkpoint | None]] = {}
    floors: dict[str, int] = {}
    for name, p in sorted(before.items()):
        slots = counts.get(checkpoint_topic(plan.job, OperatorName(name)), p)
        store = CheckpointStore(settings, plan.job, OperatorName(name), slots)
        try:
            for j in range(slots):  # fenced above; commits still being marked end first
                store.settle(j)
            newest = {j: store.latest(j) for j in range(slots)}
        finally:
            store.close()
        latest[name] = {j: newest[j] for j in range(p)}
        floors[name] = max((int(c.checkpoint_id) for c in newest.values() if c), default=0)
    rescale = plan_rescale(plan, before, recorded, latest, floors, evolved_from)
    admin.grow_partitions(_grown(plan, before))
    for name in sorted(before):
        # Downstream readers may have checkpointed another writer count (a live rescale
        # announced it in-band): announce this one the same way, after every old writer's
        # messages and before any new one's, or they would wait for writers that are gone.
        # Only where the channel exists already: topics are made after this (prepare_topics).
        announce_width(settings, plan, name, counts)
    log.info(
        "job %s rescale %d: %s",
        plan.job,
        rescale.number,
        ", ".join(f"{n} {p} -> {plan.operator(n).parallelism}" for n, p in sorted(before.items())),
    )
    return rescale


def _grown(plan: JobPlan, before: Mapping[str, int]) -> dict[str, int]:
    """Partition counts the rescaled operators need: a checkpoint and a progress partition
    per subtask, and a partition per subtask of each non-keyed input channel."""
    out: dict[str, int] = {}
    for name in before:
        op = plan.operator(name)
        out[checkpoint_topic(plan.job, op.name)] = op.parallelism
        out[progress_topic(plan.job, op.name)] = op.parallelism
        for e in plan.inputs_of(op.name):
            if not plan.width_free(e):
                out[plan.topic_of(e)] = plan.partitions_of(e)
    return out


def keep_retired_slots(
    plan: JobPlan, specs: list[TopicSpec], existing: Mapping[str, int]
) -> list[TopicSpec]:
    """``specs`` with each operator's checkpoint and progress topic at no fewer partitions
    than it has: after scaling in, the retired subtasks' partitions stay (their
    checkpoints are what a later rescale or ``spillway status`` may read)."""
    per_subtask = {
        t for op in plan.operators for t in (checkpoint_topic(plan.job, op.name),
                                             progress_topic(plan.job, op.name))
    }  # fmt: skip
    return [
        dataclasses.replace(s, partitions=max(s.partitions, existing.get(s.name, 0)))
        if s.name in per_subtask
        else s
        for s in specs
    ]


def shape_for_run(
    settings: KafkaSettings,
    plan: JobPlan,
    recorded: PlanDoc | None,
    recorded_rescale: Rescale | None,
    rewind_to: int | None,
    evolved_from: str | None = None,
    topology: Mapping[str, Any] | None = None,
) -> Rescale | None:
    """Before a run of ``plan``: rewind the job to global checkpoint ``rewind_to`` (if
    given) in the shape it last ran with (``recorded``), then hand over every operator
    whose parallelism changed since. Returns the job's rescale record for this run.
    ``evolved_from``: as :func:`prepare_rescale`; with a rewind, the rewind runs on the
    recorded topology that took the savepoint (``topology``, the last run's
    :func:`spillway.recovery.job.evolution.topology_doc`) and the new code then continues from it as
    from the latest checkpoints."""
    before = previous_parallelism(plan, recorded)
    if rewind_to is not None:
        if evolved_from is None:
            rewind_job(settings, with_parallelism(plan, before), rewind_to)
        elif topology is None or recorded is None:
            raise EvolutionError(
                f"job {plan.job}: --from-savepoint {rewind_to} with changed code needs the "
                "topology of the code that took it, which the last run did not record (an "
                f"older Spillway): run the old code with --from-savepoint {rewind_to}, stop "
                "it, then run the new code with --from-savepoint latest"
            )
        else:
            old = recorded_plan(
                plan,
                topology,
                {op.name: op.parallelism for op in recorded.operators},
                {op.name: op.max_parallelism for op in recorded.operators},
            )
            rewind_job(settings, old, rewind_to)
    return prepare_rescale(settings, plan, before, recorded_rescale, evolved_from)


@dataclass(frozen=True)
class LastRun:
    """What the job's last run recorded: its plan and rescale record (from its
    ``submitted`` event, or a later live rescale's ``rescaled`` event) and its topology
    (:func:`spillway.recovery.job.evolution.topology_doc`, from the ``submitted`` event). None:
    never
    submitted, or not recorded by the version that submitted it."""

    plan: PlanDoc | None = None
    rescale: Rescale | None = None
    topology: Mapping[str, Any] | None = None
    # Every recorded topology of the job's runs, oldest first: the schemas its channels
    # had (spillway.recovery.job.evolution.channel_history).
    topologies: tuple[Mapping[str, Any], ...] = ()


def last_run_shape(settings: KafkaSettings, job: JobId) -> LastRun:
    """The job's :class:`LastRun`."""
    admin = Admin(settings)
    admin.check_reachable()  # no broker: the clear error, not a metadata time-out
    if events_topic(job) not in admin.partition_counts():
        return LastRun()  # a new job: nothing to read (and no topic to create by reading)
    events = list(read_events(settings, job))
    last = latest_shape(events) or {}
    submitted = [e for e in events if e.get("event") == "submitted"]
    origin = f"submitted event of job {job}"
    doc, rescale = last.get("plan"), last.get("rescale")
    return LastRun(
        PlanDoc.from_json(doc, origin) if doc else None,
        Rescale.from_json(rescale, origin) if rescale else None,
        submitted[-1].get("topology") if submitted else None,
        recorded_topologies(events),
    )


def savepoint_refusal(
    job: JobId,
    where: str,
    savepoint: str,
    ran: bool,
    completed: Sequence[int],
    option: str = "--from-savepoint",
) -> SavepointNotFoundError | None:
    """Why starting ``job`` from ``savepoint`` (``latest`` or a global checkpoint number,
    as ``--from-savepoint`` takes it; ``option``: the option that named it) is refused, or
    None if it exists. ``ran``: the job was ever submitted at broker ``where``;
    ``completed``: its retained completed global checkpoints. Pure. ``latest`` of a job
    that never ran is refused too: starting it from scratch instead would silently ignore
    what the option asked for."""
    listing = f"spillway checkpoints --job {job} --bootstrap {where}"
    if not ran:
        instead = (
            "run it without --from-savepoint to start it from scratch"
            if savepoint == "latest"
            else f"savepoints of a running job are listed by {listing}"
        )
        return SavepointNotFoundError(
            f"{option} {savepoint}: job {job} has never run at {where}, so it has "
            f"no savepoint; check --job-id and --bootstrap, or {instead}"
        )
    if savepoint == "latest" or (savepoint.isdigit() and int(savepoint) in completed):
        return None
    if not completed:
        return SavepointNotFoundError(
            f"{option} {savepoint}: job {job} has no completed global checkpoint at "
            "all (they are taken with --checkpoint-mode unaligned or aligned); give 'latest' "
            "to start from every subtask's latest checkpoint"
        )
    retained = ", ".join(map(str, completed))
    return SavepointNotFoundError(
        f"{option} {savepoint}: job {job} has no completed global checkpoint "
        f"{savepoint} (retained: {retained}); give one of those or 'latest' ({listing})"
    )


def check_savepoint(
    settings: KafkaSettings, job: JobId, savepoint: str, option: str = "--from-savepoint"
) -> None:
    """Refuse (:class:`SavepointNotFoundError`, see :func:`savepoint_refusal`) to start
    ``job`` from a ``savepoint`` that does not exist; reads the job's events and completed
    global checkpoints, creates nothing. Meant before anything starts."""
    admin = Admin(settings)
    admin.check_reachable()  # no broker: the clear error, not a metadata time-out
    topics = admin.partition_counts()
    ran = events_topic(job) in topics and last_submission(settings, job) is not None
    completed = (
        [int(c["id"]) for c in read_completed(settings, job)]
        if ran and checkpoints_topic(job) in topics
        else []
    )
    refusal = savepoint_refusal(job, settings.bootstrap_servers, savepoint, ran, completed, option)
    if refusal is not None:
        raise refusal
