"""What ``spillway status`` needs to know about a job, recorded when it is submitted.

The driver builds the plan from the user's pipeline module, in the submitter's
environment. ``status`` must not repeat that: it may run on another machine, without
that environment (a pipeline whose width comes from an environment variable would be
built differently there, or not at all) and without the user's code. So the driver
records this description in its ``submitted`` event, and status reads it back.

Format (JSON, ``version`` 1)::

    {"version": 1, "operators": [
        {"name": "count", "parallelism": 2, "kind": "transform", "stateful": true,
         "checkpoint_topic": "spillway.<job>.ckpt.count",
         "inputs": [{"topic": "spillway.<job>.ch.enrich.count", "partitions": 2}]}]}

Operators are in the plan's order (sources first). An input channel of ``partitions``
partitions feeds subtask ``i`` the key-group range
``spillway.channels.routing.keygroups.key_group_range``
gives it (partition ``i`` when ``partitions`` equals the parallelism; more on a keyed
edge and on a round-robin edge into a slotted operator). ``max_parallelism``: a keyed
operator's key-group count or a slotted one's slot count (absent: neither); a later
submission of the same job must keep it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spillway.channels.errors import ConfigError
from spillway.channels.ids import TopicPartition
from spillway.channels.modes import choose
from spillway.channels.naming import checkpoint_topic
from spillway.channels.routing.keygroups import key_group_range
from spillway.recovery.job.plan import OPERATOR_KINDS, JobPlan, OperatorKind

VERSION = 1


@dataclass(frozen=True)
class InputDoc:
    """One input channel of an operator: its topic and partition count."""

    topic: str
    partitions: int


@dataclass(frozen=True)
class OperatorDoc:
    """One operator as status sees it."""

    name: str
    parallelism: int
    kind: OperatorKind
    stateful: bool
    checkpoint_topic: str
    inputs: tuple[InputDoc, ...]
    max_parallelism: int | None = None

    def owned_inputs(self, index: int) -> list[TopicPartition]:
        """The input partitions subtask ``index`` reads (spillway.recovery.restore.ownership's
        rule)."""
        return [
            TopicPartition(i.topic, p)
            for i in self.inputs
            for p in key_group_range(index, self.parallelism, i.partitions)
        ]


@dataclass(frozen=True)
class PlanDoc:
    """The recorded shape of a job: operators (sources first) and their input channels."""

    operators: tuple[OperatorDoc, ...]

    @staticmethod
    def of(plan: JobPlan) -> PlanDoc:
        """The description of ``plan``."""
        return PlanDoc(
            tuple(
                OperatorDoc(
                    name=op.name,
                    parallelism=op.parallelism,
                    kind=op.kind,
                    stateful=op.stateful,
                    checkpoint_topic=checkpoint_topic(plan.job, op.name),
                    inputs=tuple(
                        InputDoc(plan.topic_of(e), plan.partitions_of(e))
                        for e in plan.inputs_of(op.name)
                    ),
                    max_parallelism=op.max_parallelism,
                )
                for op in plan.operators
            )
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON form recorded in the ``submitted`` event."""
        return {
            "version": VERSION,
            "operators": [
                {
                    "name": op.name,
                    "parallelism": op.parallelism,
                    "kind": op.kind,
                    "stateful": op.stateful,
                    "checkpoint_topic": op.checkpoint_topic,
                    "inputs": [{"topic": i.topic, "partitions": i.partitions} for i in op.inputs],
                    **_keyed(op.max_parallelism),
                }
                for op in self.operators
            ],
        }

    @staticmethod
    def from_json(doc: Mapping[str, Any], origin: str) -> PlanDoc:
        """Parse :meth:`to_json`'s form; :class:`ConfigError` naming ``origin`` if malformed."""
        if doc.get("version") != VERSION:
            raise ConfigError(
                f"{origin}: plan description version {doc.get('version')!r} is not "
                f"{VERSION}; use the Spillway version that submitted the job"
            )
        try:
            return PlanDoc(
                tuple(
                    OperatorDoc(
                        name=str(op["name"]),
                        parallelism=int(op["parallelism"]),
                        kind=choose(op["kind"], OPERATOR_KINDS, f"{origin}: operator kind"),
                        stateful=bool(op["stateful"]),
                        checkpoint_topic=str(op["checkpoint_topic"]),
                        inputs=tuple(
                            InputDoc(str(i["topic"]), int(i["partitions"])) for i in op["inputs"]
                        ),
                        # Absent for operators without key groups or slots.
                        max_parallelism=_optional_int(op.get("max_parallelism")),
                    )
                    for op in doc["operators"]
                )
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(
                f"{origin}: malformed plan description ({type(e).__name__}: {e})"
            ) from None

    def subtask_count(self) -> int:
        """How many subtasks the job has."""
        return sum(op.parallelism for op in self.operators)


def _keyed(max_parallelism: int | None) -> dict[str, int]:
    return {} if max_parallelism is None else {"max_parallelism": max_parallelism}


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)
