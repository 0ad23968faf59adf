"""Kafka keys as a record field, tombstones as deletion records, and the lookup join
deleting its table row on them (spillway.spark_jobs.records.tombstones,
spillway.spark_jobs.operators.joins)."""

from __future__ import annotations

import json
import re
from typing import Any, cast

import pytest

from spillway.channels.errors import PipelineDefinitionError
from spillway.channels.ids import Offset, TopicPartition
from spillway.channels.wire.envelope import Decoders, writer_codec
from spillway.recovery.job.origins import TopicOffset
from spillway.recovery.restore.state import ChangelogState
from spillway.spark_jobs.api.pipeline import Pipeline
from spillway.spark_jobs.operators.joins import LookupJoinLogic
from spillway.spark_jobs.records.lines import LineError, field_types
from spillway.spark_jobs.records.tombstones import DELETED, KeyedDecoder, keyed_schema
from spillway.spark_jobs.records.watermarks import Watermarks
from tests.unit.aggfakes import Log
from tests.unit.kafkasourcefakes import Broker, SourceMsg, ctx0, kafka_source
from tests.unit.operatorfakes import Ctx

ROW = {
    "type": "record",
    "name": "Row",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "v", "type": "long"},
        {"name": "note", "type": ["null", "string"]},
    ],
}
WHERE = "source 'table'"


def test_the_channel_schema_gets_the_marker_and_nullable_values() -> None:
    assert keyed_schema(ROW, None, False, WHERE) == ROW
    assert keyed_schema(ROW, "id", False, WHERE) == ROW
    assert keyed_schema(ROW, "id", True, WHERE)["fields"] == [
        {"name": "id", "type": "string"},
        {"name": "v", "type": ["null", "long"], "default": None},
        {"name": "note", "type": ["null", "string"]},
        {"name": DELETED, "type": "boolean", "default": False},
    ]


@pytest.mark.parametrize(
    ("key_field", "tombstones", "message"),
    [
        (None, True, "tombstones=True needs key_field="),
        ("nope", False, "key_field 'nope' must be a string field of the schema (the Kafka key"),
        ("v", True, "but the schema declares it as 'long'"),
    ],
)
def test_options_that_do_not_fit_the_schema_are_refused(
    key_field: str | None, tombstones: bool, message: str
) -> None:
    with pytest.raises(PipelineDefinitionError, match=re.escape(message)) as info:
        keyed_schema(ROW, key_field, tombstones, WHERE)
    assert str(info.value).startswith(f"{WHERE}: ")
    p = Pipeline("j")
    with pytest.raises(PipelineDefinitionError, match="tombstones=True needs key_field"):
        p.read_kafka("table", "t", schema=ROW, tombstones=True)
    with pytest.raises(PipelineDefinitionError, match="batches=True reads values only"):
        p.read_kafka("table2", "t", schema=ROW, key_field="id", batches=True)


def test_messages_become_rows_and_deletions() -> None:
    fields = field_types(ROW)
    table = KeyedDecoder("id", True, list(fields))
    assert table.decode(b"a", b'{"v": 1}', fields) == {"v": 1, "id": "a", DELETED: False}
    assert table.decode(b"a", b'{"id": "x", "v": 1}', fields)["id"] == "a"  # the key wins
    assert table.decode(None, b'{"id": "x", "v": 1}', fields)["id"] == "x"
    gone = {"id": "a", "v": None, "note": None, DELETED: True}
    assert table.decode(b"a", b"", fields) == table.decode(b"a", None, fields) == gone
    with pytest.raises(LineError, match="a tombstone \\(empty value\\) without a key"):
        table.decode(None, None, fields)
    with pytest.raises(LineError, match="invalid UTF-8 at byte 0"):
        table.decode(b"\xff", b'{"v": 1}', fields)
    plain = KeyedDecoder("id", False, list(fields))  # without tombstones: still bad input
    assert plain.decode(b"a", b'{"v": 2}', fields) == {"v": 2, "id": "a"}
    with pytest.raises(LineError, match="no value \\(null\\)"):
        plain.decode(b"a", None, fields)


@pytest.mark.parametrize("codec", ["arrow", "avro"])
def test_rows_and_deletions_travel_the_channel(codec: str) -> None:
    schema = keyed_schema(ROW, "id", True, WHERE)
    fields = field_types(ROW)
    table = KeyedDecoder("id", True, list(fields))
    records = [table.decode(b"a", b'{"v": 1}', fields), table.decode(b"a", None, fields)]
    w = writer_codec(schema, codec)
    got = Decoders(schema).decode(w.version, w.frame([w.encode_block(records)]))
    assert got == [{"id": "a", "v": 1, "note": None, DELETED: False}, records[1]]


def test_the_lookup_join_deletes_the_row_and_a_restore_does_not_bring_it_back() -> None:
    sides = {"events": ("s", lambda r: r["id"], None), "table": ("t", lambda r: r["id"], None)}

    def make() -> LookupJoinLogic:
        return LookupJoinLogic("lk", sides, "left", lambda e, row: {**e, "row": row})

    def row(k: str, v: int) -> dict[str, Any]:
        return {"id": k, "v": v, "note": None, DELETED: False}

    def gone(k: str) -> dict[str, Any]:
        return {"id": k, "v": None, "note": None, DELETED: True}

    logic, ctx = make(), Ctx()
    logic.open(ctx)
    logic.process_input("table", [row("a", 1), row("b", 2), row("c", 3)])
    log = Log()
    ctx.state.flush_to(cast(Any, log))  # a checkpoint holding all three rows
    logic.process_input("table", [gone("a"), row("b", 4), gone("b"), gone("x")])
    assert logic.process_input("events", [{"id": k, "n": 1} for k in "abc"]) == [
        {"id": "a", "n": 1, "row": None},
        {"id": "b", "n": 1, "row": None},
        {"id": "c", "n": 1, "row": {"id": "c", "v": 3, "note": None}},  # no marker
    ]
    ctx.state.flush_to(cast(Any, log))  # the next checkpoint: tombstones for a and b
    assert [v for k, v in log.log[3:]].count(None) == 3  # a, b and the never-seen x
    state = ChangelogState(TopicPartition("t", 0))
    state.restore(cast(Any, log), Offset(len(log.log)))
    again = make()
    again.open(Ctx(state=state))
    assert again.process_input("events", [{"id": k, "n": 2} for k in "abc"]) == [
        {"id": "a", "n": 2, "row": None},
        {"id": "b", "n": 2, "row": None},
        {"id": "c", "n": 2, "row": {"id": "c", "v": 3, "note": None}},
    ]
    inner = LookupJoinLogic("lk", sides, "inner", lambda e, row: e)
    inner.open(Ctx(state=state))
    assert inner.process_input("events", [{"id": "a"}, {"id": "c"}]) == [{"id": "c"}]


def test_a_tombstones_source_carries_the_marker_to_other_operators() -> None:
    p = Pipeline("j")
    table = p.read_kafka("table", "t", schema=ROW, key_field="id", tombstones=True)
    table.filter("rows", lambda r: not r[DELETED]).write_jsonl("out", "/x")
    for node in ("table", "rows"):  # the filter keeps the source's schema, marker and all
        schema = p._nodes[node].schema
        assert schema is not None
        assert [f["name"] for f in schema["fields"]] == ["id", "v", "note", DELETED]


class _Keyed(SourceMsg):
    """A message with a key; ``value`` ``None``: a tombstone."""

    def __init__(self, off: int, key: bytes, value: dict[str, Any] | None, ts: int) -> None:
        super().__init__(0, off, value or {}, ts)
        self.k, self.raw = key, value

    def key(self) -> bytes:
        return self.k

    def value(self) -> bytes | None:  # type: ignore[override]
        return None if self.raw is None else json.dumps(self.raw).encode()


def test_the_kafka_source_reads_rows_and_tombstones(monkeypatch: pytest.MonkeyPatch) -> None:
    batch = [_Keyed(0, b"a", {"v": 5}, 10), _Keyed(1, b"a", None, 80)]
    table = kafka_source(
        monkeypatch,
        schema=ROW,
        timestamp=lambda r: r["v"] * 10,  # would fail on a deletion: its Kafka time counts
        watermarks=Watermarks.bounded(0),
        key_field="id",
        tombstones=True,
    )
    table.open(ctx0(), {})
    Broker.batches = [batch]
    assert table.read(10) == [
        {"v": 5, "id": "a", DELETED: False},
        {"id": "a", "v": None, "note": None, DELETED: True},
    ]
    assert table.rejected() == []
    # the row's time is 50 (its v), the deletion's 80 (Kafka's): the largest is noted
    assert table.position()["watermarks"]["event_time"] == {"0": 80}
    plain = kafka_source(monkeypatch, schema=ROW, key_field="id")
    plain.open(ctx0(), {})
    Broker.batches = [batch]
    assert plain.read(10) == [{"v": 5, "id": "a"}]
    (bad,) = plain.rejected()
    assert (bad.origin, bad.error) == (TopicOffset("in", 0, 1), "no value (null)")
