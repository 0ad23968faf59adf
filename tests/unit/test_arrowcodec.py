"""The Arrow channel codec: which schemas take it, and that it carries what Avro carries."""

from __future__ import annotations

import io
from collections import defaultdict
from typing import Any

import pyarrow as pa
import pytest
from fastavro import schemaless_reader

from spillway.channels.errors import SchemaMismatchError
from spillway.channels.wire.arrowcodec import arrow_schema
from spillway.channels.wire.batcher import Batcher
from spillway.channels.wire.envelope import (
    ARROW_VERSION,
    VERSION,
    Decoders,
    Kind,
    RecordCodec,
    decode_data,
    headers,
    writer_codec,
)

FLAT: dict[str, Any] = {
    "type": "record",
    "name": "Row",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "small", "type": "int"},
        {"name": "name", "type": "string"},
        {"name": "note", "type": ["null", "string"]},
        {"name": "score", "type": "double"},
        {"name": "ratio", "type": {"type": "float"}},
        {"name": "ok", "type": "boolean"},
        {"name": "blob", "type": ["bytes", "null"]},
    ],
}
ROWS = [
    {
        "id": 2**62,
        "small": -7,
        "name": "é€😀",
        "note": None,
        "score": 0.1,
        "ratio": 0.5,
        "ok": True,
        "blob": b"\x00\xff",
    },
    {
        "id": -1,
        "small": 2**31 - 1,
        "name": "",
        "note": "n",
        "score": -1e300,
        "ratio": 1.25,
        "ok": False,
        "blob": None,
    },
]


@pytest.mark.parametrize(
    "field_type",
    [
        {"type": "array", "items": "long"},
        {"type": "record", "name": "In", "fields": [{"name": "a", "type": "long"}]},
        {"type": "map", "values": "long"},
        {"type": "enum", "name": "E", "symbols": ["A"]},
        {"type": "long", "logicalType": "timestamp-millis"},
        ["null", "long", "string"],
        ["long", "string"],
    ],
)
def test_schemas_that_are_not_flat_keep_avro(field_type: Any) -> None:
    schema = {"type": "record", "name": "R", "fields": [{"name": "x", "type": field_type}]}
    assert arrow_schema(schema) is None
    assert writer_codec(schema, "arrow").version == VERSION


def test_a_field_with_a_default_keeps_avro() -> None:
    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "x", "type": "long", "default": 0}],
    }
    assert arrow_schema(schema) is None


def test_flat_schema_maps_field_by_field() -> None:
    s = arrow_schema(FLAT)
    assert s is not None
    assert [(f.name, str(f.type), f.nullable) for f in s] == [
        ("id", "int64", False),
        ("small", "int32", False),
        ("name", "string", False),
        ("note", "string", True),
        ("score", "double", False),
        ("ratio", "float", False),
        ("ok", "bool", False),
        ("blob", "binary", True),
    ]


def test_arrow_round_trip_equals_the_avro_round_trip() -> None:
    arrow, avro = writer_codec(FLAT, "arrow"), writer_codec(FLAT, "avro")
    assert (arrow.version, avro.version) == (ARROW_VERSION, VERSION)
    b = Batcher(1 << 20, 1.0, frame=arrow.frame, overhead=arrow.overhead)
    b.add_block(0, arrow.encode_block(ROWS[:1]), 1, 0.0)
    b.add_block(0, arrow.encode_block(ROWS[1:]), 1, 0.0)
    [(_, value)] = b.drain()
    via_avro = avro.decode_batch(avro.frame([avro.encode_block(ROWS)]))
    assert decode_data(headers(Kind.DATA, ARROW_VERSION), value, FLAT) == via_avro
    assert [list(r) for r in via_avro] == [[f["name"] for f in FLAT["fields"]]] * 2


def test_a_message_is_a_self_describing_arrow_stream() -> None:
    codec = writer_codec(FLAT, "arrow")
    value = codec.frame([codec.encode_block(ROWS)])
    table = pa.ipc.open_stream(value).read_all()  # no Spillway, no schema given
    assert table.column("name").to_pylist() == ["é€😀", ""]


def test_readers_decode_both_encodings_by_header() -> None:
    d = Decoders(FLAT)
    avro = RecordCodec(FLAT)
    assert d.decode(VERSION, avro.frame([avro.encode_block(ROWS)]))[1]["small"] == 2**31 - 1
    arrow = writer_codec(FLAT, "arrow")
    assert d.decode(ARROW_VERSION, arrow.frame([arrow.encode_block(ROWS)]))[0]["id"] == 2**62
    # A reader whose schema is not flat reads an Arrow message of an earlier, flat schema of
    # the channel resolved to its own (spillway.channels.wire.resolve): the new field takes its
    # default.
    avro_only = Decoders(
        {**FLAT, "fields": [*FLAT["fields"], {"name": "t", "type": "long", "default": 0}]}
    )
    got = avro_only.decode(ARROW_VERSION, arrow.frame([arrow.encode_block(ROWS)]))
    assert got == [
        {**r, "t": 0} for r in d.decode(ARROW_VERSION, arrow.frame([arrow.encode_block(ROWS)]))
    ]
    no_default = Decoders({**FLAT, "fields": [*FLAT["fields"], {"name": "t", "type": "long"}]})
    with pytest.raises(SchemaMismatchError, match="field 't' is not in the message"):
        no_default.decode(ARROW_VERSION, arrow.frame([arrow.encode_block(ROWS)]))


def test_corrupt_or_foreign_arrow_messages_are_schema_mismatches() -> None:
    codec = writer_codec(FLAT, "arrow")
    with pytest.raises(SchemaMismatchError, match="cannot decode an Arrow batch"):
        codec.decode_batch(b"\x07\xff garbage")
    other = writer_codec(
        {"type": "record", "name": "O", "fields": [{"name": "id", "type": "long"}]}, "arrow"
    )
    with pytest.raises(SchemaMismatchError, match="its schema is"):
        codec.decode_batch(other.frame([other.encode_block([{"id": 1}])]))
    good = codec.frame([codec.encode_block(ROWS)])
    with pytest.raises(SchemaMismatchError):
        codec.decode_batch(good[: len(good) // 2])


def test_int_overflow_and_wrong_types_name_the_record() -> None:
    codec = writer_codec(FLAT, "arrow")
    with pytest.raises(SchemaMismatchError, match="'small': 2147483648"):
        codec.encode_block([{**ROWS[0], "small": 2**31}])
    with pytest.raises(SchemaMismatchError, match="'id': 'x'"):
        codec.encode_block([ROWS[0], {**ROWS[1], "id": "x"}])


def test_avro_data_stays_readable_with_the_schema_alone() -> None:
    codec = writer_codec(FLAT, "avro")
    value = codec.frame([codec.encode_block(ROWS)])
    assert schemaless_reader(io.BytesIO(value), {"type": "array", "items": FLAT}, None) == ROWS


@pytest.mark.parametrize(
    ("field_type", "value"),
    [
        (["null", "long"], 1.5),
        ("long", 1.5),
        ("long", True),
        ("double", True),
        ("bytes", "é"),
        ("string", b"abc"),
        (["null", "boolean"], 1),
    ],
)
def test_arrow_refuses_what_it_would_convert_silently(field_type: Any, value: Any) -> None:
    schema = {"type": "record", "name": "R", "fields": [{"name": "x", "type": field_type}]}
    with pytest.raises(SchemaMismatchError, match=r"record \{'x': "):
        writer_codec(schema, "arrow").encode_block([{"x": value}])


def test_ints_are_taken_for_floats_as_avro_does() -> None:
    schema = {"type": "record", "name": "R", "fields": [{"name": "x", "type": "double"}]}
    codec = writer_codec(schema, "arrow")
    assert codec.decode_batch(codec.frame([codec.encode_block([{"x": 3}])])) == [{"x": 3.0}]


def test_left_out_fields_are_null_where_nullable_and_refused_where_not() -> None:
    codec = writer_codec(FLAT, "arrow")
    left_out = {k: v for k, v in ROWS[1].items() if k not in ("note", "blob")}
    value = codec.frame([codec.encode_block([ROWS[0], left_out])])
    assert codec.decode_batch(value) == [ROWS[0], {**left_out, "note": None, "blob": None}]
    with pytest.raises(SchemaMismatchError, match="'name'"):
        codec.encode_block([ROWS[0], {k: v for k, v in ROWS[1].items() if k != "name"}])


def test_dict_subclass_records_are_read_not_changed() -> None:
    codec = writer_codec(FLAT, "arrow")
    # A defaultdict would insert a left-out field if it were looked up with [].
    record: defaultdict[str, Any] = defaultdict(lambda: "filled", ROWS[1])
    del record["note"]
    value = codec.frame([codec.encode_block([ROWS[0], record])])
    assert codec.decode_batch(value) == [ROWS[0], {**ROWS[1], "note": None}]
    assert "note" not in record
