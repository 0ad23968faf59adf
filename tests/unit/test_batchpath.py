"""The columnar path's runtime pieces, without a broker: channel messages read
as Arrow batches, batches routed and written as Arrow, the API's definition checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pytest

from spillway.channels.config import ChannelSettings
from spillway.channels.errors import PipelineDefinitionError, SchemaMismatchError
from spillway.channels.routing.batchwrite import ColumnKeyHash, conform, route_batch
from spillway.channels.routing.partitioners import Broadcast, Forward, KeyHash, RoundRobin
from spillway.channels.wire.batchread import ArrowRows, BatchDecoders
from spillway.channels.wire.envelope import (
    ARROW_VERSION,
    VERSION,
    RecordCodec,
    decode_data,
    read_header,
)
from spillway.channels.writer import ChannelWriter, OutputChannel
from spillway.recovery.job.origins import Same, TopicOffset
from spillway.recovery.runtime.batchpath import as_batch_logic, is_batch_logic
from spillway.spark_jobs.api.pipeline import Pipeline
from spillway.spark_jobs.operators.batchops import FilterBatchesLogic, MapBatchesLogic
from spillway.spark_jobs.operators.operators import MapLogic

SCHEMA = {
    "type": "record",
    "name": "Row",
    "fields": [
        {"name": "key", "type": "string"},
        {"name": "n", "type": "long"},
        {"name": "note", "type": ["null", "string"]},
    ],
}
ARROW = pa.schema(
    [
        pa.field("key", pa.string(), nullable=False),
        pa.field("n", pa.int64(), nullable=False),
        pa.field("note", pa.string()),
    ]
)


def rows(count: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {"key": f"k{i % 7}", "n": i, "note": None if i % 3 else f"x{i}"}
        for i in range(start, start + count)
    ]


class _FakeProducer:
    def __init__(self) -> None:
        self.messages: list[tuple[int, bytes, Any]] = []

    def produce(
        self, topic: str, partition: int, key: bytes, value: bytes, headers: object
    ) -> None:
        self.messages.append((partition, value, headers))

    def decoded(self, partition: int) -> list[Any]:
        return [r for p, v, h in self.messages if p == partition for r in decode_data(h, v, SCHEMA)]


def _writer(partitioner: Any, width: int, codec: str = "arrow", max_bytes: int = 1 << 20) -> Any:
    producer = _FakeProducer()
    channel = OutputChannel("t", SCHEMA, partitioner, width)
    settings = ChannelSettings(max_batch_bytes=max_bytes, codec=codec)
    return producer, ChannelWriter(cast(Any, producer), channel, 0, settings, clock=lambda: 0.0)


def test_arrow_rows_count_and_slice_as_records_do() -> None:
    batch = pa.RecordBatch.from_pylist(rows(10), schema=ARROW)
    r = ArrowRows(batch)
    assert len(r) == 10
    assert isinstance(r[3:], ArrowRows)
    assert r[3:].batch.to_pylist() == rows(7, 3)
    assert r[2:5].batch.to_pylist() == rows(3, 2)
    assert len(r[20:]) == 0
    assert r[4] == rows(1, 4)[0]
    assert r[-1] == rows(1, 9)[0]
    assert list(r) == rows(10)
    with pytest.raises(IndexError):
        r[10]


def test_batch_decoders_give_the_arrow_message_as_it_arrived_and_avro_as_a_batch() -> None:
    d = BatchDecoders(SCHEMA)
    _, writer = _writer(Forward(0, 1), 1)
    producer = cast(_FakeProducer, writer._producer)
    writer.write_many(rows(50))
    writer.flush_batches()
    (_, value, hdrs) = producer.messages[0]
    assert read_header(hdrs)[1] == ARROW_VERSION
    got = d.decode(ARROW_VERSION, value)
    assert got.batch.schema.equals(ARROW)
    assert got.batch.to_pylist() == rows(50)
    avro = RecordCodec(SCHEMA)
    from spillway.channels.wire.envelope import frame_blocks

    value = frame_blocks([avro.encode_block(rows(5))])
    assert d.decode(VERSION, value).batch.to_pylist() == rows(5)
    with pytest.raises(SchemaMismatchError, match="cannot decode an Arrow batch"):
        d.decode(ARROW_VERSION, b"not arrow")


def test_batch_decoders_refuse_a_non_flat_channel() -> None:
    nested = {
        "type": "record",
        "name": "N",
        "fields": [{"name": "xs", "type": {"type": "array", "items": "long"}}],
    }
    with pytest.raises(PipelineDefinitionError, match="not flat"):
        BatchDecoders(nested)


def test_column_key_hash_routes_as_key_hash_on_the_column() -> None:
    records = rows(300)
    batch = pa.RecordBatch.from_pylist(records, schema=ARROW)
    record_route = KeyHash(lambda r: r["key"], 4)
    parts = route_batch(batch, ColumnKeyHash("key", 4), 4)
    assert parts is not None
    for p, part in parts:
        assert part.to_pylist() == [r for r in records if record_route.targets(r)[0] == p]
        assert ColumnKeyHash("key", 4).targets(part.to_pylist()[0]) == (p,)
    assert sum(part.num_rows for _, part in parts) == 300


def test_route_batch_for_each_partitioner() -> None:
    batch = pa.RecordBatch.from_pylist(rows(5), schema=ARROW)
    assert route_batch(batch, Forward(1, 3), 3) == [(1, batch)]
    assert route_batch(batch, Broadcast(2), 2) == [(0, batch), (1, batch)]
    rr = RoundRobin(1, 3)
    assert [route_batch(batch, rr, 3)[0][0] for _ in range(4)] == [1, 2, 0, 1]  # type: ignore[index]
    assert route_batch(batch, KeyHash(lambda r: r["key"], 3), 3) is None  # a key function
    assert route_batch(batch, KeyHash(lambda r: r["key"], 1), 1) == [(0, batch)]


def test_conform_takes_nullability_differences_only_when_no_null_breaks_them() -> None:
    loose = pa.schema([pa.field(f.name, f.type) for f in ARROW])
    batch = pa.RecordBatch.from_pylist(rows(4), schema=loose)
    fit = conform(batch, ARROW)
    assert fit is not None
    assert fit.schema.equals(ARROW)
    bad = pa.RecordBatch.from_pylist([{"key": None, "n": 1, "note": None}], schema=loose)
    assert conform(bad, ARROW) is None
    other = pa.RecordBatch.from_pylist([{"key": "a"}])
    assert conform(other, ARROW) is None


@pytest.mark.parametrize("codec", ["arrow", "avro"])
def test_write_batch_equals_write_many(codec: str) -> None:
    records = rows(2000)
    batch = pa.RecordBatch.from_pylist(records, schema=ARROW)
    by_batch, w1 = _writer(ColumnKeyHash("key", 3), 3, codec, max_bytes=4096)
    by_record, w2 = _writer(ColumnKeyHash("key", 3), 3, codec, max_bytes=4096)
    w1.write_batch(batch)
    w2.write_many(records)
    w1.flush_batches()
    w2.flush_batches()
    for p in range(3):
        assert by_batch.decoded(p) == by_record.decoded(p)
    assert w1.counts == w2.counts
    assert sum(w1.counts) == 2000
    assert len(by_batch.messages) > 3  # a part bigger than a message was split


def test_write_batch_of_a_key_function_edge_falls_back_to_records() -> None:
    records = rows(100)
    producer, w = _writer(KeyHash(lambda r: r["key"], 2), 2)
    w.write_batch(pa.RecordBatch.from_pylist(records, schema=ARROW))
    w.flush_batches()
    route = KeyHash(lambda r: r["key"], 2)
    for p in range(2):
        assert producer.decoded(p) == [r for r in records if route.targets(r)[0] == p]


def test_batch_logics_run_batch_isolate_bad_rows() -> None:
    def inc(b: pa.RecordBatch) -> pa.RecordBatch:
        if 13 in b.column("n").to_pylist():
            raise ValueError("13")
        return b

    sent: list[tuple[Any, Any]] = []

    class Dlq:
        def send(self, **kw: Any) -> None:
            sent.append((kw["origin"], kw["record"]))

    logic = MapBatchesLogic("m", inc, ARROW)
    batch = pa.RecordBatch.from_pylist(rows(20), schema=ARROW)
    origins = Same(TopicOffset("t", 0, 5))
    out = logic.run_batch(batch, origins, Dlq())
    assert [r for b in out for r in b.to_pylist()] == [r for r in rows(20) if r["n"] != 13]
    assert sent == [(TopicOffset("t", 0, 5), rows(1, 13)[0])]
    assert is_batch_logic(logic)
    assert is_batch_logic(FilterBatchesLogic("f", lambda b: b))
    assert as_batch_logic(MapLogic(lambda r: r)) is None


def test_the_api_checks_batch_operators_against_flat_schemas() -> None:
    p = Pipeline("t")
    s = p.generate("g", make=lambda i: rows(1, i)[0], schema=SCHEMA, count=10)
    s.filter_batches("f", lambda b: b.column("n"))  # not booleans: a row error, at run time
    s2 = s.map_batches("m", lambda b: b, schema=ARROW)
    assert s2._schema() is not None
    with pytest.raises(PipelineDefinitionError, match="output schema must be flat"):
        s.map_batches("m2", lambda b: b, schema=pa.schema([("xs", pa.list_(pa.int64()))]))
    nested = p.generate(
        "g2",
        make=lambda i: {"xs": [i]},
        schema={
            "type": "record",
            "name": "N",
            "fields": [{"name": "xs", "type": {"type": "array", "items": "long"}}],
        },
        count=1,
    )
    with pytest.raises(PipelineDefinitionError, match="input schema must be flat"):
        nested.filter_batches("f2", lambda b: [True] * b.num_rows)


def test_batch_operators_are_never_chained() -> None:
    p = Pipeline("t", chaining=True)
    s = p.generate("g", make=lambda i: rows(1, i)[0], schema=SCHEMA, count=10)
    s.map("a", lambda r: r, schema=SCHEMA).filter_batches("b", lambda b: b).map(
        "c", lambda r: r, schema=SCHEMA
    ).write_jsonl("out", "/tmp/unused")
    ops = [o.name for o in p.plan("t").operators]
    assert ops == ["g", "b", "c"]  # g+a fused; b alone; c+out fused


def test_a_stateless_batch_operator_chains_into_its_batch_source() -> None:
    from spillway.spark_jobs.operators.batchagg import Agg

    p = Pipeline("t", chaining=True)
    src = p.read_kafka("src", "in", schema=SCHEMA, batches=True)
    src.map_batches("m", lambda b: b, schema=SCHEMA).filter_batches("f", lambda b: b).print()
    ops = [o.name for o in p.plan("t").operators]
    assert ops == ["src", "f"]  # src+m fused; f reads a channel, the sink takes its batches
    assert is_batch_logic(p.plan("t").operators[0].make_logic())  # type: ignore[misc]
    # A keyed (stateful) batch operator never runs in the source's subtask.
    p = Pipeline("t", chaining=True)
    src = p.read_kafka("src", "in", schema=SCHEMA, batches=True)
    src.key_by("key").aggregate_batches("agg", {"n": Agg("count")}, emit="rows").print()
    assert [o.name for o in p.plan("t").operators] == ["src", "agg"]  # agg+console


def test_key_by_a_column_routes_by_the_column_and_feeds_aggregate_batches() -> None:
    from spillway.spark_jobs.operators.batchagg import Agg

    p = Pipeline("t")
    s = p.generate("g", make=lambda i: rows(1, i)[0], schema=SCHEMA, count=10)
    s.key_by("key").aggregate_batches(
        "agg", {"n": Agg("count"), "total": Agg("sum", "n")}, parallelism=3
    ).print()
    plan = p.plan("t")
    edge = plan.inputs_of("agg")[0]
    part = edge.make_partitioner(0, 3)
    assert part == ColumnKeyHash("key", 3)
    assert part.targets({"key": "k1"}) == KeyHash(lambda r: r["key"], 3).targets({"key": "k1"})
    agg = plan.operator("agg")
    assert agg.stateful
    # The aggregates are part of the plan (restored slots are positional).
    assert agg.description["aggs"] == {"n": ["count", None], "total": ["sum", "n"]}
    assert [f["name"] for f in edge.schema["fields"]] == ["key", "n", "note"]


def test_aggregate_batches_definitions_that_cannot_work_are_refused() -> None:
    from spillway.spark_jobs.operators.batchagg import Agg

    p = Pipeline("t")
    s = p.generate("g", make=lambda i: rows(1, i)[0], schema=SCHEMA, count=10)
    with pytest.raises(
        PipelineDefinitionError, match=r"once per batch with a pyarrow\.RecordBatch"
    ):
        s.key_by(lambda r: r["key"].upper()).aggregate_batches("a", {"n": Agg("count")})
    with pytest.raises(PipelineDefinitionError, match="not in the input"):
        s.key_by("nope").aggregate_batches("b", {"n": Agg("count")})
    with pytest.raises(PipelineDefinitionError):
        s.key_by("key").aggregate_batches("c", {"s": Agg("sum", "note")})  # sum of strings


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_batch_file_source_reads_what_the_record_source_reads_from_any_position(
    tmp_path: Path, fmt: str
) -> None:
    import json

    import pyarrow.parquet as pq

    from spillway.spark_jobs.connectors.batchsources import BatchFileSource
    from spillway.spark_jobs.connectors.sources import FileSource
    from tests.unit.connectorfakes import ctx

    schema = {"type": "record", "name": "R", "fields": SCHEMA["fields"][:2]}
    for f in range(3):
        recs = [{"key": f"k{i % 5}", "n": i} for i in range(f * 100, f * 100 + 37 + f)]
        if fmt == "csv":
            lines = ["key,n", *(f"{r['key']},{r['n']}" for r in recs)]
            lines.insert(7, "bad,line,here")  # wrong column count: rejected by both
            data = "\n".join(lines).encode() + b"\n"
            # A line that is not UTF-8 (pyarrow alone would fail the whole file).
            data = data.replace(b"k1,1\n", b"k\xc3\x28,1\n").replace(b"k1,101\n", b"k\xff,101\n")
            (tmp_path / f"p{f}.csv").write_bytes(data)
        else:
            pq.write_table(pa.Table.from_pylist(recs), tmp_path / f"p{f}.parquet")
    pattern = str(tmp_path / f"*.{fmt}")

    def drain(src: Any, position: dict[str, Any], n: int) -> tuple[list[Any], list[Any]]:
        src.open(ctx(0), json.loads(json.dumps(position)))
        got: list[Any] = []
        bad: list[Any] = []
        while (out := src.read(n)) is not None:
            got += (
                [r for b in out for r in b.to_pylist()]
                if out and isinstance(out[0], pa.RecordBatch)
                else out
            )
            bad += [(r.origin.file, r.origin.line) for r in src.rejected()]
        return got, bad

    expected = drain(FileSource(pattern, fmt, 1, schema), {}, 10)
    assert len(expected[0]) == 37 + 38 + 39 - (2 if fmt == "csv" else 0)
    assert len(expected[1]) == (3 + 2 if fmt == "csv" else 0)  # the rejected lines
    assert drain(BatchFileSource(pattern, fmt, 1, schema), {}, 10) == expected
    # From every position a batch read reached, the rest is read exactly once.
    src = BatchFileSource(pattern, fmt, 1, schema)
    src.open(ctx(0), {})
    seen = 0
    while (out := src.read(8)) is not None:
        seen += sum(b.num_rows for b in out)
        rest, _ = drain(BatchFileSource(pattern, fmt, 1, schema), src.position(), 8)
        assert rest == expected[0][seen:]


def test_batch_file_source_refuses_what_it_cannot_read() -> None:
    from spillway.spark_jobs.connectors.batchsources import BatchFileSource

    with pytest.raises(PipelineDefinitionError, match="csv or parquet"):
        BatchFileSource("*.jsonl", "jsonl", 1, SCHEMA)
    p = Pipeline("t")
    with pytest.raises(
        PipelineDefinitionError, match="the event time is a column: pass timestamp_c"
    ):
        p.read_files("f", "*.csv", format="csv", schema=SCHEMA, batches=True, timestamp=len)


def test_a_parquet_sink_writes_arrow_rows_as_they_arrived(tmp_path: Path) -> None:
    from collections import Counter

    import pyarrow.dataset as ds

    from spillway.recovery.runtime.batchpath import reads_batches
    from spillway.spark_jobs.connectors.parquetsink import ParquetFileSink
    from spillway.spark_jobs.connectors.sinks import JsonlFileSink
    from tests.unit.connectorfakes import ctx

    arrow = pa.schema([pa.field(f.name, f.type) for f in ARROW])  # as a user's schema
    sink = ParquetFileSink(str(tmp_path), "out", arrow, SCHEMA, partition_by="key")
    sink.open(ctx(0), {}, None)
    batch = pa.RecordBatch.from_pylist(rows(50), schema=ARROW)  # the channel's schema
    sink.write(ArrowRows(batch)[10:])
    sink.write(ArrowRows(batch)[:10])
    sink.committed(sink.prepare(0))
    part = ds.partitioning(pa.schema([("key", pa.string())]), flavor="hive")
    table = ds.dataset(tmp_path / "out", format="parquet", partitioning=part).to_table()
    assert Counter(map(str, table.to_pylist())) == Counter(
        map(str, [{"n": r["n"], "note": r["note"], "key": r["key"]} for r in rows(50)])
    )
    assert reads_batches(None, sink)
    assert not reads_batches(None, JsonlFileSink(str(tmp_path), "j"))
    assert not reads_batches(MapLogic(lambda r: r), sink)  # chained: records


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_batch_file_source_watermarks_equal_the_record_sources(tmp_path: Path, fmt: str) -> None:
    # Event time from the "ts" column: after every read, and from every checkpointed
    # position, the watermark is the record source's with timestamp=lambda r: r["ts"].
    import json
    import random

    import pyarrow.parquet as pq

    from spillway.spark_jobs.connectors.batchsources import BatchFileSource
    from spillway.spark_jobs.connectors.sources import FileSource
    from spillway.spark_jobs.records.watermarks import Watermarks
    from tests.unit.connectorfakes import ctx

    schema = {
        "type": "record",
        "name": "T",
        "fields": [{"name": "key", "type": "string"}, {"name": "ts", "type": "long"}],
    }
    rng = random.Random(3)
    top = 0
    for f in range(2):
        recs = [
            {"key": f"k{i}", "ts": i * 10 - rng.randrange(50)} for i in range(f * 60, f * 60 + 41)
        ]
        if fmt == "csv":
            text = "\n".join(["key,ts", *(f"{r['key']},{r['ts']}" for r in recs)]) + "\n"
            (tmp_path / f"p{f}.csv").write_text(text)
        else:
            pq.write_table(pa.Table.from_pylist(recs), tmp_path / f"p{f}.parquet")
        top = max(top, *(r["ts"] for r in recs))
    pattern = str(tmp_path / f"*.{fmt}")
    strategy = Watermarks.bounded(30)

    def marks(src: Any, position: dict[str, Any]) -> list[tuple[int | None, Any]]:
        src.open(ctx(0), json.loads(json.dumps(position)))
        out = []
        while src.read(7) is not None:
            out.append((src.watermark(), src.position()))
        return out

    records = marks(FileSource(pattern, fmt, 1, schema, lambda r: r["ts"], strategy), {})
    batches = marks(BatchFileSource(pattern, fmt, 1, schema, "ts", strategy), {})
    assert [w for w, _ in batches] == [w for w, _ in records]
    assert batches[-1][0] == top - 30
    assert len({w for w, _ in batches}) > 5  # it rose along the way
    assert [p for _, p in batches] == [p for _, p in records]
    for _, position in records[2:5]:  # restored from a checkpointed position
        assert marks(BatchFileSource(pattern, fmt, 1, schema, "ts", strategy), position) == (
            marks(FileSource(pattern, fmt, 1, schema, lambda r: r["ts"], strategy), position)
        )


def test_batch_source_timestamp_columns_are_checked_at_definition() -> None:
    p = Pipeline("t")
    from spillway.spark_jobs.records.watermarks import Watermarks

    schema = {**SCHEMA, "fields": [*SCHEMA["fields"], {"name": "note", "type": ["null", "long"]}]}
    schema["fields"] = [f for f in schema["fields"] if f["type"] != ["null", "string"]]
    for column in ("nope", "key", "note"):  # missing; not an integer; nullable
        with pytest.raises(PipelineDefinitionError, match=f"timestamp column '{column}'"):
            p.read_files(
                "f", "*.csv", format="csv", schema=schema, batches=True, timestamp_column=column
            )
    with pytest.raises(PipelineDefinitionError, match="watermarks= needs timestamp_column=, the"):
        p.read_files(
            "f",
            "*.csv",
            format="csv",
            schema=SCHEMA,
            batches=True,
            watermarks=Watermarks.bounded(5),
        )
