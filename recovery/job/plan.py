"""The compiled form of a job that the subtask runtime executes.

The pipeline API (``spillway.spark_jobs.api.pipeline``) compiles a user's graph into a
:class:`JobPlan`;
this layer only sees the plan and the small protocols below, so restore and replay do
not depend on how pipelines are written.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import PipelineDefinitionError
from spillway.channels.ids import JobId, OperatorName, SubtaskId
from spillway.channels.kafka.admin import TopicSpec
from spillway.channels.modes import Routing
from spillway.channels.naming import changelog_topic, channel_topic, checkpoint_topic
from spillway.channels.routing.partitioners import Partitioner, Sticky
from spillway.offsets.checkpoint import fingerprint
from spillway.offsets.store import CHECKPOINT_TOPIC_CONFIG
from spillway.recovery.job.origins import Origin, Origins

Record = Any


class Context(Protocol):
    """What operator logic may use: its identity, its keyed state, the cluster settings."""

    @property
    def subtask(self) -> SubtaskId: ...

    @property
    def state(self) -> KeyedState: ...

    @property
    def kafka(self) -> KafkaSettings: ...

    @property
    def watermark(self) -> int | None: ...


class KeyedState(Protocol):
    """Per-key state of one subtask; changes reach the changelog at the next checkpoint."""

    def get(self, key: Any, default: Any = None) -> Any: ...

    def put(self, key: Any, value: Any) -> None: ...

    def delete(self, key: Any) -> None: ...

    def items(self) -> Iterable[tuple[Any, Any]]: ...


class Logic(Protocol):
    """A transforming operator: records in, records out."""

    def open(self, ctx: Context) -> None:
        """Called once per incarnation, after state is restored."""

    def process(self, records: Sequence[Record]) -> Iterable[Record]:
        """Transform a batch of input records (in order) into output records."""
        ...

    def on_watermark(self, watermark: int) -> Iterable[Record]:
        """Emit what the watermark completes (e.g. windows)."""
        ...

    def on_end(self) -> Iterable[Record]:
        """Emit final results when every input has ended."""
        ...

    def set_aside(self) -> list[SetAside]:
        """Input records the calls since the last ``set_aside()`` did not use (late for
        their window, say), then forgotten. The runner counts them in the checkpoint and
        dead-letters them (``--dead-letter``) in the transaction of the input position
        past them. A call that raises sets nothing aside."""
        ...


class MultiInputLogic(Logic, Protocol):
    """A transforming operator that is told which named input each batch came from (the
    runtime calls :meth:`process_input` instead of ``process`` for channel input)."""

    def process_input(self, input: str, records: Sequence[Record]) -> Iterable[Record]:
        """Transform a batch of records of input ``input`` (in order) into output records."""
        ...


# What one declared operator is: it reads the outside world, transforms records, or writes
# them out.
NodeKind = Literal["source", "transform", "sink"]
# What a planned operator is: one declared operator, or a chain of them run as one
# (its members in its description).
OperatorKind = Literal["source", "transform", "sink", "chain"]
OPERATOR_KINDS: tuple[OperatorKind, ...] = get_args(OperatorKind)


@dataclass(frozen=True)
class SetAside:
    """An input record an operator did not use: what kind (``"late"``), why, the record."""

    kind: str
    reason: str
    record: Record


@dataclass(frozen=True)
class Rejected:
    """An input a source read but could not turn into a record: where it was, why, its bytes."""

    origin: Origin  # a file line, or a message of a Kafka partition
    error: str
    raw: bytes


class Source(Protocol):
    """A bounded or unbounded source with a checkpointable position."""

    def open(self, ctx: Context, position: Mapping[str, Any]) -> None:
        """Continue from ``position`` (empty: from the beginning)."""

    def read(self, max_records: int) -> list[Record] | None:
        """Next records (possibly none yet); ``None`` once the source is exhausted."""
        ...

    def position(self) -> dict[str, Any]:
        """JSON-able position after everything :meth:`read` returned."""
        ...

    def watermark(self) -> int | None:
        """Event-time watermark of what was read, if the source has event time."""
        ...

    def idle(self) -> bool:
        """True while the source has nothing to read for longer than its idle timeout (or
        no input at all); downstream then leaves it out of its watermark until it reads
        again. Always False for a source without event time."""
        ...

    def rejected(self) -> list[Rejected]:
        """Inputs the last :meth:`read` passed over as unreadable (then forgotten).

        They lie before :meth:`position`, so the runner must fail or dead-letter them in
        the transaction that commits that position: then a restart neither repeats nor
        skips them.
        """
        ...

    def origins(self) -> Origins:
        """Where each record the last :meth:`read` returned came from, by its index in
        that list (:mod:`spillway.recovery.job.origins`); ``UNKNOWN`` for sources without one."""
        ...


class Sink(Protocol):
    """An external system written exactly-once through two-phase commit at checkpoints."""

    def open(self, ctx: Context, committed: Mapping[str, Any], producer: Any) -> None:
        """Finish what the last checkpoint ``committed`` and discard anything newer."""

    def write(self, records: Sequence[Record]) -> None:
        """Stage records; they become visible only when the checkpoint commits."""

    def prepare(self, checkpoint_id: int) -> dict[str, Any]:
        """Make staged records durable; return what the checkpoint must record."""
        ...

    def committed(self, info: Mapping[str, Any]) -> None:
        """The checkpoint holding ``info`` committed: publish its records."""


@dataclass(frozen=True)
class EdgePlan:
    """An edge ``upstream → downstream`` and how records are routed on it."""

    upstream: OperatorName
    downstream: OperatorName
    schema: dict[str, Any]
    make_partitioner: Callable[[int, int], Partitioner]  # (writer index, downstream p)
    kind: Routing
    # The name the downstream's logic knows this input by (the declared upstream
    # operator, which may sit inside the chain ``upstream``); None: ``upstream``.
    input: str | None = None
    # The schemas this channel had in the job's earlier runs (spillway.recovery.job.evolution, from
    # the recorded topologies): records still in it may have been written with one, and its
    # readers resolve them to ``schema`` (spillway.channels.wire.resolve). Not part of the
    # description.
    earlier_schemas: tuple[dict[str, Any], ...] = ()
    # Its messages carry their records' event times (spillway.channels.wire.stamps): a
    # window downstream reads the time its records carry. Not part of the description
    # either: readers read messages with and without times alike, so a restart that
    # changes it needs no migration.
    carries_time: bool = False

    @property
    def input_name(self) -> str:
        """The name of this input at the downstream operator."""
        return self.input if self.input is not None else self.upstream


@dataclass(frozen=True)
class OperatorPlan:
    """One operator: its width and one of source / logic / sink factories."""

    name: OperatorName
    parallelism: int
    kind: OperatorKind
    make_source: Callable[[], Source] | None = None
    make_logic: Callable[[], Logic] | None = None
    make_sink: Callable[[], Sink] | None = None
    stateful: bool = False
    description: dict[str, Any] = field(default_factory=dict)
    # A keyed operator: its key-group count M (spillway.channels.routing.keygroups). Its keyed input
    # channels and its changelog have M partitions; None: not keyed (nor slotted).
    max_parallelism: int | None = None
    max_parallelism_given: bool = False  # by the pipeline (key_by), not the default
    # A keyed operator's state key → the record key it belongs to (the changelog
    # partition of a state entry is that key's group); None: the state key itself.
    key_of_state: Callable[[Any], Any] | None = None
    # Not keyed, no state, a round-robin input: ``max_parallelism`` counts *slots*, the
    # partitions of its round-robin input channels, owned in ranges as key groups are
    # (so its width can change without its writers noticing).
    slotted: bool = False


@dataclass(frozen=True)
class JobPlan:
    """A validated job: operators in topological order and the edges between them."""

    job: JobId
    operators: tuple[OperatorPlan, ...]
    edges: tuple[EdgePlan, ...]
    bounded: bool
    # Environment variables the pipeline reads, by prefix: captured at submission and set
    # in every task (Pipeline(env_prefixes=...)).
    env_prefixes: tuple[str, ...] = ()

    def operator(self, name: str) -> OperatorPlan:
        """The operator called ``name``."""
        for op in self.operators:
            if op.name == name:
                return op
        raise KeyError(name)

    def inputs_of(self, name: str) -> list[EdgePlan]:
        """Edges into ``name``."""
        return [e for e in self.edges if e.downstream == name]

    def outputs_of(self, name: str) -> list[EdgePlan]:
        """Edges out of ``name``."""
        return [e for e in self.edges if e.upstream == name]

    def topic_of(self, edge: EdgePlan) -> str:
        """The channel topic of ``edge``."""
        return channel_topic(self.job, edge.upstream, edge.downstream)

    def partitions_of(self, edge: EdgePlan) -> int:
        """Partitions of ``edge``'s topic: the downstream key-group count on a keyed
        (hash) edge, its slot count on a round-robin edge into a slotted operator, else
        one per downstream subtask."""
        down = self.operator(edge.downstream)
        if down.max_parallelism is not None and self.width_free(edge):
            return down.max_parallelism
        return down.parallelism

    def width_free(self, edge: EdgePlan) -> bool:
        """True if ``edge``'s partitions do not depend on the downstream width: key groups
        of a keyed edge, slots of a round-robin edge into a slotted operator."""
        down = self.operator(edge.downstream)
        if down.max_parallelism is None:
            return False
        return edge.kind == "hash" or (edge.kind == "rebalance" and down.slotted)

    def partitioner_of(self, edge: EdgePlan, writer_index: int) -> Partitioner:
        """How writer ``writer_index`` routes ``edge``'s records: round-robin over slots a
        batch at a time (:class:`Sticky`) on a slotted edge, else the edge's own rule."""
        n = self.partitions_of(edge)
        if edge.kind == "rebalance" and self.width_free(edge):
            return Sticky(writer_index, n)
        return edge.make_partitioner(writer_index, n)

    def changelog_partitions(self, op: OperatorPlan) -> int:
        """Partitions of ``op``'s changelog: its key-group count. A stateful operator is
        keyed; :class:`PipelineDefinitionError` for one without key groups."""
        if op.max_parallelism is None:
            raise PipelineDefinitionError(
                f"operator {op.name!r} of job {self.job} keeps state but has no key groups; "
                "a stateful operator follows key_by"
            )
        return op.max_parallelism

    def subtasks(self) -> list[SubtaskId]:
        """Every subtask, sources first (so bounded jobs can run with fewer slots)."""
        return [
            SubtaskId(self.job, op.name, i) for op in self.operators for i in range(op.parallelism)
        ]

    def description(self) -> dict[str, Any]:
        """A JSON-able description of the graph (what the fingerprint covers)."""
        return {
            "operators": [
                {
                    "name": op.name,
                    "p": op.parallelism,
                    "kind": op.kind,
                    **op.description,
                    **_key_groups(op),
                }
                for op in self.operators
            ],
            "edges": [
                {"from": e.upstream, "to": e.downstream, "kind": e.kind, "schema": e.schema}
                for e in self.edges
            ],
        }

    @functools.cached_property
    def fingerprint(self) -> str:
        """Stable fingerprint of :meth:`description`; stored in every checkpoint (computed
        once: the plan does not change, and hashing it per checkpoint showed in profiles)."""
        return fingerprint(self.description())

    def topics(
        self, changelog_config: Mapping[str, str], channel_config: Mapping[str, str]
    ) -> list[TopicSpec]:
        """Every channel, changelog and checkpoint topic the job needs."""
        specs = [
            TopicSpec(self.topic_of(e), self.partitions_of(e), channel_config) for e in self.edges
        ]
        for op in self.operators:
            specs.append(
                TopicSpec(
                    checkpoint_topic(self.job, op.name), op.parallelism, CHECKPOINT_TOPIC_CONFIG
                )
            )
            if op.stateful:
                specs.append(
                    TopicSpec(
                        changelog_topic(self.job, op.name),
                        self.changelog_partitions(op),
                        changelog_config,
                    )
                )
        return specs


def _key_groups(op: OperatorPlan) -> dict[str, int]:
    """The fingerprinted key-group (or slot) count, if ``op`` has one."""
    if op.max_parallelism is None:
        return {}
    return {"M": op.max_parallelism}
