"""Kafka JSON values decoded a run at a time (spillway.spark_jobs.connectors.batchjson), against the
record
path: parse_json_value at the source, then the Arrow channel codec's checks."""

from __future__ import annotations

import random
from typing import Any

import pytest

from spillway.channels.errors import SchemaMismatchError
from spillway.channels.wire.arrowcodec import ArrowCodec, arrow_schema
from spillway.recovery.job.origins import TopicOffset
from spillway.spark_jobs.connectors.batchjson import decode_json_values, decode_kafka_json
from spillway.spark_jobs.records.lines import LineError, field_types, parse_json_value

AVRO: dict[str, Any] = {
    "type": "record",
    "name": "ev",
    "fields": [
        {"name": "k", "type": "string"},
        {"name": "n", "type": ["null", "int"]},
        {"name": "f", "type": ["null", "double"]},
        {"name": "ok", "type": ["null", "boolean"]},
    ],
}
SCHEMA = arrow_schema(AVRO)
assert SCHEMA is not None
CODEC = ArrowCodec(AVRO, SCHEMA)

GOOD = [
    b'{"k":"a","n":1,"f":0.5,"ok":true}',
    b'{"k":"b"}',
    b'  {"f":2,"k":"c\\u00e9"}  ',
    b'{"k":"d","extra":{"deep":[1,2]},"n":-2147483648}',
    b'{"k":"e","n":null,"f":-1e300}',
    b'{"k":"f",\n  "n":7}',  # pretty-printed: a newline inside the value
]
BAD = [
    b"",
    None,
    b"not json",
    b"[1,2]",
    b"3",
    b'{"k":"x"}{"k":"y"}',
    b'{"n":1}',  # k missing
    b'{"k":null}',
    b'{"k":1}',
    b'{"k":"a","n":1.5}',
    b'{"k":"a","n":2.0}',
    b'{"k":"a","n":3000000000}',
    b'{"k":"a","n":true}',
    b'{"k":"a","f":NaN}',
    b'{"k":"a","f":-Infinity}',
    b'{"k":"a","f":1e400}',
    b'{"k":"a","ok":"true"}',
    b'{"k":"\xff"}',
]


def _record_path(value: bytes | None) -> dict[str, Any] | None:
    """The record a value becomes on the record path, or None if it is rejected there."""
    try:
        rec = parse_json_value(value, field_types(AVRO))
        row: dict[str, Any] = CODEC.batch([rec]).to_pylist()[0]
    except (LineError, SchemaMismatchError):
        return None
    return row


def test_the_reference_rejects_every_bad_value_and_keeps_every_good_one() -> None:
    assert all(_record_path(v) is None for v in BAD)
    assert all(_record_path(v) is not None for v in GOOD)


@pytest.mark.parametrize("seed", range(6))
def test_a_run_equals_the_record_path_value_by_value(seed: int) -> None:
    rng = random.Random(seed)
    values = [rng.choice(BAD) if rng.random() < 0.2 else rng.choice(GOOD) for _ in range(300)]
    offsets = sorted(rng.sample(range(1000, 2000), 300))  # gaps: transaction markers
    got = decode_kafka_json("in", 4, offsets, values, SCHEMA)
    expect = [(i, _record_path(v)) for i, v in enumerate(values)]
    assert got.batch.schema.equals(SCHEMA)
    assert got.batch.to_pylist() == [r for _, r in expect if r is not None]
    kept = [i for i, r in expect if r is not None]
    assert [got.origins.at(j) for j in range(len(kept))] == [
        TopicOffset("in", 4, offsets[i]) for i in kept
    ]
    rejected = [i for i, r in expect if r is None]
    assert [r.origin for r in got.rejected] == [TopicOffset("in", 4, offsets[i]) for i in rejected]
    assert [r.raw for r in got.rejected] == [values[i] or b"" for i in rejected]


def test_a_clean_run_is_one_batch_with_one_origin_run() -> None:
    values = GOOD * 50
    run = decode_json_values(values, SCHEMA)
    assert run.kept is None
    assert run.bad == []
    assert run.batch.num_rows == len(values)
    got = decode_kafka_json("in", 0, range(500, 500 + len(values)), values, SCHEMA)
    assert got.origins.at(len(values) - 1) == TopicOffset("in", 0, 500 + len(values) - 1)


def test_rejections_say_why() -> None:
    run = decode_json_values([b"", None, b'{"k":"a","f":NaN}', b'{"k":"a","n":1.5}'], SCHEMA)
    assert run.batch.num_rows == 0
    reasons = dict(run.bad)
    assert reasons[0] == "empty value"
    assert reasons[1] == "no value (null)"
    assert reasons[2] == "field 'f': NaN or infinite, not a finite number"
    assert reasons[3].startswith("not a JSON object of the schema:")
    assert "int32" in reasons[3]
