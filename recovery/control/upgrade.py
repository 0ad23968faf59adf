"""Is an operator's new code a drop-in replacement for the running one?

``spillway upgrade --job ID --operator OP`` restarts only ``OP`` with the code now
deployed, from its own checkpoints, while the rest of the job keeps running. That is sound
only if the new definition of ``OP`` plugs into the same places: the same operator (name,
kind, stateful or not), reading the same channels (upstream, edge kind, Avro
schema) and writing the same ones. Its function may change freely; its parallelism is the
running one (change that with ``spillway rescale``). This module is the pure comparison;
:mod:`spillway.spark_jobs.spark.liverescale` serves the request.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Mapping
from typing import Any

from spillway.channels.errors import UpgradeError
from spillway.recovery.job.plan import EdgePlan, JobPlan, OperatorPlan


def _find(plan: JobPlan, name: str) -> OperatorPlan | None:
    return next((op for op in plan.operators if op.name == name), None)


def _chained_into(plan: JobPlan, name: str) -> str | None:
    """The plan operator whose chain holds ``name`` (None: not chained)."""
    for op in plan.operators:
        if any(str(m.get("name")) == name for m in op.description.get("chain", ())):
            return str(op.name)
    return None


def _edge(e: EdgePlan, other_end: str) -> dict[str, Any]:
    return {"end": other_end, "input": e.input, "kind": e.kind, "schema": e.schema}


def _channels(edges: list[EdgePlan], upstream_side: bool) -> dict[str, dict[str, Any]]:
    """Each channel by the operator at its other end (and input name)."""
    out = {}
    for e in edges:
        other = str(e.upstream if upstream_side else e.downstream)
        key = f"{other}:{e.input_name}" if upstream_side else other
        out[key] = _edge(e, other)
    return out


def _compare_channels(
    what: str, old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]]
) -> list[str]:
    changes = [f"{what} {k} removed" for k in sorted(set(old) - set(new))]
    changes += [f"{what} {k} added" for k in sorted(set(new) - set(old))]
    for k in sorted(set(old) & set(new)):
        for field in ("kind", "schema"):
            if old[k][field] != new[k][field]:
                changes.append(
                    f"{what} {k}: {field} {_short(old[k][field])} -> {_short(new[k][field])}"
                )
    return changes


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 200 else text[:197] + "..."


def upgrade_changes(old: JobPlan, new: JobPlan, operator: str) -> list[str]:
    """What differs between ``operator`` in the running plan ``old`` and in ``new`` (the
    code now deployed), besides its function and parallelism; empty: compatible.

    :class:`UpgradeError` if ``operator`` is not an operator of the running plan.
    """
    before = _find(old, operator)
    if before is None:
        head = _chained_into(old, operator)
        hint = f"; it is chained into {head!r}: upgrade that" if head else ""
        raise UpgradeError(f"job {old.job} has no operator {operator!r} to upgrade{hint}")
    after = _find(new, operator)
    if after is None:
        return [f"operator {operator!r} is gone from the new code"]
    changes = []
    # Not max_parallelism: the running job keeps the key-group count it first ran with.
    for field in ("kind", "stateful"):
        a, b = getattr(before, field), getattr(after, field)
        if a != b:
            changes.append(f"{field} {a!r} -> {b!r}")
    if before.description != after.description:
        changes.append(f"definition {_short(before.description)} -> {_short(after.description)}")
    changes += _compare_channels(
        "input from",
        _channels(old.inputs_of(operator), True),
        _channels(new.inputs_of(operator), True),
    )
    changes += _compare_channels(
        "output to",
        _channels(old.outputs_of(operator), False),
        _channels(new.outputs_of(operator), False),
    )
    return changes


def check_upgrade(old: JobPlan, new: JobPlan, operator: str) -> None:
    """:class:`UpgradeError` naming every change unless ``new``'s ``operator`` can replace
    the running one (see the module docstring)."""
    changes = upgrade_changes(old, new, operator)
    if changes:
        raise UpgradeError(
            f"operator {operator!r} of job {old.job}: the deployed code is not a compatible "
            f"upgrade ({'; '.join(changes)}); the running code stays. Deploy a version with "
            "the same inputs, outputs and schemas, or stop the job and run the new code "
            "from a savepoint"
        )


def describe_upgrades(events: Iterable[Mapping[str, Any]]) -> list[str]:
    """One line per live upgrade of the job's latest run (``upgraded`` events), for
    ``spillway status``: when, which operator, from which file, how long it was stopped."""
    run: Any = None
    lines: list[str] = []
    for e in events:
        if e.get("event") == "submitted":
            run, lines = e.get("run"), []
        elif e.get("event") == "upgraded" and e.get("run") == run:
            when = datetime.datetime.fromtimestamp(float(e["time"]), datetime.UTC)
            lines.append(
                f"upgrade {len(lines) + 1}: {e.get('target')} restarted with the code of "
                f"{e.get('path')} at {when:%Y-%m-%d %H:%M:%S} UTC "
                f"(stopped {e.get('stopped_s')} s)"
            )
    return lines
