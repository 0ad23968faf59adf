"""The user-facing stream API: each method adds a downstream operator to the graph."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

from channels.batchwrite import ColumnKey
from channels.errors import PipelineDefinitionError
from recovery.plan import Record
from spark_jobs import batchspecs, keyedops
from spark_jobs.batchagg import Agg, Derive
from spark_jobs.graph import Edge, Graph, Schema
from spark_jobs.operators import (
    FilterLogic,
    FlatMapLogic,
    KeyedAggregateLogic,
    MapLogic,
)
from spark_jobs.parquetsink import columnar_sink
from spark_jobs.process import ProcessContext
from spark_jobs.records import adapt, output_converter, output_schema, returned_type
from spark_jobs.sinks import ConsoleSink, JsonlFileSink, KafkaTopicSink

# What the API takes: an Avro record schema, a dataclass, a TypedDict or a pyarrow.Schema
# (spark_jobs.schemas); ``None`` where it can come from a function's return annotation.
SchemaLike = Any


class Stream:
    """The output of an operator; methods add a downstream operator."""

    def __init__(
        self,
        pipeline: Graph,
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
        self._p._edges.append(Edge(self.name, name, self._routing, self._key_fn))
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

    def map_batches(
        self,
        name: str,
        fn: Callable[[Any], Any],
        *,
        schema: SchemaLike,
        frame: str = "arrow",
        parallelism: int | None = None,
    ) -> Stream:
        """``fn`` over each input channel message as one Arrow batch (spark_jobs.batchops):
        it takes a ``pyarrow.RecordBatch`` (a pandas or Polars DataFrame with ``frame=``)
        and returns one with ``schema`` (flat: primitive fields only); written as Arrow."""
        spec = batchspecs.map_batches(name, fn, schema, frame, self._schema())
        return self._then(
            name, spec.factory, spec.schema, parallelism, description=spec.description
        )

    def filter_batches(
        self,
        name: str,
        fn: Callable[[Any], Any],
        *,
        frame: str = "arrow",
        parallelism: int | None = None,
    ) -> Stream:
        """The rows of each input batch for which ``fn``'s boolean mask is true (a null
        drops the row); ``fn`` takes the batch as :meth:`map_batches`' does."""
        spec = batchspecs.filter_batches(name, fn, frame, self._schema())
        return self._then(
            name, spec.factory, spec.schema, parallelism, description=spec.description
        )

    def key_by(self, key_fn: Callable[[Record], Any] | str) -> KeyedStream:
        """Route records by key (stable hash) to the next, keyed operator.

        A column name as ``key_fn`` keys by that column (``lambda r: r[column]``): batches
        are then routed per column, without a Python object per row, and the next
        operator may be :meth:`KeyedStream.aggregate_batches`."""
        if isinstance(key_fn, str):
            return KeyedStream(self._p, self.name, ColumnKey(key_fn))
        return KeyedStream(self._p, self.name, adapt(key_fn))

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

    def __init__(self, pipeline: Graph, name: str, key_fn: Callable[[Record], Any]) -> None:
        super().__init__(pipeline, name, "hash", key_fn)
        self.key_fn = key_fn

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
    ) -> Stream:
        """Columnar keyed aggregation after ``key_by(column)`` (spark_jobs.batchagg): per
        key, ``aggs`` (output column -> ``Agg(kind, column or expression)``, kinds count,
        sum, min, max, mean) computed by Arrow per input batch and merged into keyed state
        (checkpointed through the changelog, as :meth:`aggregate`'s); ``derive`` adds
        columns computed from the aggregated table. ``emit`` as :meth:`aggregate`, except
        that ``"updates"`` emits one row per key and input batch."""
        if not isinstance(self.key_fn, ColumnKey):
            raise PipelineDefinitionError(
                f"operator {name!r}: aggregate_batches needs a key column: use "
                "key_by('column'), not a key function"
            )
        spec = batchspecs.aggregate_batches(
            name, self.key_fn.column, aggs, derive, emit, self._schema()
        )
        return self._then(
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
            description=spec.description,
        )  # fmt: skip
