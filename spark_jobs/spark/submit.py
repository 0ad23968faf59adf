"""What the driver does before Spark starts a run: the job's topics, the compatibility
report of changed code (:mod:`spillway.recovery.job.evolution`) and the ``submitted`` event that
status, replay, the status page and the next run read.
"""

from __future__ import annotations

import logging
import sys

from confluent_kafka import KafkaException

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import EvolutionError, SpillwayError
from spillway.channels.kafka.admin import Admin
from spillway.recovery.control.globalckpt import checkpoints_topic_spec
from spillway.recovery.control.savepoint import LastRun, keep_retired_slots
from spillway.recovery.job.evolution import evolution_of, topology_doc
from spillway.recovery.job.jobconf import masked
from spillway.recovery.job.plan import JobPlan
from spillway.recovery.job.plandoc import PlanDoc
from spillway.recovery.observe.events import events_topic_spec, record_job_event
from spillway.recovery.observe.heartbeat import heartbeats_topic_spec
from spillway.recovery.restore.progress import progress_topic_spec
from spillway.recovery.restore.rescale import Rescale
from spillway.recovery.restore.state import CHANGELOG_TOPIC_CONFIG
from spillway.recovery.runtime.deadletter import MAX_MESSAGE_BYTES, dead_letter_spec
from spillway.spark_jobs.connectors.usertopics import check_user_topics
from spillway.spark_jobs.spark.jobconfig import JobConfig

log = logging.getLogger("spillway.spark_jobs.spark.driver")

# Channel data must outlive every retained checkpoint; -1 (forever) is the safe default,
# operators shorten it once they know their checkpoint retention.
CHANNEL_TOPIC_CONFIG = {"retention.ms": "-1", "cleanup.policy": "delete"}


def prepare_topics(plan: JobPlan, settings: KafkaSettings, dead_letter: bool = False) -> None:
    """Create (or verify) every topic of the job before any subtask starts; the user's
    topics (read_kafka, write_kafka) must exist."""
    admin = Admin(settings)
    admin.check_reachable()
    existing = admin.partition_counts()
    check_user_topics(plan, existing)
    if dead_letter:
        spec = dead_letter_spec(plan.job)
        admin.ensure_topics([spec])
        if spec.name in existing:  # made by an older version: maybe the broker's 1 MB limit
            _raise_dead_letter_limit(admin, spec.name)
    admin.ensure_topics([checkpoints_topic_spec(plan.job)])
    specs = [
        *plan.topics(CHANGELOG_TOPIC_CONFIG, CHANNEL_TOPIC_CONFIG),
        events_topic_spec(plan.job),
        heartbeats_topic_spec(plan.job),
    ]
    admin.ensure_topics(keep_retired_slots(plan, specs, existing))
    progress = [progress_topic_spec(plan.job, op.name, op.parallelism) for op in plan.operators]
    admin.ensure_topics(keep_retired_slots(plan, progress, existing))


def _raise_dead_letter_limit(admin: Admin, topic: str) -> None:
    try:
        admin.raise_topic_config(topic, "max.message.bytes", MAX_MESSAGE_BYTES)
    except (KafkaException, SpillwayError) as e:  # e.g. no DescribeConfigs/AlterConfigs ACL
        log.warning(
            "could not check or raise max.message.bytes of %s to %d (%s): dead letters "
            "bigger than its limit will fail their transaction; raise it by hand",
            topic,
            MAX_MESSAGE_BYTES,
            e,
        )


def check_evolution(plan: JobPlan, last: LastRun, allow_dropped_state: bool) -> str | None:
    """If the code's topology changed since the last run: print the compatibility report
    (:mod:`spillway.recovery.job.evolution`) and return the fingerprint the last run's checkpoints
    carry; :class:`EvolutionError` with the report if a change is not allowed."""
    if last.plan is None:
        return None
    found = evolution_of(
        plan,
        {op.name: op.parallelism for op in last.plan.operators},
        {op.name: op.max_parallelism for op in last.plan.operators},
        last.topology,
        allow_dropped_state,
    )
    if found is None:
        return None
    report, evolved_from = found
    if not report.allowed:
        raise EvolutionError(report.render())
    print(report.render(), file=sys.stderr, flush=True)
    return evolved_from


def record_submission(
    config: JobConfig,
    plan: JobPlan,
    settings: KafkaSettings,
    run_id: str,
    from_checkpoint: int | None,
    rewind_to: int | None,
    rescale: Rescale | None,
) -> None:
    """Append the ``submitted`` event: this run's settings and its plan, which status,
    replay and the status page read without the pipeline's code or environment (and the
    job's latest rescale, which every later run continues)."""
    record_job_event(
        settings,
        plan.job,
        "submitted",
        run=run_id,
        pipeline=config.pipeline,
        checkpoint_interval_s=config.checkpoint_interval_s,
        master=config.master,
        subtasks=[str(s) for s in plan.subtasks()],
        from_checkpoint=from_checkpoint,
        rewound_to=rewind_to,
        dead_letter=config.dead_letter,
        checkpoint_mode=config.checkpoint_mode,
        guarantee=config.guarantee,
        # What status and replay need without the pipeline's code or environment.
        plan=PlanDoc.of(plan).to_json(),
        rescale=rescale.to_json() if rescale else None,
        topology=topology_doc(plan),  # what the next run compares (spillway.recovery.job.evolution)
        conf=masked(config.conf),
        env=list(config.forward_env),
    )
