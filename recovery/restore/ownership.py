"""Which partitions a subtask owns, from the plan (docs/architecture.md, Key groups). Pure: no I/O.

The one place the runtime decides what a subtask reads and restores: its input channels'
partitions and its changelog's. A keyed edge or a keyed operator's changelog has one
partition per key group and subtask ``i`` owns the key-group range
:func:`spillway.channels.routing.keygroups.key_group_range` gives it; a round-robin edge into a
slotted
operator has one partition per slot, owned by the same rule; any other edge has one
partition per downstream subtask, of which the same rule gives subtask ``i`` partition ``i``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from spillway.channels.config import ChannelSettings
from spillway.channels.errors import ConfigError
from spillway.channels.ids import SubtaskId
from spillway.channels.naming import changelog_topic
from spillway.channels.routing.keygroups import (
    Ownership,
    key_group,
    key_group_range,
    max_parallelism,
)
from spillway.recovery.job.plan import JobPlan
from spillway.recovery.job.plandoc import PlanDoc
from spillway.recovery.restore.state import ChangelogState


def owned_partitions(plan: JobPlan, subtask: SubtaskId) -> Ownership:
    """The partitions ``subtask`` owns: of each input channel topic and of its changelog."""
    op = plan.operator(subtask.operator)
    owned: dict[str, range] = {}
    for e in plan.inputs_of(op.name):
        owned[plan.topic_of(e)] = key_group_range(
            subtask.index, op.parallelism, plan.partitions_of(e)
        )
    if op.stateful:
        owned[changelog_topic(plan.job, op.name)] = key_group_range(
            subtask.index, op.parallelism, plan.changelog_partitions(op)
        )
    return Ownership.of(owned)


def changelog_partition_of(plan: JobPlan, operator: str) -> Callable[[Any], int]:
    """State key → changelog partition of a keyed ``operator``: its record key's group."""
    op = plan.operator(operator)
    m = plan.changelog_partitions(op)
    key_of = op.key_of_state
    if key_of is None:
        return lambda sk: key_group(sk, m)
    return lambda sk: key_group(key_of(sk), m)


def owned_state(
    plan: JobPlan,
    subtask: SubtaskId,
    owned: Ownership,
    settings: ChannelSettings | None = None,
) -> ChangelogState | None:
    """The keyed state of ``subtask`` over its owned changelog partitions (None: stateless).

    ``settings``: the job's channel settings; its changelog messages keep their bounds
    (defaults when None).

    :class:`PipelineDefinitionError` for a stateful operator without key groups
    (:meth:`JobPlan.changelog_partitions`).
    """
    op = plan.operator(subtask.operator)
    if not op.stateful:
        return None
    topic = changelog_topic(plan.job, op.name)
    return ChangelogState.keyed(
        topic, owned.of_topic(topic), changelog_partition_of(plan, subtask.operator), settings
    )


def keep_recorded_max_parallelism(plan: JobPlan, recorded: PlanDoc | None) -> JobPlan:
    """``plan`` with each keyed operator's key-group count as the job first ran with it.

    ``recorded``: the plan of the job's last submission (None: first run). An operator
    whose count was left to the default takes the recorded one, so a new default never
    reshapes a running job; an operator recorded without a count (new, or not keyed then)
    keeps the plan's. A count the pipeline sets and that differs from the recorded one is
    a :class:`ConfigError`: the channel and changelog partitions hold the old key groups.
    """
    if recorded is None:
        return plan
    before = {op.name: op for op in recorded.operators}
    ops = []
    for op in plan.operators:
        old = before.get(op.name)
        if op.max_parallelism is None or old is None or old.max_parallelism is None:
            ops.append(op)
            continue
        kept = old.max_parallelism
        if kept != op.max_parallelism:
            if op.max_parallelism_given:
                raise ConfigError(
                    f"operator {op.name!r} of job {plan.job}: max_parallelism "
                    f"{op.max_parallelism} differs from {kept}, which the job was first run "
                    f"with; its channel and changelog partitions hold {kept} key groups. Use "
                    f"key_by(..., max_parallelism={kept}), or run under a new --job-id"
                )
            max_parallelism(kept, op.parallelism, f"operator {op.name!r} of job {plan.job}")
            op = dataclasses.replace(op, max_parallelism=kept)
        ops.append(op)
    return dataclasses.replace(plan, operators=tuple(ops))


def adopted_max_parallelism(plan: JobPlan) -> dict[str, int]:
    """Key-group and slot counts by operator (for tasks that rebuild ``plan``; see
    :func:`with_max_parallelism`)."""
    return {op.name: op.max_parallelism for op in plan.operators if op.max_parallelism is not None}


def with_max_parallelism(plan: JobPlan, counts: Mapping[str, int]) -> JobPlan:
    """``plan`` with the key-group and slot counts ``counts`` (what the driver kept,
    :func:`keep_recorded_max_parallelism`); an operator absent from ``counts`` keeps its
    own."""
    ops = []
    for op in plan.operators:
        if op.max_parallelism is not None and op.name in counts:
            op = dataclasses.replace(op, max_parallelism=counts[op.name])
        ops.append(op)
    return dataclasses.replace(plan, operators=tuple(ops))
