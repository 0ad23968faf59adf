"""The user-facing stream API: each method adds a downstream operator to the graph.

:class:`Stream` and, after :meth:`Stream.key_by`, :class:`KeyedStream`: the operators
that keep per-key state (aggregates, windows, process functions, columnar aggregates).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

from spillway.channels.errors import PipelineDefinitionError
from spillway.channels.modes import choose
from spillway.channels.routing.batchkey import BatchKey
from spillway.channels.routing.batchwrite import ColumnKey
from spillway.channels.wire.arrowcodec import arrow_schema
from spillway.recovery.job.plan import NodeKind, Record
from spillway.spark_jobs.api import batchspecs, keyedops, recordtime, windowspec
from spillway.spark_jobs.api.graph import DeclaredRouting, Edge, Graph, Schema
from spillway.spark_jobs.api.windowspec import Duration, Window
from spillway.spark_jobs.connectors.confluentavro import RegistryAvroWriter, subject_name
from spillway.spark_jobs.connectors.confluentjson import (
    RegistryJsonWriter,
    json_schema_of,
    json_subject_name,
)
from spillway.spark_jobs.connectors.confluentproto import (
    MessageType,
    RegistryProtoWriter,
    message_type_of,
    proto_subject_name,
)
from spillway.spark_jobs.connectors.registry import RegistryConfig, check_registry_format
from spillway.spark_jobs.connectors.sinks import ConsoleSink, JsonlFileSink, KafkaTopicSink
from spillway.spark_jobs.connectors.tablesinks import columnar_sink
from spillway.spark_jobs.modes import (
    SINK_VALUE_FORMATS,
    SUBJECT_STRATEGIES,
    BatchEmit,
    Emit,
    SinkValueFormat,
    SubjectStrategy,
    batch_emit_of,
    emit_of,
)
from spillway.spark_jobs.operators.batchagg import Agg, Derive
from spillway.spark_jobs.operators.operators import (
    FilterLogic,
    FlatMapLogic,
    KeyedAggregateLogic,
    MapLogic,
)
from spillway.spark_jobs.operators.process import ProcessContext
from spillway.spark_jobs.records.records import (
    adapt,
    output_converter,
    output_schema,
    returned_type,
)

# What the API takes: an Avro record schema, a dataclass, a TypedDict or a pyarrow.Schema
# (spillway.spark_jobs.records.schemas); ``None`` where it can come from a function's return
# annotation.
SchemaLike = Any


class Stream:
    """The output of an operator; methods add a downstream operator."""

    def __init__(
        self,
        pipeline: Graph,
        name: str,
        routing: DeclaredRouting = "auto",
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
        kind: NodeKind = "transform",
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
        """``fn`` over each input channel message as one Arrow batch
        (spillway.spark_jobs.operators.batchops):
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
        runs. Default ``spillway.channels.routing.keygroups.DEFAULT_MAX_PARALLELISM`` (or the
        operator's
        parallelism, if larger).
        """
        key = ColumnKey(key_fn) if isinstance(key_fn, str) else adapt(key_fn)
        keyed = KeyedStream(self._p, self.name, key, max_parallelism, self._also)
        if not isinstance(key_fn, str):
            keyed._key_type = returned_type(key_fn)
        return keyed

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
        """Exactly-once Parquet files under ``directory/<name>/`` (see
        spillway.spark_jobs.connectors.parquetsink):
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
        ``delta`` extra; see spillway.spark_jobs.connectors.deltasink): the files of
        :meth:`write_parquet`,
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
        value_format: SinkValueFormat = "json",
        registry: RegistryConfig | None = None,
        subject: str | None = None,
        subject_strategy: SubjectStrategy = "topic",
        schema: Mapping[str, Any] | None = None,
        message_type: MessageType | None = None,
    ) -> None:
        """JSON records to ``topic``, in the subtask's transactions (read them read_committed).

        With ``key`` (a function of the record, or a column's name), each message is keyed
        by it (so Kafka keeps per-key order); without, librdkafka spreads messages over the
        partitions.

        ``value_format="avro", registry=RegistryConfig(url=...)``: each value is the
        record's Avro datum in the Confluent wire format, under the input's schema
        registered (or found) in ``subject``
        (:mod:`spillway.spark_jobs.connectors.confluentavro`). Without ``subject``,
        ``subject_strategy`` names it as Confluent's strategies do: ``"topic"`` (the
        default, TopicNameStrategy) ``<topic>-value``, ``"record"`` (RecordNameStrategy)
        the record schema's full name, ``"topic_record"`` (TopicRecordNameStrategy)
        ``<topic>-<full name>``; giving both is a ``PipelineDefinitionError``. The
        registry is asked now, before the job starts, whether the subject's compatibility
        rule admits the schema: ``PipelineDefinitionError`` with its reasons if not. A
        batch (from ``read_kafka(..., batches=True)`` or a batch operator) is encoded
        column by column for a flat schema
        (:mod:`spillway.spark_jobs.connectors.batchavroencode`).

        ``value_format="json-schema", registry=RegistryConfig(url=...)``: each value is the
        record's JSON behind the wire format's header, with the id of the JSON schema
        ``schema`` (a dict; by default the input's schema as JSON Schema,
        :func:`~spillway.spark_jobs.connectors.confluentjson.json_schema_of`) registered
        (or found) in the subject, named as for Avro (the record name is the JSON schema's
        ``title``) and checked with the registry as for Avro, before the job starts
        (:mod:`spillway.spark_jobs.connectors.confluentjson`). ``schema=`` with another
        value format is a ``PipelineDefinitionError``.

        ``value_format="protobuf", registry=RegistryConfig(url=...), message_type=Click``:
        each record is built into a ``Click`` message (the generated class; every field
        of the input must be one of the message's, enums by their symbols' names) and
        written behind the wire format's header and message indexes, as confluent-kafka's
        ``ProtobufSerializer`` writes it; ``Click``'s file (without imports) is registered
        (or found) in the subject, named as for Avro (the record name is the message's
        full name) and checked with the registry as for Avro, before the job starts
        (:mod:`spillway.spark_jobs.connectors.confluentproto`).
        """
        # Without a key function, alone in its subtask, a flat channel is read as Arrow
        # batches and written column by column (spillway.channels.wire.arrowjson).
        fmt = choose(
            value_format,
            SINK_VALUE_FORMATS,
            f"write_kafka {name!r}: value_format",
            PipelineDefinitionError,
        )
        strategy = choose(
            subject_strategy,
            SUBJECT_STRATEGIES,
            f"write_kafka {name!r}: subject_strategy",
            PipelineDefinitionError,
        )
        records = self._schema()
        naming = _SubjectNaming(topic, subject, strategy)
        encoder = _registry_writer(name, records, fmt, registry, naming, schema, message_type)
        flat = arrow_schema(records) if records is not None else None
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
        if encoder is not None:
            description |= {"values": value_format, "subject": encoder.subject}
        self._then(
            name,
            partial(KafkaTopicSink, topic, key_fn, batches, encoder),
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


@dataclasses.dataclass(frozen=True)
class _SubjectNaming:
    """How ``write_kafka`` was asked to name its subject: ``subject`` as given, else by
    ``strategy`` from ``topic`` and the records' schema."""

    topic: str
    subject: str | None
    strategy: SubjectStrategy

    def check(self, where: str) -> None:
        """``PipelineDefinitionError`` naming both if a subject and a strategy other than
        the default are given: one would be ignored."""
        if self.subject is not None and self.strategy != "topic":
            raise PipelineDefinitionError(
                f"{where}: give subject= or subject_strategy=, not both (subject="
                f"{self.subject!r}, subject_strategy={self.strategy!r})"
            )

    def given(self) -> bool:
        """True if either was given (they need a registry)."""
        return self.subject is not None or self.strategy != "topic"

    def of(self, schema: Schema) -> str:
        """The subject of records of ``schema``."""
        return self.subject or subject_name(self.topic, dict(schema), self.strategy)


def _registry_writer(
    name: str,
    schema: Schema | None,
    value_format: SinkValueFormat,
    registry: RegistryConfig | None,
    naming: _SubjectNaming,
    json_schema: Mapping[str, Any] | None = None,
    message_type: MessageType | None = None,
) -> RegistryAvroWriter | RegistryJsonWriter | RegistryProtoWriter | None:
    """The wire-format encoder of ``write_kafka``, its subject checked with the registry;
    ``None`` for JSON values. ``json_schema``: the JSON schema of JSON Schema values
    (else derived from ``schema``, the input's); ``message_type``: the message class of
    Protobuf values."""
    where = f"write_kafka {name!r}"
    naming.check(where)
    if message_type is not None and value_format != "protobuf":
        raise PipelineDefinitionError(
            f'{where}: message_type= is for value_format="protobuf", got '
            f"value_format={value_format!r}"
        )
    if json_schema is not None and value_format != "json-schema":
        raise PipelineDefinitionError(
            f'{where}: schema= is the JSON schema of value_format="json-schema" values; '
            f"got value_format={value_format!r}"
        )
    if registry is None:
        if value_format != "json" or naming.given():
            raise PipelineDefinitionError(
                f'{where}: value_format="avro", "json-schema" or "protobuf", subject= and '
                "subject_strategy= need registry=RegistryConfig(...)"
            )
        return None
    fmt = check_registry_format(where, value_format, registry, "written")
    if fmt == "protobuf":
        return _proto_writer(where, schema, registry, naming, message_type_of(message_type, where))
    if fmt == "json-schema" and json_schema is not None:
        values = dict(json_schema)
        subject = naming.subject or json_subject_name(naming.topic, values, naming.strategy)
        writer: RegistryAvroWriter | RegistryJsonWriter | RegistryProtoWriter = RegistryJsonWriter(
            values, registry, subject
        )
    elif schema is None:
        raise PipelineDefinitionError(
            f"{where}: {fmt} values need the input's schema; give the operator before it "
            "an output schema" + (" (or write_kafka a JSON schema=)" if fmt != "avro" else "")
        )
    elif fmt == "json-schema":
        values = json_schema_of(dict(schema))
        subject = naming.subject or json_subject_name(naming.topic, values, naming.strategy)
        writer = RegistryJsonWriter(values, registry, subject)
    else:
        writer = RegistryAvroWriter(dict(schema), registry, naming.of(schema))
    writer.check(where)
    return writer


def _proto_writer(
    where: str,
    schema: Schema | None,
    registry: RegistryConfig,
    naming: _SubjectNaming,
    message_type: MessageType,
) -> RegistryProtoWriter:
    """``write_kafka``'s Protobuf encoder, its subject checked with the registry; refuse
    an input (of ``schema``, when it is known) with a field the message lacks."""
    descriptor = message_type.DESCRIPTOR
    if schema is not None:
        lacking = [
            f["name"]
            for f in schema.get("fields", [])
            if f["name"] not in descriptor.fields_by_name
        ]
        if lacking:
            raise PipelineDefinitionError(
                f"{where}: the Protobuf message {descriptor.full_name} has no field "
                f"{lacking} of the input; its fields are {list(descriptor.fields_by_name)}"
            )
    subject = naming.subject or proto_subject_name(naming.topic, descriptor, naming.strategy)
    writer = RegistryProtoWriter(message_type, registry, subject)
    writer.check(where)
    return writer


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
        self._key_type: Any = None  # the key function's return annotation, if any

    def _then(
        self,
        name: str,
        factory: Callable[[], Any],
        schema: Schema | None,
        parallelism: int | None,
        kind: NodeKind = "transform",
        stateful: bool = False,
        description: dict[str, Any] | None = None,
        key_of_state: Callable[[Any], Any] | None = None,
    ) -> Stream:
        """As :meth:`Stream._then`; the new operator is keyed (key groups)."""
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
        emit: Emit = "final",
        parallelism: int | None = None,
    ) -> Stream:
        """Fold records per key into a JSON-able accumulator.

        ``emit="final"`` emits ``result(key, acc)`` for every key when the input ends;
        ``emit="updates"`` emits it after every record.
        """
        emit = emit_of(emit, f"operator {name!r}")
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
        emit: BatchEmit = "final",
        parallelism: int | None = None,
        key_name: str = "key",
    ) -> Stream:
        """Columnar keyed aggregation after ``key_by(column)``
        (spillway.spark_jobs.operators.batchagg): per
        key, ``aggs`` (output column -> ``Agg(kind, column or expression)``, kinds count,
        sum, min, max, mean) computed by Arrow per input batch and merged into keyed state
        (checkpointed through the changelog, as :meth:`aggregate`'s); ``derive`` adds
        columns computed from the aggregated table. ``emit`` as :meth:`aggregate`, except
        that ``"updates"`` emits one row per key and input batch; ``"rows"`` (count, sum,
        mean) emits one row per input row, as :meth:`aggregate`'s ``"updates"`` does.

        After ``key_by(fn)``, ``fn`` takes a whole ``pyarrow.RecordBatch`` and returns one
        key per row (an Arrow array, numpy array or pandas/Polars Series), e.g.
        ``lambda b: pc.utf8_lower(b["user"])``: batches are routed by it vectorised
        (:mod:`spillway.channels.routing.batchkey`) and the output's key column is ``key_name``. It
        is
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
        mode = batch_emit_of(emit, f"operator {name!r}")
        spec = batchspecs.aggregate_batches(name, key, aggs, derive, mode, self._schema())
        return stream._then(
            name, spec.factory, spec.schema, parallelism, stateful=True,
            description=spec.description,
        )  # fmt: skip

    def reduce(
        self,
        name: str,
        fn: Callable[[Record, Record], Record],
        *,
        emit: Emit = "final",
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

    def agg(
        self,
        name: str,
        /,
        *,
        emit: Emit = "final",
        parallelism: int | None = None,
        **aggs: Agg,
    ) -> Stream:
        """Built-in aggregations per key, e.g. ``agg("totals", total=sum("cents"),
        n=count())`` (:mod:`spillway.spark_jobs.records.aggregations`): one output record
        per key, its key field (the ``key_by`` column's name, else ``key``) and one field
        per aggregation, with the output schema derived from the input's. ``emit`` as
        :meth:`aggregate` (``"final"``: at the end of the input; ``"updates"``: after
        every record). ``emit`` and ``parallelism`` cannot name outputs; the key field's
        type is the key column's, or the key function's return annotation.
        """
        where = f"operator {name!r}"
        mode = emit_of(emit, where)
        spec = keyedops.builtin_aggregate(
            name, self.key_fn, self._key_field(where), aggs, self._input_schema(where), mode
        )
        return self._keyed(name, spec, parallelism)

    def window(
        self,
        name: str,
        window: Window,
        *,
        allowed_lateness: Duration = 0,
        event_time: Callable[[Record], int] | None = None,
    ) -> WindowedStream:
        """Window operator ``name`` over this keyed stream: ``window`` is
        ``Tumbling(size)``, ``Hopping(size, hop)``, ``Session(gap)`` or ``Count(n)``
        (:mod:`spillway.spark_jobs.api.windowspec`; durations as ``timedelta`` or ms);
        finish it with :meth:`WindowedStream.agg` (built-in aggregations) or
        :meth:`WindowedStream.aggregate` (a custom fold).

        Event-time windows use the time each record carries from its source, as the
        source declared it (``timestamp_column=``, ``timestamp=`` or the Kafka record
        timestamp), whatever the operators on the way did to the fields
        (:mod:`spillway.spark_jobs.api.recordtime`). ``event_time=`` overrides that with
        another time (a function of the record, ms). ``allowed_lateness``: how
        long after it fired a window still takes late records
        (:mod:`spillway.spark_jobs.operators.windows`). Count windows have neither.
        A bad window value is a :class:`PipelineDefinitionError` naming ``name``.
        """
        where = f"operator {name!r}"
        spec = windowspec.resolve(window, where)
        lateness = windowspec.millis(allowed_lateness, "allowed_lateness", where, minimum=0)
        if spec.kind == "count_window":
            if event_time is not None or lateness:
                raise PipelineDefinitionError(
                    f"{where}: a Count window has no event time: drop event_time= and "
                    "allowed_lateness="
                )
            return WindowedStream(self, name, spec, None, 0)
        if event_time is not None:
            if not callable(event_time):
                raise PipelineDefinitionError(
                    f"{where}: event_time must be a function of the record returning its "
                    f"event time in ms, got {event_time!r}"
                )
            time_fn = adapt(event_time)
        else:
            nodes = self._p._nodes
            time_fn = recordtime.time_at(name, self.upstreams, nodes, self._p._inputs_of)
        return WindowedStream(self, name, spec, time_fn, lateness)

    def _key_field(self, where: str) -> tuple[str, Any]:
        """(name, Avro type) of the key field in built-in aggregations' output."""
        if isinstance(self.key_fn, ColumnKey):
            column = self.key_fn.column
            for f in self._input_schema(where).get("fields", []):
                if f["name"] == column:
                    return column, f["type"]
            raise PipelineDefinitionError(
                f"{where}: key column {column!r} is not in the input; its fields are "
                f"{[f['name'] for f in self._input_schema(where).get('fields', [])]}"
            )
        avro = _AVRO_OF.get(self._key_type)
        if avro is None:
            raise PipelineDefinitionError(
                f"{where}: the output's key type is unknown: key_by a column name "
                '(key_by("user")), or annotate the key function\'s return type (str, int, '
                "float or bool)"
            )
        return "key", avro

    def _input_schema(self, where: str) -> Schema:
        schema = self._schema()
        if schema is None:
            raise PipelineDefinitionError(f"{where}: the input has no schema to aggregate")
        return schema

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
        """A keyed process function with keyed state and timers
        (spillway.spark_jobs.operators.process). ``ctx.timestamp`` is each record's event
        time: ``event_time(record)`` if given, else the time the record carries from its
        source (:mod:`spillway.spark_jobs.api.recordtime`), else None."""
        time_fn: Callable[[Record], int | None] | None = event_time
        if time_fn is None:  # the time the records carry, if any (else ctx.timestamp is None)
            time_fn = recordtime.time_or_none(
                name, self.upstreams, self._p._nodes, self._p._inputs_of
            )
        spec = keyedops.process(
            name, self.key_fn, fn, on_timer=on_timer, event_time=time_fn, ttl_ms=ttl_ms,
            schema=schema,
        )  # fmt: skip
        return self._keyed(name, spec, parallelism)

    def _keyed(self, name: str, spec: keyedops.OperatorSpec, parallelism: int | None) -> Stream:
        return self._then(
            name, spec.factory, spec.schema, parallelism, stateful=True,
            description=spec.description, key_of_state=spec.key_of_state,
        )  # fmt: skip


class WindowedStream:
    """A keyed stream with a window declared (:meth:`KeyedStream.window`); :meth:`agg`
    or :meth:`aggregate` adds the window operator."""

    def __init__(
        self,
        keyed: KeyedStream,
        name: str,
        window: windowspec.Resolved,
        time_fn: Callable[[Record], int] | None,
        allowed_lateness_ms: int,
    ) -> None:
        self._keyed, self.name, self.spec = keyed, name, window
        self._time, self._lateness = time_fn, allowed_lateness_ms

    def agg(self, *, emit: Emit = "final", parallelism: int | None = None, **aggs: Agg) -> Stream:
        """Built-in aggregations per key and window, e.g. ``.agg(views=count(),
        total=sum("cents"))``: one record per key and window with the key field (the
        ``key_by`` column's name, else ``key``), ``start``, ``end`` (ms; count windows:
        record numbers) and one field per aggregation; the schema is derived from the
        input's. ``emit="final"``: when the window fires; ``"updates"``: after every
        record. ``emit`` and ``parallelism`` cannot name outputs. The results of an
        event-time window have event time ``end - 1`` (Flink's), so windows behind this one
        read it without ``event_time=``."""
        k, where = self._keyed, f"operator {self.name!r}"
        fold, schema = keyedops.window_aggs(
            self.name, k._key_field(where), aggs, k._input_schema(where)
        )
        merge = fold.merge if self.spec.kind == "session_window" else None
        mode = emit_of(emit, where)
        spec = self._spec(fold.init, fold.add, fold.window_result, merge, schema, mode)
        description = {**spec.description, "aggs": keyedops.describe_aggs(aggs)}
        out = k._keyed(self.name, dataclasses.replace(spec, description=description), parallelism)
        if self.spec.kind != "count_window":  # results at the window's last instant (Flink's)
            fields = tuple(f["name"] for f in schema["fields"])
            end = recordtime.RecordTime(self.name, column="end", fields=fields, offset=-1)
            self._keyed._p._nodes[self.name].time = end
        return out

    def aggregate(
        self,
        *,
        init: Callable[[], Any],
        add: Callable[[Any, Record], Any],
        result: Callable[[Any, int, int, Any], Record],
        merge: Callable[[Any, Any], Any] | None = None,
        schema: SchemaLike = None,
        emit: Emit = "final",
        parallelism: int | None = None,
    ) -> Stream:
        """A custom fold per key and window: ``init()`` an accumulator (JSON-able),
        ``add(acc, record)`` folds a record in, ``result(key, start, end, acc)`` makes the
        output record (``schema``: its schema, or ``result``'s return annotation).
        ``merge(a, b)`` combines two accumulators; session windows need it. ``emit`` as
        in :meth:`agg`."""
        where = f"operator {self.name!r}"
        if self.spec.kind == "session_window" and merge is None:
            raise PipelineDefinitionError(
                f"{where}: a Session window merges sessions a record bridges, so it needs "
                "merge=(acc, acc) -> acc"
            )
        spec = self._spec(init, add, result, merge, schema, emit_of(emit, where))
        return self._keyed._keyed(self.name, spec, parallelism)

    def _spec(
        self,
        init: Callable[[], Any],
        add: Callable[[Any, Record], Any],
        result: Callable[..., Record],
        merge: Callable[[Any, Any], Any] | None,
        schema: Any,
        emit: Emit,
    ) -> keyedops.OperatorSpec:
        spec, name, key_fn = self.spec, self.name, self._keyed.key_fn
        if spec.kind == "count_window":
            return keyedops.count_window(
                name, key_fn, size=spec.size, init=init, add=add, result=result,
                schema=schema, emit=emit,
            )  # fmt: skip
        assert self._time is not None
        if spec.kind == "session_window":
            assert merge is not None
            return keyedops.session_window(
                name, key_fn, gap=spec.size, event_time=self._time, init=init, add=add,
                merge=merge, result=result, schema=schema,
                allowed_lateness_ms=self._lateness, emit=emit,
            )  # fmt: skip
        return keyedops.fixed_window(
            spec.kind, name, key_fn, size=spec.size, hop=spec.hop, event_time=self._time,
            init=init, add=add, result=result, schema=schema,
            allowed_lateness_ms=self._lateness, emit=emit,
        )  # fmt: skip


_AVRO_OF: dict[Any, str] = {str: "string", int: "long", float: "double", bool: "boolean"}


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
