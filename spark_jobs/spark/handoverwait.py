"""A live rescale's new subtask, launched before the handover, waits for it here.

The driver launches the new subtasks as soon as the old ones have stopped
(:mod:`spillway.spark_jobs.spark.liverescale`), while it still fences the old subtasks,
takes the handover and announces the new writer count. Spark schedules the tasks, PySpark
forks their Python workers and each builds the pipeline meanwhile; then each waits here
for the driver's ``rescaled`` answer, which carries the rescale record it restores from.
Only then does the subtask fence, restore and process, so nothing of the new subtasks
reaches Kafka before the handover is complete.

If the handover fails, the driver stops the waiting generation as it stops any operator
(an ``operator-stop-requested`` event for that generation): the tasks end without running,
and the operator starts again as it was. A stop of the whole run ends them the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import RescaleError
from spillway.channels.ids import JobId
from spillway.recovery.observe.events import await_event, operator_stop
from spillway.recovery.restore.rescale import PlanShape, Rescale

# Longest wait for the driver's handover before the task fails (and Spark retries it):
# the handover is seconds; this only bounds a driver that died meanwhile.
WAIT_S = 600.0


def answer_for(
    event: Mapping[str, Any], request: str, run_id: str, operator: tuple[str, int]
) -> bool:
    """True for the driver's ``rescaled`` answer to ``request``, its stop request for
    ``operator`` = (name, generation) of run ``run_id`` (the handover failed), or the
    whole run's stop request."""
    if event.get("event") == "rescaled" and event.get("request") == request:
        return True
    if event.get("run") != run_id:
        return False
    return event.get("event") == "stop-requested" or operator_stop(dict(event), operator)


def resolve(shape: PlanShape, answer: Mapping[str, Any], job: JobId) -> PlanShape | None:
    """``shape`` with the rescale record of the driver's answer (None: the answer is a stop
    request, of the operator or the run; the task ends without running)."""
    if answer.get("event") != "rescaled":
        return None
    doc = answer.get("rescale")
    if not isinstance(doc, Mapping):
        raise RescaleError(f"job {job}: the rescaled answer to {shape.awaiting} has no record")
    rescale = Rescale.from_json(dict(doc), f"the rescaled event of job {job}")
    return dataclasses.replace(shape, rescale=rescale, awaiting=None)


def await_handover(
    settings: KafkaSettings,
    job: JobId,
    shape: PlanShape,
    run_id: str,
    operator: tuple[str, int],
    timeout_s: float = WAIT_S,
) -> PlanShape | None:
    """Wait for the handover ``shape`` awaits; the shape to run with, or None if the
    driver stopped this generation instead. :class:`RescaleError` after ``timeout_s``."""
    request = shape.awaiting
    assert request is not None
    answer = await_event(
        settings, job, lambda e: answer_for(e, request, run_id, operator), timeout_s
    )
    if answer is None:
        raise RescaleError(
            f"job {job}: no handover for rescale request {request} in {timeout_s:.0f} s"
        )
    return resolve(shape, answer, job)
