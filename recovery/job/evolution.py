"""Restarting a stopped job with changed code and topology. Pure: no I/O.

Every checkpoint carries the fingerprint of the topology that took it; a run whose
pipeline has another topology than the job's last run used to be refused outright. The
driver now compares the two topologies instead (:func:`compare`) and prints the
resulting :class:`EvolutionReport`; the run goes ahead when every change is allowed:

* Operators are **matched by name**. Its function (definition) may change: the state and
  positions it checkpointed carry over. Its kind may not (rename it instead).
* An **added** operator starts empty (no state, like Flink's new operators); its input
  channels are new topics, read from their beginning, which hold exactly what its
  upstreams write from the restart on.
* A **removed** stateful operator, or one that became stateless, **drops its state**:
  refused unless ``--allow-dropped-state``. A removed channel drops the records in it that
  its reader had not consumed at the savepoint: refused likewise.
* A changed **channel schema** must resolve under Avro's rules (old schema = writer,
  new = reader, :mod:`spillway.recovery.job.avrocompat`); otherwise refused, naming channel and
  field.
  A changed partitioning (edge kind) is refused. Records of the old schema still unread
  in the channel are read with it and resolved to the new one: every message names its
  writer schema (:mod:`spillway.channels.wire.schemaid`), and the run's readers get every schema the
  channel had in the job's recorded runs (:func:`channel_history`,
  :func:`with_earlier_schemas`; resolution in :mod:`spillway.channels.wire.resolve`).
* A changed **parallelism** is reported and done by the rescale path
  (:mod:`spillway.recovery.restore.rescale`).

The old topology comes from the job's ``submitted`` event (``topology``: the plan's
description, :func:`topology_doc`); :func:`recorded_fingerprint` recomputes the
fingerprint its checkpoints carry under the widths of the last run (a live rescale may have
changed them since the submission).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spillway.channels.ids import OperatorName
from spillway.channels.modes import ROUTINGS, choose
from spillway.offsets.checkpoint import fingerprint
from spillway.recovery.job.avrocompat import resolution_problems
from spillway.recovery.job.plan import OPERATOR_KINDS, EdgePlan, JobPlan, OperatorPlan


@dataclass(frozen=True)
class Change:
    """One difference between the old and the new topology: what (``subject``: an
    operator or a channel) and how, whether it is allowed, and if not what to do."""

    subject: str
    what: str
    allowed: bool = True
    fix: str = ""

    def line(self) -> str:
        """One line of the report."""
        mark = "ok     " if self.allowed else "REFUSED"
        return f"  {mark} {self.subject}: {self.what}" + (f" ({self.fix})" if self.fix else "")


@dataclass(frozen=True)
class EvolutionReport:
    """The compatibility report of restarting job ``job`` with a changed topology."""

    job: str
    changes: tuple[Change, ...]

    @property
    def allowed(self) -> bool:
        """True if every change is allowed."""
        return all(c.allowed for c in self.changes)

    def render(self) -> str:
        """The report as ``spillway run`` prints it."""
        verdict = "allowed" if self.allowed else "REFUSED, nothing was started"
        head = f"job {self.job}: the pipeline's topology changed since the last run ({verdict})"
        return "\n".join([head, *(c.line() for c in self.changes)])


def topology_doc(plan: JobPlan) -> dict[str, Any]:
    """What a run records of its topology (in its ``submitted`` event) for the next
    run's comparison: the plan's fingerprinted description and its stateful operators."""
    return {
        "description": plan.description(),
        "stateful": sorted(op.name for op in plan.operators if op.stateful),
    }


def recorded_fingerprint(
    doc: Mapping[str, Any], widths: Mapping[str, int], key_groups: Mapping[str, int | None]
) -> str:
    """The fingerprint of recorded topology ``doc`` with operator ``name`` at
    ``widths[name]`` subtasks and ``key_groups[name]`` key groups (the last run's shape);
    the rule of :meth:`spillway.recovery.job.plan.JobPlan.description` (M where it is set)."""
    desc = dict(doc["description"])
    ops = []
    for op in desc["operators"]:
        op = {k: v for k, v in op.items() if k != "M"}
        name = str(op["name"])
        op["p"] = widths.get(name, op["p"])
        m = key_groups.get(name)
        if m is not None:
            op["M"] = m
        ops.append(op)
    desc["operators"] = ops
    return fingerprint(desc)


def _definition(op: Mapping[str, Any]) -> dict[str, Any]:
    """An operator's description without name, width and key groups (its code)."""
    return {k: v for k, v in op.items() if k not in ("name", "p", "M")}


def _operator_changes(
    old: Mapping[str, Any], old_stateful: set[str], new: JobPlan, allow_dropped: bool
) -> list[Change]:
    before = {str(op["name"]): op for op in old["operators"]}
    after = {str(op.name): op for op in new.operators}
    flag = "refused without --allow-dropped-state"
    out: list[Change] = []
    for name in sorted(set(before) - set(after)):
        subject = f"operator {name!r}"
        if name in old_stateful:
            out.append(Change(subject, "removed: its state is dropped", allow_dropped, flag))
        else:
            out.append(Change(subject, "removed (it had no state)"))
    for name in sorted(set(after) - set(before)):
        out.append(Change(f"operator {name!r}", "added: starts with no state"))
    new_desc = {str(op["name"]): op for op in new.description()["operators"]}
    for name in sorted(set(before) & set(after)):
        subject, old_op, op = f"operator {name!r}", before[name], after[name]
        if old_op.get("kind") != op.kind:
            out.append(Change(
                subject, f"kind {old_op.get('kind')} -> {op.kind}", False,
                "an operator keeps its kind; give the new one another name",
            ))  # fmt: skip
            continue
        if name in old_stateful and not op.stateful:
            out.append(Change(subject, "stateful -> stateless: its state is dropped",
                              allow_dropped, flag))  # fmt: skip
        elif name not in old_stateful and op.stateful:
            out.append(Change(subject, "stateless -> stateful: starts with empty state"))
        if _definition(old_op) != _definition(new_desc[name]):
            out.append(Change(subject, "definition changed; its state and positions carry over"))
        if old_op.get("p") != op.parallelism:
            out.append(Change(subject, f"parallelism {old_op.get('p')} -> {op.parallelism} "
                                       "(rescaled from the savepoint)"))  # fmt: skip
    return out


def _channel_changes(old: Mapping[str, Any], new: JobPlan, allow_dropped: bool) -> list[Change]:
    def key(e: Mapping[str, Any]) -> tuple[str, str]:
        return str(e["from"]), str(e["to"])

    before = {key(e): e for e in old["edges"]}
    after = {key(e): e for e in new.description()["edges"]}
    out: list[Change] = []
    for up, down in sorted(set(before) - set(after)):
        out.append(Change(
            f"channel {up} -> {down}",
            "removed: records its reader had not consumed at the savepoint are dropped",
            allow_dropped, "refused without --allow-dropped-state",
        ))  # fmt: skip
    for up, down in sorted(set(after) - set(before)):
        out.append(Change(f"channel {up} -> {down}", "added: a new channel, read from its start"))
    for k in sorted(set(before) & set(after)):
        subject, was, now = f"channel {k[0]} -> {k[1]}", before[k], after[k]
        if was.get("kind") != now.get("kind"):
            out.append(Change(
                subject, f"partitioning {was.get('kind')} -> {now.get('kind')}", False,
                "a channel keeps its partitioning; rename the downstream operator to start "
                "it on a new channel",
            ))  # fmt: skip
        if was.get("schema") != now.get("schema"):
            problems = resolution_problems(was.get("schema"), now.get("schema"))
            if problems:
                out.append(Change(
                    subject, "schema change not readable under Avro resolution: "
                    + "; ".join(problems), False,
                    "give a new field a default; change a type only by an Avro promotion",
                ))  # fmt: skip
            else:
                out.append(Change(
                    subject, "schema changed, compatible under Avro resolution",
                    fix="records of the old schema still in the channel are resolved to the "
                    "new one as they are read",
                ))  # fmt: skip
    return out


def compare(
    job: str, old: Mapping[str, Any], new: JobPlan, allow_dropped_state: bool
) -> EvolutionReport:
    """The report of restarting from a savepoint taken under recorded topology ``old``
    (:func:`topology_doc`) with plan ``new`` (its final widths); see the module docstring
    for what is allowed. No changes: an empty report."""
    desc = old["description"]
    changes = _operator_changes(desc, set(old.get("stateful", ())), new, allow_dropped_state)
    changes += _channel_changes(desc, new, allow_dropped_state)
    return EvolutionReport(job, tuple(changes))


def evolution_of(
    plan: JobPlan,
    widths: Mapping[str, int],
    key_groups: Mapping[str, int | None],
    recorded: Mapping[str, Any] | None,
    allow_dropped_state: bool,
) -> tuple[EvolutionReport, str] | None:
    """The report of running ``plan`` after a last run of topology ``recorded`` (None: not
    recorded, a first run or a job submitted before topologies were recorded) in shape
    ``widths`` / ``key_groups`` (operator → parallelism / key-group count), and the
    fingerprint that run's checkpoints carry. None when only widths changed (or nothing)."""
    if recorded is None:
        return None
    old = recorded_fingerprint(recorded, widths, key_groups)
    if old == recorded_fingerprint(topology_doc(plan), widths, key_groups):
        return None
    return compare(str(plan.job), recorded, plan, allow_dropped_state), old


Channel = tuple[str, str]  # (upstream, downstream) operator names


def recorded_topologies(events: Iterable[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    """The topology each ``submitted`` event of a job's ``events`` recorded, oldest first
    (runs by versions that did not record one are left out)."""
    return tuple(
        e["topology"] for e in events if e.get("event") == "submitted" and e.get("topology")
    )


def channel_history(
    topologies: Iterable[Mapping[str, Any]],
) -> dict[Channel, tuple[dict[str, Any], ...]]:
    """Every schema each channel had in recorded topologies ``topologies``
    (:func:`topology_doc` of each run, oldest first), each once, oldest first."""
    out: dict[Channel, list[dict[str, Any]]] = {}
    for doc in topologies:
        for e in doc.get("description", {}).get("edges", ()):
            schemas = out.setdefault((str(e["from"]), str(e["to"])), [])
            if e.get("schema") is not None and e["schema"] not in schemas:
                schemas.append(e["schema"])
    return {k: tuple(v) for k, v in out.items()}


def with_earlier_schemas(
    plan: JobPlan, history: Mapping[Channel, tuple[dict[str, Any], ...]]
) -> JobPlan:
    """``plan`` whose channels know the schemas ``history`` recorded for them other than
    their own (:attr:`spillway.recovery.job.plan.EdgePlan.earlier_schemas`)."""
    edges = []
    for e in plan.edges:
        earlier = tuple(s for s in history.get((e.upstream, e.downstream), ()) if s != e.schema)
        edges.append(dataclasses.replace(e, earlier_schemas=earlier) if earlier else e)
    return dataclasses.replace(plan, edges=tuple(edges))


def _no_partitioner(writer: int, p: int) -> Any:
    raise AssertionError("a recorded plan only rewinds: it writes no channel")


def recorded_plan(
    new: JobPlan,
    doc: Mapping[str, Any],
    widths: Mapping[str, int],
    key_groups: Mapping[str, int | None],
) -> JobPlan:
    """The plan of recorded topology ``doc`` (:func:`topology_doc`) at the last run's
    ``widths`` and ``key_groups``, for the job of plan ``new``: operators and channels without
    code, enough to rewind the job to a savepoint its checkpoints took
    (:func:`spillway.recovery.control.rewind.rewind_job`). Its fingerprint is
    :func:`recorded_fingerprint`'s."""
    desc, stateful = doc["description"], set(doc.get("stateful", ()))
    ops = []
    for op in desc["operators"]:
        name = str(op["name"])
        ops.append(OperatorPlan(
            name=OperatorName(name),
            parallelism=int(widths.get(name, op["p"])),
            kind=choose(op["kind"], OPERATOR_KINDS, "recorded operator kind"),
            stateful=name in stateful,
            description={k: v for k, v in op.items() if k not in ("name", "p", "kind", "M")},
            max_parallelism=key_groups.get(name, op.get("M")),
        ))  # fmt: skip
    edges = tuple(
        EdgePlan(
            OperatorName(str(e["from"])),
            OperatorName(str(e["to"])),
            e["schema"],
            _no_partitioner,
            choose(e["kind"], ROUTINGS, "recorded edge kind"),
        )
        for e in desc["edges"]
    )
    return JobPlan(new.job, tuple(ops), edges, new.bounded, env_prefixes=new.env_prefixes)
