"""Record origins, dead-letter documents, and the one error a job stops with. No broker."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from spillway.channels.errors import (
    BrokerUnavailableError,
    ConfigError,
    ProducerFencedError,
    RecordError,
    SchemaMismatchError,
    TransactionAbortedError,
)
from spillway.channels.ids import JobId, OperatorName, SubtaskId
from spillway.recovery.job.origins import (
    UNKNOWN,
    FileLine,
    Same,
    TopicOffset,
    line_runs,
    topic_runs,
)
from spillway.recovery.job.plan import Rejected
from spillway.recovery.runtime.deadletter import TRUNCATED_BYTES, dead_letter_doc
from spillway.recovery.runtime.failures import (
    abort_message,
    emit_failure,
    failure_fields,
    process_failure,
    source_failure,
)
from spillway.spark_jobs.api.pipeline import Pipeline
from spillway.spark_jobs.connectors.sources import FileSource
from spillway.spark_jobs.connectors.usertopics import check_user_topics
from spillway.spark_jobs.records.lines import LineError, field_types, parse_json_value
from spillway.spark_jobs.spark.failfast import deterministic_failure
from tests.unit.connectorfakes import ctx

SUBTASK = SubtaskId(JobId("j"), OperatorName("parse"), 1)
READING = {
    "type": "record",
    "name": "Reading",
    "fields": [
        {"name": "key", "type": "string"},
        {"name": "n", "type": "long"},
        {"name": "x", "type": "double"},
    ],
}

# -- origins ---------------------------------------------------------------------------


def test_runs_give_each_record_its_partition_and_offset() -> None:
    runs = topic_runs("in")
    for p, off in [(0, 5), (0, 6), (0, 7), (1, 0), (1, 1), (0, 9), (0, 10)]:
        runs.add(p, off)
    assert len(runs) == 7
    assert [str(runs.at(k)) for k in range(7)] == [
        "in[0]@5", "in[0]@6", "in[0]@7", "in[1]@0", "in[1]@1", "in[0]@9", "in[0]@10",
    ]  # fmt: skip
    assert runs.at(7) is None
    assert len(runs._runs) == 3  # consecutive offsets share one run


def test_line_runs_and_add_run() -> None:
    runs = line_runs(["a.jsonl", "b.jsonl"])
    runs.add_run(1, 10, 3)
    runs.add_run(0, 1, 0)  # empty runs are not kept
    runs.add(0, 4)
    assert [runs.at(k) for k in range(4)] == [
        FileLine("b.jsonl", 10), FileLine("b.jsonl", 11), FileLine("b.jsonl", 12),
        FileLine("a.jsonl", 4),
    ]  # fmt: skip
    assert str(FileLine("a.jsonl", 4)) == "a.jsonl:4"
    assert Same(TopicOffset("t", 2, 9)).at(1000) == TopicOffset("t", 2, 9)
    assert UNKNOWN.at(0) is None


def test_file_source_tells_the_line_of_every_record(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_bytes(
        b'{"key": "a", "n": 1, "x": 1.0}\n'  # line 1
        b"not json\n"  # 2: rejected
        b"\n"  # 3: blank
        b'{"key": "b", "n": 2, "x": 2.0}\n'  # 4
        b'{"key": "c", "n": 3, "x": 3.0}\n'  # 5
    )
    src = FileSource(str(path), "jsonl", 1, READING)
    src.open(ctx(0), {})
    assert [r["key"] for r in src.read(10) or []] == ["a", "b", "c"]
    assert [src.origins().at(k) for k in range(3)] == [
        FileLine(str(path), 1), FileLine(str(path), 4), FileLine(str(path), 5),
    ]  # fmt: skip
    assert [r.origin for r in src.rejected()] == [FileLine(str(path), 2)]


# -- Kafka values ------------------------------------------------------------------------

FIELDS = field_types(READING)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"", "empty value"),
        (None, "no value"),
        (b'{"key": "k\xff", "n": 1, "x": 1.0}', "invalid UTF-8"),
        (b'{"key": "k", "n": 1, "x":', "not JSON"),
        (b"[1, 2]", "a JSON list, not an object"),
        (b'"text"', "a JSON str, not an object"),
        (b'{"key": "k", "n": 1, "x": NaN}', "JSON has no NaN"),
        (b'{"key": "k", "n": 1, "x": -Infinity}', "JSON has no NaN or Infinity"),
        (b'{"key": "k", "n": 9223372036854775808, "x": 1.0}', "too big for long"),
        (b'{"key": "k", "n": 1, "x": 1e400}', "too big"),
    ],
)
def test_kafka_values_that_cannot_be_records(value: bytes | None, reason: str) -> None:
    with pytest.raises(LineError, match=reason):
        parse_json_value(value, FIELDS)


def test_kafka_values_that_orjson_reads_are_left_to_the_writer_for_types() -> None:
    assert parse_json_value(b'{"key": "k", "n": 1, "x": 0.5}', FIELDS) == {
        "key": "k", "n": 1, "x": 0.5,
    }  # fmt: skip
    # A wrong type is found when the record is written to its channel (stage "emit").
    assert parse_json_value(b'{"key": "k", "n": "one"}', FIELDS) == {"key": "k", "n": "one"}
    big = b'{"key": "k", "n": 9223372036854775807, "x": 1.0}'  # long max: exact
    assert parse_json_value(big, FIELDS)["n"] == 2**63 - 1


# -- dead letters ------------------------------------------------------------------------


def test_dead_letter_names_the_origin() -> None:
    doc = json.loads(
        dead_letter_doc(
            SUBTASK, stage="emit", error=ValueError("bad"), origin=TopicOffset("in", 1, 42),
            record={"key": "k"},
        )
    )  # fmt: skip
    where = (doc["topic"], doc["partition"], doc["offset"], doc["origin"])
    assert where == ("in", 1, 42, "in[1]@42")
    assert (doc["file"], doc["line"]) == (None, None)
    assert (doc["stage"], doc["error"]) == ("emit", "ValueError: bad")
    assert (json.loads(doc["record"]), doc["truncated"], doc["size"]) == ({"key": "k"}, False, 12)
    doc = json.loads(
        dead_letter_doc(SUBTASK, stage="source", error="x", origin=FileLine("f", 3), raw=b"\xff")
    )
    assert (doc["file"], doc["line"], doc["topic"], doc["origin"]) == ("f", 3, None, "f:3")
    assert base64.b64decode(doc["raw"]) == b"\xff"


def test_a_dead_letter_too_big_for_its_topic_is_kept_truncated_and_marked() -> None:
    raw = bytes(range(256)) * 4096  # 1 MiB
    origin = TopicOffset("in", 0, 7)
    text = dead_letter_doc(
        SUBTASK, stage="source", error="x", origin=origin, raw=raw, limit=512 * 1024
    )
    assert len(text) <= 512 * 1024
    doc = json.loads(text)
    assert (doc["truncated"], doc["size"], doc["origin"]) == (True, len(raw), "in[0]@7")
    kept = base64.b64decode(doc["raw"])
    assert kept == raw[: len(kept)]
    assert 0 < len(kept) <= TRUNCATED_BYTES
    record = {"blob": "y" * 2_000_000}
    doc = json.loads(dead_letter_doc(SUBTASK, stage="emit", error="x", origin=origin,
                                     record=record, limit=256 * 1024))  # fmt: skip
    assert doc["truncated"] is True
    assert doc["size"] == len(json.dumps(record))
    assert json.dumps(record).startswith(doc["record"])
    whole = json.loads(dead_letter_doc(SUBTASK, stage="emit", error="x", origin=origin,
                                       record=record))  # fmt: skip
    assert whole["truncated"] is False
    assert json.loads(whole["record"]) == record


# -- the error a job stops with ------------------------------------------------------------


def fails_on_three(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for r in records:
        if r["n"] == 3:
            raise ValueError(f"cannot handle {r['n']}\nsecond line")
    return records


def test_process_failure_names_the_first_failing_record_of_a_message() -> None:
    records = [{"n": i} for i in range(6)]
    origins = Same(TopicOffset("ch", 1, 500))
    err = process_failure(SUBTASK, "parse", records, origins, ValueError("batch"), fails_on_three)
    text = str(err)
    assert text.startswith("j/parse[1]: operator 'parse' failed on the record at ch[1]@500 ")
    assert "(record 4 of 6 in that message): ValueError: cannot handle 3 second line." in text
    assert "--dead-letter" in text
    assert "spillway.j.dlq" in text
    assert "\n" not in text
    assert err.origin == "ch[1]@500"
    assert err.deterministic
    assert err.subtasks == {SUBTASK}


def test_process_failure_of_a_source_read_names_the_records_own_offset() -> None:
    runs = topic_runs("in")
    for off in range(10, 16):
        runs.add(0, off)
    err = process_failure(SUBTASK, "parse", [{"n": i} for i in range(6)], runs,
                          ValueError("batch"), fails_on_three)  # fmt: skip
    assert err.origin == "in[0]@13"
    assert "failed on the record at in[0]@13: ValueError" in str(err)


def test_emit_failure_names_the_refused_record() -> None:
    def write(records: list[dict[str, Any]]) -> None:
        if records[0]["n"] == 2:
            raise SchemaMismatchError("record does not match schema 'R'")

    runs = topic_runs("in")
    runs.add_run(1, 100, 4)
    batch_error = SchemaMismatchError("batch")
    err = emit_failure(SUBTASK, "rows", [{"n": i} for i in range(4)], runs, batch_error, write)
    assert isinstance(err, SchemaMismatchError)
    assert err.origin == "in[1]@102"
    assert "emitted a record it cannot write (the record at in[1]@102): record does not" in str(err)


def test_source_failure_and_abort_message() -> None:
    bad = Rejected(FileLine("/d/a.jsonl", 7), "not JSON: Expecting value", b"{")
    err = source_failure(SUBTASK, "rows", bad)
    assert str(err).startswith("j/parse[1]: source 'rows' cannot read /d/a.jsonl:7: not JSON")
    assert abort_message(SUBTASK, err) == str(err)  # already complete: kept as it is
    # A reader's error names neither the subtask nor the fix: both are added.
    bare = SchemaMismatchError("ch[0] offset 5: unknown kind", origin="ch[0]@5")
    line = abort_message(SUBTASK, bare)
    assert line.startswith("j/parse[1]: ch[0] offset 5: unknown kind (at ch[0]@5). ")
    assert line.endswith("run with --dead-letter to divert bad records to spillway.j.dlq")


@pytest.mark.parametrize(
    ("error", "deterministic"),
    [
        (RecordError("bad", origin="t[0]@1"), True),
        (ConfigError("no such topic"), True),
        (TransactionAbortedError("aborted"), False),
        (BrokerUnavailableError("gone"), False),
        (ProducerFencedError("fenced"), False),
        (RuntimeError("killed"), False),
    ],
)
def test_what_is_deterministic(error: BaseException, deterministic: bool) -> None:
    fields = failure_fields(SUBTASK, error)
    assert fields["deterministic"] is deterministic
    assert fields["message"].startswith("j/parse[1]: ")
    event = {"event": "failed", "run": "r1", **fields}
    assert deterministic_failure(event, "r1") is deterministic
    assert not deterministic_failure(event, "r0")  # another run's failure


def test_a_missing_write_kafka_topic_is_named_before_the_job_starts() -> None:
    p = Pipeline("sinky")
    src = p.read_kafka("orders", "orders-in", schema=READING)
    src.write_kafka("sink", "orders-out")
    plan = p.plan("sinky")
    check_user_topics(plan, {"orders-in": 1, "orders-out": 2})
    with pytest.raises(ConfigError, match="write_kafka operator 'sink' uses topic 'orders-out', "
                       "which does not exist") as raised:  # fmt: skip
        check_user_topics(plan, {"orders-in": 1})
    assert "Create the topic first" in str(raised.value)
    with pytest.raises(ConfigError, match="read_kafka operator 'orders' uses topic 'orders-in'"):
        check_user_topics(plan, {"orders-out": 2})
