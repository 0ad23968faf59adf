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

from collections.abc import Callable
from functools import partial
from typing import Any

from spillway.channels.errors import PipelineDefinitionError
from spillway.channels.modes import choose
from spillway.recovery.job.jobconf import conf as conf  # re-exported: pipelines read their settings
from spillway.recovery.job.plan import Record
from spillway.spark_jobs.api.coprocess import connect as connect  # re-exported: two-input operators
from spillway.spark_jobs.api.graph import Graph
from spillway.spark_jobs.api.graph import Schema as Schema
from spillway.spark_jobs.api.recordtime import FieldTime, RecordTime, integer_field
from spillway.spark_jobs.api.streams import KeyedStream as KeyedStream  # re-exported, with Stream
from spillway.spark_jobs.api.streams import SchemaLike as SchemaLike
from spillway.spark_jobs.api.streams import Stream as Stream
from spillway.spark_jobs.api.streams import union as union
from spillway.spark_jobs.connectors.batchavro import AvroRecords, avro_framing
from spillway.spark_jobs.connectors.batchregistry import channel_schema
from spillway.spark_jobs.connectors.batchsources import BatchFileSource, BatchKafkaSource
from spillway.spark_jobs.connectors.confluentavro import RegistryAvroRecords
from spillway.spark_jobs.connectors.confluentjson import RegistryJsonRecords
from spillway.spark_jobs.connectors.confluentproto import (
    MessageType,
    RegistryProtoRecords,
    message_type_of,
    record_schema,
)
from spillway.spark_jobs.connectors.registry import RegistryConfig, check_registry_format
from spillway.spark_jobs.connectors.sources import FileSource, GeneratorSource, KafkaTopicSource
from spillway.spark_jobs.modes import (
    FILE_FORMATS,
    VALUE_FORMATS,
    FileFormat,
    RegistryFormat,
    ValueFormat,
)
from spillway.spark_jobs.records.records import adapt, output_schema
from spillway.spark_jobs.records.schemas import avro_schema
from spillway.spark_jobs.records.tombstones import keyed_schema
from spillway.spark_jobs.records.watermarks import Watermarks


class Pipeline(Graph):
    """A job graph under construction. Operators are added through :class:`Stream` methods."""

    def generate(
        self,
        name: str,
        *,
        make: Callable[[int], Record],
        schema: SchemaLike = None,
        count: int | None,
        parallelism: int = 1,
        rate: float | None = None,
        timestamp: Callable[[Record], int] | None = None,
        timestamp_column: str | None = None,
        watermarks: Watermarks | None = None,
    ) -> Stream:
        """A seeded generator: record ``make(i)`` for ``i < count`` (``None``: unbounded).

        Event time, declared once here for every window downstream: the integer field
        ``timestamp_column`` (ms) or ``timestamp(record)``, with ``watermarks`` (default
        :meth:`Watermarks.monotonic`); see :meth:`read_kafka`. ``schema`` may be omitted
        when ``make`` is annotated ``-> SomeDataclass``.
        """
        avro, out = output_schema(schema, make, f"source {name!r}", name)
        ts = _event_time_args(name, timestamp, timestamp_column, watermarks, avro, required=True)
        make = adapt(make, (), out)
        node = self._add(
            name,
            parallelism,
            "source",
            avro,
            partial(GeneratorSource, make, count, parallelism, rate, ts[0], ts[1]),
            description={"source": "generator", "count": count},
        )
        node.bounded = count is not None
        node.event_time = ts[1] is not None
        node.time = _record_time(name, ts[0], timestamp_column, ts[1], avro)
        return Stream(self, name)

    def read_files(
        self,
        name: str,
        pattern: str,
        *,
        format: FileFormat,
        schema: SchemaLike,
        parallelism: int = 1,
        timestamp: Callable[[Record], int] | None = None,
        timestamp_column: str | None = None,
        watermarks: Watermarks | None = None,
        batches: bool = False,
    ) -> Stream:
        """Rows of files matching ``pattern`` (``jsonl``, ``csv`` or ``parquet``).

        JSONL and CSV lines are checked against ``schema``; a bad line (not UTF-8, not
        JSON, wrong column count, NaN, a number too big for its field) stops the job
        naming file and line, or goes to the dead-letter channel with ``--dead-letter``.
        Event time, declared once here for every window downstream: the integer field
        ``timestamp_column`` (ms) or ``timestamp(record)``, with ``watermarks`` (default
        :meth:`Watermarks.monotonic`); a timestamp that fails is a bad line too.

        ``batches=True`` (CSV or Parquet, flat schema) reads Arrow batches
        (:mod:`spillway.spark_jobs.connectors.batchsources`) and writes them to the channel
        as Arrow; its event time can only be a column, ``timestamp_column`` (a non-null
        integer field, ms).
        """
        fmt = choose(format, FILE_FORMATS, f"read_files {name!r}: format", PipelineDefinitionError)
        schema = avro_schema(schema, where=f"source {name!r}", name=name)
        if batches:
            ts_col = _batch_event_time(name, timestamp, timestamp_column, watermarks, True)
            stream = self._batch_files(name, pattern, fmt, schema, parallelism, *ts_col)
            self._nodes[name].time = _record_time(name, None, timestamp_column, ts_col[1], schema)
            return stream
        ts = _event_time_args(name, timestamp, timestamp_column, watermarks, schema, required=True)
        node = self._add(
            name,
            parallelism,
            "source",
            schema,
            partial(FileSource, pattern, fmt, parallelism, schema, ts[0], ts[1]),
            description={"source": "files", "format": fmt},
        )
        node.event_time = ts[1] is not None
        node.time = _record_time(name, ts[0], timestamp_column, ts[1], schema)
        return Stream(self, name)

    def _batch_kafka(
        self,
        name: str,
        topic: str,
        spec: SchemaLike,
        parallelism: int,
        bounded: bool,
        timestamp: str | None,
        watermarks: Watermarks | None,
        framing: str | None = None,
        registry: RegistryConfig | None = None,
        registry_format: RegistryFormat = "avro",
        message_type: MessageType | None = None,
    ) -> Stream:
        schema = avro_schema(spec, where=f"source {name!r}", name=name)
        args = (
            topic, parallelism, bounded, schema, timestamp, watermarks, framing, registry,
            registry_format, message_type,
        )  # fmt: skip
        BatchKafkaSource(*args)  # checks the schema and the timestamp column now
        description = {"source": "kafka", "topic": topic, "bounded": bounded, "batch": True}
        if framing is not None:
            description["values"] = "avro" if framing == "none" else "avro-confluent"
        if registry is not None:
            description["values"] = registry_format
            description["registry"] = registry.url
            schema = channel_schema(schema)  # its defaults serve resolution only
        node = self._add(
            name, parallelism, "source", schema, partial(BatchKafkaSource, *args),
            description=description,
        )  # fmt: skip
        node.bounded = bounded
        node.event_time = watermarks is not None
        return Stream(self, name)

    def _batch_files(
        self,
        name: str,
        pattern: str,
        fmt: FileFormat,
        schema: dict[str, Any],
        parallelism: int,
        timestamp: str | None,
        watermarks: Watermarks | None,
    ) -> Stream:
        args = (pattern, fmt, parallelism, schema, timestamp, watermarks)
        BatchFileSource(*args)  # checks format, schema and timestamp column now
        description = {"source": "files", "format": fmt, "batch": True}
        node = self._add(
            name, parallelism, "source", schema, partial(BatchFileSource, *args),
            description=description,
        )  # fmt: skip
        node.event_time = watermarks is not None
        return Stream(self, name)

    def read_kafka(
        self,
        name: str,
        topic: str,
        *,
        schema: SchemaLike = None,
        parallelism: int = 1,
        bounded: bool = False,
        timestamp: Callable[[Record], int] | None = None,
        timestamp_column: str | None = None,
        watermarks: Watermarks | None = None,
        batches: bool = False,
        key_field: str | None = None,
        tombstones: bool = False,
        value_format: ValueFormat = "json",
        kafka_timestamp_field: str | None = None,
        registry: RegistryConfig | None = None,
        message_type: MessageType | None = None,
    ) -> Stream:
        """JSON (or Avro) records of an existing topic (read_committed); offsets in checkpoints.

        ``bounded=True`` reads up to the end offsets seen when the job first starts.

        Event time (needed by windows behind an unbounded source), declared once here for
        every window downstream: pass ``watermarks``, e.g. ``Watermarks.bounded(5_000,
        idle_timeout_ms=30_000)``. Each record's event time is then its Kafka record
        timestamp, or its integer field ``timestamp_column`` (ms), or ``timestamp(record)``
        (ms) (either alone means ``Watermarks.monotonic()``). The time travels with each
        record to the windows downstream, which need no ``event_time=``, the Kafka record
        timestamp included (:mod:`spillway.spark_jobs.api.recordtime`). A subtask's watermark is
        the minimum over its partitions of (largest event time − bound), leaving out
        partitions idle longer than the idle timeout; it is checkpointed with the offsets.

        ``batches=True`` (flat schema) decodes each partition's values of a read with one
        ``pyarrow.json`` call (:mod:`spillway.spark_jobs.connectors.batchsources`) and writes the
        batch to the
        channel as Arrow; its event time is then ``timestamp_column`` (a non-null integer
        field, ms), or without one the Kafka timestamp.

        ``key_field="id"`` puts each message's key (UTF-8 text) into the string field
        ``id``. ``tombstones=True`` (with ``key_field``) reads a table topic: a message
        with a key and an empty or null value becomes a deletion record
        ``{"id": key, "_deleted": True}`` (other fields ``None``; rows get ``"_deleted":
        False``), which a lookup join's table input applies by deleting the row
        (:mod:`spillway.spark_jobs.records.tombstones`). Without it a tombstone is a bad record.

        ``kafka_timestamp_field="ts"`` puts each message's Kafka record timestamp (ms) into
        the long field ``ts`` (added to the records; ``schema`` must not have it) and makes
        it the event time: the Kafka time then travels with the record, and windows
        downstream read it from that field. Not with ``timestamp=``/``timestamp_column=``
        (one event time per source) nor ``batches=True``.

        ``value_format="avro"``: each value is one Avro datum of ``schema`` (as
        ``fastavro.schemaless_writer`` writes it); ``"avro-confluent"``: behind the Schema
        Registry's 5-byte header. With ``batches=True`` (flat schema) a read's values are
        decoded column by column into one Arrow batch
        (:mod:`spillway.spark_jobs.connectors.batchavro`).

        ``value_format="avro", registry=RegistryConfig(url=...)``: each value is in the
        Confluent wire format and is decoded by the writer's schema its id names, resolved
        into ``schema`` by Avro's resolution rules
        (:mod:`spillway.spark_jobs.connectors.confluentavro`); a value whose id the
        registry does not know, or whose schema does not resolve, is a bad record with the
        id in its reason. With ``batches=True`` (a flat ``schema``, whose
        defaults then serve resolution only) each id's values are decoded column by column
        when its writer's schema is flat too, record by record otherwise
        (:mod:`spillway.spark_jobs.connectors.batchregistry`).

        ``value_format="json-schema", registry=RegistryConfig(url=...)``: each value is JSON
        text behind the wire format's header, validated against the JSON schema its id
        names, then read into ``schema`` as plain JSON values are (records, or with
        ``batches=True`` one Arrow batch per read); a value with an id the registry does
        not know or that its JSON schema refuses is a bad record with the id in its reason
        (:mod:`spillway.spark_jobs.connectors.confluentjson`).

        ``value_format="protobuf", registry=RegistryConfig(url=...),
        message_type=Click``: each value is a Protobuf message behind the wire format's
        header and message indexes, parsed with the generated class ``Click`` (as
        confluent-kafka's ``ProtobufDeserializer(Click)`` takes it) once its id's schema
        is found to hold a message of ``Click``'s shape. ``schema`` is then left out: the
        records' schema is the message's
        (:func:`~spillway.spark_jobs.connectors.confluentproto.record_schema`: enums as
        strings, repeated fields as arrays, nested messages as nullable records, absent
        scalars as their proto3 defaults). With ``batches=True`` (a message of scalar and
        enum fields) each read is one Arrow batch. A value whose id the registry does not
        know, that holds another message, or whose bytes do not parse is a bad record with
        the id in its reason (:mod:`spillway.spark_jobs.connectors.confluentproto`).
        """
        where = f"source {name!r}"
        value_format = choose(
            value_format, VALUE_FORMATS, f"{where}: value_format", PipelineDefinitionError
        )
        registry_format: RegistryFormat = "avro"
        if registry is not None:
            registry_format = check_registry_format(where, value_format, registry, "read")
        elif value_format in ("json-schema", "protobuf"):
            raise PipelineDefinitionError(
                f'{where}: value_format="{value_format}" needs registry=RegistryConfig(...)'
            )
        proto = _message_type(where, value_format, message_type, schema)
        if proto is not None:
            schema = record_schema(proto.DESCRIPTOR)
        framing = avro_framing(value_format, where, key_field is not None or tombstones)
        if kafka_timestamp_field is not None:
            _check_kafka_time_field(
                where, kafka_timestamp_field, timestamp, timestamp_column, batches,
                avro_schema(schema, where=where, name=name),
            )  # fmt: skip
            watermarks = watermarks or Watermarks.monotonic()
        if batches:
            if key_field is not None or tombstones:
                raise PipelineDefinitionError(
                    f"{where}: batches=True reads values only; drop key_field/tombstones or batches"
                )
            ts_col = _batch_event_time(name, timestamp, timestamp_column, watermarks, False)
            stream = self._batch_kafka(
                name, topic, schema, parallelism, bounded, *ts_col, framing=framing,
                registry=registry, registry_format=registry_format, message_type=proto,
            )  # fmt: skip
            node = self._nodes[name]
            node.time = _record_time(name, None, timestamp_column, ts_col[1], node.schema or {})
            return stream
        avro = avro_schema(schema, where=where, name=name)
        ts = _event_time_args(name, timestamp, timestamp_column, watermarks, avro, required=False)
        source = partial(KafkaTopicSource, topic, parallelism, bounded, avro, ts[0], ts[1])
        values: (
            AvroRecords | RegistryAvroRecords | RegistryJsonRecords | RegistryProtoRecords | None
        )
        values = None
        if registry is not None and proto is not None:
            values = RegistryProtoRecords(proto, registry)
        elif registry is not None and registry_format == "json-schema":
            values = RegistryJsonRecords(avro, registry)
        elif registry is not None:
            values = RegistryAvroRecords(avro, registry)
        elif framing is not None:
            values = AvroRecords(avro, framing)
        channel = keyed_schema(avro, key_field, tombstones, where)
        if kafka_timestamp_field is not None:
            field = {"name": kafka_timestamp_field, "type": "long"}
            channel = {**channel, "fields": [*channel["fields"], field]}
        node = self._add(
            name,
            parallelism,
            "source",
            channel,
            partial(source, key_field, tombstones, values, kafka_timestamp_field),
            description={
                "source": "kafka",
                "topic": topic,
                "bounded": bounded,
                **({"key_field": key_field} if key_field is not None else {}),
                **({"tombstones": True} if tombstones else {}),
                **({"values": value_format} if value_format != "json" else {}),
                **({"registry": registry.url} if registry is not None else {}),
                **(
                    {"kafka_timestamp_field": kafka_timestamp_field}
                    if kafka_timestamp_field
                    else {}
                ),
            },
        )
        node.bounded = bounded
        node.event_time = ts[1] is not None
        column = timestamp_column or kafka_timestamp_field
        node.time = _record_time(name, ts[0], column, ts[1], channel)
        return Stream(self, name)


def _message_type(
    where: str, value_format: ValueFormat, message_type: object, schema: SchemaLike
) -> MessageType | None:
    """``read_kafka``'s Protobuf message class (``None``: not Protobuf values); refuse a
    ``message_type`` without ``value_format="protobuf"``, Protobuf without one or with a
    ``schema`` too, and another format without a ``schema``."""
    if value_format != "protobuf":
        if message_type is not None:
            raise PipelineDefinitionError(
                f'{where}: message_type= is for value_format="protobuf", got '
                f"value_format={value_format!r}"
            )
        if schema is None:
            raise PipelineDefinitionError(f"{where}: read_kafka needs schema=")
        return None
    if schema is not None:
        raise PipelineDefinitionError(
            f'{where}: value_format="protobuf" takes its records\' schema from message_type=; '
            "drop schema="
        )
    return message_type_of(message_type, where)


def _check_kafka_time_field(
    where: str,
    field: str,
    timestamp: object,
    timestamp_column: str | None,
    batches: bool,
    schema: Schema,
) -> None:
    """Refuse ``kafka_timestamp_field`` where it cannot be (see ``read_kafka``)."""
    if timestamp is not None or timestamp_column is not None:
        raise PipelineDefinitionError(
            f"{where}: kafka_timestamp_field= makes the Kafka timestamp the event time; "
            "drop timestamp=/timestamp_column=, or kafka_timestamp_field="
        )
    if batches:
        raise PipelineDefinitionError(
            f"{where}: kafka_timestamp_field= is for records; with batches=True the event "
            "time is the Kafka timestamp already, or a column (timestamp_column=)"
        )
    if not isinstance(field, str) or not field:
        raise PipelineDefinitionError(
            f"{where}: kafka_timestamp_field must be a field name, got {field!r}"
        )
    if any(f["name"] == field for f in schema.get("fields", [])):
        raise PipelineDefinitionError(
            f"{where}: kafka_timestamp_field {field!r} is already a field of the schema; "
            "name a new field (the source adds it), or take the event time from the "
            f"existing one with timestamp_column={field!r}"
        )


def _batch_event_time(
    name: str,
    timestamp: object,
    timestamp_column: str | None,
    watermarks: Watermarks | None,
    required: bool,
) -> tuple[str | None, Watermarks | None]:
    """(timestamp column, strategy) of batch source ``name``; strategy ``None``: no event
    time. A batch source's event time is a column (``timestamp_column``), not a function."""
    if timestamp is not None:
        raise PipelineDefinitionError(
            f"source {name!r}: with batches=True the event time is a column: pass "
            f"timestamp_column='<field>' (integer ms) instead of timestamp={timestamp!r}; "
            "or read records (batches=False)"
        )
    if timestamp_column is not None and not isinstance(timestamp_column, str):
        raise PipelineDefinitionError(
            f"source {name!r}: timestamp_column must be a field name, got {timestamp_column!r}"
        )
    strategy = _strategy(
        name, timestamp_column, watermarks, required, "timestamp_column=, the field holding"
    )
    return timestamp_column, strategy


def _strategy(
    name: str, timestamp: object, watermarks: Watermarks | None, required: bool, what: str
) -> Watermarks | None:
    """The watermark strategy of source ``name`` (``None``: no event time); ``what``
    names the kind of timestamp the source takes, for the message."""
    if watermarks is not None and not isinstance(watermarks, Watermarks):
        raise PipelineDefinitionError(
            f"source {name!r}: watermarks must be a Watermarks strategy, e.g. "
            f"Watermarks.bounded(5000), got {watermarks!r}"
        )
    if watermarks is not None and timestamp is None and required:
        raise PipelineDefinitionError(
            f"source {name!r}: watermarks= needs {what} its event time in ms"
        )
    if timestamp is not None and watermarks is None:
        return Watermarks.monotonic()
    return watermarks


def _event_time_args(
    name: str,
    timestamp: Callable[[Record], int] | None,
    timestamp_column: str | None,
    watermarks: Watermarks | None,
    schema: Schema,
    *,
    required: bool,
) -> tuple[Callable[[Record], int] | None, Watermarks | None]:
    """(timestamp function, strategy) of record source ``name``; strategy ``None``: no
    event time. ``timestamp_column`` becomes a function reading that integer field.

    ``required``: the source has no timestamp of its own (unlike Kafka's record time).
    """
    where = f"source {name!r}"
    if timestamp is not None and timestamp_column is not None:
        raise PipelineDefinitionError(
            f"{where}: pass timestamp= (a function) or timestamp_column= (a field), not both"
        )
    given: object = timestamp  # typed a function, but users pass field names too
    if given is not None and not callable(given):
        hint = (
            f"; for the field {given!r} pass timestamp_column={given!r}"
            if isinstance(given, str)
            else ""
        )
        raise PipelineDefinitionError(
            f"{where}: timestamp must be a function of the record returning its event time "
            f"in ms, got {timestamp!r}{hint}"
        )
    fn: Callable[[Record], int] | None = None
    if timestamp_column is not None:
        if not integer_field(schema, timestamp_column):
            raise PipelineDefinitionError(
                f"{where}: timestamp_column {timestamp_column!r} must name an integer "
                f"(int/long, ms) field of the schema; its fields are "
                f"{[f['name'] for f in schema.get('fields', [])]}"
            )
        fn = FieldTime(timestamp_column)
    elif timestamp is not None:
        fn = adapt(timestamp)  # gets a dataclass if its parameter is annotated with one
    declared = timestamp if timestamp is not None else timestamp_column
    strategy = _strategy(
        name, declared, watermarks, required,
        "timestamp_column= (a field) or timestamp= (a function) giving",
    )  # fmt: skip
    return fn, strategy


def _record_time(
    name: str,
    timestamp: Callable[[Record], int] | None,
    timestamp_column: str | None,
    strategy: object,
    schema: Schema,
) -> RecordTime | None:
    """How windows downstream of source ``name`` read its records' time (``None``: it
    has no event time): ``timestamp`` is the source's (adapted) timestamp function."""
    if strategy is None:
        return None
    fields = tuple(f["name"] for f in schema.get("fields", []))
    if timestamp_column is not None:
        return RecordTime(name, column=timestamp_column, fields=fields)
    if timestamp is not None:
        return RecordTime(name, fn=timestamp, fields=fields)
    return RecordTime(name, fields=fields)
