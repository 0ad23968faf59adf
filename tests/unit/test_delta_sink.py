"""The Delta sink's idempotent commits across simulated crashes, on a tmp dir. No broker."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from spillway.channels.errors import SpillwayError
from spillway.channels.ids import JobId, OperatorName, SubtaskId
from spillway.spark_jobs.connectors.deltasink import DeltaTableSink
from spillway.spark_jobs.connectors.parquetsink import ParquetFileSink
from spillway.spark_jobs.records.schemas import arrow_schema_of, avro_schema


@dataclass
class FakeContext:
    subtask: SubtaskId
    state: Any = None


@dataclass
class View:
    page: str
    section: str | None
    user: int


AVRO = avro_schema(View, where="test")
ARROW = arrow_schema_of(AVRO, where="test")


def open_sink(tmp_path: Path, committed: dict[str, Any], index: int = 0) -> DeltaTableSink:
    sink = DeltaTableSink(str(tmp_path), "out", ARROW, AVRO, "section")
    sink.open(FakeContext(SubtaskId(JobId("j"), OperatorName("out"), index)), committed, None)
    return sink


def views(n: int, start: int = 0) -> list[dict[str, Any]]:
    sections = ["news", "a b/c", None]
    return [
        {"page": f"/p{i}", "section": sections[i % 3], "user": i} for i in range(start, start + n)
    ]


def rows(tmp_path: Path) -> Counter[tuple[Any, ...]]:
    table = DeltaTable(str(tmp_path / "out")).to_pyarrow_table()
    return Counter((r["page"], r["section"], r["user"]) for r in table.to_pylist())


def expected(records: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    return Counter((r["page"], r["section"], r["user"]) for r in records)


def version_of(tmp_path: Path, index: int = 0) -> int | None:
    app = SubtaskId(JobId("j"), OperatorName("out"), index).transactional_id
    v: int | None = DeltaTable(str(tmp_path / "out")).transaction_version(app)
    return v


def test_files_join_the_table_when_their_checkpoint_commits(tmp_path: Path) -> None:
    sink = open_sink(tmp_path, {})
    sink.write(views(9))
    info = sink.prepare(0)
    assert rows(tmp_path) == Counter()
    sink.committed(info)
    assert rows(tmp_path) == expected(views(9))
    assert version_of(tmp_path) == 0
    sink.committed(sink.prepare(1))  # nothing written: no Delta commit
    assert version_of(tmp_path) == 0


@pytest.mark.parametrize("crash", ["before-rename", "after-rename", "after-delta-commit"])
def test_a_restart_adds_the_checkpoints_files_exactly_once(tmp_path: Path, crash: str) -> None:
    first = open_sink(tmp_path, {})
    first.write(views(3))
    first.committed(first.prepare(0))
    first.write(views(6, start=3))
    info1 = first.prepare(1)  # checkpoint 1's Kafka transaction commits, then the crash:
    if crash == "after-rename":
        ParquetFileSink.committed(first, info1)  # files renamed, no Delta commit yet
    elif crash == "after-delta-commit":
        first.committed(info1)
    first.write(views(2, start=100))
    first.prepare(2)  # an attempt that never commits

    second = open_sink(tmp_path, info1)
    assert rows(tmp_path) == expected(views(9))
    assert version_of(tmp_path) == 1
    open_sink(tmp_path, info1)  # and again: still once
    assert rows(tmp_path) == expected(views(9))
    second.write(views(1, start=9))
    second.committed(second.prepare(2))
    assert rows(tmp_path) == expected(views(10))
    assert version_of(tmp_path) == 2


def test_subtasks_append_to_one_table_with_their_own_app_ids(tmp_path: Path) -> None:
    a, b = open_sink(tmp_path, {}, 0), open_sink(tmp_path, {}, 1)
    a.write(views(4))
    b.write(views(4, start=4))
    info_a, info_b = a.prepare(0), b.prepare(0)
    b.committed(info_b)
    b.write(views(1, start=8))
    b.committed(b.prepare(1))
    a.committed(info_a)
    assert rows(tmp_path) == expected(views(9))
    assert (version_of(tmp_path, 0), version_of(tmp_path, 1)) == (0, 1)


def test_a_rewind_past_committed_files_is_refused(tmp_path: Path) -> None:
    sink = open_sink(tmp_path, {})
    sink.write(views(2))
    info0 = sink.prepare(0)
    sink.committed(info0)
    sink.write(views(2, start=2))
    sink.committed(sink.prepare(1))
    with pytest.raises(SpillwayError, match="a rewind cannot take them back"):
        open_sink(tmp_path, info0)
    assert rows(tmp_path) == expected(views(4))
