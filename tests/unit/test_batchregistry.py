"""The batch path's registry decoder (spillway.spark_jobs.connectors.batchregistry) with a
fake registry: values of several schema ids decoded and resolved into the reader's
columns, equal to the record path's fastavro resolution; each id looked up once; unknown
ids, unresolvable schemas, nulls the reader refuses and malformed values rejected alone
with the id in the reason and their origin."""

from __future__ import annotations

import io
import json
import pickle
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from spillway.channels.errors import PipelineDefinitionError
from spillway.recovery.job.origins import TopicOffset
from spillway.spark_jobs.api.pipeline import Pipeline
from spillway.spark_jobs.connectors.batchavro import decode_kafka_avro
from spillway.spark_jobs.connectors.batchregistry import RegistryAvroBatches, channel_schema
from spillway.spark_jobs.connectors.confluentavro import RegistryAvroRecords
from spillway.spark_jobs.connectors.registry import RegistryConfig, SchemaId, SchemaNotFound
from spillway.spark_jobs.records.lines import LineError

READER = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "amount", "type": "double"},
        {"name": "note", "type": "string", "default": "none"},
        {"name": "tag", "type": ["null", "string"], "default": None},
    ],
}
V1 = {
    "type": "record",
    "name": "OrderV1",
    "namespace": "producer",
    "fields": [{"name": "id", "type": "int"}, {"name": "amount", "type": "float"}],
}
V2 = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "amount", "type": "double"},
        {"name": "note", "type": "string", "default": "none"},
        {"name": "extra", "type": "boolean"},  # the reader has no such field: skipped
        {"name": "tag", "type": ["string", "null"]},
    ],
}
NULLABLE_ID = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": ["null", "long"]}, {"name": "amount", "type": "double"}],
}
STRING_ID = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]}
NO_AMOUNT = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}
NESTED = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "amount", "type": "double"},
        {"name": "lines", "type": {"type": "array", "items": "long"}},
    ],
}
SCHEMAS = {1: V1, 2: V2, 3: NULLABLE_ID, 4: STRING_ID, 5: NO_AMOUNT, 6: NESTED}
ASKED: list[int] = []  # every id the fake registry was asked for, in order
REGISTRY = RegistryConfig("http://127.0.0.1:1")


class FakeRegistry:
    """The registry's side of the decoder: the schema texts of :data:`SCHEMAS`."""

    def __init__(self, config: RegistryConfig) -> None:
        self.config = config

    def schema(self, schema_id: SchemaId) -> str:
        ASKED.append(int(schema_id))
        if schema_id not in SCHEMAS:
            raise SchemaNotFound(f"no schema with id {schema_id}")
        return json.dumps(SCHEMAS[schema_id])


@pytest.fixture(autouse=True)
def _fresh_log() -> None:
    ASKED.clear()


def framed(schema_id: int, record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(SCHEMAS[schema_id]), record)
    return b"\x00" + schema_id.to_bytes(4, "big") + out.getvalue()


def decoder() -> RegistryAvroBatches:
    return RegistryAvroBatches(READER, REGISTRY, FakeRegistry)


def test_two_versions_resolve_into_the_readers_columns_as_fastavro_resolves_them() -> None:
    values = [
        framed(1, {"id": 1, "amount": 1.5}),
        framed(2, {"id": 2, "amount": 2.25, "note": "n2", "extra": True, "tag": "t"}),
        framed(1, {"id": 3, "amount": -3.0}),
        framed(2, {"id": 4, "amount": 4.0, "note": "n4", "extra": False, "tag": None}),
    ]
    d = decoder()
    run = d.decode(values)
    assert run.bad == []
    assert run.kept == [0, 1, 2, 3]
    assert run.batch.schema == pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("amount", pa.float64(), nullable=False),
            pa.field("note", pa.string(), nullable=False),
            pa.field("tag", pa.string()),
        ]
    )
    assert run.batch.to_pylist() == [
        {"id": 1, "amount": 1.5, "note": "none", "tag": None},
        {"id": 2, "amount": 2.25, "note": "n2", "tag": "t"},
        {"id": 3, "amount": -3.0, "note": "none", "tag": None},
        {"id": 4, "amount": 4.0, "note": "n4", "tag": None},
    ]
    records = RegistryAvroRecords(READER, REGISTRY, FakeRegistry)
    assert run.batch.to_pylist() == [records.read(v) for v in values]
    ASKED.clear()
    d.decode(values[::-1])
    assert ASKED == []  # each writer's schema is looked up once per id, then cached


def test_an_unknown_id_is_a_bad_record_with_its_origin_and_the_id() -> None:
    values = [framed(1, {"id": 1, "amount": 1.0}), b"\x00\x00\x0f\x12\x06\x02", None]
    batch = decode_kafka_avro(decoder(), "orders", 2, [10, 11, 12], values)
    assert batch.batch.to_pylist() == [{"id": 1, "amount": 1.0, "note": "none", "tag": None}]
    assert [(r.origin, r.raw) for r in batch.rejected] == [
        (TopicOffset("orders", 2, 11), values[1]),
        (TopicOffset("orders", 2, 12), b""),
    ]
    assert batch.rejected[0].error == (
        "schema id 987654 is not in the schema registry (no schema with id 987654)"
    )
    assert batch.rejected[1].error == "no value (null)"
    assert ASKED == [1, 987654]


def test_a_schema_that_does_not_resolve_makes_every_value_of_its_id_bad() -> None:
    d = decoder()
    values = [
        framed(4, {"id": "x"}),
        framed(1, {"id": 7, "amount": 0.5}),
        framed(5, {"id": 8}),
        framed(4, {"id": "y"}),
    ]
    run = d.decode(values)
    assert run.kept == [1]
    assert run.batch.column("id").to_pylist() == [7]
    assert run.bad == [
        (
            0,
            "schema id 4: the writer's schema cannot be resolved into the reader's: the "
            "writer's field 'id' is string, the reader's 'id' is long",
        ),
        (
            2,
            "schema id 5: the writer's schema cannot be resolved into the reader's: the "
            "reader's field 'amount' is not in the writer's schema and has no default",
        ),
        (
            3,
            "schema id 4: the writer's schema cannot be resolved into the reader's: the "
            "writer's field 'id' is string, the reader's 'id' is long",
        ),
    ]
    agrees = r"^schema id 5: the writer's schema cannot be resolved into the reader's"
    with pytest.raises(LineError, match=agrees):  # the record path (fastavro) agrees
        RegistryAvroRecords(READER, REGISTRY, FakeRegistry).read(values[2])


def test_a_null_the_reader_does_not_allow_rejects_its_row_alone() -> None:
    values = [
        framed(3, {"id": 1, "amount": 1.0}),
        framed(3, {"id": None, "amount": 2.0}),
        framed(3, {"id": 3, "amount": 3.0}),
    ]
    run = decoder().decode(values)
    assert run.kept == [0, 2]
    assert run.batch.column("id").to_pylist() == [1, 3]
    assert run.bad == [
        (
            1,
            "schema id 3: the writer's value cannot be resolved into the reader's: null in "
            "'id', which the reader's schema does not allow",
        )
    ]


def test_malformed_values_and_values_without_a_header_are_rejected_alone() -> None:
    good = framed(2, {"id": 5, "amount": 5.0, "note": "n", "extra": True, "tag": "z"})
    values = [good[:-1], good, good + b"\x00", b"\x01" + good[1:], b"\x00\x00"]
    run = decoder().decode(values)
    assert run.kept == [1]
    assert run.batch.to_pylist() == [{"id": 5, "amount": 5.0, "note": "n", "tag": "z"}]
    assert [i for i, _ in run.bad] == [0, 2, 3, 4]
    assert run.bad[0][1].startswith("schema id 2: not an Avro datum of the schema")
    assert run.bad[1][1] == "schema id 2: not an Avro datum of the schema: 1 bytes after its end"
    assert [why for _, why in run.bad[2:]] == [
        "no Confluent Schema Registry header (magic byte 0, a 4-byte schema id)"
    ] * 2


def test_a_nested_writers_schema_is_read_record_by_record_into_the_same_columns() -> None:
    values = [
        framed(6, {"id": 1, "amount": 1.0, "lines": [1, 2]}),
        framed(1, {"id": 2, "amount": 2.0}),
        framed(6, {"id": 3, "amount": 3.0, "lines": []})[:-2],  # truncated
    ]
    run = decoder().decode(values)
    assert run.kept == [0, 1]
    assert run.batch.to_pylist() == [
        {"id": 1, "amount": 1.0, "note": "none", "tag": None},
        {"id": 2, "amount": 2.0, "note": "none", "tag": None},
    ]
    assert [i for i, _ in run.bad] == [2]
    assert run.bad[0][1].startswith("schema id 6: not an Avro datum of its schema")


def test_the_decoder_pickles_before_use_and_refuses_a_nested_readers_schema() -> None:
    copy = pickle.loads(pickle.dumps(decoder()))
    assert copy.decode([framed(1, {"id": 9, "amount": 9.0})]).batch.column("id").to_pylist() == [9]
    with pytest.raises(PipelineDefinitionError, match="flat record schema"):
        RegistryAvroBatches(NESTED, REGISTRY, FakeRegistry)


def test_the_batch_source_with_a_registry_carries_the_readers_schema_without_defaults() -> None:
    p = Pipeline("r")
    p.read_kafka("o", "t", schema=READER, value_format="avro", registry=REGISTRY, batches=True)
    assert p._nodes["o"].schema == channel_schema(READER)
    assert [f.get("default", "-") for f in channel_schema(READER)["fields"]] == [
        "-",
        "-",
        "-",
        None,
    ]
