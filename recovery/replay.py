"""Replaying one subtask by hand, outside Spark.

For when the Spark application gave up on a subtask, or to move it to another machine:
the subtask fences any live copy of itself, restores its latest (or a retained)
checkpoint and catches up on its own input channels, exactly as a Spark retry would.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import ConfigError
from spillway.channels.ids import SubtaskId
from spillway.channels.modes import GUARANTEES, choose
from spillway.channels.naming import job_id, operator_name
from spillway.recovery.control.liverescale import latest_shape
from spillway.recovery.job.evolution import (
    channel_history,
    recorded_topologies,
    with_earlier_schemas,
)
from spillway.recovery.job.jobconf import replay_conf
from spillway.recovery.job.loader import load_plan
from spillway.recovery.job.plandoc import PlanDoc
from spillway.recovery.observe.events import last_submission, read_events
from spillway.recovery.restore.ownership import keep_recorded_max_parallelism
from spillway.recovery.restore.rescale import Rescale, with_parallelism
from spillway.recovery.runtime.runner import RunOptions, SubtaskResult, SubtaskRunner

log = logging.getLogger("spillway.recovery.replay")

REPLAY_ATTEMPT = 1000  # marks manual replays in events and checkpoints


def replay_subtask(
    settings: KafkaSettings,
    job: str,
    operator: str,
    index: int,
    *,
    pipeline: str | None = None,
    checkpoint: int | None = None,
    checkpoint_interval_s: float = 1.0,
    allow_duplicates: bool = False,
    conf: Mapping[str, str] | None = None,
) -> SubtaskResult:
    """Run ``job/operator[index]`` from its latest (or ``checkpoint``) to the end of its input.

    The plan is built with the pipeline settings the job was submitted with (``--conf``),
    overridden by ``conf``; see :func:`spillway.recovery.job.jobconf.replay_conf`.
    """
    jid = job_id(job)
    ref = pipeline
    submitted = last_submission(settings, jid)
    dead_letter = bool(submitted.get("dead_letter", False)) if submitted else False
    guarantee = choose(
        submitted.get("guarantee", "exactly-once") if submitted else "exactly-once",
        GUARANTEES,
        f"the guarantee job {job!r} was submitted with",
    )
    if ref is None:
        if submitted is None:
            raise ConfigError(
                f"job {job!r} has no submission record on {settings.bootstrap_servers}; pass "
                "--pipeline MODULE:PIPELINE (or check --job and --bootstrap)"
            )
        ref = str(submitted["pipeline"])
        checkpoint_interval_s = float(submitted.get("checkpoint_interval_s", checkpoint_interval_s))
    plan = load_plan(ref, job, replay_conf(job, submitted, conf or {}))
    if submitted is not None:  # with the plan as a live rescale may have left it
        events = list(read_events(settings, jid))
        shape = latest_shape(events) or submitted
        # Channel schemas of earlier runs: records of them may still be in the channels.
        plan = with_earlier_schemas(plan, channel_history(recorded_topologies(events)))
        submitted = {**submitted, "plan": shape.get("plan"), "rescale": shape.get("rescale")}
    recorded = submitted.get("plan") if submitted else None
    origin = f"submitted event of job {job}"
    rescale = None
    if recorded and submitted:  # the key-group counts and widths the job runs with
        doc = PlanDoc.from_json(recorded, origin)
        known = {str(o.name) for o in plan.operators}
        widths = {o.name: o.parallelism for o in doc.operators if o.name in known}
        plan = with_parallelism(keep_recorded_max_parallelism(plan, doc), widths)
        if submitted.get("rescale"):  # recovery/restore/rescale.py: a rescaled subtask's handover
            rescale = Rescale.from_json(submitted["rescale"], origin)
    try:
        op = plan.operator(operator)
    except KeyError:
        names = ", ".join(o.name for o in plan.operators)
        raise ConfigError(f"job {job!r} has no operator {operator!r}; operators: {names}") from None
    if not 0 <= index < op.parallelism:
        raise ConfigError(
            f"operator {operator!r} has parallelism {op.parallelism}; --subtask must be in "
            f"0..{op.parallelism - 1}, got {index}"
        )
    subtask = SubtaskId(jid, operator_name(operator), index)
    options = RunOptions(
        checkpoint_interval_s=checkpoint_interval_s,
        from_checkpoint=checkpoint,
        allow_rewind=allow_duplicates,
        dead_letter=dead_letter,
        guarantee=guarantee,
        rescale=rescale,
    )
    start = "its latest checkpoint" if checkpoint is None else f"checkpoint {checkpoint}"
    log.info("replaying %s from %s", subtask, start)
    return SubtaskRunner(plan, subtask, settings, options, attempt=REPLAY_ATTEMPT).run()
