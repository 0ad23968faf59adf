"""The column-by-column Avro decoder (spillway.spark_jobs.connectors.batchavro) against fastavro's
per-record
reader: equal rows for every flat type, nullable or not; each malformed value rejected
alone with its offset and the rest of the run kept."""

from __future__ import annotations

import io
import random
import struct
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from spillway.channels.errors import PipelineDefinitionError
from spillway.recovery.job.origins import TopicOffset
from spillway.spark_jobs.connectors.batchavro import (
    AvroDecoder,
    AvroRecords,
    avro_framing,
    decode_kafka_avro,
)
from spillway.spark_jobs.records.lines import LineError

ALL = {
    "type": "record",
    "name": "All",
    "fields": [
        {"name": "b", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "s", "type": "string"},
        {"name": "y", "type": "bytes"},
        {"name": "ns", "type": ["null", "string"], "default": None},
        {"name": "nl", "type": ["long", "null"]},
        {"name": "nd", "type": ["null", "double"], "default": None},
    ],
}
PARSED = fastavro.parse_schema(ALL)


def encode(record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, PARSED, record)
    return out.getvalue()


def random_record(rng: random.Random) -> dict[str, Any]:
    def maybe(v: Any) -> Any:
        return None if rng.random() < 0.3 else v

    return {
        "b": rng.random() < 0.5,
        "i": rng.choice([0, -1, 1, 63, -64, 64, 2**31 - 1, -(2**31), rng.randint(-999, 999)]),
        "l": rng.choice([0, 2**63 - 1, -(2**63), rng.randint(-(10**12), 10**12)]),
        # float32 values that round-trip exactly
        "f": struct.unpack("<f", struct.pack("<f", rng.uniform(-1e6, 1e6)))[0],
        "d": rng.uniform(-1e9, 1e9),
        "s": "".join(
            rng.choice(["a", "é", "字", "😀", "", "xyz"]) for _ in range(rng.randint(0, 6))
        ),
        "y": bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 5))),
        "ns": maybe(f"n{rng.randint(0, 99)}"),
        "nl": maybe(rng.randint(-(2**40), 2**40)),
        "nd": maybe(rng.uniform(-1, 1)),
    }


def test_decoded_columns_equal_fastavro_for_every_flat_type() -> None:
    rng = random.Random(7)
    records = [random_record(rng) for _ in range(2_000)]
    run = AvroDecoder(ALL).decode([encode(r) for r in records])
    assert run.bad == []
    assert run.kept == list(range(len(records)))
    assert run.batch.schema == AvroDecoder(ALL).arrow
    assert run.batch.to_pylist() == records


def test_empty_run_and_long_strings() -> None:
    assert AvroDecoder(ALL).decode([]).batch.num_rows == 0
    rng = random.Random(3)
    records = [{**random_record(rng), "s": "x" * 100_000, "y": b"\x00" * 70_000}] * 3
    assert AvroDecoder(ALL).decode([encode(r) for r in records]).batch.to_pylist() == records


def test_each_malformed_value_is_rejected_alone_and_the_rest_goes_on() -> None:
    rng = random.Random(11)
    records = [random_record(rng) for _ in range(50)]
    values: list[bytes | None] = [encode(r) for r in records]
    good = encode(records[0])
    broken = {
        3: good[:-1],  # truncated
        7: good + b"\x00",  # a byte after the datum
        11: None,  # no value
        12: b"",  # empty
        20: b"\xff" * 12,  # a varint of more than 10 bytes
        25: encode({**records[25], "s": "ok"}).replace(b"\x04ok", b"\x04\xff\xfe"),  # not UTF-8
        30: b"\x02" + good[1:],  # boolean byte 1? no: 2 is not a boolean
        40: good[:8],  # cut inside the fields
    }
    # A union branch index past the union's two branches (ns is field 8: rebuild by hand).
    head = encode({**records[45], "ns": None, "nl": None, "nd": None})
    broken[45] = head[:-3] + b"\x04" + head[-2:]
    for i, v in broken.items():
        values[i] = v
    run = decode_kafka_avro(AvroDecoder(ALL), "t", 2, list(range(100, 150)), values)
    assert [r.origin for r in run.rejected] == [
        TopicOffset("t", 2, 100 + i) for i in sorted(broken)
    ]
    assert [r.raw for r in run.rejected] == [broken[i] or b"" for i in sorted(broken)]
    assert run.batch.to_pylist() == [r for i, r in enumerate(records) if i not in broken]
    kept = [i for i in range(50) if i not in broken]
    assert [run.origins.at(k) for k in range(len(kept))] == [
        TopicOffset("t", 2, 100 + i) for i in kept
    ]
    reasons = {r.origin.offset - 100: r.error for r in run.rejected}  # type: ignore[union-attr]
    assert reasons[11] == "no value (null)"
    assert reasons[12] == "empty value"
    assert "1 bytes after its end" in reasons[7]
    assert all(r.startswith(("not an Avro datum", "no value", "empty")) for r in reasons.values())


def test_int_out_of_range_is_rejected() -> None:
    schema = {"type": "record", "name": "I", "fields": [{"name": "i", "type": "int"}]}
    as_long = fastavro.parse_schema(
        {"type": "record", "name": "L", "fields": [{"name": "i", "type": "long"}]}
    )
    out = io.BytesIO()
    fastavro.schemaless_writer(out, as_long, {"i": 2**31})
    run = AvroDecoder(schema).decode([out.getvalue(), b"\x02"])
    assert [i for i, _ in run.bad] == [0]
    assert run.batch.to_pylist() == [{"i": 1}]


def test_confluent_framing_skips_the_header_and_checks_the_magic_byte() -> None:
    rng = random.Random(5)
    records = [random_record(rng) for _ in range(20)]
    framed = [b"\x00\x00\x00\x00\x2a" + encode(r) for r in records]
    framed[4] = b"\x01" + framed[4][1:]  # wrong magic byte
    framed[9] = b"\x00\x00"  # shorter than a header
    run = AvroDecoder(ALL, "confluent").decode(framed)
    assert [i for i, _ in run.bad] == [4, 9]
    assert "Schema Registry header" in run.bad[0][1]
    assert run.batch.to_pylist() == [r for i, r in enumerate(records) if i not in (4, 9)]


def test_record_path_reader_applies_the_same_rules() -> None:
    rng = random.Random(9)
    record = random_record(rng)
    reader = AvroRecords(ALL)
    assert reader.read(encode(record)) == record
    for bad in (None, b"", encode(record) + b"\x00", encode(record)[:-2]):
        with pytest.raises(LineError):
            reader.read(bad)
    assert AvroRecords(ALL, "confluent").read(b"\x00\x00\x00\x00\x01" + encode(record)) == record


def test_definition_errors_say_what_to_pass() -> None:
    with pytest.raises(PipelineDefinitionError, match="key_field/tombstones read JSON"):
        avro_framing("avro", "source 'x'", keyed=True)
    nested = {
        "type": "record",
        "name": "N",
        "fields": [{"name": "a", "type": {"type": "array", "items": "long"}}],
    }
    with pytest.raises(PipelineDefinitionError, match="flat record schema"):
        AvroDecoder(nested)
    assert avro_framing("json", "w") is None
    assert isinstance(AvroDecoder(ALL).arrow, pa.Schema)


def test_random_corruptions_are_judged_as_fastavro_judges_them() -> None:
    # Flip, cut and append bytes of good values; every value the decoder keeps must be what
    # fastavro reads from it, and every value fastavro reads whole (nothing after it, every
    # rule of the schema kept) must be kept: a bad row never disturbs its neighbours.
    rng = random.Random(21)
    records = [random_record(rng) for _ in range(3_000)]
    values: list[bytes | None] = []
    for r in records:
        v = bytearray(encode(r))
        roll = rng.random()
        if roll < 0.3:
            v[rng.randrange(len(v))] = rng.randrange(256)
        elif roll < 0.4:
            del v[rng.randrange(len(v)) :]
        elif roll < 0.45:
            v += bytes([rng.randrange(256)])
        values.append(bytes(v))
    run = AvroDecoder(ALL).decode(values)
    reader = AvroRecords(ALL)
    expected: list[dict[str, Any]] = []
    for v in values:
        try:
            record = reader.read(v)
        except LineError:
            continue
        if -(2**31) <= record["i"] < 2**31 and v[0] in (0, 1):  # the decoder's stricter rules
            expected.append(record)
    assert run.batch.to_pylist() == expected
    assert len(run.kept) + len(run.bad) == len(values)
    assert 500 < len(run.bad) < 2_000  # the corruptions were caught, not a few by chance
