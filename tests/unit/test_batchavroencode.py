"""Arrow batches written as registry-framed Avro, column by column
(spillway.spark_jobs.connectors.batchavroencode, RegistryAvroWriter.encode_batch), with a
fake registry: every value is the Confluent header of the registered id and the datum
fastavro writes for the row, and decodes back to the row exactly; nulls, both union
orders, varint and int32 edges, slices; what the columns cannot write is written row by
row (with fastavro's error where there is one). The Kafka sink writes batches chained
behind a batch operator in its value format. Subject names under Confluent's strategies.
"""

from __future__ import annotations

import io
import json
import pickle
from typing import Any, ClassVar

import fastavro
import pyarrow as pa
import pytest

from spillway.channels.errors import PipelineDefinitionError
from spillway.channels.routing.batchwrite import ColumnKey
from spillway.channels.routing.partitioners import key_bytes
from spillway.channels.wire.batchread import ArrowRows
from spillway.spark_jobs.api.pipeline import Pipeline
from spillway.spark_jobs.connectors.batchavroencode import AvroBatchEncoder, batch_encoder
from spillway.spark_jobs.connectors.confluentavro import (
    RegistryAvroWriter,
    record_full_name,
    subject_name,
)
from spillway.spark_jobs.connectors.registry import RegistryConfig, SchemaId, SchemaKind
from spillway.spark_jobs.connectors.sinks import KafkaTopicSink
from tests.unit.connectorfakes import FakeProducer, ctx

SCHEMA = {
    "type": "record",
    "name": "Row",
    "namespace": "spillway.test",
    "fields": [
        {"name": "l", "type": "long"},
        {"name": "i", "type": "int"},
        {"name": "s", "type": ["null", "string"], "default": None},
        {"name": "d", "type": "double"},
        {"name": "f", "type": ["float", "null"]},
        {"name": "b", "type": "boolean"},
        {"name": "raw", "type": {"type": "bytes"}},
        {"name": "note", "type": "string", "default": "none"},
    ],
}
ARROW = pa.schema(
    [
        ("note", pa.string()),  # the batch's column order is not the schema's
        ("l", pa.int64()),
        ("i", pa.int32()),
        ("s", pa.string()),
        ("d", pa.float64()),
        ("f", pa.float32()),
        ("b", pa.bool_()),
        ("raw", pa.binary()),
    ]
)
LONGS = [0, -1, 1, 63, 64, -64, -65, 8191, 8192, 2**31, -(2**31) - 1, 2**63 - 1, -(2**63)]
INTS = [0, -1, 2**31 - 1, -(2**31), 300, -300]
REGISTRY = RegistryConfig("http://127.0.0.1:1")
SCHEMA_ID = 0x01020304


def rows(n: int) -> list[dict[str, Any]]:
    """``n`` rows of :data:`SCHEMA` through every edge: varints of 1 to 10 bytes, strings
    of 0, 127 and 128 bytes (a 2-byte length), non-ASCII text, nulls in both unions."""
    out = []
    for k in range(n):
        text = ["", "é€", "x" * 127, "y" * 128, 'q"\\\n'][k % 5]
        out.append(
            {
                "l": LONGS[k % len(LONGS)],
                "i": INTS[k % len(INTS)],
                "s": None if k % 3 == 0 else text,
                "d": [0.1, -2.5e300, float("inf"), -0.0][k % 4],
                "f": None if k % 4 == 1 else [1.5, -3.25, 2.0**100][k % 3],  # float32's own
                "b": k % 2 == 0,
                "raw": bytes(range(k % 7)) * (k % 40),
                "note": f"n{k}",
            }
        )
    return out


class FakeRegistry:
    """The registry's side of a writer: registers every schema as :data:`SCHEMA_ID`."""

    registered: ClassVar[list[tuple[str, Any]]] = []  # (subject, schema) of every register

    def __init__(self, config: RegistryConfig) -> None:
        self.config = config

    def register(self, subject: str, schema: str, kind: SchemaKind = "AVRO") -> SchemaId:
        assert kind == "AVRO"
        FakeRegistry.registered.append((subject, json.loads(schema)))
        return SchemaId(SCHEMA_ID)

    def compatible(
        self, subject: str, schema: str, kind: SchemaKind = "AVRO"
    ) -> tuple[bool, list[str]]:
        assert kind == "AVRO"
        return True, []


def writer(schema: dict[str, Any] = SCHEMA) -> RegistryAvroWriter:
    FakeRegistry.registered.clear()
    return RegistryAvroWriter(schema, REGISTRY, "orders-value", connect=FakeRegistry)


def decoded(values: list[bytes], schema: dict[str, Any] = SCHEMA) -> list[Any]:
    """Each value's header checked (magic byte 0, :data:`SCHEMA_ID`), its datum read."""
    parsed = fastavro.parse_schema(schema)
    out = []
    for v in values:
        assert v[:5] == b"\x00\x01\x02\x03\x04"
        body = io.BytesIO(v[5:])
        out.append(fastavro.schemaless_reader(body, parsed, None))
        assert body.tell() == len(v) - 5  # nothing after the datum
    return out


def test_a_batch_encodes_to_the_records_bytes_and_decodes_back_to_its_rows() -> None:
    expected = rows(90)
    batch = pa.RecordBatch.from_pylist(expected, schema=ARROW)
    w = writer()
    values = w.encode_batch(batch)
    assert values == [w.encode(r) for r in expected]
    assert decoded(values) == expected
    assert FakeRegistry.registered == [("orders-value", SCHEMA)]  # once, under the subject


def test_a_sliced_batch_encodes_its_own_rows() -> None:
    expected = rows(50)
    batch = pa.RecordBatch.from_pylist(expected, schema=ARROW)
    encoder = batch_encoder(SCHEMA)
    assert encoder is not None
    assert (
        decoded(encoder.encode(batch.slice(17, 20), b"\x00\x01\x02\x03\x04") or [])
        == (expected[17:37])
    )
    assert encoder.encode(batch.slice(0, 0)) == []


def test_columns_of_another_arrow_type_are_cast_to_the_fields() -> None:
    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "n", "type": "long"}, {"name": "t", "type": ["null", "string"]}],
    }
    texts = pa.array(["a", None, "c"], pa.large_string())
    batch = pa.RecordBatch.from_arrays(
        [pa.array([7, 8, 9], pa.int8()), pa.DictionaryArray.from_arrays([0, 1, 0], texts)],
        names=["n", "t"],
    )
    got = decoded(writer(schema).encode_batch(batch), schema)
    assert got == [{"n": 7, "t": "a"}, {"n": 8, "t": None}, {"n": 9, "t": "a"}]


def test_what_the_columns_cannot_write_goes_row_by_row() -> None:
    encoder = AvroBatchEncoder(SCHEMA)
    full = pa.RecordBatch.from_pylist(rows(3), schema=ARROW)
    # A null where the field has none, an int out of 32-bit range, a missing column.
    nulled = full.set_column(1, "l", pa.array([1, None, 3], pa.int64()))
    wide = full.set_column(2, "i", pa.array([1, 2**31, 3], pa.int64()))
    assert encoder.encode(nulled) is None
    assert encoder.encode(wide) is None
    assert encoder.encode(full.drop_columns(["raw"])) is None
    with pytest.raises((TypeError, ValueError)):
        writer().encode_batch(nulled)  # fastavro refuses the null, as for the record
    # A schema that is not flat has no column encoder: its rows are written one by one.
    nested = {
        "type": "record",
        "name": "N",
        "fields": [{"name": "tags", "type": {"type": "array", "items": "string"}}],
    }
    assert batch_encoder(nested) is None
    batch = pa.RecordBatch.from_pylist([{"tags": ["a", "b"]}, {"tags": []}])
    assert decoded(writer(nested).encode_batch(batch), nested) == batch.to_pylist()


def test_the_writer_pickles_with_its_connect_and_without_its_client() -> None:
    w = writer()
    w.encode_batch(pa.RecordBatch.from_pylist(rows(2), schema=ARROW))
    copy = pickle.loads(pickle.dumps(w))
    assert (copy.schema, copy.subject, copy.target.connect) == (
        SCHEMA,
        "orders-value",
        FakeRegistry,
    )
    FakeRegistry.registered.clear()
    assert decoded(copy.encode_batch(pa.RecordBatch.from_pylist(rows(2), schema=ARROW))) == (
        rows(2)
    )
    assert FakeRegistry.registered == [("orders-value", SCHEMA)]  # asked again, once


def test_a_chained_kafka_sink_writes_batches_in_its_value_format() -> None:
    # Columns JSON could write column by column too: the sink must not (no "raw" bytes).
    schema = {**SCHEMA, "fields": [f for f in SCHEMA["fields"] if f["name"] != "raw"]}
    expected = [{k: v for k, v in r.items() if k != "raw"} for r in rows(30)]
    batch = pa.RecordBatch.from_pylist(expected, schema=ARROW.remove(ARROW.get_field_index("raw")))
    for key, keys in [
        (None, [None] * 30),
        (ColumnKey("note"), [key_bytes(r["note"]) for r in expected]),
        (lambda r: r["l"], [key_bytes(r["l"]) for r in expected]),  # asked per record
    ]:
        producer = FakeProducer()
        # batches=False: a sink chained behind a batch operator gets batches all the same.
        sink = KafkaTopicSink("out", key, batches=False, encoder=writer(schema))
        sink.open(ctx(0), {}, producer)
        sink.write(ArrowRows(batch))
        assert [k for _, k, _ in producer.sent] == keys
        assert decoded([v for _, _, v in producer.sent], schema) == expected


def test_subjects_are_named_as_confluents_strategies_name_them() -> None:
    plain = {"type": "record", "name": "Order", "fields": []}
    dotted = {"type": "record", "name": "shop.v2.Order", "namespace": "ignored", "fields": []}
    assert subject_name("orders", SCHEMA) == "orders-value"
    assert subject_name("orders", SCHEMA, "topic") == "orders-value"
    assert subject_name("orders", SCHEMA, "record") == "spillway.test.Row"
    assert subject_name("orders", SCHEMA, "topic_record") == "orders-spillway.test.Row"
    assert subject_name("orders", plain, "record") == "Order"
    assert subject_name("orders", plain, "topic_record") == "orders-Order"
    assert record_full_name(dotted) == "shop.v2.Order"


def test_write_kafka_names_its_subject_by_the_strategy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(RegistryAvroWriter, "check", lambda self, where: None)
    p = Pipeline("s")
    src = p.read_kafka("src", "in", schema=SCHEMA)
    for strategy, subject in [
        ("topic", "out-value"),
        ("record", "spillway.test.Row"),
        ("topic_record", "out-spillway.test.Row"),
    ]:
        src.write_kafka(
            f"k-{strategy}", "out", value_format="avro", registry=REGISTRY,
            subject_strategy=strategy,  # type: ignore[arg-type]
        )  # fmt: skip
        assert p._nodes[f"k-{strategy}"].description["subject"] == subject
    src.write_kafka("given", "out", value_format="avro", registry=REGISTRY, subject="mine")
    assert p._nodes["given"].description["subject"] == "mine"
    with pytest.raises(PipelineDefinitionError) as both:
        src.write_kafka(
            "both", "out", value_format="avro", registry=REGISTRY, subject="mine",
            subject_strategy="record",
        )  # fmt: skip
    assert str(both.value) == (
        "write_kafka 'both': give subject= or subject_strategy=, not both "
        "(subject='mine', subject_strategy='record')"
    )
    with pytest.raises(PipelineDefinitionError) as unregistered:
        src.write_kafka("bare", "out", subject_strategy="record")
    assert "subject_strategy= need registry=RegistryConfig(...)" in str(unregistered.value)
