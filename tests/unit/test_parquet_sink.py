"""The Parquet sink's two-phase commit, rolling and partitioning, on a tmp dir. No broker."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from spillway.channels.errors import PipelineDefinitionError, SchemaMismatchError
from spillway.channels.ids import JobId, OperatorName, SubtaskId
from spillway.spark_jobs.api.pipeline import Pipeline
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


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def open_sink(
    tmp_path: Path, committed: dict[str, Any], index: int = 0, **kw: Any
) -> ParquetFileSink:
    sink = ParquetFileSink(str(tmp_path), "out", ARROW, AVRO, **kw)
    sink.open(FakeContext(SubtaskId(JobId("j"), OperatorName("out"), index)), committed, None)
    return sink


def views(n: int, start: int = 0) -> list[dict[str, Any]]:
    sections = ["news", "a b/c", None]
    return [
        {"page": f"/p{i}", "section": sections[i % 3], "user": i} for i in range(start, start + n)
    ]


def read(tmp_path: Path, partitioned: bool = False) -> Counter[tuple[Any, ...]]:
    part = ds.partitioning(pa.schema([("section", pa.string())]), flavor="hive")
    data = ds.dataset(
        tmp_path / "out", format="parquet", partitioning=part if partitioned else None
    )
    return Counter((r["page"], r["section"], r["user"]) for r in data.to_table().to_pylist())


def expected(records: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    return Counter((r["page"], r["section"], r["user"]) for r in records)


def all_files(tmp_path: Path) -> list[str]:
    root = tmp_path / "out"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_staged_files_are_invisible_until_their_checkpoint_commits(tmp_path: Path) -> None:
    sink = open_sink(tmp_path, {})
    sink.write(views(10))
    sink.write([])
    sink.write(views(5, start=10))
    info = sink.prepare(0)
    assert info == {"next": 1, "pending": [".part-0000-00000000-0000.parquet.inprogress"]}
    assert all_files(tmp_path) == [".part-0000-00000000-0000.parquet.inprogress"]
    assert read(tmp_path) == Counter()  # pyarrow.dataset skips the staged file
    sink.committed(info)
    assert all_files(tmp_path) == ["part-0000-00000000-0000.parquet"]
    assert read(tmp_path) == expected(views(15))
    assert sink.prepare(1) == {"next": 2}  # nothing written: nothing to publish


def test_partitioned_files_go_to_hive_directories(tmp_path: Path) -> None:
    sink = open_sink(tmp_path, {}, partition_by="section")
    sink.write(views(9))
    info = sink.prepare(0)
    sink.committed(info)
    assert all_files(tmp_path) == [
        "section=__HIVE_DEFAULT_PARTITION__/part-0000-00000000-0002.parquet",
        "section=a%20b%2Fc/part-0000-00000000-0001.parquet",
        "section=news/part-0000-00000000-0000.parquet",
    ]
    assert read(tmp_path, partitioned=True) == expected(views(9))
    # The partition column is in the directory name, not in the files.
    one = ds.dataset(tmp_path / "out" / "section=news", format="parquet")
    assert one.schema.names == ["page", "user"]


def test_files_roll_by_size_within_a_checkpoint(tmp_path: Path) -> None:
    sink = open_sink(tmp_path, {}, max_file_bytes=2000, row_group_rows=10)
    for start in range(0, 200, 20):
        sink.write(views(20, start))
    info = sink.prepare(0)
    assert len(info["pending"]) > 1
    sink.committed(info)
    names = all_files(tmp_path)
    assert names == [f"part-0000-00000000-{i:04d}.parquet" for i in range(len(names))]
    assert read(tmp_path) == expected(views(200))


def test_files_roll_by_time_within_a_checkpoint(tmp_path: Path) -> None:
    clock = Clock()
    sink = open_sink(tmp_path, {}, roll_interval_s=10.0, clock=clock)
    sink.write(views(3))
    clock.now = 9.0
    sink.write(views(3, start=3))  # same file: open 9 s
    clock.now = 10.0
    sink.write(views(3, start=6))  # the file has been open 10 s: a new one
    sink.committed(sink.prepare(0))
    assert all_files(tmp_path) == [
        "part-0000-00000000-0000.parquet",
        "part-0000-00000000-0001.parquet",
    ]
    first = ds.dataset(tmp_path / "out" / "part-0000-00000000-0000.parquet", format="parquet")
    assert first.count_rows() == 6
    assert read(tmp_path) == expected(views(9))


def test_restart_publishes_what_its_checkpoint_names_and_drops_the_rest(tmp_path: Path) -> None:
    first = open_sink(tmp_path, {}, partition_by="section")
    first.write(views(6))
    info0 = first.prepare(0)
    # crash: checkpoint 0 committed but committed(info0) never ran; then an attempt
    # wrote more and died before its checkpoint committed
    first.write(views(3, start=6))
    first.prepare(1)
    assert read(tmp_path, partitioned=True) == Counter()

    second = open_sink(tmp_path, info0, partition_by="section")
    assert read(tmp_path, partitioned=True) == expected(views(6))
    assert not [f for f in all_files(tmp_path) if f.endswith(".inprogress")]
    open_sink(tmp_path, info0, partition_by="section")  # idempotent
    assert read(tmp_path, partitioned=True) == expected(views(6))
    second.write(views(3, start=6))
    second.committed(second.prepare(1))
    assert read(tmp_path, partitioned=True) == expected(views(9))


def test_restart_from_an_older_checkpoint_deletes_files_published_after_it(
    tmp_path: Path,
) -> None:
    sink = open_sink(tmp_path, {})
    sink.write(views(2))
    info0 = sink.prepare(0)
    sink.committed(info0)
    sink.write(views(2, start=2))
    sink.committed(sink.prepare(1))
    assert read(tmp_path) == expected(views(4))
    open_sink(tmp_path, info0)  # a whole-job rewind to checkpoint 0
    assert read(tmp_path) == expected(views(2))


def test_restart_leaves_other_subtasks_files_alone(tmp_path: Path) -> None:
    other = open_sink(tmp_path, {}, index=1)
    other.write(views(2))
    other.prepare(0)
    mine = open_sink(tmp_path, {}, index=0)
    mine.write(views(2))
    mine.prepare(0)
    open_sink(tmp_path, {}, index=0)
    assert all_files(tmp_path) == [".part-0001-00000000-0000.parquet.inprogress"]


def test_a_record_that_does_not_fit_names_sink_field_and_value(tmp_path: Path) -> None:
    sink = open_sink(tmp_path, {})
    with pytest.raises(SchemaMismatchError) as info:
        sink.write([*views(2), {"page": "/x", "section": "s", "user": "seven"}])
    assert "sink 'out'" in str(info.value)
    assert "field 'user' expects long, got 'seven' (str)" in str(info.value)


def test_a_nested_schema_is_written_as_structs_and_lists(tmp_path: Path) -> None:
    avro = {
        "type": "record",
        "name": "N",
        "fields": [
            {"name": "k", "type": "string"},
            {"name": "xs", "type": {"type": "array", "items": "long"}},
            {
                "name": "p",
                "type": {"type": "record", "name": "P", "fields": [{"name": "a", "type": "long"}]},
            },
        ],
    }
    sink = ParquetFileSink(str(tmp_path), "out", arrow_schema_of(avro, where="t"), avro)
    sink.open(FakeContext(SubtaskId(JobId("j"), OperatorName("out"), 0)), {}, None)
    rows = [{"k": "a", "xs": [1, 2], "p": {"a": 3}}, {"k": "b", "xs": [], "p": {"a": 4}}]
    sink.write(rows)
    sink.committed(sink.prepare(0))
    assert ds.dataset(tmp_path / "out", format="parquet").to_table().to_pylist() == rows
    with pytest.raises(SchemaMismatchError, match=r"field 'xs\[0\]' expects long, got 'x'"):
        sink.write([{"k": "c", "xs": ["x"], "p": {"a": 1}}])


def test_write_parquet_takes_its_schema_from_the_input_and_checks_the_partition_column(
    tmp_path: Path,
) -> None:
    p = Pipeline("pq")
    src = p.generate("views", make=lambda i: views(1, i)[0], schema=View, count=3)
    src.write_parquet("out", str(tmp_path), partition_by="section")
    plan = p.plan("j")
    assert plan.operator("out").description == {"sink": "parquet", "partition_by": "section"}
    make = plan.operator("out").make_sink
    assert make is not None
    sink = make()
    assert isinstance(sink, ParquetFileSink)
    assert sink.schema == ARROW
    with pytest.raises(PipelineDefinitionError, match=r"partition_by='nope' is not a field"):
        src.write_parquet("out2", str(tmp_path), partition_by="nope")
    with pytest.raises(PipelineDefinitionError, match=r"partition_by='page'.*only field"):
        src.write_parquet(
            "out3", str(tmp_path), schema=pa.schema([("page", pa.string())]), partition_by="page"
        )


def test_no_staged_file_survives_prepare_and_commit(tmp_path: Path) -> None:
    sink = open_sink(tmp_path, {}, partition_by="section", max_file_bytes=1500)
    for cid in range(3):
        sink.write(views(50, start=cid * 50))
        sink.committed(sink.prepare(cid))
    assert all(not os.path.basename(f).startswith(".") for f in all_files(tmp_path))
    assert read(tmp_path, partitioned=True) == expected(views(150))
