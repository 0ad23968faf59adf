"""Keyed streams: the operators that keep per-key state (aggregates, windows, process
functions, columnar aggregates) after :meth:`spark_jobs.streams.Stream.key_by`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

from channels.batchkey import BatchKey
from channels.batchwrite import ColumnKey
from channels.errors import PipelineDefinitionError
from recovery.plan import Record
from spark_jobs import batchspecs, keyedops
from spark_jobs.batchagg import Agg, Derive
from spark_jobs.graph import Graph, Schema
from spark_jobs.operators import (
    KeyedAggregateLogic,
)
from spark_jobs.process import ProcessContext
from spark_jobs.records import adapt, output_converter, output_schema, returned_type
from spark_jobs.streams import SchemaLike, Stream


class KeyedStream(Stream):
    """A stream routed by key; keyed operators keep per-key state."""

    def __init__(
        self,
        pipeline: Graph,
        name: str,
        key_fn: Callable[[Record], Any],
        max_parallelism: int | None = None,
        also: tuple[str, ...] = (),
    ) -> None:
        super().__init__(pipeline, name, "hash", key_fn, also)
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

    def aggregate_batches(
        self,
        name: str,
        aggs: Mapping[str, Agg],
        *,
        derive: Mapping[str, Derive] | None = None,
        emit: str = "final",
        parallelism: int | None = None,
        key_name: str = "key",
    ) -> Stream:
        """Columnar keyed aggregation after ``key_by(column)`` (spark_jobs.batchagg): per
        key, ``aggs`` (output column -> ``Agg(kind, column or expression)``, kinds count,
        sum, min, max, mean) computed by Arrow per input batch and merged into keyed state
        (checkpointed through the changelog, as :meth:`aggregate`'s); ``derive`` adds
        columns computed from the aggregated table. ``emit`` as :meth:`aggregate`, except
        that ``"updates"`` emits one row per key and input batch; ``"rows"`` (count, sum,
        mean) emits one row per input row, as :meth:`aggregate`'s ``"updates"`` does.

        After ``key_by(fn)``, ``fn`` takes a whole ``pyarrow.RecordBatch`` and returns one
        key per row (an Arrow array, numpy array or pandas/Polars Series), e.g.
        ``lambda b: pc.utf8_lower(b["user"])``: batches are routed by it vectorised
        (:mod:`channels.batchkey`) and the output's key column is ``key_name``. It is
        checked now on an empty batch: a per-record function is refused, saying what to
        pass. It must be row-wise (a row's key depends on that row alone)."""
        stream: KeyedStream = self
        if isinstance(self.key_fn, ColumnKey):
            key: str | BatchKey = self.key_fn.column
        else:
            flat = batchspecs.batch_input(self._schema(), f"operator {name!r}")
            try:
                key = BatchKey(self.key_fn, key_name, flat)
            except PipelineDefinitionError as e:
                raise PipelineDefinitionError(f"operator {name!r}: {e}") from e
            stream = KeyedStream(self._p, self.name, key, self.max_parallelism, self._also)
        spec = batchspecs.aggregate_batches(name, key, aggs, derive, emit, self._schema())
        return stream._then(
            name, spec.factory, spec.schema, parallelism, stateful=True,
            description=spec.description,
        )  # fmt: skip

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
