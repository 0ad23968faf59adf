"""The Confluent wire format with Avro, by the schema registry: magic byte 0, the schema
id (4 bytes, big-endian), then the Avro datum.

:class:`RegistryAvroRecords` reads each value with the writer's schema its id names
(fetched once per id) resolved into the reader's schema by Avro's resolution rules: a
field the reader has and the writer lacks takes its default, a field the writer has and
the reader lacks is skipped, numbers are promoted. The top-level record's name is not
compared (the reader's schema describes fields; producers name their records as they
like); nested named types are. A value whose id the registry does not know, or whose
writer's schema cannot be resolved into the reader's, is a bad record whose reason names
the id. :class:`RegistryAvroWriter` registers the channel's schema under a subject
(:func:`subject_name`: Confluent's TopicNameStrategy by default) and frames each record's
datum, or each row of an Arrow batch (column by column,
:mod:`spillway.spark_jobs.connectors.batchavroencode`), with its id.
"""

from __future__ import annotations

import io
import json
import typing
from collections.abc import Callable
from typing import Any, Protocol

import fastavro
import pyarrow as pa
from fastavro.read import SchemaResolutionError

from spillway.spark_jobs.connectors.batchavroencode import batch_encoder
from spillway.spark_jobs.connectors.registry import (
    RegistryClient,
    RegistryConfig,
    SchemaId,
    SchemaNotFound,
)
from spillway.spark_jobs.connectors.subjectschema import (
    HEADER_BYTES,
    MAGIC,
    SubjectRegistry,
    SubjectSchema,
)
from spillway.spark_jobs.modes import SubjectStrategy
from spillway.spark_jobs.records.lines import LineError

_REASON_CHARS = 300


class SchemaSource(Protocol):
    """What a decoder asks of a registry: the schema text of an id
    (:class:`~spillway.spark_jobs.connectors.registry.RegistryClient` is one)."""

    def schema(self, schema_id: SchemaId) -> str:
        """The schema text of ``schema_id``; ``SchemaNotFound`` if there is none."""
        ...


def record_full_name(schema: dict[str, Any]) -> str:
    """The full name of record ``schema`` as Avro defines it: a name holding a dot is
    already full; else ``<namespace>.<name>``, or the name alone without a namespace."""
    name = str(schema["name"])
    namespace = schema.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"


def subject_name(topic: str, schema: dict[str, Any], strategy: SubjectStrategy = "topic") -> str:
    """The value subject of records of ``schema`` written to ``topic``, as Confluent's
    strategies name it: ``"topic"`` (TopicNameStrategy) ``<topic>-value``, ``"record"``
    (RecordNameStrategy) the record's full name, ``"topic_record"``
    (TopicRecordNameStrategy) ``<topic>-<full name>``."""
    if strategy == "topic":
        return f"{topic}-value"
    if strategy == "record":
        return record_full_name(schema)
    return f"{topic}-{record_full_name(schema)}"


def split_header(value: bytes | None) -> tuple[SchemaId, bytes]:
    """The schema id and the Avro body of one message value; ``LineError`` if the value
    has no Confluent header."""
    if not value:
        raise LineError("no value (null)" if value is None else "empty value")
    if len(value) < HEADER_BYTES or value[0] != MAGIC:
        raise LineError("no Confluent Schema Registry header (magic byte 0, a 4-byte schema id)")
    return SchemaId(int.from_bytes(value[1:HEADER_BYTES], "big")), value[HEADER_BYTES:]


class RegistryAvroRecords:
    """The record path's decoder of registry-framed Avro values into ``schema``'s records.

    Picklable before its first :meth:`read` (the client is made on first use, by
    ``connect``: a module-level callable, :class:`RegistryClient` unless a test fakes it).
    """

    def __init__(
        self,
        schema: dict[str, Any],
        registry: RegistryConfig,
        connect: Callable[[RegistryConfig], SchemaSource] = RegistryClient,
    ) -> None:
        self.schema = schema
        self.registry = registry
        self.connect = connect
        fastavro.parse_schema(schema, named_schemas={})  # a clear error now, not per record
        self._client: SchemaSource | None = None
        self._pairs: dict[SchemaId, tuple[Any, Any]] = {}
        self._writers: dict[SchemaId, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"schema": self.schema, "registry": self.registry, "connect": self.connect}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["schema"], state["registry"], state["connect"])  # type: ignore[misc]

    def read(self, value: bytes | None) -> dict[str, Any]:
        """``value`` as a record of the reader's schema; ``LineError`` saying why not."""
        schema_id, body = split_header(value)
        writer, reader = self.resolution(schema_id)
        stream = io.BytesIO(body)
        try:
            record = fastavro.schemaless_reader(stream, writer, reader)
        except SchemaResolutionError as e:
            raise LineError(
                f"schema id {schema_id}: the writer's schema cannot be resolved into the "
                f"reader's: {str(e)[:_REASON_CHARS]}"
            ) from e
        except Exception as e:  # fastavro raises many kinds (EOFError, IndexError, ...)
            raise LineError(
                f"schema id {schema_id}: not an Avro datum of its schema: {type(e).__name__}: {e}"
            ) from e
        if stream.tell() != len(body):
            raise LineError(
                f"schema id {schema_id}: not an Avro datum of its schema: "
                f"{len(body) - stream.tell()} bytes after its end"
            )
        if not isinstance(record, dict):
            raise LineError(f"schema id {schema_id}: the writer's schema is not a record")
        return record

    def writer_schema(self, schema_id: SchemaId) -> Any:
        """The writer's schema of ``schema_id`` as the registry gives it (parsed JSON),
        cached per id; ``LineError`` if the registry has no such id or it is not JSON."""
        if schema_id in self._writers:
            return self._writers[schema_id]
        if self._client is None:
            self._client = self.connect(self.registry)
        try:
            text = self._client.schema(schema_id)
        except SchemaNotFound as e:
            raise LineError(f"schema id {schema_id} is not in the schema registry ({e})") from e
        try:
            schema = self._writers[schema_id] = json.loads(text)
        except ValueError as e:
            raise LineError(f"schema id {schema_id}: its schema cannot be parsed: {e}") from e
        return schema

    def resolution(self, schema_id: SchemaId) -> tuple[Any, Any]:
        """The parsed writer's schema of ``schema_id`` and the reader's, cached per id;
        ``LineError`` if the registry has no such id or its schema cannot be parsed."""
        pair = self._pairs.get(schema_id)
        if pair is not None:
            return pair
        writer_schema = self.writer_schema(schema_id)
        try:
            writer = fastavro.parse_schema(writer_schema, named_schemas={})
        except Exception as e:  # a registry serving a schema fastavro refuses
            raise LineError(f"schema id {schema_id}: its schema cannot be parsed: {e}") from e
        reader_schema = dict(self.schema)
        if isinstance(writer_schema, dict) and writer_schema.get("type") == "record":
            # Top-level names are not compared: take the writer's full name for the reader.
            reader_schema.pop("namespace", None)
            reader_schema["name"] = typing.cast(dict[str, Any], writer)["name"]
        reader = fastavro.parse_schema(reader_schema, named_schemas={})
        pair = self._pairs[schema_id] = (writer, reader)
        return pair


class RegistryAvroWriter:
    """Frames records as the registry's Avro wire format under ``subject``'s schema.

    :meth:`check` (before the job starts) asks the registry whether the subject's
    compatibility rule admits the schema; :meth:`encode` and :meth:`encode_batch` register
    it on first use (:class:`~spillway.spark_jobs.connectors.subjectschema.SubjectSchema`).
    Picklable (the client is made on first use, by ``connect``: a module-level callable,
    :class:`RegistryClient` unless a test fakes it).
    """

    def __init__(
        self,
        schema: dict[str, Any],
        registry: RegistryConfig,
        subject: str,
        connect: Callable[[RegistryConfig], SubjectRegistry] = RegistryClient,
    ) -> None:
        self.schema = schema
        text = json.dumps(schema, separators=(",", ":"))
        self.target = SubjectSchema(text, "AVRO", registry, subject, connect)
        self._parsed = fastavro.parse_schema(schema, named_schemas={})
        self._columns = batch_encoder(schema)  # None: not flat, rows are written one by one

    @property
    def subject(self) -> str:
        """The subject the schema is registered under."""
        return self.target.subject

    def __getstate__(self) -> dict[str, Any]:
        return {"schema": self.schema, "target": self.target}

    def __setstate__(self, state: dict[str, Any]) -> None:
        target: SubjectSchema = state["target"]
        self.__init__(  # type: ignore[misc]
            state["schema"], target.registry, target.subject, target.connect
        )

    def check(self, where: str) -> None:
        """``PipelineDefinitionError`` naming ``where`` if the subject's compatibility
        rule refuses the schema (the registry's reasons included)."""
        self.target.check(where, "the records' schema")

    def encode(self, record: dict[str, Any]) -> bytes:
        """``record`` as magic byte, schema id and Avro datum."""
        out = io.BytesIO()
        out.write(self.target.header())
        fastavro.schemaless_writer(out, self._parsed, record)
        return out.getvalue()

    def encode_batch(self, batch: pa.RecordBatch) -> list[bytes]:
        """Each row of ``batch`` as :meth:`encode` writes its dict: column by column for a
        flat schema, else (or for a row the columns cannot write, e.g. a null in a field
        that is not nullable: fastavro's error) row by row."""
        header = self.target.header()
        if self._columns is not None:
            values = self._columns.encode(batch, header)
            if values is not None:
                return values
        return [self.encode(r) for r in batch.to_pylist()]
