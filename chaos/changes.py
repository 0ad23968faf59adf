"""Live changes in a chaos run: ``rescale OP N`` and ``upgrade OP`` sent to the running
driver through the control path of ``spillway rescale`` / ``spillway upgrade``
(:mod:`spillway.recovery.control.liverescale`: a request event, answered by the driver), then
checked
with :func:`chaos.check.change_mismatches` until the new subtasks have started as
planned; a little later once more, so that a restart the change caused late is seen too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from chaos import observe
from chaos.check import change_mismatches, replay_outside
from chaos.schedule import Change
from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId
from spillway.recovery.control.liverescale import request_rescale, request_upgrade
from spillway.recovery.job.plan import JobPlan
from spillway.recovery.restore.rescale import with_parallelism

log = logging.getLogger("chaos")

# ChaosRun._until: poll a predicate until true ([]) or give up ([what ...]).
Until = Callable[[Callable[[], bool], str, float], list[str]]
SETTLE_S = 180.0  # for the answer and every new subtask's start (retries included)


def inject_change(
    settings: KafkaSettings,
    job: JobId,
    run: str,
    change: Change,
    until: Until,
    pause: Callable[[int], None],
) -> list[str]:
    """Ask the driver of run ``run`` for ``change``; return where the restarts differ from
    what it asked (empty: only its operator's new subtasks started, each as planned).
    ``pause(n)``: let about ``n`` checkpoints pass."""
    if change.kind == "rescale":
        request = request_rescale(settings, job, change.operator, change.width)
    else:
        request = request_upgrade(settings, job, change.operator)
    log.info("chaos %s: requested %s (%s)", job, change.describe(), request)

    def problems() -> list[str]:
        return change_mismatches(
            observe.events(settings, job),
            run,
            request,
            change.operator,
            change.width,
            change.kills(),
            change.silent_attempts(),
        )

    def settled() -> bool:
        found = problems()
        return not found or "-failed" in found[0]  # a refusal will not change

    waited = until(settled, f"{change.describe()} settled", SETTLE_S)
    if waited:
        return waited + problems()
    pause(2)
    return problems()


def replays_outside(
    plan: JobPlan, widths: Mapping[str, int], events: Sequence[Mapping[str, Any]]
) -> list[str]:
    """:func:`chaos.check.replay_outside`, each replay judged against the shape in force
    when it started: ``plan`` before the first live rescale (its ``rescaled`` event),
    ``plan`` with the rescaled ``widths`` after it (a rescale moves partitions to new
    owners; a rerun keeps the widths)."""
    cut = next((k for k, e in enumerate(events) if e.get("event") == "rescaled"), len(events))
    after = with_parallelism(plan, widths)
    return replay_outside(events[:cut], observe.input_partitions(plan)) + replay_outside(
        events[cut:], observe.input_partitions(after)
    )
