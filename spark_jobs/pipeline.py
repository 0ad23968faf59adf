"""The pipeline API: a graph of named operators, each with its own parallelism.

Example::

    p = Pipeline("clicks")
    clicks = p.generate("clicks", count=1_000_000, make=make_click, schema=CLICK, parallelism=2)
    pages = clicks.map("enrich", enrich, schema=PAGE_VIEW)
    counts = pages.key_by(lambda r: r["page"]).aggregate(
        "count", init=lambda: 0, add=lambda n, r: n + 1,
        result=lambda page, n: {"page": page, "views": n}, schema=PAGE_COUNT)
    counts.write_jsonl("out", "/tmp/out")

Every edge between operators becomes a persistent channel (a Kafka topic). Routing on an
edge: ``forward`` when both sides have the same parallelism, round-robin otherwise,
key hash after :meth:`Stream.key_by`, or :meth:`Stream.broadcast`. :meth:`Pipeline.plan`
validates the graph before anything starts.

``Pipeline(name, chaining=True)`` fuses operators joined by a forward edge into one
subtask, as Flink chains operators: the edge then has no channel, the chain checkpoints
and recovers as one subtask (named after its first operator). An edge is chained when it
is ``forward``, is its upstream's only output and its downstream's only input, and at most
the chain's last transform keeps keyed state. Key-by, rebalance and broadcast edges always
stay persistent channels, so recovery stays local to the failed chain.

:func:`conf` reads the job's pipeline settings (``spillway run ... --conf KEY=VALUE``) while
the pipeline is built, on the driver and in every task alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from channels import keygroups
from channels.errors import PipelineDefinitionError
from channels.ids import JobId, OperatorName, job_id, operator_name
from channels.partitioners import Broadcast, Forward, KeyHash, Partitioner, RoundRobin
from recovery.jobconf import conf as conf  # re-exported: pipelines read their settings
from recovery.plan import EdgePlan, JobPlan, OperatorPlan, Record
from spark_jobs import keyedops
from spark_jobs.operators import (
    FilterLogic,
    FlatMapLogic,
    KeyedAggregateLogic,
    MapLogic,
    make_chain,
)
from spark_jobs.parquetsink import columnar_sink
from spark_jobs.process import ProcessContext
from spark_jobs.records import adapt, output_converter, output_schema, returned_type
from spark_jobs.schemas import avro_schema
from spark_jobs.sinks import ConsoleSink, JsonlFileSink, KafkaTopicSink
from spark_jobs.sources import FileSource, GeneratorSource, KafkaTopicSource
from spark_jobs.watermarks import Watermarks

Schema = dict[str, Any]  # an Avro record schema, as operators keep it
# What the API takes: an Avro record schema, a dataclass, a TypedDict or a pyarrow.Schema
# (spark_jobs.schemas); ``None`` where it can come from a function's return annotation.
SchemaLike = Any
_ROUTINGS = frozenset({"auto", "forward", "rebalance", "broadcast", "hash"})


@dataclass
class _Node:
    name: str
    parallelism: int
    kind: str  # source | transform | sink
    schema: Schema | None  # of its output records
    factory: Callable[[], Any]
    stateful: bool = False
    bounded: bool = True
    description: dict[str, Any] = field(default_factory=dict)
    event_time: bool = False  # a source whose records have event time (and watermarks)
    # Behind key_by: the key-group count asked for (None: the default) and how a state key
    # maps to its record key (keyedops.OperatorSpec.key_of_state).
    keyed: bool = False
    max_parallelism: int | None = None
    key_of_state: Callable[[Any], Any] | None = None


@dataclass
class _Edge:
    upstream: str
    downstream: str
    routing: str  # forward | rebalance | hash | broadcast | auto
    key_fn: Callable[[Record], Any] | None = None


class Pipeline:
    """A job graph under construction. Operators are added through :class:`Stream` methods."""

    def __init__(self, name: str, *, chaining: bool = False) -> None:
        self.name = name
        self.chaining = chaining
        self._nodes: dict[str, _Node] = {}
        self._order: list[str] = []
        self._edges: list[_Edge] = []
        self._errors: list[str] = []

    # -- sources -------------------------------------------------------------------------

    def generate(
        self,
        name: str,
        *,
        make: Callable[[int], Record],
        schema: SchemaLike = None,
        count: int | None,
        parallelism: int = 1,
        rate: float | None = None,
        event_time: Callable[[Record], int] | None = None,
        timestamp: Callable[[Record], int] | None = None,
        watermarks: Watermarks | None = None,
    ) -> Stream:
        """A seeded generator: record ``make(i)`` for ``i < count`` (``None``: unbounded).

        Event time: ``timestamp(record)`` in ms (``event_time`` is its older name), with
        ``watermarks`` (default :meth:`Watermarks.monotonic`); see :meth:`read_kafka`.
        ``schema`` may be omitted when ``make`` is annotated ``-> SomeDataclass``.
        """
        if event_time is not None and timestamp is not None:
            raise PipelineDefinitionError(
                f"source {name!r}: pass timestamp= or its older name event_time=, not both"
            )
        ts = _event_time_args(name, timestamp or event_time, watermarks, required=True)
        avro, out = output_schema(schema, make, f"source {name!r}", name)
        make = adapt(make, (), out)
        node = self._add(
            name,
            parallelism,
            "source",
            avro,
            partial(GeneratorSource, make, count, parallelism, rate, _typed(ts[0]), ts[1]),
            description={"source": "generator", "count": count},
        )
        node.bounded = count is not None
        node.event_time = ts[1] is not None
        return Stream(self, name)

    def read_files(
        self,
        name: str,
        pattern: str,
        *,
        format: str,
        schema: SchemaLike,
        parallelism: int = 1,
        timestamp: Callable[[Record], int] | None = None,
        watermarks: Watermarks | None = None,
    ) -> Stream:
        """Rows of files matching ``pattern`` (``jsonl``, ``csv`` or ``parquet``).

        JSONL and CSV lines are checked against ``schema``; a bad line (not UTF-8, not
        JSON, wrong column count, NaN, a number too big for its field) stops the job
        naming file and line, or goes to the dead-letter channel with ``--dead-letter``.
        Event time: ``timestamp(record)`` in ms, with ``watermarks`` (default
        :meth:`Watermarks.monotonic`); a timestamp that fails is a bad line too.
        """
        ts = _event_time_args(name, timestamp, watermarks, required=True)
        schema = avro_schema(schema, where=f"source {name!r}", name=name)
        node = self._add(
            name,
            parallelism,
            "source",
            schema,
            partial(FileSource, pattern, format, parallelism, schema, _typed(ts[0]), ts[1]),
            description={"source": "files", "format": format},
        )
        node.event_time = ts[1] is not None
        return Stream(self, name)

    def read_kafka(
        self,
        name: str,
        topic: str,
        *,
        schema: SchemaLike,
        parallelism: int = 1,
        bounded: bool = False,
        timestamp: Callable[[Record], int] | None = None,
        watermarks: Watermarks | None = None,
    ) -> Stream:
        """JSON records of an existing topic (read_committed); offsets live in checkpoints.

        ``bounded=True`` reads up to the end offsets seen when the job first starts.

        Event time (needed by windows behind an unbounded source): pass ``watermarks``,
        e.g. ``Watermarks.bounded(5_000, idle_timeout_ms=30_000)``. Each record's event
        time is then its Kafka record timestamp, or ``timestamp(record)`` (ms) if given
        (``timestamp`` alone means ``Watermarks.monotonic()``). A subtask's watermark is
        the minimum over its partitions of (largest event time − bound), leaving out
        partitions idle longer than the idle timeout; it is checkpointed with the offsets.
        """
        ts = _event_time_args(name, timestamp, watermarks, required=False)
        node = self._add(
            name,
            parallelism,
            "source",
            avro_schema(schema, where=f"source {name!r}", name=name),
            partial(KafkaTopicSource, topic, parallelism, bounded, schema, _typed(ts[0]), ts[1]),
            description={"source": "kafka", "topic": topic, "bounded": bounded},
        )
        node.bounded = bounded
        node.event_time = ts[1] is not None
        return Stream(self, name)

    # -- graph ---------------------------------------------------------------------------

    def add_edge(self, upstream: str, downstream: str, routing: str = "auto") -> None:
        """Connect two existing operators (for graphs the fluent API cannot express)."""
        self._edges.append(_Edge(upstream, downstream, routing))

    def _add(
        self,
        name: str,
        parallelism: int,
        kind: str,
        schema: Schema | None,
        factory: Callable[[], Any],
        *,
        stateful: bool = False,
        description: dict[str, Any] | None = None,
    ) -> _Node:
        if name in self._nodes:
            self._errors.append(
                f"operator name {name!r} is used twice; give each operator its own name"
            )
        if not isinstance(parallelism, int) or parallelism < 1:
            self._errors.append(
                f"operator {name!r} has parallelism {parallelism!r}; use an integer >= 1"
            )
        node = _Node(name, parallelism, kind, schema, factory, stateful, True, description or {})
        self._nodes.setdefault(name, node)
        self._order.append(name)
        return node

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
            if e.routing not in _ROUTINGS or (e.routing == "hash" and e.key_fn is None):
                problems.append(
                    f"edge {e.upstream} -> {e.downstream} has routing {e.routing!r}; use one of "
                    f"{', '.join(sorted(_ROUTINGS - {'hash'}))}, or key_by() for hash routing"
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
                        "tumbling_window, or bound the source"
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
        return JobPlan(jid, ops, edges, bounded)

    def _chains(self) -> list[list[_Node]]:
        """Operators grouped into chains (single operators without ``chaining``), in
        topological order of their first operators."""
        chains: list[list[_Node]] = []
        chain_of: dict[str, list[_Node]] = {}
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

    def _chainable(self, e: _Edge, chain_of: dict[str, list[_Node]]) -> bool:
        up, down = self._nodes[e.upstream], self._nodes[e.downstream]
        if self._routing(e) != "forward" or down.kind == "source" or up.kind == "sink":
            return False
        if sum(1 for o in self._edges if o.upstream == up.name) != 1:
            return False
        # Keyed state only in the chain's last transform: a failed call then changes no
        # state (ChainedLogic), and dead-letter retries cannot apply a record twice.
        return not (down.kind == "transform" and any(m.stateful for m in chain_of[up.name]))

    def _topological(self) -> list[_Node]:
        indeg = {n: 0 for n in self._nodes}
        for e in self._edges:
            indeg[e.downstream] += 1
        ready = [n for n in self._order if indeg[n] == 0]
        out: list[_Node] = []
        while ready:
            n = ready.pop(0)
            out.append(self._nodes[n])
            for e in self._edges:
                if e.upstream == n:
                    indeg[e.downstream] -= 1
                    if indeg[e.downstream] == 0:
                        ready.append(e.downstream)
        return out

    def _routing(self, e: _Edge) -> str:
        if e.routing != "auto":
            return e.routing
        up, down = self._nodes[e.upstream], self._nodes[e.downstream]
        return "forward" if up.parallelism == down.parallelism else "rebalance"

    def _edge_plan(self, e: _Edge, upstream: str, downstream: str) -> EdgePlan:
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
        )


_WATERMARK_FIX = {
    "kafka": "read_kafka(..., watermarks=Watermarks.bounded(max_out_of_orderness_ms)) "
    "(event time: the Kafka record timestamp, or timestamp=fn)",
    "generator": "generate(..., timestamp=fn, watermarks=Watermarks.bounded(ms))",
}


def _typed(timestamp: Callable[[Record], int] | None) -> Callable[[Record], int] | None:
    """A timestamp function that gets a dataclass if its parameter is annotated with one."""
    return None if timestamp is None else adapt(timestamp)


def _event_time_args(
    name: str,
    timestamp: Callable[[Record], int] | None,
    watermarks: Watermarks | None,
    *,
    required: bool,
) -> tuple[Callable[[Record], int] | None, Watermarks | None]:
    """(timestamp function, strategy) of source ``name``; strategy ``None``: no event time.

    ``required``: the source has no timestamp of its own (unlike Kafka's record time).
    """
    if watermarks is not None and not isinstance(watermarks, Watermarks):
        raise PipelineDefinitionError(
            f"source {name!r}: watermarks must be a Watermarks strategy, e.g. "
            f"Watermarks.bounded(5000), got {watermarks!r}"
        )
    if timestamp is not None and not callable(timestamp):
        raise PipelineDefinitionError(
            f"source {name!r}: timestamp must be a function of the record returning its "
            f"event time in ms, got {timestamp!r}"
        )
    if watermarks is not None and timestamp is None and required:
        raise PipelineDefinitionError(
            f"source {name!r}: watermarks= needs timestamp=, a function of the record "
            "returning its event time in ms"
        )
    if timestamp is not None and watermarks is None:
        watermarks = Watermarks.monotonic()
    return timestamp, watermarks


def _max_parallelism(node: _Node) -> int | None:
    """The key-group count of a keyed operator (None: not keyed), validated."""
    if not node.keyed:
        return None
    where = f"operator {node.name!r}"
    if node.max_parallelism is None:
        return keygroups.max_parallelism(
            max(keygroups.DEFAULT_MAX_PARALLELISM, node.parallelism), node.parallelism, where
        )
    return keygroups.max_parallelism(node.max_parallelism, node.parallelism, where)


def _operator_plan(chain: list[_Node]) -> OperatorPlan:
    """The plan of one operator, or of a chain of them (named after its first)."""
    first, last = chain[0], chain[-1]
    logics = [m.factory for m in chain if m.kind == "transform"]
    make_logic: Callable[[], Any] | None = None
    if len(logics) == 1:
        make_logic = logics[0]
    elif logics:
        make_logic = partial(make_chain, tuple(logics))
    return OperatorPlan(
        name=OperatorName(first.name),
        parallelism=first.parallelism,
        kind=first.kind if len(chain) == 1 else "chain",
        make_source=first.factory if first.kind == "source" else None,
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


def _partitioner_factory(
    routing: str, key_fn: Callable[[Record], Any] | None
) -> Callable[[int, int], Partitioner]:
    if routing == "forward":
        return Forward
    if routing == "rebalance":
        return RoundRobin
    if routing == "broadcast":
        return lambda _i, p: Broadcast(p)
    if routing == "hash":
        assert key_fn is not None
        fn = key_fn
        return lambda _i, p: KeyHash(fn, p)
    raise PipelineDefinitionError(f"unknown routing {routing!r}")


class Stream:
    """The output of an operator; methods add a downstream operator."""

    def __init__(
        self,
        pipeline: Pipeline,
        name: str,
        routing: str = "auto",
        key_fn: Callable[[Record], Any] | None = None,
    ) -> None:
        self._p = pipeline
        self.name = name
        self._routing = routing
        self._key_fn = key_fn

    def _then(
        self,
        name: str,
        factory: Callable[[], Any],
        schema: Schema | None,
        parallelism: int | None,
        kind: str = "transform",
        stateful: bool = False,
        description: dict[str, Any] | None = None,
    ) -> Stream:
        up = self._p._nodes.get(self.name)
        p = parallelism if parallelism is not None else (up.parallelism if up else 1)
        self._p._add(name, p, kind, schema, factory, stateful=stateful, description=description)
        self._p._edges.append(_Edge(self.name, name, self._routing, self._key_fn))
        return Stream(self._p, name)

    def _schema(self) -> Schema | None:
        node = self._p._nodes.get(self.name)
        return node.schema if node else None

    def map(
        self,
        name: str,
        fn: Callable[[Record], Record],
        *,
        schema: SchemaLike = None,
        parallelism: int | None = None,
    ) -> Stream:
        """One output record per input record (``schema`` defaults to ``fn``'s return
        annotation; records arrive as dicts unless ``fn``'s parameter names a dataclass)."""
        avro, out = output_schema(schema, fn, f"operator {name!r}", name)
        fn = adapt(fn, (0,), out)
        return self._then(name, partial(MapLogic, fn), avro, parallelism, description={"op": "map"})

    def flat_map(
        self,
        name: str,
        fn: Callable[[Record], Iterable[Record]],
        *,
        schema: SchemaLike = None,
        parallelism: int | None = None,
    ) -> Stream:
        """Zero or more output records per input record (``schema`` defaults to the element
        type of ``fn``'s return annotation, e.g. ``-> Iterator[Word]``)."""
        avro, out = output_schema(schema, fn, f"operator {name!r}", name, many=True)
        fn = adapt(fn, (0,), out, many=True)
        return self._then(
            name, partial(FlatMapLogic, fn), avro, parallelism, description={"op": "flat_map"}
        )

    def filter(
        self, name: str, predicate: Callable[[Record], bool], *, parallelism: int | None = None
    ) -> Stream:
        """Only records for which ``predicate`` is true."""
        return self._then(
            name,
            partial(FilterLogic, adapt(predicate)),
            self._schema(),
            parallelism,
            description={"op": "filter"},
        )

    def key_by(
        self, key_fn: Callable[[Record], Any], *, max_parallelism: int | None = None
    ) -> KeyedStream:
        """Route records by key (stable hash) to the next, keyed operator.

        ``max_parallelism``: the keyed operator's number of key groups (its input channel
        and changelog partitions), the most subtasks it can ever be scaled to; fixed when
        the job first runs. Default ``channels.keygroups.DEFAULT_MAX_PARALLELISM`` (or the
        operator's parallelism, if larger).
        """
        return KeyedStream(self._p, self.name, adapt(key_fn), max_parallelism)

    def rebalance(self) -> Stream:
        """Round-robin to the next operator."""
        return Stream(self._p, self.name, "rebalance")

    def forward(self) -> Stream:
        """Subtask i to subtask i (needs equal parallelism)."""
        return Stream(self._p, self.name, "forward")

    def broadcast(self) -> Stream:
        """Every record to every subtask of the next operator."""
        return Stream(self._p, self.name, "broadcast")

    def write_jsonl(self, name: str, directory: str, *, parallelism: int | None = None) -> None:
        """Exactly-once JSONL files under ``directory/<name>/`` (published at checkpoints)."""
        self._then(
            name,
            partial(JsonlFileSink, directory, name),
            None,
            parallelism,
            "sink",
            description={"sink": "jsonl"},
        )

    def write_parquet(
        self,
        name: str,
        directory: str,
        *,
        schema: SchemaLike = None,
        partition_by: str | None = None,
        max_file_bytes: int = 128 << 20,
        roll_interval_s: float = 60.0,
        parallelism: int | None = None,
    ) -> None:
        """Exactly-once Parquet files under ``directory/<name>/`` (see spark_jobs.parquetsink):
        published when their checkpoint commits, rolled at every checkpoint and by size and
        time, Hive-style directories with ``partition_by``. ``schema`` defaults to the
        input's (a ``pyarrow.Schema`` is used as it is)."""
        sink = columnar_sink(
            "parquet",
            directory,
            name,
            schema,
            self._schema(),
            partition_by,
            max_file_bytes,
            roll_interval_s,
        )
        description = {"sink": "parquet", "partition_by": partition_by}
        self._then(name, sink, None, parallelism, "sink", description=description)

    def write_delta(
        self,
        name: str,
        directory: str,
        *,
        schema: SchemaLike = None,
        partition_by: str | None = None,
        max_file_bytes: int = 128 << 20,
        roll_interval_s: float = 60.0,
        parallelism: int | None = None,
    ) -> None:
        """Exactly-once appends to the Delta Lake table ``directory/<name>/`` (needs the
        ``delta`` extra; see spark_jobs.deltasink): the files of :meth:`write_parquet`,
        added to the table's log in one idempotent commit per checkpoint and subtask."""
        sink = columnar_sink(
            "delta",
            directory,
            name,
            schema,
            self._schema(),
            partition_by,
            max_file_bytes,
            roll_interval_s,
        )
        description = {"sink": "delta", "partition_by": partition_by}
        self._then(name, sink, None, parallelism, "sink", description=description)

    def write_kafka(
        self,
        name: str,
        topic: str,
        *,
        key: Callable[[Record], Any] | None = None,
        parallelism: int | None = None,
    ) -> None:
        """JSON records to ``topic``, in the subtask's transactions (read them read_committed).

        With ``key``, each message is keyed by ``key(record)`` (so Kafka keeps per-key order);
        without, librdkafka spreads messages over the partitions.
        """
        self._then(
            name,
            partial(KafkaTopicSink, topic, key and adapt(key)),
            None,
            parallelism,
            "sink",
            description={"sink": "kafka"},
        )

    def print(self, name: str = "console", *, limit: int = 20) -> None:
        """Committed records on stdout, for demos."""
        self._then(
            name, partial(ConsoleSink, limit), None, 1, "sink", description={"sink": "console"}
        )


class KeyedStream(Stream):
    """A stream routed by key; keyed operators keep per-key state."""

    def __init__(
        self,
        pipeline: Pipeline,
        name: str,
        key_fn: Callable[[Record], Any],
        max_parallelism: int | None = None,
    ) -> None:
        super().__init__(pipeline, name, "hash", key_fn)
        self.key_fn = key_fn
        self.max_parallelism = max_parallelism

    def _then(
        self,
        name: str,
        factory: Callable[[], Any],
        schema: Schema | None,
        parallelism: int | None,
        kind: str = "transform",
        stateful: bool = False,
        description: dict[str, Any] | None = None,
        key_of_state: Callable[[Any], Any] | None = None,
    ) -> Stream:
        """As :meth:`Stream._then`; the new operator is keyed (key groups, DESIGN §10)."""
        out = super()._then(name, factory, schema, parallelism, kind, stateful, description)
        node = self._p._nodes[name]
        node.keyed, node.max_parallelism, node.key_of_state = (
            True,
            self.max_parallelism,
            key_of_state,
        )
        return out

    def aggregate(
        self,
        name: str,
        *,
        init: Callable[[], Any],
        add: Callable[[Any, Record], Any],
        result: Callable[[Any, Any], Record],
        schema: SchemaLike = None,
        emit: str = "final",
        parallelism: int | None = None,
    ) -> Stream:
        """Fold records per key into a JSON-able accumulator.

        ``emit="final"`` emits ``result(key, acc)`` for every key when the input ends;
        ``emit="updates"`` emits it after every record.
        """
        if emit not in ("final", "updates"):
            raise PipelineDefinitionError(
                f"operator {name!r}: emit must be 'final' or 'updates', got {emit!r}"
            )
        avro, out = output_schema(schema, result, f"operator {name!r}", name)
        add, result = adapt(add, (1,)), adapt(result, (), out)
        return self._then(
            name,
            partial(KeyedAggregateLogic, self.key_fn, init, add, result, emit),
            avro,
            parallelism,
            stateful=True,
            description={"op": "aggregate", "emit": emit},
        )

    def reduce(
        self,
        name: str,
        fn: Callable[[Record, Record], Record],
        *,
        emit: str = "final",
        parallelism: int | None = None,
    ) -> Stream:
        """Combine records of a key pairwise with ``fn``; the result has the input's schema."""
        schema = self._schema()
        assert schema is not None
        # Dict in, dict out (the accumulator is keyed state): instances only inside fn.
        fn = adapt(fn, (0, 1), output_converter([returned_type(fn)], f"operator {name!r}"))
        return self.aggregate(
            name,
            init=lambda: None,
            add=lambda acc, r: r if acc is None else fn(acc, r),
            result=lambda _k, acc: acc,
            schema=schema,
            emit=emit,
            parallelism=parallelism,
        )

    def tumbling_window(
        self,
        name: str,
        *,
        size: int,
        event_time: Callable[[Record], int],
        init: Callable[[], Any],
        add: Callable[[Any, Record], Any],
        result: Callable[[Any, int, int, Any], Record],
        schema: SchemaLike = None,
        allowed_lateness_ms: int = 0,
        emit: str = "final",
        parallelism: int | None = None,
    ) -> Stream:
        """Event-time tumbling windows ``[start, start + size)`` (spark_jobs.windows)."""
        spec = keyedops.fixed_window(
            "tumbling_window", name, self.key_fn, size=size, hop=size, event_time=event_time,
            init=init, add=add, result=result, schema=schema,
            allowed_lateness_ms=allowed_lateness_ms, emit=emit,
        )  # fmt: skip
        return self._keyed(name, spec, parallelism)

    def hopping_window(
        self,
        name: str,
        *,
        size: int,
        hop: int,
        event_time: Callable[[Record], int],
        init: Callable[[], Any],
        add: Callable[[Any, Record], Any],
        result: Callable[[Any, int, int, Any], Record],
        schema: SchemaLike = None,
        allowed_lateness_ms: int = 0,
        emit: str = "final",
        parallelism: int | None = None,
    ) -> Stream:
        """Event-time windows of ``size`` starting every ``hop`` ms (spark_jobs.windows)."""
        spec = keyedops.fixed_window(
            "hopping_window", name, self.key_fn, size=size, hop=hop, event_time=event_time,
            init=init, add=add, result=result, schema=schema,
            allowed_lateness_ms=allowed_lateness_ms, emit=emit,
        )  # fmt: skip
        return self._keyed(name, spec, parallelism)

    def sliding_window(
        self,
        name: str,
        *,
        size: int,
        slide: int,
        event_time: Callable[[Record], int],
        init: Callable[[], Any],
        add: Callable[[Any, Record], Any],
        result: Callable[[Any, int, int, Any], Record],
        schema: SchemaLike = None,
        allowed_lateness_ms: int = 0,
        emit: str = "final",
        parallelism: int | None = None,
    ) -> Stream:
        """Flink's sliding windows: hopping windows of ``size`` every ``slide`` ms."""
        spec = keyedops.fixed_window(
            "sliding_window", name, self.key_fn, size=size, hop=slide, event_time=event_time,
            init=init, add=add, result=result, schema=schema,
            allowed_lateness_ms=allowed_lateness_ms, emit=emit,
        )  # fmt: skip
        return self._keyed(name, spec, parallelism)

    def session_window(
        self,
        name: str,
        *,
        gap: int,
        event_time: Callable[[Record], int],
        init: Callable[[], Any],
        add: Callable[[Any, Record], Any],
        merge: Callable[[Any, Any], Any],
        result: Callable[[Any, int, int, Any], Record],
        schema: SchemaLike = None,
        allowed_lateness_ms: int = 0,
        emit: str = "final",
        parallelism: int | None = None,
    ) -> Stream:
        """Sessions ``[first, last + gap)`` per key, merged as records bridge them."""
        spec = keyedops.session_window(
            name, self.key_fn, gap=gap, event_time=event_time, init=init, add=add,
            merge=merge, result=result, schema=schema,
            allowed_lateness_ms=allowed_lateness_ms, emit=emit,
        )  # fmt: skip
        return self._keyed(name, spec, parallelism)

    def count_window(
        self,
        name: str,
        *,
        size: int,
        init: Callable[[], Any],
        add: Callable[[Any, Record], Any],
        result: Callable[[Any, int, int, Any], Record],
        schema: SchemaLike = None,
        emit: str = "final",
        parallelism: int | None = None,
    ) -> Stream:
        """Windows of ``size`` records per key, in arrival order (spark_jobs.windows)."""
        spec = keyedops.count_window(
            name, self.key_fn, size=size, init=init, add=add, result=result, schema=schema,
            emit=emit,
        )  # fmt: skip
        return self._keyed(name, spec, parallelism)

    def process(
        self,
        name: str,
        fn: Callable[[Record, ProcessContext], Iterable[Record] | None],
        *,
        on_timer: Callable[[int, ProcessContext], Iterable[Record] | None] | None = None,
        event_time: Callable[[Record], int] | None = None,
        ttl_ms: dict[str, int] | None = None,
        schema: SchemaLike = None,
        parallelism: int | None = None,
    ) -> Stream:
        """A keyed process function with keyed state and timers (spark_jobs.process)."""
        spec = keyedops.process(
            name, self.key_fn, fn, on_timer=on_timer, event_time=event_time, ttl_ms=ttl_ms,
            schema=schema,
        )  # fmt: skip
        return self._keyed(name, spec, parallelism)

    def _keyed(self, name: str, spec: keyedops.OperatorSpec, parallelism: int | None) -> Stream:
        return self._then(
            name, spec.factory, spec.schema, parallelism, stateful=True,
            description=spec.description, key_of_state=spec.key_of_state,
        )  # fmt: skip
