"""JSON Schema values by a schema registry (spillway.spark_jobs.connectors.confluentjson)
with a fake registry: values of two schema versions read into the reader's records and
Arrow columns exactly, each id looked up once; every kind of bad value (no header, a
truncated header, an unknown id, an id of an Avro schema, a broken JSON schema, text that
is not a JSON object, an object its JSON schema refuses, one the reader's columns refuse)
rejected alone with its reason and origin; the writer's exact bytes, record by record and
column by column, its subject, registration and compatibility check; the API's checks.
"""

from __future__ import annotations

import json
import pickle
from typing import Any, ClassVar

import pyarrow as pa
import pytest

from spillway.channels.errors import PipelineDefinitionError
from spillway.channels.routing.batchwrite import ColumnKey
from spillway.channels.routing.partitioners import key_bytes
from spillway.channels.wire.batchread import ArrowRows
from spillway.recovery.job.origins import TopicOffset
from spillway.spark_jobs.api.pipeline import Pipeline
from spillway.spark_jobs.connectors import registry as registry_module
from spillway.spark_jobs.connectors.batchavro import decode_kafka_avro
from spillway.spark_jobs.connectors.confluentjson import (
    DRAFT,
    RegistryJsonBatches,
    RegistryJsonRecords,
    RegistryJsonWriter,
    json_schema_of,
    json_subject_name,
)
from spillway.spark_jobs.connectors.registry import (
    RegistryClient,
    RegistryConfig,
    SchemaId,
    SchemaKind,
    SchemaNotFound,
)
from spillway.spark_jobs.connectors.sinks import KafkaTopicSink
from spillway.spark_jobs.records.lines import LineError
from tests.unit.connectorfakes import FakeProducer, ctx

READER = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "amount", "type": "double"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
V1 = {
    "$schema": DRAFT,
    "title": "Order",
    "type": "object",
    "properties": {"id": {"type": "integer"}, "amount": {"type": "number"}},
    "required": ["id", "amount"],
}
V2 = {
    **V1,
    "properties": {**V1["properties"], "note": {"type": "string"}, "extra": {"type": "boolean"}},
}
ID_AS_TEXT = {**V1, "properties": {"id": {"type": "string"}}, "required": ["id"]}
BROKEN = {"type": "objekt"}  # not a JSON schema: no such type
SCHEMAS = {1: V1, 2: V2, 3: ID_AS_TEXT, 4: BROKEN}
AVRO_ID = 9  # an id the fake registry holds an Avro schema under
UNKNOWN_ID = 987_654
ASKED: list[int] = []  # every id the fake registry was asked for, in order
REGISTRY = RegistryConfig("http://127.0.0.1:1")


class FakeRegistry:
    """The registry's side of a reader: the JSON schemas of :data:`SCHEMAS`."""

    def __init__(self, config: RegistryConfig) -> None:
        self.config = config

    def json_schema(self, schema_id: SchemaId) -> str:
        ASKED.append(int(schema_id))
        if schema_id == AVRO_ID:
            raise SchemaNotFound(f"schema id {schema_id} is a AVRO schema, not JSON")
        if schema_id not in SCHEMAS:
            raise SchemaNotFound(f"no schema with id {schema_id}")
        return json.dumps(SCHEMAS[schema_id])


class FakeSubjects:
    """The registry's side of a writer: registers every schema as id 0x01020304; refuses
    a schema whose title is "Refused"."""

    registered: ClassVar[list[tuple[str, Any, str]]] = []  # (subject, schema, kind)

    def __init__(self, config: RegistryConfig) -> None:
        self.config = config

    def register(self, subject: str, schema: str, kind: SchemaKind = "AVRO") -> SchemaId:
        FakeSubjects.registered.append((subject, json.loads(schema), kind))
        return SchemaId(0x01020304)

    def compatible(
        self, subject: str, schema: str, kind: SchemaKind = "AVRO"
    ) -> tuple[bool, list[str]]:
        if json.loads(schema).get("title") == "Refused":
            return False, ["property 'id' changed type", "required 'x' added"]
        return True, []


@pytest.fixture(autouse=True)
def _fresh_logs() -> None:
    ASKED.clear()
    FakeSubjects.registered.clear()


def framed(schema_id: int, value: Any) -> bytes:
    """``value`` as confluent-kafka's JSONSerializer frames it (``json.dumps``'s text)."""
    return b"\x00" + schema_id.to_bytes(4, "big") + json.dumps(value).encode()


GOOD = [
    framed(1, {"id": 1, "amount": 1.5}),
    framed(2, {"id": 2, "amount": 2.25, "note": "n2", "extra": True}),
    framed(1, {"id": 3, "amount": -3}),
    framed(2, {"id": 4, "amount": 4.0}),
]
GOOD_RECORDS = [
    {"id": 1, "amount": 1.5},
    {"id": 2, "amount": 2.25, "note": "n2", "extra": True},
    {"id": 3, "amount": -3},
    {"id": 4, "amount": 4.0},
]
GOOD_ROWS = [
    {"id": 1, "amount": 1.5, "note": None},
    {"id": 2, "amount": 2.25, "note": "n2"},
    {"id": 3, "amount": -3.0, "note": None},
    {"id": 4, "amount": 4.0, "note": None},
]
# Every kind of bad value, with the reason both paths give.
BAD: list[tuple[bytes | None, str]] = [
    (None, "no value (null)"),
    (b"\x00\x00\x00", "no Confluent Schema Registry header (magic byte 0, a 4-byte schema id)"),
    (
        b"{" + framed(1, {"id": 5, "amount": 5})[1:],
        "no Confluent Schema Registry header (magic byte 0, a 4-byte schema id)",
    ),
    (
        framed(UNKNOWN_ID, {"id": 6}),
        f"schema id {UNKNOWN_ID} is not in the schema registry (no schema with id {UNKNOWN_ID})",
    ),
    (
        framed(AVRO_ID, {"id": 7}),
        f"schema id {AVRO_ID} is not in the schema registry (schema id {AVRO_ID} is a AVRO "
        "schema, not JSON)",
    ),
    (
        framed(4, {"id": 8}),
        "schema id 4: its JSON schema cannot be parsed: 'objekt' is not valid under any of "
        "the given schemas",
    ),
    (
        framed(1, {"id": 9, "amount": 9})[:-1],  # truncated JSON
        "schema id 1: not JSON: Expecting ',' delimiter: line 1 column 22 (char 21)",
    ),
    (framed(1, [1, 2]), "schema id 1: a JSON list, not an object"),
    (b"\x00\x00\x00\x00\x01", "schema id 1: empty value"),
    (
        framed(1, {"id": 10}),
        "schema id 1: the value does not match its JSON schema: 'amount' is a required property",
    ),
    (
        framed(2, {"id": 11, "amount": "12"}),
        "schema id 2: the value does not match its JSON schema at 'amount': '12' is not of "
        "type 'number'",
    ),
    (
        framed(1, {"id": 1.5, "amount": 1}),
        "schema id 1: the value does not match its JSON schema at 'id': 1.5 is not of "
        "type 'integer'",
    ),
]


def records() -> RegistryJsonRecords:
    return RegistryJsonRecords(READER, REGISTRY, FakeRegistry)


def test_two_versions_are_read_as_their_json_objects_each_id_looked_up_once() -> None:
    decoder = records()
    assert [decoder.read(v) for v in GOOD] == GOOD_RECORDS
    assert ASKED == [1, 2]
    assert [decoder.read(v) for v in GOOD[::-1]] == GOOD_RECORDS[::-1]
    assert ASKED == [1, 2]  # cached per id


@pytest.mark.parametrize(("value", "reason"), BAD)
def test_each_kind_of_bad_value_is_a_line_error_naming_the_id(
    value: bytes | None, reason: str
) -> None:
    with pytest.raises(LineError) as bad:
        records().read(value)
    assert str(bad.value) == reason


def test_an_unknown_id_is_asked_again_later_a_known_one_is_not() -> None:
    decoder = records()
    for _ in range(2):
        with pytest.raises(LineError, match=f"schema id {UNKNOWN_ID} is not in the schema"):
            decoder.read(framed(UNKNOWN_ID, {"id": 1}))
        decoder.read(GOOD[0])
    assert ASKED == [UNKNOWN_ID, 1, UNKNOWN_ID]  # it may be registered in between


def test_the_batch_path_reads_the_same_rows_and_rejects_each_bad_value_alone() -> None:
    bad_values = [v for v, _ in BAD]
    # A value its JSON schema admits (V1 says nothing of "note") that the reader's columns
    # refuse (a number for a string), as the plain JSON batch path refuses it.
    unreadable = framed(1, {"id": 12, "amount": 1, "note": 5})
    values = [GOOD[0], *bad_values[:6], GOOD[1], unreadable, *bad_values[6:], GOOD[2], GOOD[3]]
    decoder = RegistryJsonBatches(READER, REGISTRY, FakeRegistry)
    run = decoder.decode(values)
    assert run.batch.schema == pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("amount", pa.float64(), nullable=False),
            pa.field("note", pa.string()),
        ]
    )
    assert run.batch.to_pylist() == GOOD_ROWS
    assert run.kept == [0, 7, 15, 16]
    reasons = dict(run.bad)
    assert sorted(reasons) == [1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14]
    expected = [r for _, r in BAD]
    for i, reason in zip([1, 2, 3, 4, 5, 6, 9, 10, 11, 12, 13, 14], expected, strict=True):
        assert reasons[i] == reason
    assert reasons[8] == (
        "schema id 1: not a JSON object of the schema: JSON parse error: Column(/note) "
        "changed from string to number in row 0"
    )


def test_batch_rows_carry_their_origin_and_bad_ones_are_rejected_with_theirs() -> None:
    values = [GOOD[0], framed(UNKNOWN_ID, {"id": 6}), None, GOOD[1]]
    decoder = RegistryJsonBatches(READER, REGISTRY, FakeRegistry)
    batch = decode_kafka_avro(decoder, "orders", 2, [10, 11, 12, 13], values)
    assert batch.batch.to_pylist() == GOOD_ROWS[:2]
    assert [batch.origins.at(k) for k in range(2)] == [
        TopicOffset("orders", 2, 10),
        TopicOffset("orders", 2, 13),
    ]
    assert [(r.origin, r.error, r.raw) for r in batch.rejected] == [
        (
            TopicOffset("orders", 2, 11),
            f"schema id {UNKNOWN_ID} is not in the schema registry (no schema with id "
            f"{UNKNOWN_ID})",
            values[1],
        ),
        (TopicOffset("orders", 2, 12), "no value (null)", b""),
    ]


def test_the_decoders_pickle_before_use_and_a_nested_reader_is_refused_for_batches() -> None:
    copy = pickle.loads(pickle.dumps(RegistryJsonBatches(READER, REGISTRY, FakeRegistry)))
    assert copy.decode(GOOD[:1]).batch.to_pylist() == GOOD_ROWS[:1]
    assert pickle.loads(pickle.dumps(records())).read(GOOD[1]) == GOOD_RECORDS[1]
    nested = {**READER, "fields": [{"name": "tags", "type": {"type": "array", "items": "long"}}]}
    with pytest.raises(PipelineDefinitionError, match="flat record schema"):
        RegistryJsonBatches(nested, REGISTRY, FakeRegistry)


TAXED = {
    "type": "record",
    "name": "Taxed",
    "namespace": "spillway.test",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "amount", "type": "double"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "n", "type": "int"},
        {"name": "ok", "type": "boolean"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "size", "type": {"type": "enum", "name": "Size", "symbols": ["S", "L"]}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "either", "type": ["null", "long", "string"]},
        {"name": "sub", "type": {"type": "record", "name": "Sub", "fields": []}},
        {"name": "counts", "type": {"type": "map", "values": "long"}},
    ],
}


def test_the_records_schema_as_json_schema() -> None:
    assert json_schema_of(TAXED) == {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "spillway.test.Taxed",
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "amount": {"type": "number"},
            "note": {"type": ["string", "null"]},
            "n": {"type": "integer"},
            "ok": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "size": {"type": "string", "enum": ["S", "L"]},
            "at": {"type": "integer"},
            "either": {
                "anyOf": [{"anyOf": [{"type": "integer"}, {"type": "string"}]}, {"type": "null"}]
            },
            "sub": {"type": "object", "properties": {}, "required": []},
            "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
        },
        "required": ["id", "amount", "n", "ok", "tags", "size", "at", "sub", "counts"],
    }
    raw = {**TAXED, "fields": [{"name": "raw", "type": "bytes"}]}
    with pytest.raises(PipelineDefinitionError, match="'bytes' has no JSON Schema form"):
        json_schema_of(raw)


def test_subjects_are_named_by_the_strategies_with_the_title_as_record_name() -> None:
    schema = json_schema_of(TAXED)
    assert json_subject_name("out", schema, "topic") == "out-value"
    assert json_subject_name("out", schema, "record") == "spillway.test.Taxed"
    assert json_subject_name("out", schema, "topic_record") == "out-spillway.test.Taxed"
    assert json_subject_name("out", {"type": "object"}, "topic") == "out-value"
    with pytest.raises(PipelineDefinitionError, match='JSON schema\'s "title"'):
        json_subject_name("out", {"type": "object"}, "record")


FLAT = {**READER, "fields": [*READER["fields"], {"name": "k", "type": "string"}]}
ROWS = [
    {"id": 1, "amount": 1.5, "note": None, "k": "a"},
    {"id": -2, "amount": 0.25, "note": '\u00e9"q"', "k": "b"},
    {"id": 2**40, "amount": 3.0, "note": "", "k": "a"},
]


def writer(schema: dict[str, Any] | None = None) -> RegistryJsonWriter:
    return RegistryJsonWriter(
        schema or json_schema_of(FLAT), REGISTRY, "out-value", connect=FakeSubjects
    )


def test_the_writer_frames_each_records_json_with_the_registered_id() -> None:
    w = writer()
    assert [w.encode(r) for r in ROWS] == [
        b'\x00\x01\x02\x03\x04{"amount":1.5,"id":1,"k":"a","note":null}',
        b'\x00\x01\x02\x03\x04{"amount":0.25,"id":-2,"k":"b","note":"\xc3\xa9\\"q\\""}',
        b'\x00\x01\x02\x03\x04{"amount":3.0,"id":1099511627776,"k":"a","note":""}',
    ]
    assert FakeSubjects.registered == [("out-value", json_schema_of(FLAT), "JSON")]  # once
    batch = pa.RecordBatch.from_pylist(
        ROWS,
        schema=pa.schema(
            [
                ("id", pa.int64()),
                ("amount", pa.float64()),
                ("note", pa.string()),
                ("k", pa.string()),
            ]
        ),
    )
    assert w.encode_batch(batch) == [w.encode(r) for r in ROWS]
    # What confluent-kafka's JSONDeserializer does: validate the JSON against the schema.
    back = RegistryJsonRecords(FLAT, REGISTRY, _registered_as_id(0x01020304))
    assert [back.read(v) for v in w.encode_batch(batch) or []] == ROWS


def _registered_as_id(schema_id: int) -> Any:
    class Registered:
        def __init__(self, config: RegistryConfig) -> None:
            pass

        def json_schema(self, asked: SchemaId) -> str:
            assert asked == schema_id
            return json.dumps(FakeSubjects.registered[0][1])

    return Registered


def test_the_kafka_sink_writes_records_and_batches_as_the_same_bytes() -> None:
    arrow = pa.schema(
        [("id", pa.int64()), ("amount", pa.float64()), ("note", pa.string()), ("k", pa.string())]
    )
    batch = pa.RecordBatch.from_pylist(ROWS, schema=arrow)
    expected = [writer().encode(r) for r in ROWS]
    for key, keys in [(None, [None] * 3), (ColumnKey("k"), [key_bytes(r["k"]) for r in ROWS])]:
        for rows in (ArrowRows(batch), ROWS):
            producer = FakeProducer()
            sink = KafkaTopicSink("out", key, batches=True, encoder=writer())
            sink.open(ctx(0), {}, producer)
            sink.write(rows)
            assert producer.sent == [("out", k, v) for k, v in zip(keys, expected, strict=True)]


def test_the_writer_checks_compatibility_and_refuses_an_invalid_json_schema() -> None:
    writer().check("write_kafka 'sink'")  # admitted: no error
    with pytest.raises(PipelineDefinitionError) as refused:
        writer({**json_schema_of(FLAT), "title": "Refused"}).check("write_kafka 'sink'")
    assert str(refused.value) == (
        "write_kafka 'sink': the schema registry's compatibility rule for subject "
        "'out-value' refuses the JSON schema: property 'id' changed type; required 'x' added"
    )
    assert FakeSubjects.registered == []  # a check registers nothing
    with pytest.raises(PipelineDefinitionError, match="schema= is not a valid JSON schema"):
        writer({"type": 7})
    copy = pickle.loads(pickle.dumps(writer()))
    assert copy.encode(ROWS[0]) == writer().encode(ROWS[0])


def test_the_api_reads_and_refuses_json_schema_as_documented() -> None:
    p = Pipeline("j")
    s = p.read_kafka(
        "o", "t", schema=READER, value_format="json-schema", registry=REGISTRY, batches=True
    )
    assert p._nodes["o"].description["values"] == "json-schema"
    assert isinstance(p._nodes["o"].factory()._columns, RegistryJsonBatches)
    r = p.read_kafka("r", "t", schema=READER, value_format="json-schema", registry=REGISTRY)
    assert p._nodes["r"].description["values"] == "json-schema"
    assert isinstance(p._nodes["r"].factory()._avro, RegistryJsonRecords)
    with pytest.raises(PipelineDefinitionError, match="key_field/tombstones read JSON"):
        p.read_kafka(
            "k", "t", schema=READER, value_format="json-schema", registry=REGISTRY,
            key_field="id",
        )  # fmt: skip
    with pytest.raises(PipelineDefinitionError, match="schema= is the JSON schema of"):
        s.write_kafka("w", "out", value_format="avro", registry=REGISTRY, schema=V1)
    with pytest.raises(PipelineDefinitionError, match='JSON schema\'s "title"'):
        r.write_kafka(
            "u", "out", value_format="json-schema", registry=REGISTRY,
            schema={"type": "object"}, subject_strategy="record",
        )  # fmt: skip


def test_the_client_asks_for_and_registers_schemas_of_their_kind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[tuple[str, str, Any]] = []
    answers = {
        "/schemas/ids/3": {"schema": '{"type": "object"}', "schemaType": "JSON"},
        "/schemas/ids/4": {"schema": '"long"'},  # no schemaType: Avro
        "/subjects/out-value/versions": {"id": 5},
    }

    def request(method: str, path: str, body: Any = None) -> dict[str, Any]:
        asked.append((method, path, body))
        return answers[path]

    client = RegistryClient(REGISTRY)
    monkeypatch.setattr(client, "_request", request)
    assert client.json_schema(SchemaId(3)) == '{"type": "object"}'
    with pytest.raises(SchemaNotFound, match=r"^schema id 3 is a JSON schema, not AVRO$"):
        client.schema(SchemaId(3))
    with pytest.raises(SchemaNotFound, match=r"^schema id 4 is a AVRO schema, not JSON$"):
        client.json_schema(SchemaId(4))
    assert client.register("out-value", "{}", "JSON") == 5
    assert client.json_schema(SchemaId(5)) == "{}"  # known by its registration
    assert asked == [
        ("GET", "/schemas/ids/3", None),
        ("GET", "/schemas/ids/4", None),
        ("POST", "/subjects/out-value/versions", {"schema": "{}", "schemaType": "JSON"}),
    ]  # each id asked once


def test_a_registration_that_loses_a_race_for_the_first_version_registers_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []

    def request(method: str, path: str, body: Any = None) -> dict[str, Any]:
        calls.append(path)
        if len(calls) == 1:  # another subtask created the subject a moment before
            raise registry_module._Conflict("refused (409): artifact already exists")
        return {"id": 7}

    client = RegistryClient(REGISTRY)
    monkeypatch.setattr(client, "_request", request)
    assert client.register("out-value", "{}", "JSON") == 7
    assert calls == ["/subjects/out-value/versions"] * 2
