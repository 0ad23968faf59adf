"""Reading channel records written with an older schema of the channel, without a broker:
schema ids (channels/wire/schemaid.py), Avro and Arrow resolution (channels/wire/resolve.py) through
the decoders and the reader, and how a run learns the channel's earlier schemas from the
job's recorded topologies (recovery/job/evolution.py, recovery/restore/rescale.py PlanShape)."""

from __future__ import annotations

from typing import Any, cast

import pyarrow as pa
import pytest

from spillway.channels.config import ChannelSettings
from spillway.channels.errors import SchemaMismatchError
from spillway.channels.ids import JobId, OperatorName, SubtaskId
from spillway.channels.reader import ChannelReader, InputChannel
from spillway.channels.routing.partitioners import Forward
from spillway.channels.wire.arrowcodec import arrow_schema
from spillway.channels.wire.batchread import BatchDecoders
from spillway.channels.wire.envelope import (
    ARROW_VERSION,
    VERSION,
    Decoders,
    RecordCodec,
    writer_codec,
)
from spillway.channels.wire.schemaid import H_SCHEMA, WriterSchemas, schema_id, schema_id_of
from spillway.channels.writer import ChannelWriter, OutputChannel
from spillway.recovery.job.evolution import (
    channel_history,
    recorded_fingerprint,
    recorded_plan,
    topology_doc,
    with_earlier_schemas,
)
from spillway.recovery.restore.ownership import owned_partitions
from spillway.recovery.restore.rescale import PlanShape, with_parallelism
from spillway.recovery.runtime.runner import input_channels
from spillway.spark_jobs.api.pipeline import Pipeline
from tests.unit.channelfakes import FakeProducer, LogMsg, ScriptedLog


def record(name: str, **fields: Any) -> dict[str, Any]:
    """A record schema ``name`` with fields ``fields`` (name -> field dict without name)."""
    return {"type": "record", "name": name, "fields": [{"name": k, **v} for k, v in fields.items()]}


V1 = record("Event", seq={"type": "int"}, key={"type": "string"}, score={"type": "float"})
# Every rule at once: seq int -> long, score float -> double, key renamed to id (alias),
# a field added with a default, one added nullable with a null default.
V2 = record(
    "Event",
    seq={"type": "long"},
    id={"type": "string", "aliases": ["key"]},
    score={"type": "double"},
    weight={"type": "int", "default": 1},
    note={"type": ["null", "string"], "default": None},
)
OLD = [{"seq": i, "key": f"k{i}", "score": i + 0.5} for i in range(5)]
AS_V2 = [{"seq": i, "id": f"k{i}", "score": i + 0.5, "weight": 1, "note": None} for i in range(5)]


def avro_message(schema: dict[str, Any], records: list[Any]) -> bytes:
    codec = RecordCodec(schema)
    return codec.frame([codec.encode_block(records)])


def arrow_message(schema: dict[str, Any], records: list[Any]) -> bytes:
    codec = writer_codec(schema, "arrow")
    assert codec.version == ARROW_VERSION
    return codec.frame([codec.encode_block(records)])


def test_a_schema_id_names_the_encoding() -> None:
    with_doc = {**V1, "doc": "events", "fields": [{**f, "default": 0} if f["name"] == "seq"
                                                   else f for f in V1["fields"]]}  # fmt: skip
    assert schema_id(with_doc) == schema_id(V1)  # defaults and docs do not change bytes
    assert schema_id(V2) != schema_id(V1)
    assert schema_id(record("Other", **{f["name"]: f for f in V1["fields"]})) != schema_id(V1)
    assert len(schema_id(V1)) == 16
    assert int(schema_id(V1), 16) >= 0
    assert schema_id_of([("spw.v", b"1"), (H_SCHEMA, b"00ff")]) == b"00ff"
    assert schema_id_of([("spw.v", b"1")]) is None


def test_writer_schemas_look_up_own_and_earlier_and_name_an_unknown_id() -> None:
    schemas = WriterSchemas(V2, [V1, V1])
    assert schemas.is_own(None)
    assert schemas.is_own(schema_id(V2))
    assert not schemas.is_own(schema_id(V1))
    assert schemas.get(schema_id(V1)) == V1
    with pytest.raises(SchemaMismatchError) as e:
        schemas.get(b"0123456789abcdef")
    assert "schema id 0123456789abcdef" in str(e.value)
    assert schema_id(V1).decode() in str(e.value)  # the ids it knows
    assert "read it with the code that wrote it" in str(e.value)


@pytest.mark.parametrize("encoding", ["avro", "arrow"])
def test_every_resolution_rule_on_both_encodings(encoding: str) -> None:
    value = avro_message(V1, OLD) if encoding == "avro" else arrow_message(V1, OLD)
    version = VERSION if encoding == "avro" else ARROW_VERSION
    got = Decoders(V2, [V1]).decode(version, value, schema_id(V1))
    assert got == AS_V2
    assert [type(r["seq"]) for r in got] == [int] * 5


@pytest.mark.parametrize(
    ("old_type", "new_type", "value", "read"),
    [
        ("int", "long", 7, 7),
        ("int", "float", 7, 7.0),
        ("int", "double", 7, 7.0),
        ("long", "float", 2**40, float(2**40)),
        ("long", "double", 2**40, float(2**40)),
        ("float", "double", 0.5, 0.5),
        ("string", "bytes", "é", "é".encode()),
        ("bytes", "string", "é".encode(), "é"),
    ],
)
@pytest.mark.parametrize("encoding", ["avro", "arrow"])
def test_each_promotion(encoding: str, old_type: str, new_type: str, value: Any, read: Any) -> None:
    old, new = record("P", x={"type": old_type}), record("P", x={"type": new_type})
    message = avro_message(old, [{"x": value}]) if encoding == "avro" else arrow_message(
        old, [{"x": value}]
    )  # fmt: skip
    version = VERSION if encoding == "avro" else ARROW_VERSION
    got = Decoders(new, [old]).decode(version, message, schema_id(old))
    assert got == [{"x": read}]
    assert type(got[0]["x"]) is type(read)


def test_a_dropped_field_and_a_nullable_reader_field() -> None:
    old = record("D", a={"type": "long"}, b={"type": "string"})
    new = record("D", a={"type": ["null", "long"]})
    for version, msg in ((VERSION, avro_message(old, [{"a": 1, "b": "x"}])),
                         (ARROW_VERSION, arrow_message(old, [{"a": 1, "b": "x"}]))):  # fmt: skip
        assert Decoders(new, [old]).decode(version, msg, schema_id(old)) == [{"a": 1}]


@pytest.mark.parametrize("encoding", ["avro", "arrow"])
def test_a_reader_union_takes_the_first_branch_the_value_equals_or_promotes_to(
    encoding: str,
) -> None:
    old = record("U", x={"type": "int"})
    new = record("U", x={"type": ["null", "double", "int"]})
    message = avro_message(old, [{"x": 7}]) if encoding == "avro" else arrow_message(
        old, [{"x": 7}]
    )  # fmt: skip
    version = VERSION if encoding == "avro" else ARROW_VERSION
    got = Decoders(new, [old]).decode(version, message, schema_id(old))
    assert got == [{"x": 7.0}]
    assert type(got[0]["x"]) is float


def test_avro_enum_with_new_symbols_and_nested_record_with_new_field() -> None:
    inner1 = record("In", n={"type": "int"})
    inner2 = record("In", n={"type": "long"}, m={"type": "string", "default": "-"})
    old = record("N", e={"type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
                 i={"type": inner1})  # fmt: skip
    new = record("N", e={"type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
                 i={"type": inner2})  # fmt: skip
    msg = avro_message(old, [{"e": "B", "i": {"n": 3}}])
    assert Decoders(new, [old]).decode(VERSION, msg, schema_id(old)) == [
        {"e": "B", "i": {"n": 3, "m": "-"}}
    ]


def test_own_schema_and_messages_without_an_id_take_the_fast_path() -> None:
    own = avro_message(V2, AS_V2)
    assert Decoders(V2).decode(VERSION, own, schema_id(V2)) == AS_V2
    assert Decoders(V2).decode(VERSION, own, None) == AS_V2  # an older Spillway's message


def test_an_avro_message_of_an_unrecorded_schema_is_refused() -> None:
    with pytest.raises(SchemaMismatchError, match="neither this reader's schema 'Event'"):
        Decoders(V2).decode(VERSION, avro_message(V1, OLD), schema_id(V1))


def test_arrow_resolution_names_the_field_it_cannot_resolve() -> None:
    msg = arrow_message(V1, OLD)
    no_default = record("Event", seq={"type": "long"}, extra={"type": "string"})
    with pytest.raises(SchemaMismatchError, match="field 'extra' is not in the message and has"):
        Decoders(no_default).decode(ARROW_VERSION, msg, schema_id(V1))
    narrowed = record("Event", seq={"type": "string"})
    with pytest.raises(SchemaMismatchError, match="field 'seq': the message holds int32"):
        Decoders(narrowed).decode(ARROW_VERSION, msg, schema_id(V1))
    nullable = record("Event", seq={"type": ["null", "int"]})
    with_null = arrow_message(nullable, [{"seq": None}])
    with pytest.raises(SchemaMismatchError, match="field 'seq': the message holds nulls"):
        Decoders(record("Event", seq={"type": "long"})).decode(ARROW_VERSION, with_null, None)


def test_batch_decoders_resolve_both_encodings_to_the_readers_arrow_schema() -> None:
    # A batch operator's schema is flat: a new field must be nullable (null default).
    new = record(
        "Event",
        seq={"type": "long"},
        id={"type": "string", "aliases": ["key"]},
        score={"type": "double"},
        note={"type": ["null", "string"], "default": None},
    )
    flat = arrow_schema(new)
    assert flat is not None
    expected = [{k: v for k, v in r.items() if k != "weight"} for r in AS_V2]
    decoders = BatchDecoders(new, [V1])
    for version, msg in ((VERSION, avro_message(V1, OLD)), (ARROW_VERSION, arrow_message(V1, OLD))):
        rows = decoders.decode(version, msg, schema_id(V1))
        assert rows.batch.schema.equals(flat)
        assert rows.batch.to_pylist() == expected
    assert rows.batch.column(0).type == pa.int64()


def write_log(
    schema: dict[str, Any], records: list[Any], codec: str, first_off: int
) -> list[LogMsg]:
    """What a ChannelWriter of ``schema`` writes for ``records`` (one message per record
    batch of 2), as a partition log starting at ``first_off``."""
    producer = FakeProducer()
    writer = ChannelWriter(
        cast(Any, producer),
        OutputChannel("ch", schema, Forward(0, 1), 1),
        0,
        ChannelSettings(codec=codec, linger_s=60),
        lambda: 0.0,
    )
    for i in range(0, len(records), 2):
        writer.write_many(records[i : i + 2])
        writer.flush_batches()
    return [LogMsg(p, first_off + n, k, v, h) for n, (p, k, v, h) in enumerate(producer.sent)]


@pytest.mark.parametrize("codec", ["arrow", "avro"])
def test_a_reader_resolves_old_records_in_its_channel_then_reads_new_ones(codec: str) -> None:
    old_log = write_log(V1, OLD, codec, 0)
    assert all((H_SCHEMA, schema_id(V1)) in m.h for m in old_log)
    new = [{**r, "seq": 100 + r["seq"], "weight": 2} for r in AS_V2]
    log = old_log + write_log(V2, new, codec, len(old_log))
    reader = ChannelReader(cast(Any, ScriptedLog(log)), [InputChannel("ch", 0, V2, 1, "", (V1,))])
    reader.start()
    got = [r for d in reader.poll() for r in d.records]
    assert got == AS_V2 + new
    # Without the channel's earlier schema the old records are refused, naming the place.
    blind = ChannelReader(cast(Any, ScriptedLog(log)), [InputChannel("ch", 0, V2, 1)])
    blind.start()
    if codec == "avro":
        with pytest.raises(SchemaMismatchError, match=r"ch\[0\] offset 0: .* schema id") as e:
            blind.poll()
        assert e.value.deterministic
        assert e.value.origin == "ch[0]@0"
    else:  # an Arrow message carries its own schema
        assert [r for d in blind.poll() for r in d.records] == AS_V2 + new


@pytest.mark.parametrize("codec", ["arrow", "avro"])
def test_a_record_of_the_old_schema_that_spans_messages_is_resolved(codec: str) -> None:
    big1 = record("Big", n={"type": "int"}, b={"type": "bytes"})
    big2 = record("Big", n={"type": "long"}, b={"type": "string"}, t={"type": "int", "default": 5})
    producer = FakeProducer()
    writer = ChannelWriter(
        cast(Any, producer),
        OutputChannel("ch", big1, Forward(0, 1), 1),
        0,
        ChannelSettings(max_batch_bytes=1024, codec=codec, linger_s=60),
        lambda: 0.0,
    )
    writer.write_many([{"n": 1, "b": b"x" * 5000}, {"n": 2, "b": b"y"}])
    writer.flush_batches()
    assert len(producer.sent) > 2  # the first record in parts
    assert all((H_SCHEMA, schema_id(big1)) in h for _, _, _, h in producer.sent)
    log = [LogMsg(p, n, k, v, h) for n, (p, k, v, h) in enumerate(producer.sent)]
    reader = ChannelReader(
        cast(Any, ScriptedLog(log)), [InputChannel("ch", 0, big2, 1, "", (big1,))]
    )
    reader.start()
    assert [r for d in reader.poll() for r in d.records] == [
        {"n": 1, "b": "x" * 5000, "t": 5},
        {"n": 2, "b": "y", "t": 5},
    ]


# How a run learns a channel's earlier schemas: from the job's recorded topologies.


def pipeline(schema: dict[str, Any], make: Any) -> Pipeline:
    pipe = Pipeline("evolve")
    src = pipe.generate("src", make=make, schema=schema, count=9, parallelism=2)
    src.key_by(lambda r: r["seq"] % 3, max_parallelism=4).aggregate(
        "count", init=lambda: 0, add=lambda n, _r: n + 1,
        result=lambda k, n: {"seq": k, "id": "", "score": 0.0, "weight": n, "note": None},
        schema=V2, parallelism=2,
    ).write_jsonl("out", "/x", parallelism=1)  # fmt: skip
    return pipe


def test_the_plan_and_its_readers_get_every_recorded_schema_of_a_channel() -> None:
    v1 = pipeline(V1, lambda i: OLD[i % 5]).plan("j")
    v2 = pipeline(V2, lambda i: AS_V2[i % 5]).plan("j")
    history = channel_history([topology_doc(v1), topology_doc(v1), topology_doc(v2)])
    assert history[("src", "count")] == (V1, V2)
    assert history[("count", "out")] == (V2,)
    plan = with_earlier_schemas(v2, history)
    assert [(e.upstream, e.earlier_schemas) for e in plan.edges] == [("src", (V1,)), ("count", ())]
    assert plan.fingerprint == v2.fingerprint  # not part of the topology
    # Shipped to the tasks with the plan's shape; a task's rebuilt plan has them again.
    rebuilt = PlanShape.of(plan, None).apply(pipeline(V2, lambda i: AS_V2[i % 5]).plan("j"))
    sub = SubtaskId(JobId("j"), OperatorName("count"), 1)
    inputs = input_channels(rebuilt, rebuilt.operator("count"), owned_partitions(rebuilt, sub))
    assert inputs
    assert all(i.earlier_schemas == (V1,) and i.schema == V2 for i in inputs)


def test_a_recorded_plan_has_the_fingerprint_the_old_runs_checkpoints_carry() -> None:
    v1 = with_parallelism(pipeline(V1, lambda i: OLD[i % 5]).plan("j"), {"count": 3})
    doc = topology_doc(pipeline(V1, lambda i: OLD[i % 5]).plan("j"))  # recorded at count=2
    widths = {op.name: op.parallelism for op in v1.operators}
    groups = {op.name: op.max_parallelism for op in v1.operators}
    v2 = pipeline(V2, lambda i: AS_V2[i % 5]).plan("j")
    old = recorded_plan(v2, doc, widths, groups)
    assert old.fingerprint == recorded_fingerprint(doc, widths, groups) == v1.fingerprint
    assert [s for s in old.subtasks()] == v1.subtasks()
    assert [(e.upstream, e.downstream, e.schema) for e in old.edges] == [
        (e.upstream, e.downstream, e.schema) for e in v1.edges
    ]
    sub = SubtaskId(JobId("j"), OperatorName("count"), 2)
    assert owned_partitions(old, sub) == owned_partitions(v1, sub)
    assert old.operator("count").stateful
    assert not old.operator("src").stateful
