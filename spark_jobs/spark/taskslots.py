"""Task slots: what a job needs, what Spark offers it, and ``spillway run --slots N``.

Every subtask of an unbounded job holds a task slot for as long as the job runs, so the
job needs one per subtask at once; a bounded job may queue (upstream operators finish and
free theirs), so one slot is enough to start it. ``--slots N`` gives the job N slots at
start, more than it needs, as room for a live rescale (``spillway rescale``) to add
subtasks: in local mode the master becomes ``local[N,F]``; on a cluster
``spark.cores.max`` is N (one core per task). A live rescale that does not fit says how
many slots are free and how to start the job with room, in the terms of the mode it runs
in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from spillway.channels.errors import ConfigError

# Where the job's tasks run: Spark's local mode (one JVM, slots = local[N] threads) or a
# cluster (standalone, YARN, Kubernetes: slots = executor cores).
SparkMode = Literal["local", "cluster"]


def mode_of(master: str) -> SparkMode:
    """The mode of Spark master URL ``master`` (``local``, ``local[4]``, ``local[4,2]``,
    ``local[*]``: local; anything else a cluster)."""
    return "local" if master == "local" or master.startswith("local[") else "cluster"


@dataclass(frozen=True)
class Offer:
    """The task slots Spark offers a running job, and where."""

    slots: int
    mode: SparkMode


@dataclass(frozen=True)
class StartSlots:
    """How a run asks Spark for slots: the master to use (None: whatever ``spark-submit``
    configured) and ``spark.cores.max`` (None: not set)."""

    master: str | None
    cores_max: int | None


def slots_needed(subtasks: int, bounded: bool) -> int:
    """Task slots a job of ``subtasks`` subtasks needs at start: one per subtask if it is
    unbounded, else one (its subtasks may queue)."""
    return 1 if bounded else subtasks


def check_slots_option(slots: int, subtasks: int, bounded: bool) -> None:
    """:class:`ConfigError` unless ``--slots slots`` is enough to start the job."""
    need = slots_needed(subtasks, bounded)
    if slots < need:
        why = (
            f"one per subtask of this unbounded job, which has {subtasks}"
            if not bounded
            else "a bounded job queues its subtasks on what it gets"
        )
        raise ConfigError(
            f"--slots {slots}: the job needs at least {need} task slot(s) at start ({why}); "
            f"give --slots {need} or more (the slots beyond it are room for spillway rescale)"
        )


def start_slots(
    master: str | None,
    slots: int | None,
    subtasks: int,
    bounded: bool,
    task_attempts: int,
    submitted: bool,
) -> StartSlots:
    """How ``spillway run`` asks for slots, given ``--master`` (None: not given),
    ``--slots`` (None: not given), the job's ``subtasks`` at start and whether it is
    ``bounded``, ``--task-attempts`` and whether it runs under ``spark-submit`` (which then
    chose the master). Without ``--master`` and outside ``spark-submit``: local mode with
    ``--slots`` or one slot per subtask. :class:`ConfigError` for ``--slots`` too small
    or given with a local ``--master`` (which already fixes the slots)."""
    if slots is None:
        if master is None and not submitted:
            return StartSlots(f"local[{subtasks},{task_attempts}]", None)
        return StartSlots(master, None)
    check_slots_option(slots, subtasks, bounded)
    if master is not None and mode_of(master) == "local":
        raise ConfigError(
            f"--slots {slots} with --master {master}: give one of them (--slots {slots} "
            f"alone runs in local mode as local[{slots},{task_attempts}])"
        )
    if master is None and not submitted:
        return StartSlots(f"local[{slots},{task_attempts}]", None)
    return StartSlots(master, slots)  # a cluster: at most that many executor cores


def room_advice(mode: SparkMode, slots: int) -> str:
    """How to run the job again with ``slots`` task slots, in ``mode``'s terms."""
    again = (
        "stop the job (SIGTERM to spillway run: it checkpoints and exits) and run it "
        f"again with --slots {slots}"
    )
    if mode == "local":
        return again
    return (
        f"{again} on a cluster with {slots} free executor cores (spillway cluster start "
        "--workers W --worker-cores C offers W x C)"
    )


def no_room(needed: int, running: int, offer: Offer) -> str:
    """Why an unbounded job cannot grow to ``needed`` subtasks while ``running`` of them
    hold slots of ``offer``: the free slots, and how to start with room."""
    free = max(0, offer.slots - running)
    return (
        f"the job is unbounded and would need a task slot for each of its {needed} "
        f"subtasks at once, but Spark offers {offer.slots} ({offer.mode} mode), {running} "
        f"held by its running subtasks, {free} free: add at most {free} subtask(s), or "
        f"{room_advice(offer.mode, needed)}"
    )
