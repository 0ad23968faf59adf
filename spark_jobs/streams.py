"""The user-facing stream API: each method adds a downstream operator to the graph."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

from channels.arrowcodec import arrow_schema
from channels.batchwrite import ColumnKey
from channels.errors import PipelineDefinitionError
from recovery.plan import Record
from spark_jobs import batchspecs
from spark_jobs.graph import Edge, Graph, Schema
from spark_jobs.operators import (
    FilterLogic,
    FlatMapLogic,
    MapLogic,
)
from spark_jobs.parquetsink import columnar_sink
from spark_jobs.records import adapt, output_schema
from spark_jobs.sinks import ConsoleSink, JsonlFileSink, KafkaTopicSink

if TYPE_CHECKING:  # a KeyedStream is a Stream: imported where it is made (key_by)
    from spark_jobs.keyedstream import KeyedStream

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
        also: tuple[str, ...] = (),
    ) -> None:
        self._p = pipeline
        self.name = name
        self._routing = routing
        self._key_fn = key_fn
        self._also = also  # further operators whose outputs this stream unites (union)

    @property
    def upstreams(self) -> tuple[str, ...]:
        """The operators whose outputs make up this stream (several after a union)."""
        return (self.name, *self._also)

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
        for up_name in self.upstreams:
            self._p._edges.append(Edge(up_name, name, self._routing, self._key_fn))
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

    def key_by(
        self, key_fn: Callable[[Record], Any] | str, *, max_parallelism: int | None = None
    ) -> KeyedStream:
        """Route records by key (stable hash) to the next, keyed operator.

        A column name as ``key_fn`` keys by that column (``lambda r: r[column]``): batches
        are then routed per column, without a Python object per row, and the next
        operator may be :meth:`KeyedStream.aggregate_batches`. ``max_parallelism``: the
        keyed operator's number of key groups (its input channel and changelog
        partitions), the most subtasks it can ever be scaled to; fixed when the job first
        runs. Default ``channels.keygroups.DEFAULT_MAX_PARALLELISM`` (or the operator's
        parallelism, if larger).
        """
        key = ColumnKey(key_fn) if isinstance(key_fn, str) else adapt(key_fn)
        from spark_jobs.keyedstream import KeyedStream  # it builds on Stream

        return KeyedStream(self._p, self.name, key, max_parallelism, self._also)

    def union(self, *others: Stream) -> Stream:
        """This stream and ``others`` (same schema) as one: the next operator reads all
        of them, one input per upstream operator (see :func:`union`)."""
        return union(self, *others)

    def rebalance(self) -> Stream:
        """Round-robin to the next operator."""
        return Stream(self._p, self.name, "rebalance", also=self._also)

    def forward(self) -> Stream:
        """Subtask i to subtask i (needs equal parallelism)."""
        return Stream(self._p, self.name, "forward", also=self._also)

    def broadcast(self) -> Stream:
        """Every record to every subtask of the next operator."""
        return Stream(self._p, self.name, "broadcast", also=self._also)

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
        key: Callable[[Record], Any] | str | None = None,
        parallelism: int | None = None,
    ) -> None:
        """JSON records to ``topic``, in the subtask's transactions (read them read_committed).

        With ``key`` (a function of the record, or a column's name), each message is keyed
        by it (so Kafka keeps per-key order); without, librdkafka spreads messages over the
        partitions.
        """
        # Without a key function, alone in its subtask, a flat channel is read as Arrow
        # batches and written column by column (channels.arrowjson).
        schema = self._schema()
        flat = arrow_schema(schema) if schema is not None else None
        description: dict[str, Any] = {"sink": "kafka"}
        if isinstance(key, str):
            if flat is not None and key not in flat.names:
                raise PipelineDefinitionError(
                    f"write_kafka {name!r}: key column {key!r} is not in the input; its "
                    f"columns are {flat.names}"
                )
            description["key"] = key
        key_fn = ColumnKey(key) if isinstance(key, str) else key and adapt(key)
        batches = flat is not None and (key is None or isinstance(key, str))
        self._then(
            name,
            partial(KafkaTopicSink, topic, key_fn, batches),
            None,
            parallelism,
            "sink",
            description=description,
        )

    def print(self, name: str = "console", *, limit: int = 20) -> None:
        """Committed records on stdout, for demos."""
        self._then(
            name, partial(ConsoleSink, limit), None, 1, "sink", description={"sink": "console"}
        )


def union(*streams: Stream) -> Stream:
    """The records of every stream in ``streams`` as one stream; they must have one schema
    (a mismatch is a :class:`PipelineDefinitionError` naming both streams). Routing
    (``key_by``, ``rebalance``...) applied to the union applies to each of its inputs."""
    if not streams:
        raise PipelineDefinitionError("union() needs at least one stream")
    first = streams[0]
    names: list[str] = []
    for s in streams:
        if s._p is not first._p:
            raise PipelineDefinitionError(
                f"union: stream {s.name!r} belongs to another pipeline than {first.name!r}"
            )
        for n in s.upstreams:
            if n in names:
                raise PipelineDefinitionError(
                    f"union: stream {n!r} is given twice; each input must be another operator"
                )
            names.append(n)
            _check_same_schema(first._p, names[0], n, "union")
    return Stream(first._p, names[0], also=tuple(names[1:]))


def _check_same_schema(graph: Graph, a: str, b: str, what: str) -> None:
    """Raise naming both streams unless ``a`` and ``b`` carry records of one schema."""
    sa, sb = graph._nodes[a].schema, graph._nodes[b].schema
    fields_a = sa.get("fields") if sa else None
    fields_b = sb.get("fields") if sb else None
    if fields_a != fields_b:
        raise PipelineDefinitionError(
            f"{what}: stream {a!r} and stream {b!r} have different schemas "
            f"({_fields(sa)} vs {_fields(sb)}); map one of them to the other's schema first"
        )


def _fields(schema: Schema | None) -> str:
    if not schema:
        return "no schema"
    return ", ".join(f"{f['name']}: {f['type']}" for f in schema.get("fields", []))
