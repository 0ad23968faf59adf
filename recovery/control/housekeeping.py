"""Housekeeping bookkeeping, without I/O: which topics and consumer groups are a job's,
whether a job runs, and what ``spillway topics create`` has to do.

The I/O around it (reading the cluster, deleting) is
:mod:`spillway.recovery.control.clusterjobs`; the commands are
:mod:`spillway.recovery.housekeepcli`.

A job's internal topics are named ``spillway.<job>.<kind>[.<operator>[.<operator>]]``
(:mod:`spillway.channels.naming` and the modules that own each kind); only names of a
known kind with the right number of valid parts count, so a user's topic that merely
starts with ``spillway.<job>.`` is never taken for a job's. A job's consumer groups are
named ``spillway.<job>.<rest>`` (the subtasks' groups, where their positions are
committed); job ids cannot contain ``.``, so the prefix names one job.

State (see :func:`job_state`): a running subtask appends a heartbeat to
``spillway.<job>.heartbeats`` every second
(:mod:`spillway.recovery.observe.heartbeat`). A job is *running* while its newest
heartbeat is younger than ``lost_after`` seconds, *stopped* when its heartbeat topic
exists but holds no fresh heartbeat, and *unknown* without a heartbeat topic (a job made
by a version without heartbeats, or one whose topics were partly deleted): then nothing
tells a live job from a dead one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from spillway.channels.errors import ConfigError, TopologyMismatchError
from spillway.channels.ids import JobId
from spillway.channels.naming import PREFIX, is_name
from spillway.recovery.observe.heartbeat import heartbeats_topic

# Each kind of internal topic, and how many operator names follow it in the topic's name.
INTERNAL_KINDS: Mapping[str, int] = {
    "ch": 2,  # channel upstream → downstream (channels.naming.channel_topic)
    "changelog": 1,  # keyed state (channels.naming.changelog_topic)
    "ckpt": 1,  # checkpoint records (channels.naming.checkpoint_topic)
    "progress": 1,  # read marks (recovery.restore.progress)
    "events": 0,  # event log (recovery.observe.events)
    "heartbeats": 0,  # heartbeats (recovery.observe.heartbeat)
    "checkpoints": 0,  # completed global checkpoints (recovery.control.globalckpt)
    "dlq": 0,  # dead letters (recovery.runtime.deadletter)
}

_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
_MAX_TOPIC = 249  # Kafka's limit


class JobState(StrEnum):
    """What the heartbeats say about a job (see the module's docstring)."""

    RUNNING = "running"
    STOPPED = "stopped"
    UNKNOWN = "unknown"


def internal_topic_job(topic: str) -> JobId | None:
    """The job whose internal topic ``topic`` is; ``None`` for any other topic."""
    parts = topic.split(".")
    if len(parts) < 3 or parts[0] != PREFIX:
        return None
    job, kind, names = parts[1], parts[2], parts[3:]
    if INTERNAL_KINDS.get(kind) != len(names) or not all(is_name(p) for p in (job, *names)):
        return None
    return JobId(job)


def group_job(group: str) -> JobId | None:
    """The job whose consumer group ``group`` is (``spillway.<job>.<rest>``); else ``None``."""
    parts = group.split(".", 2)
    if len(parts) != 3 or parts[0] != PREFIX or not is_name(parts[1]) or not parts[2]:
        return None
    return JobId(parts[1])


@dataclass(frozen=True)
class JobResources:
    """A job's internal topics and consumer groups on one cluster, each sorted."""

    job: JobId
    topics: tuple[str, ...]
    groups: tuple[str, ...]

    @property
    def has_heartbeats(self) -> bool:
        """True if the job's heartbeat topic exists."""
        return heartbeats_topic(self.job) in self.topics


def jobs_on_cluster(topics: Iterable[str], groups: Iterable[str]) -> list[JobResources]:
    """Every job with an internal topic or a consumer group among ``topics`` and
    ``groups``, sorted by job id; names of no job are left out."""
    found_topics: dict[JobId, list[str]] = {}
    found_groups: dict[JobId, list[str]] = {}
    for topic in topics:
        job = internal_topic_job(topic)
        if job is not None:
            found_topics.setdefault(job, []).append(topic)
    for group in groups:
        job = group_job(group)
        if job is not None:
            found_groups.setdefault(job, []).append(group)
    return [
        JobResources(
            job,
            tuple(sorted(found_topics.get(job, ()))),
            tuple(sorted(found_groups.get(job, ()))),
        )
        for job in sorted(found_topics.keys() | found_groups.keys())
    ]


def resources_of(job: JobId, topics: Iterable[str], groups: Iterable[str]) -> JobResources:
    """``job``'s internal topics and consumer groups among ``topics`` and ``groups`` (both
    empty if it has none)."""
    for found in jobs_on_cluster(topics, groups):
        if found.job == job:
            return found
    return JobResources(job, (), ())


def record_time(value: bytes | None, timestamp_ms: int | None) -> float | None:
    """The wall time (seconds) a heartbeat or event record states in its ``time`` field;
    the record's Kafka timestamp if it has none; ``None`` if neither is there."""
    try:
        doc: Any = json.loads(value or b"null")
    except ValueError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("time"), int | float):
        return float(doc["time"])
    if timestamp_ms is not None and timestamp_ms > 0:
        return timestamp_ms / 1000.0
    return None


def job_state(
    has_heartbeats: bool, newest_heartbeat: float | None, now: float, lost_after: float
) -> JobState:
    """The job's state from its heartbeat topic: *running* if the newest heartbeat is at most
    ``lost_after`` seconds older than ``now`` (one from the future, a skewed clock, counts
    as fresh), *stopped* if the topic exists without such a heartbeat, *unknown* without the
    topic."""
    if not has_heartbeats:
        return JobState.UNKNOWN
    if newest_heartbeat is not None and now - newest_heartbeat <= lost_after:
        return JobState.RUNNING
    return JobState.STOPPED


@dataclass(frozen=True)
class JobRow:
    """One line of ``spillway jobs``."""

    resources: JobResources
    state: JobState
    last_activity: float | None  # wall time of the newest heartbeat or event, if any

    def as_json(self) -> dict[str, Any]:
        """The row as ``spillway jobs --json`` prints it."""
        return {
            "job": self.resources.job,
            "state": str(self.state),
            "last_activity": self.last_activity,
            "last_activity_utc": _utc(self.last_activity),
            "topics": list(self.resources.topics),
            "groups": list(self.resources.groups),
        }


def job_row(
    resources: JobResources,
    newest_heartbeat: float | None,
    newest_event: float | None,
    now: float,
    lost_after: float,
) -> JobRow:
    """The row of a job whose newest heartbeat and event carry these times."""
    times = [t for t in (newest_heartbeat, newest_event) if t is not None]
    return JobRow(
        resources,
        job_state(resources.has_heartbeats, newest_heartbeat, now, lost_after),
        max(times) if times else None,
    )


def render_jobs(rows: Sequence[JobRow]) -> str:
    """The table ``spillway jobs`` prints."""
    if not rows:
        return "no Spillway jobs on this cluster"
    width = max(len("job"), *(len(r.resources.job) for r in rows))
    lines = [f"{'job':{width}}  {'state':8} {'last activity (UTC)':20} {'topics':>6} {'groups':>6}"]
    for r in rows:
        lines.append(
            f"{r.resources.job:{width}}  {r.state!s:8} {_utc(r.last_activity) or '-':20} "
            f"{len(r.resources.topics):>6} {len(r.resources.groups):>6}"
        )
    return "\n".join(lines)


def refuse_if_running(
    job: JobId, newest_heartbeat: float | None, now: float, lost_after: float
) -> None:
    """:class:`ConfigError` (one line) if ``job`` has a heartbeat at most ``lost_after``
    seconds old: its subtasks would recreate what a reset deletes."""
    if newest_heartbeat is not None and now - newest_heartbeat <= lost_after:
        raise ConfigError(
            f"job {job} is running (last heartbeat {max(0.0, now - newest_heartbeat):.1f} s ago); "
            "stop it first, then reset"
        )


def describe_reset(resources: JobResources) -> list[str]:
    """The lines ``spillway reset`` shows before it asks: everything it will delete."""
    if not resources.topics and not resources.groups:
        return [f"job {resources.job} has no internal topics or consumer groups on this cluster"]
    lines = [
        f"reset of job {resources.job} deletes {len(resources.topics)} topics and "
        f"{len(resources.groups)} consumer groups:"
    ]
    lines += [f"  topic {t}" for t in resources.topics]
    lines += [f"  group {g}" for g in resources.groups]
    return lines


@dataclass(frozen=True)
class CreatePlan:
    """What ``spillway topics create`` does: topics to create, and topics already there
    with the partition count asked for."""

    create: tuple[str, ...]
    existing: tuple[str, ...]


def plan_create(names: Sequence[str], partitions: int, existing: Mapping[str, int]) -> CreatePlan:
    """The topics of ``names`` to create with ``partitions`` partitions, given the cluster's
    ``existing`` partition counts.

    :class:`ConfigError` for a partition count below 1, a name Kafka does not allow, a
    name given twice or the name of a job's internal topic (jobs make those themselves);
    :class:`TopologyMismatchError` naming every existing topic with another partition count
    (Kafka cannot take partitions away, and adding some moves keys to other partitions).
    """
    if partitions < 1:
        raise ConfigError(f"--partitions must be at least 1, got {partitions}")
    for name in names:
        _check_topic_name(name)
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"topic {', '.join(twice)} given more than once")
    wrong = [n for n in names if n in existing and existing[n] != partitions]
    if wrong:
        found = ", ".join(f"{n} has {existing[n]}" for n in wrong)
        raise TopologyMismatchError(
            f"topic {found} partitions, asked for {partitions}: Kafka cannot remove "
            "partitions and adding some sends keys to other partitions. Pass "
            "--partitions matching the existing topic, use another name, or delete the "
            "topic first (e.g. kafka-topics.sh --delete) if its data can go"
        )
    return CreatePlan(
        tuple(n for n in names if n not in existing), tuple(n for n in names if n in existing)
    )


def _check_topic_name(name: str) -> None:
    if not name or len(name) > _MAX_TOPIC or name in (".", "..") or set(name) - _TOPIC_CHARS:
        raise ConfigError(
            f"invalid topic name {name!r}: use 1-{_MAX_TOPIC} characters from "
            "A-Z, a-z, 0-9, '.', '_' and '-' (not '.' or '..')"
        )
    job = internal_topic_job(name)
    if job is not None:
        raise ConfigError(
            f"{name} is the name of an internal topic of job {job}; jobs create their "
            "internal topics themselves"
        )


def _utc(when: float | None) -> str | None:
    return None if when is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(when))
