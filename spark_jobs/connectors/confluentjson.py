"""The Confluent wire format with JSON Schema, by the schema registry: magic byte 0, the
schema id (4 bytes, big-endian), then the value's JSON text (what confluent-kafka's
``JSONSerializer`` writes).

Reading: :class:`RegistryJsonRecords` (the record path) and :class:`RegistryJsonBatches`
(the batch path) validate each value against the JSON schema its id names (fetched once
per id and cached, as a ``jsonschema`` validator), then read it as the project reads plain
JSON values into the reader's (Avro record) schema: records by
:func:`~spillway.spark_jobs.records.lines.parse_json_value`, batches by
:func:`~spillway.spark_jobs.connectors.batchjson.decode_json_values`. A value with no
header, an id the registry does not know (or that names a schema of another kind), text
that is not a JSON object, or an object its JSON schema refuses is a bad record whose
reason names the id.

Writing: :class:`RegistryJsonWriter` registers a JSON schema under a subject (the records'
schema as JSON Schema by default: :func:`json_schema_of`) and frames each record's JSON, or
each row of an Arrow batch (column by column,
:func:`~spillway.channels.wire.arrowjson.json_values`), with its id. Values are the
project's JSON (``jsontext.dumps``: compact, keys sorted); they are not validated on the
way out: the channel's schema has typed them already.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import jsonschema
import pyarrow as pa

from spillway.channels.errors import PipelineDefinitionError
from spillway.channels.wire import jsontext
from spillway.channels.wire.arrowjson import json_values
from spillway.spark_jobs.connectors.batchavro import AvroRun
from spillway.spark_jobs.connectors.batchjson import decode_json_values
from spillway.spark_jobs.connectors.batchregistry import flat_reader
from spillway.spark_jobs.connectors.confluentavro import record_full_name, split_header
from spillway.spark_jobs.connectors.registry import (
    RegistryClient,
    RegistryConfig,
    SchemaId,
    SchemaNotFound,
)
from spillway.spark_jobs.connectors.subjectschema import SubjectRegistry, SubjectSchema
from spillway.spark_jobs.modes import SubjectStrategy
from spillway.spark_jobs.records.lines import LineError, field_types, parse_json_value

DRAFT = "http://json-schema.org/draft-07/schema#"
"""The JSON Schema dialect of the schemas :func:`json_schema_of` derives."""

_REASON_CHARS = 300
_JSON_TYPES = {
    "boolean": "boolean",
    "int": "integer",
    "long": "integer",
    "float": "number",
    "double": "number",
    "string": "string",
}


class JsonSchemaSource(Protocol):
    """What a JSON Schema decoder asks of a registry
    (:class:`~spillway.spark_jobs.connectors.registry.RegistryClient` is one)."""

    def json_schema(self, schema_id: SchemaId) -> str:
        """The JSON Schema text of ``schema_id``; ``SchemaNotFound`` if there is none."""
        ...


def json_schema_of(schema: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema (draft-07) of the JSON the project writes for records of the Avro
    record ``schema``; pure. Its ``title`` is the record's full name (the record name
    Confluent's subject strategies read); a field whose type is not ``["null", ...]`` is
    ``required``. ``PipelineDefinitionError`` for a type JSON has no form for (``bytes``,
    ``fixed``)."""
    return {"$schema": DRAFT, "title": record_full_name(schema), **_json_type(schema)}


def _json_type(avro: Any) -> dict[str, Any]:
    """The JSON Schema of values of the Avro type ``avro`` (parsed JSON)."""
    if isinstance(avro, str) and avro in _JSON_TYPES:
        return {"type": _JSON_TYPES[avro]}
    if isinstance(avro, list):
        branches = [_json_type(b) for b in avro if b != "null"]
        one = branches[0] if len(branches) == 1 else {"anyOf": branches}
        if "null" not in avro:
            return one
        if set(one) == {"type"} and isinstance(one["type"], str):
            return {"type": [one["type"], "null"]}
        return {"anyOf": [one, {"type": "null"}]}
    if isinstance(avro, dict):
        kind = avro.get("type")
        if kind == "record":
            fields = avro.get("fields", [])
            return {
                "type": "object",
                "properties": {f["name"]: _json_type(f["type"]) for f in fields},
                "required": [f["name"] for f in fields if not _nullable(f["type"])],
            }
        if kind == "array":
            return {"type": "array", "items": _json_type(avro["items"])}
        if kind == "map":
            return {"type": "object", "additionalProperties": _json_type(avro["values"])}
        if kind == "enum":
            return {"type": "string", "enum": list(avro["symbols"])}
        if isinstance(kind, str) and kind in _JSON_TYPES:  # a logical type: its base type
            return {"type": _JSON_TYPES[kind]}
    raise PipelineDefinitionError(
        f"the Avro type {avro!r} has no JSON Schema form here; pass write_kafka(schema=...) "
        "a JSON schema of the records"
    )


def _nullable(avro: Any) -> bool:
    return isinstance(avro, list) and "null" in avro


def json_subject_name(topic: str, schema: dict[str, Any], strategy: SubjectStrategy) -> str:
    """The value subject of values of the JSON ``schema`` written to ``topic``, as
    Confluent's strategies name it (the record name is the schema's ``title``):
    ``<topic>-value``, ``<title>`` or ``<topic>-<title>``; ``PipelineDefinitionError`` if
    the strategy needs a title and the schema has none."""
    if strategy == "topic":
        return f"{topic}-value"
    title = schema.get("title")
    if not isinstance(title, str) or not title:
        raise PipelineDefinitionError(
            f'subject_strategy="{strategy}" names the subject by the JSON schema\'s "title" '
            "(its record name); the schema has none"
        )
    return title if strategy == "record" else f"{topic}-{title}"


class RegistryJsonRecords:
    """The record path's decoder of registry-framed JSON values into records of the
    reader's (Avro record) ``schema``, each validated against its id's JSON schema.

    Picklable before its first :meth:`read` (the client is made on first use, by
    ``connect``: a module-level callable, :class:`RegistryClient` unless a test fakes it).
    """

    def __init__(
        self,
        schema: dict[str, Any],
        registry: RegistryConfig,
        connect: Callable[[RegistryConfig], JsonSchemaSource] = RegistryClient,
    ) -> None:
        self.schema, self.registry, self.connect = schema, registry, connect
        self._fields = field_types(schema)
        self._client: JsonSchemaSource | None = None
        self._validators: dict[SchemaId, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        # The client and the validators are made again where the decoder is unpickled.
        return {**self.__dict__, "_client": None, "_validators": {}}

    def read(self, value: bytes | None) -> dict[str, Any]:
        """``value`` as a record; ``LineError`` saying why not (naming the schema id)."""
        schema_id, body = split_header(value)
        return self.document(schema_id, body)

    def document(self, schema_id: SchemaId, body: bytes) -> dict[str, Any]:
        """``body`` (the JSON after a header naming ``schema_id``) as a record;
        ``LineError`` if it is not a JSON object or its id's JSON schema refuses it."""
        validator = self.validator(schema_id)
        try:
            record = parse_json_value(body, self._fields)
        except LineError as e:
            raise LineError(f"schema id {schema_id}: {e}") from e
        if not validator.is_valid(record):
            error = jsonschema.exceptions.best_match(validator.iter_errors(record))
            where = "/".join(str(p) for p in error.absolute_path)
            raise LineError(
                f"schema id {schema_id}: the value does not match its JSON schema"
                f"{f' at {where!r}' if where else ''}: {error.message[:_REASON_CHARS]}"
            )
        return record

    def validator(self, schema_id: SchemaId) -> Any:
        """The validator of ``schema_id``'s JSON schema, cached per id; ``LineError`` if the
        registry has no JSON schema of that id or it is not a valid JSON schema."""
        validator = self._validators.get(schema_id)
        if validator is not None:
            return validator
        if self._client is None:
            self._client = self.connect(self.registry)
        try:
            text = self._client.json_schema(schema_id)
        except SchemaNotFound as e:
            raise LineError(f"schema id {schema_id} is not in the schema registry ({e})") from e
        try:
            document = json.loads(text)
            kind = jsonschema.validators.validator_for(document)
            kind.check_schema(document)
        except (ValueError, TypeError, jsonschema.exceptions.SchemaError) as e:
            why = str(e).splitlines()[0][:_REASON_CHARS]
            why = f"schema id {schema_id}: its JSON schema cannot be parsed: {why}"
            raise LineError(why) from e
        validator = self._validators[schema_id] = kind(document)
        return validator


class RegistryJsonBatches:
    """Decodes runs of registry-framed JSON values into Arrow batches of the flat reader's
    ``schema`` (its defaults dropped:
    :func:`~spillway.spark_jobs.connectors.batchregistry.channel_schema`); ``decode`` as
    :meth:`AvroDecoder.decode <spillway.spark_jobs.connectors.batchavro.AvroDecoder.decode>`.

    Each value is parsed alone (orjson) to be validated against its id's JSON schema, as
    on the record path; the valid ones are then decoded together as plain JSON values are
    (:func:`~spillway.spark_jobs.connectors.batchjson.decode_json_values`: one
    ``pyarrow.json`` call per run), so the columns hold what the JSON path would.

    Picklable (its decoder's client and validators are made again where it is unpickled).
    """

    def __init__(
        self,
        schema: dict[str, Any],
        registry: RegistryConfig,
        connect: Callable[[RegistryConfig], JsonSchemaSource] = RegistryClient,
    ) -> None:
        self.arrow = flat_reader(schema)
        self._records = RegistryJsonRecords(schema, registry, connect)

    def decode(self, values: Sequence[bytes | None]) -> AvroRun:
        """``values`` as one batch of the reader's schema, in their order, bad values left
        out with the reason (which names the schema id where there is one);
        ``RegistryUnavailableError`` if the registry cannot be asked about a new id."""
        bodies: list[bytes] = []
        sources: list[tuple[int, SchemaId]] = []  # body k: its value's index and schema id
        bad: list[tuple[int, str]] = []
        for i, value in enumerate(values):
            try:
                schema_id, body = split_header(value)
                self._records.document(schema_id, body)
            except LineError as e:
                bad.append((i, str(e)))
                continue
            bodies.append(body)
            sources.append((i, schema_id))
        run = decode_json_values(bodies, self.arrow)
        kept = range(len(bodies)) if run.kept is None else run.kept
        for k, why in run.bad:
            i, schema_id = sources[k]
            bad.append((i, f"schema id {schema_id}: {why}"))
        return AvroRun(run.batch, [sources[k][0] for k in kept], sorted(bad))


class RegistryJsonWriter:
    """Frames records as the registry's JSON Schema wire format under ``subject``'s
    ``schema`` (a JSON schema).

    :meth:`check` (before the job starts) asks the registry whether the subject's
    compatibility rule admits the schema; :meth:`encode` and :meth:`encode_batch` register
    it on first use (:class:`~spillway.spark_jobs.connectors.subjectschema.SubjectSchema`).
    Picklable (the client is made on first use, by ``connect``).
    """

    def __init__(
        self,
        schema: dict[str, Any],
        registry: RegistryConfig,
        subject: str,
        connect: Callable[[RegistryConfig], SubjectRegistry] = RegistryClient,
    ) -> None:
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.exceptions.SchemaError as e:
            raise PipelineDefinitionError(
                f"write_kafka: schema= is not a valid JSON schema: {e.message}"
            ) from None
        text = json.dumps(schema, separators=(",", ":"))
        self.target = SubjectSchema(text, "JSON", registry, subject, connect)

    @property
    def subject(self) -> str:
        """The subject the schema is registered under."""
        return self.target.subject

    def check(self, where: str) -> None:
        """``PipelineDefinitionError`` naming ``where`` if the subject's compatibility
        rule refuses the schema (the registry's reasons included)."""
        self.target.check(where, "the JSON schema")

    def encode(self, record: dict[str, Any]) -> bytes:
        """``record`` as magic byte, schema id and its JSON (``jsontext.dumps``)."""
        return self.target.header() + jsontext.dumps(record)

    def encode_batch(self, batch: pa.RecordBatch) -> list[bytes] | None:
        """Each row of ``batch`` as :meth:`encode` writes its dict, column by column;
        ``None`` if a column's type is not written so (then write the rows as records)."""
        values = json_values(batch)
        if values is None:
            return None
        header = self.target.header()
        return [header + v for v in values]
