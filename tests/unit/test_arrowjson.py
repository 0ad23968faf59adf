"""JSON text of Arrow batches (spillway.channels.wire.arrowjson) and the Kafka sink that writes it:
byte for byte what jsontext.dumps writes for each row's dict."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest

from spillway.channels.wire import jsontext
from spillway.channels.wire.arrowjson import json_values
from spillway.channels.wire.batchread import ArrowRows
from spillway.recovery.runtime.batchpath import reads_batches
from spillway.spark_jobs.connectors.sinks import KafkaTopicSink
from tests.unit.connectorfakes import FakeProducer, ctx

STRINGS = ['a"b', "x\\y", "plé\u2028", "t\tab\x01\x1f\x7f", "", "new\nline\r\b\f", None, "ω/"]
FLOATS = [0.1, 1.0, 1e15, 123456789012345.0, 1e-7, -0.0, float("nan"), float("inf"), None]


def mixed_rows(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {
            "id": i,
            "name": rng.choice(STRINGS),
            "f": rng.choice(FLOATS),
            "ok": rng.choice([True, False, None]),
            "Z": rng.randint(-(2**63), 2**63 - 1),
            "b": rng.choice([None, -5, 7]),
        }
        for i in range(n)
    ]


def reference(batch: pa.RecordBatch) -> list[bytes]:
    return [jsontext.dumps(r) for r in batch.to_pylist()]


def test_json_values_equal_the_records_json_byte_for_byte() -> None:
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("name", pa.string()),
            ("f", pa.float64()),
            ("ok", pa.bool_()),
            ("Z", pa.int64()),
            ("b", pa.int8()),
        ]
    )
    batch = pa.RecordBatch.from_pylist(mixed_rows(3000, 1), schema=schema)
    assert json_values(batch) == reference(batch)
    # Slices (a resumed message) and one-row batches too.
    assert json_values(batch.slice(17, 5)) == reference(batch.slice(17, 5))
    assert json_values(batch.slice(5, 0)) == []


def test_float32_dictionary_and_large_string_columns() -> None:
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([0.1, None, 3.5], pa.float32()),
            pa.array(["a", "b", "a"]).dictionary_encode(),
            pa.array(['q"', None, "r"], pa.large_string()),
            pa.array([1, 2, None], pa.uint64()),
        ],
        names=["x", "k", "s", "u"],
    )
    assert json_values(batch) == reference(batch)


def test_strings_without_control_characters_take_no_escape_pass() -> None:
    batch = pa.RecordBatch.from_pylist([{"k": f'k{i}"\\'} for i in range(100)])
    assert json_values(batch) == reference(batch)


def test_plain_string_columns_go_into_the_join_as_they_are_and_others_are_escaped() -> None:
    # Rows 0-9 need no escape, row 10 has a quote, 11 a backslash, 12 a control character,
    # 13 a null; a slice of plain rows takes the fast path even though the buffer it views
    # holds the others; the empty string and non-ASCII text are plain too.
    texts = [f"/news/{i}é" for i in range(9)] + ["", 'a"b', "a\\b", "a\x01b", None]
    batch = pa.RecordBatch.from_pylist(
        [{"page": t, "views": i, "z": "x"} for i, t in enumerate(texts)]
    )
    for lo, hi in ((0, 10), (3, 9), (9, 14), (0, 14), (12, 13), (13, 14), (9, 10)):
        part = batch.slice(lo, hi - lo)
        assert json_values(part) == reference(part), (lo, hi)


@pytest.mark.parametrize(
    "column",
    [pa.array([b"x"], pa.binary()), pa.array([1], pa.date32()), pa.array([[1]])],
)
def test_other_types_are_left_to_the_records(column: pa.Array) -> None:
    assert json_values(pa.RecordBatch.from_arrays([column], names=["c"])) is None


def test_repeated_field_names_are_left_to_the_records() -> None:
    batch = pa.RecordBatch.from_arrays([pa.array([1]), pa.array([2])], names=["a", "a"])
    assert json_values(batch) is None


def test_kafka_sink_writes_arrow_rows_as_their_records_would_be() -> None:
    schema = pa.schema([("n", pa.int64()), ("key", pa.string()), ("note", pa.string())])
    rows = [{"n": i, "key": f"k{i % 3}", "note": None if i % 4 else "x"} for i in range(40)]
    batch = pa.RecordBatch.from_pylist(rows, schema=schema)
    columnar, records = FakeProducer(), FakeProducer()
    sink = KafkaTopicSink("out", None, batches=True)
    sink.open(ctx(0), {}, columnar)
    sink.write(ArrowRows(batch)[10:])
    sink.write(ArrowRows(batch)[:10])
    plain = KafkaTopicSink("out")
    plain.open(ctx(0), {}, records)
    plain.write(rows[10:])
    plain.write(rows[:10])
    assert columnar.sent == records.sent
    assert [v for _, _, v in columnar.sent][:1] == [b'{"key":"k1","n":10,"note":null}']
    assert reads_batches(None, sink)
    assert not reads_batches(None, plain)
    # A key function is asked per record: such a sink takes records.
    assert not reads_batches(None, KafkaTopicSink("out", lambda r: r["key"], batches=True))


def test_kafka_sink_keyed_by_a_column_writes_the_records_keys() -> None:
    from spillway.channels.routing.batchwrite import ColumnKey
    from spillway.channels.routing.partitioners import key_bytes
    from spillway.channels.wire.arrowjson import key_values

    rows = [{"n": i, "page": None if i % 9 == 0 else f"/p/{i % 4}", "u": i % 3} for i in range(30)]
    batch = pa.RecordBatch.from_pylist(rows)
    columnar, records = FakeProducer(), FakeProducer()
    for producer, rows_in in ((columnar, ArrowRows(batch)), (records, rows)):
        sink = KafkaTopicSink("out", ColumnKey("page"), batches=producer is columnar)
        sink.open(ctx(0), {}, producer)
        sink.write(rows_in)
    assert columnar.sent == records.sent
    assert reads_batches(None, KafkaTopicSink("out", ColumnKey("page"), batches=True))
    assert key_values(batch.column("u")) == [key_bytes(r["u"]) for r in rows]
    assert key_values(pa.array([1.5])) is None
