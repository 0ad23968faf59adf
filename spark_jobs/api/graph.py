"""The operator graph of a pipeline: its nodes and edges, their validation, and the
compiled :class:`~spillway.recovery.job.plan.JobPlan` (chains, routing, partitioners).

:class:`spillway.spark_jobs.api.pipeline.Pipeline` is the user-facing builder on top of it; the
:class:`spillway.spark_jobs.api.streams.Stream` methods add operators and edges through it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, get_args

from spillway.channels.errors import PipelineDefinitionError
from spillway.channels.ids import JobId, OperatorName
from spillway.channels.modes import Routing, choose
from spillway.channels.naming import job_id, operator_name
from spillway.channels.routing import keygroups
from spillway.channels.routing.batchkey import BatchKey, BatchKeyHash
from spillway.channels.routing.batchwrite import ColumnKey, ColumnKeyHash
from spillway.channels.routing.partitioners import (
    Broadcast,
    Forward,
    KeyHash,
    Partitioner,
    RoundRobin,
)
from spillway.recovery.job.plan import EdgePlan, JobPlan, NodeKind, OperatorPlan, Record
from spillway.spark_jobs.api import keyedops
from spillway.spark_jobs.api.recordtime import RecordTime
from spillway.spark_jobs.operators.operators import make_chain
from spillway.spark_jobs.operators.stamping import stamping_logic, stamping_source

Schema = dict[str, Any]  # an Avro record schema, as operators keep it
# An edge's routing as declared: one of the channel routings, or "auto" (forward where
# both ends have the same parallelism, else rebalance), resolved when the plan is built.
DeclaredRouting = Routing | Literal["auto"]
_DECLARED_ROUTINGS: tuple[DeclaredRouting, ...] = ("auto", *get_args(Routing))


@dataclass
class Node:
    """One operator as declared (before chaining)."""

    name: str
    parallelism: int
    kind: NodeKind
    schema: Schema | None  # of its output records
    factory: Callable[[], Any]
    stateful: bool = False
    bounded: bool = True
    description: dict[str, Any] = field(default_factory=dict)
    event_time: bool = False  # a source whose records have event time (and watermarks)
    # A source's: how its records' event time is read (spillway.spark_jobs.api.recordtime).
    time: RecordTime | None = None
    # It stamps its outputs with their event time, and its output channels carry it: a
    # window downstream reads the carried time (spillway.spark_jobs.operators.stamping).
    carry: bool = False
    # Behind key_by: the key-group count asked for (None: the default) and how a state key
    # maps to its record key (keyedops.OperatorSpec.key_of_state).
    keyed: bool = False
    max_parallelism: int | None = None
    key_of_state: Callable[[Any], Any] | None = None


@dataclass
class Edge:
    """An edge as declared; ``auto`` routing is resolved when the plan is built."""

    upstream: str
    downstream: str
    routing: DeclaredRouting
    key_fn: Callable[[Record], Any] | None = None


class Graph:
    """Operators and edges under construction; :meth:`plan` validates and compiles them."""

    def __init__(
        self, name: str, *, chaining: bool = False, env_prefixes: Sequence[str] = ()
    ) -> None:
        """``env_prefixes``: the environment variables the pipeline's code reads, by name
        prefix (e.g. ``("MYAPP_",)``). Those set where the job is submitted are captured
        then and set in every task, so the pipeline sees the same settings on executors
        that never had that environment (a cluster) or that outlived it (one Spark JVM
        serving several runs). Variables named ``SPILLWAY_*`` always travel."""
        self.name = name
        self.chaining = chaining
        self.env_prefixes = tuple(env_prefixes)
        bad = [p for p in self.env_prefixes if not isinstance(p, str) or not p.strip()]
        if bad:
            raise PipelineDefinitionError(
                f"pipeline {name!r}: env_prefixes must be non-empty strings, got {bad!r}"
            )
        self._nodes: dict[str, Node] = {}
        self._order: list[str] = []
        self._edges: list[Edge] = []
        self._errors: list[str] = []

    # -- sources -------------------------------------------------------------------------
    # -- graph ---------------------------------------------------------------------------

    def add_edge(self, upstream: str, downstream: str, routing: str = "auto") -> None:
        """Connect two existing operators (for graphs the fluent API cannot express).
        ``routing``: ``auto``, ``forward``, ``rebalance`` or ``broadcast`` (``hash`` needs a
        key function: use ``key_by``); anything else is a :class:`PipelineDefinitionError`."""
        what = f"edge {upstream} -> {downstream}: routing"
        how = choose(routing, _DECLARED_ROUTINGS, what, PipelineDefinitionError)
        self._edges.append(Edge(upstream, downstream, how))

    def _add(
        self,
        name: str,
        parallelism: int,
        kind: NodeKind,
        schema: Schema | None,
        factory: Callable[[], Any],
        *,
        stateful: bool = False,
        description: dict[str, Any] | None = None,
    ) -> Node:
        if name in self._nodes:
            self._errors.append(
                f"operator name {name!r} is used twice; give each operator its own name"
            )
        if not isinstance(parallelism, int) or parallelism < 1:
            self._errors.append(
                f"operator {name!r} has parallelism {parallelism!r}; use an integer >= 1"
            )
        node = Node(name, parallelism, kind, schema, factory, stateful, True, description or {})
        self._nodes.setdefault(name, node)
        self._order.append(name)
        return node

    def _inputs_of(self, name: str) -> list[str]:
        """The operators with an edge into ``name``, as declared so far."""
        return [e.upstream for e in self._edges if e.downstream == name]

    # -- validation and compilation ------------------------------------------------------

    def validate(self) -> None:
        """Raise :class:`PipelineDefinitionError` listing every problem of the graph."""
        problems = list(self._errors)
        for name in self._nodes:
            try:
                operator_name(name)
            except Exception as err:
                problems.append(str(err))
        for e in self._edges:
            for end in (e.upstream, e.downstream):
                if end not in self._nodes:
                    problems.append(
                        f"edge {e.upstream} -> {e.downstream} names unknown operator {end!r}; "
                        "create the operator first or fix the name"
                    )
            if e.routing == "hash" and e.key_fn is None:
                choices = ", ".join(sorted(set(_DECLARED_ROUTINGS) - {"hash"}))
                problems.append(
                    f"edge {e.upstream} -> {e.downstream} has routing {e.routing!r} without a key; "
                    f"use one of {choices}, or key_by() for hash routing"
                )
        if not problems:
            problems += self._check_graph()
        if problems:
            raise PipelineDefinitionError(
                f"pipeline {self.name!r} is invalid:\n  - " + "\n  - ".join(problems)
            )

    def _check_graph(self) -> list[str]:
        problems: list[str] = []
        if not any(n.kind == "source" for n in self._nodes.values()):
            problems.append("the pipeline has no source; start it with generate() or read_files()")
        for e in self._edges:
            up, down = self._nodes[e.upstream], self._nodes[e.downstream]
            if up.kind == "sink":
                problems.append(
                    f"sink {up.name!r} cannot have a downstream operator ({down.name!r})"
                )
            if down.kind == "source":
                problems.append(f"source {down.name!r} cannot have an input (from {up.name!r})")
            if e.routing == "forward" and up.parallelism != down.parallelism:
                problems.append(
                    f"forward edge {up.name!r} (parallelism {up.parallelism}) -> {down.name!r} "
                    f"(parallelism {down.parallelism}): forward needs equal parallelism; "
                    "use rebalance() or key_by()"
                )
        unbounded = [n.name for n in self._nodes.values() if n.kind == "source" and not n.bounded]
        if unbounded:
            for n in self._nodes.values():
                if n.description.get("emit") == "final":
                    problems.append(
                        f"operator {n.name!r} emits its results only when its input ends, but "
                        f"source {unbounded[0]!r} never ends; use emit='updates' or a "
                        "window (key_by(...).window(name, Tumbling(size))), or bound the source"
                    )
        problems += self._windows_without_watermarks()
        cycle = self._find_cycle()
        if cycle:
            problems.append(
                "the graph has a cycle: " + " -> ".join(cycle) + "; remove one of these edges"
            )
            return problems
        reaches_sink = {n for n, node in self._nodes.items() if node.kind == "sink"}
        changed = True
        while changed:
            changed = False
            for e in self._edges:
                if e.downstream in reaches_sink and e.upstream not in reaches_sink:
                    reaches_sink.add(e.upstream)
                    changed = True
        for name in self._order:
            if name not in reaches_sink:
                problems.append(
                    f"operator {name!r} has no path to a sink; add write_jsonl(), write_kafka() or "
                    "print() after it, or remove it"
                )
        for name, node in self._nodes.items():
            if node.kind != "source" and not any(e.downstream == name for e in self._edges):
                problems.append(f"operator {name!r} has no input")
        return problems

    def _windows_without_watermarks(self) -> list[str]:
        """A window fires on watermarks; one behind an unbounded source without event
        time would never get one (a bounded source's end fires every window instead)."""
        problems: list[str] = []
        for name, node in self._nodes.items():
            if node.description.get("op") not in keyedops.EVENT_TIME_OPS:
                continue
            upstream: set[str] = set()
            todo = [name]
            while todo:  # every operator with a path to the window, through any chain
                n = todo.pop()
                for e in self._edges:
                    if e.downstream == n and e.upstream not in upstream:
                        upstream.add(e.upstream)
                        todo.append(e.upstream)
            for s, src in self._nodes.items():
                if s in upstream and src.kind == "source" and not (src.bounded or src.event_time):
                    problems.append(
                        f"window {name!r} would never fire: source {s!r} upstream of it is "
                        "unbounded and has no event time, so no watermark reaches the "
                        f"window; give {s!r} a timestamp and watermark strategy, e.g. "
                        + _WATERMARK_FIX.get(str(src.description.get("source")), "")
                    )
        return problems

    def _find_cycle(self) -> list[str] | None:
        succ: dict[str, list[str]] = {n: [] for n in self._nodes}
        for e in self._edges:
            succ[e.upstream].append(e.downstream)
        color: dict[str, int] = dict.fromkeys(self._nodes, 0)
        stack: list[str] = []

        def visit(n: str) -> list[str] | None:
            color[n] = 1
            stack.append(n)
            for m in succ[n]:
                if color[m] == 1:
                    return [*stack[stack.index(m) :], m]
                if color[m] == 0:
                    found = visit(m)
                    if found:
                        return found
            stack.pop()
            color[n] = 2
            return None

        for n in self._order:
            if color[n] == 0:
                found = visit(n)
                if found:
                    return found
        return None

    def plan(self, job: str) -> JobPlan:
        """Validate and compile into the plan the runtime executes for job ``job``."""
        self.validate()
        jid: JobId = job_id(job)
        chains = self._chains()
        head = {m.name: chain[0].name for chain in chains for m in chain}
        ops = tuple(_operator_plan(chain) for chain in chains)
        edges = tuple(
            self._edge_plan(e, head[e.upstream], head[e.downstream])
            for e in self._edges
            if head[e.upstream] != head[e.downstream]
        )
        bounded = all(n.bounded for n in self._nodes.values() if n.kind == "source")
        return JobPlan(
            jid,
            tuple(_with_slots(op, edges) for op in ops),
            edges,
            bounded,
            env_prefixes=self.env_prefixes,
        )

    def _chains(self) -> list[list[Node]]:
        """Operators grouped into chains (single operators without ``chaining``), in
        topological order of their first operators."""
        chains: list[list[Node]] = []
        chain_of: dict[str, list[Node]] = {}
        for n in self._topological():
            ins = [e for e in self._edges if e.downstream == n.name]
            if self.chaining and len(ins) == 1 and self._chainable(ins[0], chain_of):
                chain = chain_of[ins[0].upstream]
                chain.append(n)
            else:
                chain = [n]
                chains.append(chain)
            chain_of[n.name] = chain
        return chains

    def _chainable(self, e: Edge, chain_of: dict[str, list[Node]]) -> bool:
        up, down = self._nodes[e.upstream], self._nodes[e.downstream]
        if self._routing(e) != "forward" or down.kind == "source" or up.kind == "sink":
            return False
        if up.description.get("batch") or down.description.get("batch"):
            # A batch operator reads and writes channels (spillway.recovery.runtime.batchpath); only
            # a stateless one may run in a batch source's subtask, on the batch it read,
            # and a sink may take a batch operator's output in its subtask (as ArrowRows).
            if sum(1 for o in self._edges if o.upstream == up.name) != 1:
                return False
            batch_in = up.kind == "source" and bool(up.description.get("batch"))
            stateless_batch = down.kind == "transform" and bool(down.description.get("batch"))
            batch_out = up.kind == "transform" and bool(up.description.get("batch"))
            return (batch_in and stateless_batch and not down.stateful) or (
                batch_out and down.kind == "sink"
            )
        if sum(1 for o in self._edges if o.upstream == up.name) != 1:
            return False
        # Keyed state only in the chain's last transform: a failed call then changes no
        # state (ChainedLogic), and dead-letter retries cannot apply a record twice.
        return not (down.kind == "transform" and any(m.stateful for m in chain_of[up.name]))

    def _topological(self) -> list[Node]:
        indeg = {n: 0 for n in self._nodes}
        for e in self._edges:
            indeg[e.downstream] += 1
        ready = [n for n in self._order if indeg[n] == 0]
        out: list[Node] = []
        while ready:
            n = ready.pop(0)
            out.append(self._nodes[n])
            for e in self._edges:
                if e.upstream == n:
                    indeg[e.downstream] -= 1
                    if indeg[e.downstream] == 0:
                        ready.append(e.downstream)
        return out

    def _routing(self, e: Edge) -> Routing:
        if e.routing != "auto":
            return e.routing
        up, down = self._nodes[e.upstream], self._nodes[e.downstream]
        return "forward" if up.parallelism == down.parallelism else "rebalance"

    def _edge_plan(self, e: Edge, upstream: str, downstream: str) -> EdgePlan:
        """``e`` between the operators (chains) ``upstream`` and ``downstream``."""
        schema = self._nodes[e.upstream].schema
        assert schema is not None
        routing = self._routing(e)
        return EdgePlan(
            OperatorName(upstream),
            OperatorName(downstream),
            schema,
            _partitioner_factory(routing, e.key_fn),
            routing,
            e.upstream,
            carries_time=self._nodes[e.upstream].carry,
        )


_WATERMARK_FIX = {
    "kafka": "read_kafka(..., watermarks=Watermarks.bounded(max_out_of_orderness_ms)) "
    "(event time: the Kafka record timestamp, or timestamp=fn)",
    "generator": "generate(..., timestamp=fn, watermarks=Watermarks.bounded(ms))",
}


def _max_parallelism(node: Node) -> int | None:
    """The key-group count of a keyed operator (None: not keyed), validated."""
    if not node.keyed:
        return None
    where = f"operator {node.name!r}"
    if node.max_parallelism is None:
        return keygroups.max_parallelism(
            max(keygroups.DEFAULT_MAX_PARALLELISM, node.parallelism), node.parallelism, where
        )
    return keygroups.max_parallelism(node.max_parallelism, node.parallelism, where)


def _with_slots(op: OperatorPlan, edges: tuple[EdgePlan, ...]) -> OperatorPlan:
    """``op`` with slots if it is not keyed, keeps no state and every input is round-robin:
    those inputs then have ``max(32, p)`` partitions owned in ranges (docs/architecture.md,
    Slots), so its width can change while its writers keep writing. (With a
    forward or broadcast input its width is fixed anyway: slots would only cost.)"""
    if op.max_parallelism is not None or op.stateful or op.make_source is not None:
        return op
    if not all(e.kind == "rebalance" for e in edges if e.downstream == op.name):
        return op
    m = keygroups.max_parallelism(
        max(keygroups.DEFAULT_MAX_PARALLELISM, op.parallelism),
        op.parallelism,
        f"operator {op.name!r}",
    )
    return dataclasses.replace(op, max_parallelism=m, slotted=True)


def _operator_plan(chain: list[Node]) -> OperatorPlan:
    """The plan of one operator, or of a chain of them (named after its first)."""
    first, last = chain[0], chain[-1]
    logics = [_factory(m) for m in chain if m.kind == "transform"]
    make_logic: Callable[[], Any] | None = None
    if len(logics) == 1:
        make_logic = logics[0]
    elif logics:
        make_logic = partial(make_chain, tuple(logics))
    return OperatorPlan(
        name=OperatorName(first.name),
        parallelism=first.parallelism,
        kind=first.kind if len(chain) == 1 else "chain",
        make_source=_factory(first) if first.kind == "source" else None,
        make_logic=make_logic,
        make_sink=last.factory if last.kind == "sink" else None,
        stateful=any(m.stateful for m in chain),
        max_parallelism=_max_parallelism(first),
        max_parallelism_given=first.max_parallelism is not None,
        key_of_state=first.key_of_state,
        description=first.description
        if len(chain) == 1
        else {"chain": [{"name": m.name, "kind": m.kind, **m.description} for m in chain]},
    )


def _factory(node: Node) -> Callable[[], Any]:
    """``node``'s factory; where it carries event time, of an operator that stamps it."""
    if not node.carry:
        return node.factory
    if node.kind == "source":
        assert node.time is not None, "only a source with event time carries it"
        return partial(stamping_source, node.factory, node.time.reader())
    reader = node.time.reader() if node.time is not None else None  # a window's results
    return partial(_stamping, node.factory, reader)


def _stamping(factory: Callable[[], Any], reader: Callable[[Record], int] | None) -> Any:
    return stamping_logic(factory(), reader)


def _partitioner_factory(
    routing: Routing, key_fn: Callable[[Record], Any] | None
) -> Callable[[int, int], Partitioner]:
    if routing == "forward":
        return Forward
    if routing == "rebalance":
        return RoundRobin
    if routing == "broadcast":
        return lambda _i, p: Broadcast(p)
    if routing == "hash" and isinstance(key_fn, ColumnKey):  # key_by(column): batches too
        column = key_fn.column
        return lambda _i, p: ColumnKeyHash(column, p)
    if routing == "hash" and isinstance(key_fn, BatchKey):  # a key function over batches
        batch_key = key_fn
        return lambda _i, p: BatchKeyHash(batch_key, p)
    if routing == "hash":
        assert key_fn is not None
        fn = key_fn
        return lambda _i, p: KeyHash(fn, p)
    raise PipelineDefinitionError(f"unknown routing {routing!r}")
