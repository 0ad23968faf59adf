"""Two connected streams and the keyed co-process function over them.

``connect(a, b).key_by(key_a, key_b).process(name, fn_a, fn_b, on_timer=...)`` routes
``a`` by ``key_a`` and ``b`` by ``key_b`` to one operator: records of either stream with
equal keys meet at the same subtask. ``fn_a(record, ctx)`` runs for each record of ``a``,
``fn_b(record, ctx)`` for each of ``b``; both see the same keyed state through ``ctx``
(value, list and map state, timers, TTL: see :mod:`spillway.spark_jobs.operators.process`), so one
input can
keep what the other reads, as in an enrichment. ``on_timer(ts, ctx)`` fires timers
registered from either. The operator's watermark is the minimum over both inputs
(spillway.channels.inputmarks); at the end of bounded inputs every event-time timer fires.

Within an input, records of one upstream subtask arrive in order; between the inputs
the interleaving is whatever the channels deliver, so a result must not depend on it to
be reproducible (buffer in state until both sides are there, or use event time).

The joins run on the same wiring: ``connect(left, right).key_by(...)`` then
``.interval_join(...)``, ``.asof_join(...)`` or ``.lookup_join(...)``
(spillway.spark_jobs.operators.joins).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

from spillway.channels.errors import PipelineDefinitionError
from spillway.recovery.job.plan import Record
from spillway.spark_jobs.api import joinops
from spillway.spark_jobs.api.graph import Edge
from spillway.spark_jobs.api.keyedops import OperatorSpec, _check, _or_empty, _second
from spillway.spark_jobs.api.streams import SchemaLike, Stream
from spillway.spark_jobs.operators.process import ProcessContext, ProcessLogic, wall_ms
from spillway.spark_jobs.records.records import adapt, output_schema

ProcessFn = Callable[[Record, ProcessContext], Iterable[Record] | None]
TimerFn = Callable[[int, ProcessContext], Iterable[Record] | None]
KeyFn = Callable[[Record], Any]
TimeFn = Callable[[Record], int]


class CoProcessLogic(ProcessLogic):
    """A keyed process function with several named inputs sharing one keyed state.

    ``inputs`` maps each input's name (its upstream operator) to ``(key_fn, fn,
    time_fn)``; ``time_fn`` (or None) gives a record's event time as ``ctx.timestamp``.
    """

    def __init__(
        self,
        inputs: Mapping[str, tuple[KeyFn, ProcessFn, TimeFn | None]],
        on_timer: TimerFn | None = None,
        ttl_ms: Mapping[str, int] | None = None,
        clock: Callable[[], int] = wall_ms,
    ) -> None:
        first_key, first_fn, first_time = next(iter(inputs.values()))
        super().__init__(first_key, first_fn, on_timer, first_time, ttl_ms, clock)
        self.inputs = dict(inputs)

    def process_input(self, input: str, records: Sequence[Record]) -> list[Record]:
        """The function of ``input`` for each record, bound to its key by that input's key
        function; state and timer changes apply when all succeeded."""
        try:
            key_fn, fn, time_fn = self.inputs[input]
        except KeyError:
            raise PipelineDefinitionError(
                f"co-process got records of input {input!r}, but its inputs are "
                f"{sorted(self.inputs)}; the job's plan and the running code differ"
            ) from None
        return self._run(records, key_fn, fn, time_fn)

    def process(self, records: Sequence[Record]) -> list[Record]:
        """Not used: every record of a co-process comes with its input's name."""
        raise TypeError("CoProcessLogic needs the input of each record: call process_input")


def connect(a: Stream, b: Stream) -> ConnectedStreams:
    """Two streams to be processed together by one two-input operator (``key_by`` next)."""
    if a._p is not b._p:
        raise PipelineDefinitionError(
            f"connect: stream {a.name!r} and stream {b.name!r} belong to different pipelines"
        )
    both = set(a.upstreams) & set(b.upstreams)
    if both:
        raise PipelineDefinitionError(
            f"connect: stream {sorted(both)[0]!r} is on both sides; connect two different "
            "operators (map one of them first if you need the same records twice)"
        )
    return ConnectedStreams(a, b)


class ConnectedStreams:
    """The result of :func:`connect`; :meth:`key_by` makes it keyed."""

    def __init__(self, a: Stream, b: Stream) -> None:
        self.a, self.b = a, b

    def key_by(self, key_a: KeyFn, key_b: KeyFn) -> ConnectedKeyedStreams:
        """Route ``a`` by ``key_a`` and ``b`` by ``key_b`` (equal keys meet)."""
        return ConnectedKeyedStreams(self.a, self.b, adapt(key_a), adapt(key_b))


class ConnectedKeyedStreams:
    """Two keyed streams; :meth:`process` adds the co-process operator."""

    def __init__(self, a: Stream, b: Stream, key_a: KeyFn, key_b: KeyFn) -> None:
        self.a, self.b, self.key_a, self.key_b = a, b, key_a, key_b

    def process(
        self,
        name: str,
        fn_a: ProcessFn,
        fn_b: ProcessFn,
        *,
        on_timer: TimerFn | None = None,
        event_time_a: TimeFn | None = None,
        event_time_b: TimeFn | None = None,
        ttl_ms: dict[str, int] | None = None,
        schema: SchemaLike = None,
        parallelism: int | None = None,
    ) -> Stream:
        """A keyed co-process function (see the module docstring); ``schema`` defaults to
        the element type of ``fn_a``'s return annotation; ``event_time_a``/``_b`` give a
        record's event time (ms) as ``ctx.timestamp`` (else None)."""
        for state, ms in (ttl_ms or {}).items():
            _check(name, **{f"ttl_ms[{state!r}]": ms})
        avro, out = output_schema(schema, fn_a, f"operator {name!r}", name, many=True)
        fns = {
            "a": adapt(_or_empty(fn_a), (0,), out, many=True),
            "b": adapt(_or_empty(fn_b), (0,), out, many=True),
        }
        times = {side: adapt(t) if t is not None else None
                 for side, t in (("a", event_time_a), ("b", event_time_b))}  # fmt: skip
        inputs: dict[str, tuple[KeyFn, ProcessFn, TimeFn | None]] = {}
        for side, stream, key in (("a", self.a, self.key_a), ("b", self.b, self.key_b)):
            inputs.update((up, (key, fns[side], times[side])) for up in stream.upstreams)
        timer = adapt(_or_empty(on_timer), (), out, many=True) if on_timer else None
        factory = partial(CoProcessLogic, inputs, timer, dict(ttl_ms or {}))
        description = {
            "op": "co_process",
            "inputs": {"a": list(self.a.upstreams), "b": list(self.b.upstreams)},
            "ttl_ms": dict(ttl_ms or {}),
        }
        return self._operator(name, factory, avro, description, parallelism)

    def _inputs(self) -> joinops.Inputs:
        return (self.a.upstreams, self.key_a, self.b.upstreams, self.key_b)

    def _join(self, name: str, spec: OperatorSpec, parallelism: int | None) -> Stream:
        return self._operator(name, spec.factory, spec.schema, spec.description, parallelism)

    def interval_join(
        self,
        name: str,
        *,
        lower: int,
        upper: int,
        left_time: TimeFn,
        right_time: TimeFn,
        result: Callable[[Any, Any], Record],
        allowed_lateness_ms: int = 0,
        schema: SchemaLike = None,
        parallelism: int | None = None,
    ) -> Stream:
        """Join ``a`` (left) and ``b`` (right) records of one key whose event times (ms,
        from ``left_time``/``right_time``) satisfy ``l + lower <= r <= l + upper``:
        ``result(left, right)`` once per pair, when the second arrives. Buffers expire by
        the watermark; records more than ``allowed_lateness_ms`` behind it are set aside
        (spillway.spark_jobs.operators.joinbook)."""
        spec = joinops.interval_join(
            name, self._inputs(), lower=lower, upper=upper, left_time=left_time,
            right_time=right_time, result=result, allowed_lateness_ms=allowed_lateness_ms,
            schema=schema,
        )  # fmt: skip
        return self._join(name, spec, parallelism)

    def asof_join(
        self,
        name: str,
        *,
        left_time: TimeFn,
        right_time: TimeFn,
        result: Callable[[Any, Any], Record],
        how: str = "left",
        allowed_lateness_ms: int = 0,
        retention_ms: int | None = None,
        schema: SchemaLike = None,
        parallelism: int | None = None,
    ) -> Stream:
        """Join each ``a`` (left) record with the latest ``b`` (right) record of its key at
        or before its event time (within ``retention_ms`` of it, if given): ``result(left,
        right or None)``, once the watermark passes the left record's time +
        ``allowed_lateness_ms``. ``how="inner"`` leaves out left records without a match.
        Right history is pruned by the watermark (spillway.spark_jobs.operators.joinbook)."""
        spec = joinops.asof_join(
            name, self._inputs(), left_time=left_time, right_time=right_time, result=result,
            allowed_lateness_ms=allowed_lateness_ms, retention_ms=retention_ms, how=how,
            schema=schema,
        )  # fmt: skip
        return self._join(name, spec, parallelism)

    def lookup_join(
        self,
        name: str,
        *,
        result: Callable[[Any, Any], Record],
        how: str = "left",
        schema: SchemaLike = None,
        parallelism: int | None = None,
    ) -> Stream:
        """Join each ``a`` record, as it arrives, with the current row of its key in the
        table ``b`` (e.g. ``read_kafka`` of a compacted topic; each of its records replaces
        its key's row, and with ``tombstones=True`` a tombstone deletes it):
        ``result(record, row or None)``; ``how="inner"`` leaves out records whose key has
        no row. The table is the operator's changelog-backed state."""
        spec = joinops.lookup_join(name, self._inputs(), result=result, how=how, schema=schema)
        return self._join(name, spec, parallelism)

    def _operator(
        self,
        name: str,
        factory: Callable[[], Any],
        schema: Any,
        description: dict[str, Any],
        parallelism: int | None,
    ) -> Stream:
        """Add a keyed two-input operator reading ``a`` by ``key_a`` and ``b`` by ``key_b``
        (a co-process function or a join, spillway.spark_jobs.api.joinops)."""
        graph = self.a._p
        up = graph._nodes.get(self.a.name)
        p = parallelism if parallelism is not None else (up.parallelism if up else 1)
        graph._add(name, p, "transform", schema, factory, stateful=True, description=description)
        # Keyed: its inputs and changelog are partitioned by key group (docs/architecture.md); state
        # keys are ``(kind, key, ...)``.
        node = graph._nodes[name]
        node.keyed, node.key_of_state = True, _second
        for stream, key in ((self.a, self.key_a), (self.b, self.key_b)):
            for up_name in stream.upstreams:
                graph._edges.append(Edge(up_name, name, "hash", key))
        return Stream(graph, name)
