"""Protobuf values by a schema registry (spillway.spark_jobs.connectors.confluentproto)
with a fake registry: values confluent-kafka's ``ProtobufSerializer`` wrote with two
versions of a message read into exact records and Arrow rows, each id looked up once;
every kind of bad value (no header, a wrong magic byte, an unknown id, an id of another
kind, a schema that is not a descriptor, indexes that name no message, a message of
another shape, bytes that do not parse, an enum number that is no symbol) rejected alone
with its reason and origin; the writer's bytes equal to ``ProtobufSerializer``'s, record
by record and column by column, its subject, registration and compatibility check; the
records' schema of every field kind; the API's checks.
"""

from __future__ import annotations

import base64
import io
import pickle
from typing import Any, ClassVar

import fastavro
import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2
from google.protobuf.message import Message

from spillway.channels.errors import PipelineDefinitionError
from spillway.channels.wire.batchread import ArrowRows
from spillway.recovery.job.origins import TopicOffset
from spillway.spark_jobs.api.pipeline import Pipeline
from spillway.spark_jobs.connectors.batchavro import decode_kafka_avro
from spillway.spark_jobs.connectors.confluentproto import (
    RegistryProtoBatches,
    RegistryProtoRecords,
    RegistryProtoWriter,
    indexes_bytes,
    message_indexes,
    proto_subject_name,
    record_schema,
    split_indexes,
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
from tests.protomessages import ORDERS_V2, RICH_FILE, Order, OrderV1, Rich, Taxed, message_class
from tests.unit.connectorfakes import FakeProducer, ctx

REGISTRY = RegistryConfig("http://127.0.0.1:1")
CTX = SerializationContext("orders", MessageField.VALUE)
NO_DEPRECATED = {"use.deprecated.format": False}
UNKNOWN_ID = 987_654
AVRO_ID = 9
PROTO_TEXT_ID = 8  # a registry answering .proto text, not a serialized descriptor
ASKED: list[int] = []


# confluent-kafka's in-memory registry client: its serializers register here.
MOCK = SchemaRegistryClient.new_client({"url": "mock://protobuf-tests"})
V1_SERIALIZER = ProtobufSerializer(OrderV1, MOCK, NO_DEPRECATED)
V2_SERIALIZER = ProtobufSerializer(Order, MOCK, NO_DEPRECATED)


def _other_shape() -> type[Message]:
    """``shop.Order`` with ``amount`` (field 2) a string: a message of another shape."""
    other = descriptor_pb2.FileDescriptorProto()
    other.CopyFrom(ORDERS_V2)
    other.name = "other.proto"
    other.message_type[0].field[1].type = descriptor_pb2.FieldDescriptorProto.TYPE_STRING
    return message_class(other, "shop.Order")


OTHER = _other_shape()


class FakeRegistry:
    """The registry's side of a reader: what ``MOCK`` holds (serialized descriptors),
    plus an Avro id and one answering .proto text."""

    def __init__(self, config: RegistryConfig) -> None:
        self.config = config

    def protobuf_schema(self, schema_id: SchemaId) -> str:
        ASKED.append(int(schema_id))
        if schema_id == AVRO_ID:
            raise SchemaNotFound(f"schema id {schema_id} is a AVRO schema, not PROTOBUF")
        if schema_id == PROTO_TEXT_ID:
            return 'syntax = "proto3"; message Order { int64 id = 1; }'
        try:
            return str(MOCK.get_schema(schema_id, fmt="serialized").schema_str)
        except Exception as e:  # the mock's 404
            raise SchemaNotFound(f"no schema with id {schema_id}") from e


@pytest.fixture(autouse=True)
def _fresh_logs() -> None:
    ASKED.clear()
    FakeSubjects.registered.clear()


ORDERS: list[tuple[Message, dict[str, Any]]] = [
    (OrderV1(id=1, amount=150, kind=1), {"id": 1, "amount": 150, "kind": "BUY", "note": ""}),
    (
        Order(id=2, amount=-3, note="n\u00e9", kind=2),
        {"id": 2, "amount": -3, "kind": "RETURN", "note": "n\u00e9"},
    ),
    (OrderV1(id=3), {"id": 3, "amount": 0, "kind": "VIEW", "note": ""}),  # proto3 defaults
    (Order(id=4, amount=2**40, note=""), {"id": 4, "amount": 2**40, "kind": "VIEW", "note": ""}),
]
GOOD = [(V1_SERIALIZER if isinstance(m, OrderV1) else V2_SERIALIZER)(m, CTX) for m, _ in ORDERS]
GOOD_RECORDS = [r for _, r in ORDERS]
V1_ID, V2_ID = (int.from_bytes(GOOD[i][1:5], "big") for i in (0, 1))


def framed(schema_id: int, body: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + body


BAD: list[tuple[bytes | None, str]] = [
    (None, "no value (null)"),
    (b"\x00\x00\x00", "no Confluent Schema Registry header (magic byte 0, a 4-byte schema id)"),
    (
        b"\x01" + GOOD[0][1:],
        "no Confluent Schema Registry header (magic byte 0, a 4-byte schema id)",
    ),
    (
        framed(UNKNOWN_ID, GOOD[0][5:]),
        f"schema id {UNKNOWN_ID} is not in the schema registry (no schema with id {UNKNOWN_ID})",
    ),
    (
        framed(AVRO_ID, GOOD[0][5:]),
        f"schema id {AVRO_ID} is not in the schema registry (schema id {AVRO_ID} is a AVRO "
        "schema, not PROTOBUF)",
    ),
    (
        framed(PROTO_TEXT_ID, GOOD[0][5:]),
        f"schema id {PROTO_TEXT_ID}: its Protobuf schema cannot be read: it is not a base64 "
        "FileDescriptorProto (the registry's format=serialized; .proto text is not parsed "
        "here): Only base64 data is allowed",
    ),
    (framed(V1_ID, b""), f"schema id {V1_ID}: the message indexes are cut short"),
    (framed(V1_ID, b"\x02\x80"), f"schema id {V1_ID}: the message indexes are cut short"),
    (
        framed(V1_ID, b"\x02\x04" + GOOD[0][6:]),  # [2]: the file has 2 messages
        f"schema id {V1_ID}: the message indexes [2] name no message of its schema",
    ),
    (
        framed(V1_ID, b"\x04\x02\x00" + GOOD[0][6:]),  # [1, 0]: Taxed has no nested message
        f"schema id {V1_ID}: the message indexes [1, 0] name no message of its schema",
    ),
    (
        framed(V1_ID, b"\x00\xff\xff"),  # a varint tag cut short
        f"schema id {V1_ID}: not a Protobuf message shop.Order: Error parsing message with "
        "type 'shop.Order': Wire format was corrupt",
    ),
    (
        framed(V1_ID, b"\x00\x18\x07"),  # kind = 7: no such symbol
        f"schema id {V1_ID}: field 'kind': 7 is not a symbol of the enum shop.Kind",
    ),
]


def records() -> RegistryProtoRecords:
    return RegistryProtoRecords(Order, REGISTRY, FakeRegistry)


def test_confluents_values_of_two_versions_are_read_as_records_each_id_looked_up_once() -> None:
    assert V1_ID != V2_ID
    assert GOOD[0][5:6] == b"\x00"  # the first message: the lone 0 byte
    decoder = records()
    assert [decoder.read(v) for v in GOOD] == GOOD_RECORDS
    assert ASKED == [V1_ID, V2_ID]
    assert [decoder.read(v) for v in GOOD[::-1]] == GOOD_RECORDS[::-1]
    assert ASKED == [V1_ID, V2_ID]  # cached per id


@pytest.mark.parametrize(("value", "reason"), BAD)
def test_each_kind_of_bad_value_is_a_line_error_naming_the_id(
    value: bytes | None, reason: str
) -> None:
    with pytest.raises(LineError) as bad:
        records().read(value)
    assert str(bad.value) == reason


def test_a_message_of_another_shape_is_refused_a_taxed_one_read_by_its_shared_fields() -> None:
    other = ProtobufSerializer(OTHER, MOCK, NO_DEPRECATED)(OTHER(id=1, amount="x"), CTX)
    other_id = int.from_bytes(other[1:5], "big")
    with pytest.raises(LineError) as bad:
        records().read(other)
    assert str(bad.value) == (
        f"schema id {other_id}: its message shop.Order's field 2 (amount) is not of the type "
        "of shop.Order's field 2 (amount)"
    )
    # Taxed (indexes [1]) shares Order's fields 1-4 with their types: a compatible message.
    taxed = ProtobufSerializer(Taxed, MOCK, NO_DEPRECATED)(
        Taxed(id=5, amount=10, note="t", gross=12), SerializationContext("t", MessageField.VALUE)
    )
    assert taxed[5:7] == b"\x02\x02"  # count 1, index 1 (zigzag)
    assert records().read(taxed) == {"id": 5, "amount": 10, "kind": "VIEW", "note": "t"}


def test_the_message_indexes_are_written_and_read_as_confluent_does() -> None:
    nested = Rich.DESCRIPTOR.nested_types_by_name["Point"]
    assert message_indexes(Order.DESCRIPTOR) == [0]
    assert message_indexes(Taxed.DESCRIPTOR) == [1]
    assert message_indexes(nested) == [0, 0]
    assert indexes_bytes([0]) == b"\x00"
    assert indexes_bytes([1]) == b"\x02\x02"
    assert indexes_bytes([0, 0]) == b"\x04\x00\x00"
    assert indexes_bytes([3, 70]) == b"\x04\x06\x8c\x01"
    assert split_indexes(b"\x04\x06\x8c\x01rest") == ([3, 70], b"rest")
    assert split_indexes(b"\x00rest") == ([0], b"rest")


def test_the_batch_path_reads_the_same_rows_and_rejects_each_bad_value_alone() -> None:
    bad_values = [v for v, _ in BAD]
    values = [GOOD[0], *bad_values[:6], GOOD[1], *bad_values[6:], GOOD[2], GOOD[3]]
    decoder = RegistryProtoBatches(Order, REGISTRY, FakeRegistry)
    run = decoder.decode(values)
    assert run.batch.schema == pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("amount", pa.int64(), nullable=False),
            pa.field("kind", pa.string(), nullable=False),
            pa.field("note", pa.string(), nullable=False),
        ]
    )
    assert run.batch.to_pylist() == GOOD_RECORDS
    assert run.kept == [0, 7, 14, 15]
    assert run.bad == [(i, r) for i, (_, r) in zip([*range(1, 7), *range(8, 14)], BAD, strict=True)]


def test_batch_rows_carry_their_origin_and_bad_ones_are_rejected_with_theirs() -> None:
    values = [GOOD[0], framed(UNKNOWN_ID, GOOD[0][5:]), b"\x07junk", GOOD[1]]
    decoder = RegistryProtoBatches(Order, REGISTRY, FakeRegistry)
    batch = decode_kafka_avro(decoder, "orders", 2, [10, 11, 12, 13], values)
    assert batch.batch.to_pylist() == GOOD_RECORDS[:2]
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
        (
            TopicOffset("orders", 2, 12),
            "no Confluent Schema Registry header (magic byte 0, a 4-byte schema id)",
            values[2],
        ),
    ]


def test_every_field_kind_becomes_its_record_type_and_round_trips() -> None:
    assert record_schema(Rich.DESCRIPTOR) == {
        "type": "record",
        "name": "Rich",
        "namespace": "lab",
        "fields": [
            {"name": "big", "type": "long"},
            {"name": "ratio", "type": "float"},
            {"name": "ok", "type": "boolean"},
            {"name": "raw", "type": "bytes"},
            {
                "name": "at",
                "type": [
                    "null",
                    {
                        "type": "record",
                        "name": "Point",
                        "namespace": "lab.Rich",
                        "fields": [{"name": "x", "type": "int"}, {"name": "y", "type": "double"}],
                    },
                ],
            },
            {"name": "path", "type": {"type": "array", "items": "lab.Rich.Point"}},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "counts", "type": {"type": "map", "values": "long"}},
            {"name": "small", "type": "long"},
        ],
    }
    message = Rich(big=2**63 - 1, ratio=0.5, ok=True, raw=b"\x00\xff", tags=["a", "b"], small=7)
    message.at.x = -3
    message.path.add(x=1, y=1.5)
    message.path.add()
    message.counts["k"] = 2**32 - 1
    record = {
        "big": 2**63 - 1,
        "ratio": 0.5,
        "ok": True,
        "raw": b"\x00\xff",
        "at": {"x": -3, "y": 0.0},
        "path": [{"x": 1, "y": 1.5}, {"x": 0, "y": 0.0}],
        "tags": ["a", "b"],
        "counts": {"k": 2**32 - 1},
        "small": 7,
    }
    # The records travel the channels as Avro datums of the derived schema.
    parsed = fastavro.parse_schema(record_schema(Rich.DESCRIPTOR))
    datum = io.BytesIO()
    fastavro.schemaless_writer(datum, parsed, record)
    datum.seek(0)
    assert fastavro.schemaless_reader(datum, parsed, None) == record
    value = ProtobufSerializer(Rich, MOCK, NO_DEPRECATED)(message, CTX)
    rich_id = int.from_bytes(value[1:5], "big")
    decoder = RegistryProtoRecords(Rich, REGISTRY, FakeRegistry)
    assert decoder.read(value) == record
    assert decoder.read(framed(rich_id, b"\x00")) == {  # every field absent
        "big": 0, "ratio": 0.0, "ok": False, "raw": b"", "at": None, "path": [], "tags": [],
        "counts": {}, "small": 0,
    }  # fmt: skip
    with pytest.raises(LineError, match=r"field 'big': 9223372036854775808 does not fit a long"):
        decoder.read(ProtobufSerializer(Rich, MOCK, NO_DEPRECATED)(Rich(big=2**63), CTX))
    writer = RegistryProtoWriter(Rich, REGISTRY, "rich-value", FakeSubjects)
    written = writer.encode(record)
    assert Rich.FromString(written[6:]) == message
    with pytest.raises(PipelineDefinitionError, match="flat record schema"):
        RegistryProtoBatches(Rich, REGISTRY, FakeRegistry)


class FakeSubjects:
    """The registry's side of a writer: ``MOCK``'s registration (the ids confluent-kafka's
    serializer sees); refuses the ``lab.Rich`` file's schema."""

    registered: ClassVar[list[tuple[str, str, str]]] = []  # (subject, schema, kind)

    def __init__(self, config: RegistryConfig) -> None:
        self.config = config

    def register(self, subject: str, schema: str, kind: SchemaKind = "AVRO") -> SchemaId:
        FakeSubjects.registered.append((subject, schema, kind))
        return SchemaId(MOCK.register_schema(subject, Schema(schema, kind)))

    def compatible(
        self, subject: str, schema: str, kind: SchemaKind = "AVRO"
    ) -> tuple[bool, list[str]]:
        if schema == base64.b64encode(RICH_FILE.SerializeToString()).decode():
            return False, ["field 1 changed type"]
        return True, []


TAXED_ROWS = [
    {"id": 1, "amount": 150, "kind": "BUY", "note": "", "gross": 180},
    {"id": -2, "amount": 0, "kind": "VIEW", "note": '\u00e9"q"', "gross": 0},
    {"id": 2**40, "amount": 5, "kind": "RETURN", "note": "x", "gross": 6},
]
TAXED_ARROW = pa.schema(
    [
        ("id", pa.int64()),
        ("amount", pa.int64()),
        ("kind", pa.string()),
        ("note", pa.string()),
        ("gross", pa.int64()),
    ]
)


def test_the_writer_writes_the_bytes_of_confluents_serializer_record_and_batch() -> None:
    writer = RegistryProtoWriter(Taxed, REGISTRY, "out-value", FakeSubjects)
    serializer = ProtobufSerializer(Taxed, MOCK, NO_DEPRECATED)
    out = SerializationContext("out", MessageField.VALUE)
    expected = [serializer(Taxed(**{**r, "kind": r["kind"]}), out) for r in TAXED_ROWS]
    assert [writer.encode(r) for r in TAXED_ROWS] == expected
    assert FakeSubjects.registered == [
        ("out-value", base64.b64encode(Taxed.DESCRIPTOR.file.serialized_pb).decode(), "PROTOBUF")
    ]  # once
    batch = pa.RecordBatch.from_pylist(TAXED_ROWS, schema=TAXED_ARROW)
    assert writer.encode_batch(batch) == expected
    back = ProtobufDeserializer(Taxed, NO_DEPRECATED)
    assert [back(v, out) for v in expected] == [Taxed(**r) for r in TAXED_ROWS]
    copy = pickle.loads(pickle.dumps(writer))
    assert copy.encode(TAXED_ROWS[0]) == expected[0]
    with pytest.raises(ValueError, match=r"'SELL' is not a symbol of the enum shop\.Kind"):
        writer.encode({**TAXED_ROWS[0], "kind": "SELL"})


def test_the_kafka_sink_writes_records_and_batches_as_the_same_bytes() -> None:
    writer = RegistryProtoWriter(Taxed, REGISTRY, "out-value", FakeSubjects)
    expected = [writer.encode(r) for r in TAXED_ROWS]
    for rows in (ArrowRows(pa.RecordBatch.from_pylist(TAXED_ROWS, schema=TAXED_ARROW)), TAXED_ROWS):
        producer = FakeProducer()
        sink = KafkaTopicSink("out", None, batches=True, encoder=writer)
        sink.open(ctx(0), {}, producer)
        sink.write(rows)
        assert producer.sent == [("out", None, v) for v in expected]


def test_the_writer_checks_compatibility_and_names_subjects_by_the_message() -> None:
    RegistryProtoWriter(Taxed, REGISTRY, "out-value", FakeSubjects).check("write_kafka 'sink'")
    with pytest.raises(PipelineDefinitionError) as refused:
        RegistryProtoWriter(Rich, REGISTRY, "out-value", FakeSubjects).check("write_kafka 'sink'")
    assert str(refused.value) == (
        "write_kafka 'sink': the schema registry's compatibility rule for subject "
        "'out-value' refuses the Protobuf schema of lab.Rich: field 1 changed type"
    )
    assert FakeSubjects.registered == []  # a check registers nothing
    assert proto_subject_name("out", Taxed.DESCRIPTOR, "topic") == "out-value"
    assert proto_subject_name("out", Taxed.DESCRIPTOR, "record") == "shop.Taxed"
    assert proto_subject_name("out", Taxed.DESCRIPTOR, "topic_record") == "out-shop.Taxed"


def test_the_decoders_pickle_with_a_message_class_made_at_run_time() -> None:
    copy = pickle.loads(pickle.dumps(RegistryProtoBatches(Order, REGISTRY, FakeRegistry)))
    assert copy.decode(GOOD[:2]).batch.to_pylist() == GOOD_RECORDS[:2]
    assert pickle.loads(pickle.dumps(records())).read(GOOD[1]) == GOOD_RECORDS[1]


def test_the_api_reads_and_writes_protobuf_as_documented(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(RegistryProtoWriter, "check", lambda self, where: None)
    p = Pipeline("pb")
    s = p.read_kafka(
        "o", "t", value_format="protobuf", registry=REGISTRY, message_type=Order, batches=True
    )
    assert p._nodes["o"].description["values"] == "protobuf"
    assert isinstance(p._nodes["o"].factory()._columns, RegistryProtoBatches)
    assert p._nodes["o"].schema == record_schema(Order.DESCRIPTOR)
    r = p.read_kafka("r", "t", value_format="protobuf", registry=REGISTRY, message_type=Order)
    assert isinstance(p._nodes["r"].factory()._avro, RegistryProtoRecords)
    assert p._nodes["r"].schema == record_schema(Order.DESCRIPTOR)
    r.write_kafka(
        "w", "out", value_format="protobuf", registry=REGISTRY, message_type=Taxed,
        subject_strategy="record",
    )  # fmt: skip
    assert p._nodes["w"].description["subject"] == "shop.Taxed"
    refusals = [
        (
            lambda: p.read_kafka("a", "t", value_format="protobuf", message_type=Order),
            'value_format="protobuf" needs registry=',
        ),
        (
            lambda: p.read_kafka("b", "t", value_format="protobuf", registry=REGISTRY),
            "needs message_type=<a generated Protobuf message class>",
        ),
        (
            lambda: p.read_kafka(
                "c", "t", value_format="protobuf", registry=REGISTRY, message_type=Order()
            ),
            "needs message_type=<a generated Protobuf message class>",
        ),
        (
            lambda: p.read_kafka(
                "d",
                "t",
                schema={"type": "record", "name": "X", "fields": []},
                value_format="protobuf",
                registry=REGISTRY,
                message_type=Order,
            ),
            "takes its records' schema from message_type=; drop schema=",
        ),
        (
            lambda: p.read_kafka("e", "t", value_format="avro", message_type=Order),
            'message_type= is for value_format="protobuf"',
        ),
        (lambda: p.read_kafka("f", "t"), "read_kafka needs schema="),
        (
            lambda: p.read_kafka(
                "g",
                "t",
                value_format="protobuf",
                registry=REGISTRY,
                message_type=Rich,
                batches=True,
            ),
            "needs a flat schema",
        ),
        (
            lambda: s.write_kafka(
                "x", "out", value_format="protobuf", registry=REGISTRY, message_type=Rich
            ),
            r"lab.Rich has no field \['id', 'amount', 'kind', 'note'\] of the input",
        ),
        (
            lambda: r.write_kafka(
                "y", "out", value_format="avro", registry=REGISTRY, message_type=Taxed
            ),
            'message_type= is for value_format="protobuf"',
        ),
    ]
    for call, message in refusals:
        with pytest.raises(PipelineDefinitionError, match=message):
            call()


def test_the_client_asks_for_protobuf_schemas_serialized(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    answers = {
        "/schemas/ids/3?format=serialized": {"schema": "CgA=", "schemaType": "PROTOBUF"},
        "/schemas/ids/4": {"schema": "syntax = 'proto3';", "schemaType": "PROTOBUF"},
    }

    def request(method: str, path: str, body: Any = None) -> dict[str, Any]:
        asked.append(path)
        return answers[path]

    client = RegistryClient(REGISTRY)
    monkeypatch.setattr(client, "_request", request)
    assert client.protobuf_schema(SchemaId(3)) == "CgA="
    assert client.protobuf_schema(SchemaId(3)) == "CgA="  # cached
    with pytest.raises(SchemaNotFound, match=r"^schema id 3 is a PROTOBUF schema, not AVRO$"):
        client.schema(SchemaId(3))
    with pytest.raises(SchemaNotFound, match=r"^schema id 4 is a PROTOBUF schema, not JSON$"):
        client.json_schema(SchemaId(4))
    assert asked == ["/schemas/ids/3?format=serialized", "/schemas/ids/4"]
