"""Housekeeping on a cluster: create user topics, list the jobs, delete one job's internal
topics and consumer groups.

The I/O half of :mod:`spillway.recovery.control.housekeeping`, which decides what
belongs to whom and what state a job is in; this module only reads the cluster and acts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import TopologyMismatchError
from spillway.channels.ids import JobId, Offset, TopicPartition
from spillway.channels.kafka.admin import Admin, TopicSpec
from spillway.channels.kafka.consumer import AssignedConsumer
from spillway.recovery.control.housekeeping import (
    CreatePlan,
    JobResources,
    JobRow,
    job_row,
    jobs_on_cluster,
    plan_create,
    record_time,
    refuse_if_running,
    resources_of,
)
from spillway.recovery.observe.events import events_topic
from spillway.recovery.observe.heartbeat import heartbeats_topic

log = logging.getLogger("spillway.recovery.control.clusterjobs")

# Never commits (AssignedConsumer), so no group of this name is ever stored; not of the
# form spillway.<job>.<rest>, so it could not be taken for a job's either.
_READER_GROUP = "spillway-housekeeping"


def create_topics(
    settings: KafkaSettings,
    names: Sequence[str],
    partitions: int,
    replication_factor: int | None,
    config: Mapping[str, str],
) -> CreatePlan:
    """Create the topics of ``names`` that do not exist yet, each with ``partitions``
    partitions, ``config`` and ``replication_factor`` (``None``: the broker's default);
    the plan it carried out.

    Idempotent: a topic that exists with ``partitions`` partitions is left as it is (and
    its configs are not changed). Nothing is created if any exists with another count
    (:class:`TopologyMismatchError`, from
    :func:`~spillway.recovery.control.housekeeping.plan_create`), nor if a name is invalid.
    """
    plan_create(names, partitions, {})  # bad names or counts fail before any I/O
    admin = Admin(settings)
    admin.check_reachable()
    plan = plan_create(names, partitions, admin.partition_counts())
    made = admin.create_topics(
        [TopicSpec(n, partitions, dict(config)) for n in plan.create], replication_factor
    )
    raced = sorted(n for n, count in made.items() if count != partitions)
    if raced:  # another client created it meanwhile, with another count
        raise TopologyMismatchError(
            f"topic {', '.join(raced)} was created by another client meanwhile with "
            f"{', '.join(str(made[n]) for n in raced)} partitions, asked for {partitions}"
        )
    return plan


def cluster_jobs(settings: KafkaSettings) -> list[JobResources]:
    """Every job with an internal topic or consumer group on the cluster."""
    admin = Admin(settings)
    admin.check_reachable()
    return jobs_on_cluster(admin.partition_counts(), admin.consumer_groups())


def job_resources(settings: KafkaSettings, job: JobId) -> JobResources:
    """``job``'s internal topics and consumer groups on the cluster."""
    admin = Admin(settings)
    admin.check_reachable()
    return resources_of(job, admin.partition_counts(), admin.consumer_groups())


def list_jobs(settings: KafkaSettings, lost_after: float) -> list[JobRow]:
    """A row per job on the cluster: its state from its newest heartbeat, and its last
    activity (the newest heartbeat or event)."""
    jobs = cluster_jobs(settings)
    topics = [
        t for r in jobs for t in (heartbeats_topic(r.job), events_topic(r.job)) if t in r.topics
    ]
    newest = newest_record_times(settings, topics)
    now = time.time()
    return [
        job_row(
            r,
            newest.get(heartbeats_topic(r.job)),
            newest.get(events_topic(r.job)),
            now,
            lost_after,
        )
        for r in jobs
    ]


def check_not_running(settings: KafkaSettings, resources: JobResources, lost_after: float) -> None:
    """:class:`~spillway.channels.errors.ConfigError` if the job has a heartbeat at most
    ``lost_after`` seconds old."""
    topic = heartbeats_topic(resources.job)
    if topic in resources.topics:
        newest = newest_record_times(settings, [topic]).get(topic)
        refuse_if_running(resources.job, newest, time.time(), lost_after)


def delete_resources(settings: KafkaSettings, resources: JobResources) -> None:
    """Delete exactly ``resources``' topics and consumer groups (the groups first: a group's
    committed offsets name the topics)."""
    admin = Admin(settings)
    admin.delete_consumer_groups(resources.groups)
    admin.delete_topics(resources.topics)
    log.info(
        "deleted %d topics and %d consumer groups of job %s",
        len(resources.topics),
        len(resources.groups),
        resources.job,
    )


def newest_record_times(
    settings: KafkaSettings, topics: Sequence[str], timeout_s: float = 10.0
) -> dict[str, float]:
    """The time the newest record of each one-partition topic of ``topics`` states
    (:func:`~spillway.recovery.control.housekeeping.record_time`); an empty topic is left
    out."""
    if not topics:
        return {}
    marks = Admin(settings).watermarks([TopicPartition(t, 0) for t in topics])
    starts = {tp: Offset(high - 1) for tp, (low, high) in marks.items() if high > low}
    if not starts:
        return {}
    found: dict[str, float] = {}
    consumer = AssignedConsumer(settings, _READER_GROUP)
    try:
        consumer.assign(starts)
        pending = set(starts)
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            for m in consumer.consume(100, 0.2):
                tp = TopicPartition(str(m.topic()), int(m.partition() or 0))
                when = record_time(m.value(), m.timestamp()[1])
                if when is not None:
                    found[tp.topic] = max(when, found.get(tp.topic, when))
                pending.discard(tp)
    finally:
        consumer.close()
    return found
