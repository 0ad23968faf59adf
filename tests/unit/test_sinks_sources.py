"""JSONL file sink two-phase commit and checkpointable sources, on a tmp dir. No broker."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from spillway.channels.errors import ConfigError
from spillway.spark_jobs.connectors.sinks import JsonlFileSink
from spillway.spark_jobs.connectors.sources import FileSource, GeneratorSource
from tests.unit.connectorfakes import ctx


def files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# -- JsonlFileSink -----------------------------------------------------------------------


def open_sink(tmp_path: Path, committed: dict[str, Any], index: int = 0) -> JsonlFileSink:
    sink = JsonlFileSink(str(tmp_path))
    sink.open(ctx(index), committed=committed, producer=None)
    return sink


def test_sink_prepare_leaves_only_an_inprogress_file(tmp_path: Path) -> None:
    sink = open_sink(tmp_path, {})
    out = tmp_path / "out"
    assert files(out) == []
    sink.write([{"a": 1}, {"b": 2, "a": 0}])
    sink.write([])
    sink.write([{"a": 3}])
    info = sink.prepare(0)
    assert info == {"next": 1, "pending": "part-0000-00000000.jsonl.inprogress"}
    assert files(out) == ["part-0000-00000000.jsonl.inprogress"]
    assert (out / info["pending"]).read_text(encoding="utf-8") == (
        '{"a":1}\n{"a":0,"b":2}\n{"a":3}\n'
    )


def test_sink_committed_publishes_the_final_file(tmp_path: Path) -> None:
    sink = open_sink(tmp_path, {})
    out = tmp_path / "out"
    sink.write([{"n": 1}, {"n": 2}])
    info = sink.prepare(0)
    sink.committed(info)
    assert files(out) == ["part-0000-00000000.jsonl"]
    assert lines(out / "part-0000-00000000.jsonl") == [{"n": 1}, {"n": 2}]


def test_sink_one_file_per_checkpoint_with_records(tmp_path: Path) -> None:
    sink = open_sink(tmp_path, {})
    out = tmp_path / "out"
    sink.write([{"n": 1}])
    sink.committed(sink.prepare(0))
    empty = sink.prepare(1)  # nothing written: nothing to publish
    assert empty == {"next": 2}
    sink.committed(empty)
    sink.write([{"n": 2}])
    info = sink.prepare(2)
    assert info == {"next": 3, "pending": "part-0000-00000002.jsonl.inprogress"}
    sink.committed(info)
    assert files(out) == ["part-0000-00000000.jsonl", "part-0000-00000002.jsonl"]
    assert lines(out / "part-0000-00000002.jsonl") == [{"n": 2}]


def test_sink_records_written_during_a_checkpoint_go_to_the_next_file(tmp_path: Path) -> None:
    sink = open_sink(tmp_path, {})
    out = tmp_path / "out"
    sink.write([{"n": 1}])
    info0 = sink.prepare(0)
    sink.write([{"n": 2}])  # before checkpoint 0 has committed
    sink.committed(info0)
    assert files(out) == ["part-0000-00000000.jsonl", "part-0000-00000001.jsonl.inprogress"]
    sink.committed(sink.prepare(1))
    assert lines(out / "part-0000-00000000.jsonl") == [{"n": 1}]
    assert lines(out / "part-0000-00000001.jsonl") == [{"n": 2}]


def test_sink_restart_publishes_the_file_its_checkpoint_names(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = open_sink(tmp_path, {})
    first.write([{"n": 0}])
    info0 = first.prepare(0)
    first.committed(info0)
    first.write([{"n": 1}, {"n": 2}])
    info1 = first.prepare(1)
    # crash: checkpoint 1 committed but committed(info1) never ran
    assert files(out) == ["part-0000-00000000.jsonl", "part-0000-00000001.jsonl.inprogress"]

    second = open_sink(tmp_path, info1)
    assert files(out) == ["part-0000-00000000.jsonl", "part-0000-00000001.jsonl"]
    assert lines(out / "part-0000-00000001.jsonl") == [{"n": 1}, {"n": 2}]
    second.write([{"n": 3}])
    info2 = second.prepare(2)
    assert info2["pending"] == "part-0000-00000002.jsonl.inprogress"
    second.committed(info2)
    assert lines(out / "part-0000-00000002.jsonl") == [{"n": 3}]


def test_sink_restart_is_idempotent_when_the_file_was_already_published(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = open_sink(tmp_path, {})
    first.write([{"n": 1}])
    info = first.prepare(0)
    first.committed(info)
    open_sink(tmp_path, info)
    open_sink(tmp_path, info)
    assert files(out) == ["part-0000-00000000.jsonl"]
    assert lines(out / "part-0000-00000000.jsonl") == [{"n": 1}]


def test_sink_restart_from_previous_checkpoint_drops_the_aborted_attempt(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = open_sink(tmp_path, {})
    first.write([{"n": 1}])
    info0 = first.prepare(0)
    first.committed(info0)
    first.write([{"aborted": True}])
    first.prepare(1)  # checkpoint 1's transaction never committed
    assert "part-0000-00000001.jsonl.inprogress" in files(out)

    second = open_sink(tmp_path, info0)
    assert files(out) == ["part-0000-00000000.jsonl"]
    second.write([{"n": 2}])
    info1 = second.prepare(1)
    assert info1 == {"next": 2, "pending": "part-0000-00000001.jsonl.inprogress"}
    second.committed(info1)
    assert files(out) == ["part-0000-00000000.jsonl", "part-0000-00000001.jsonl"]
    assert lines(out / "part-0000-00000000.jsonl") == [{"n": 1}]
    assert lines(out / "part-0000-00000001.jsonl") == [{"n": 2}]


def test_sink_restart_with_no_checkpoint_drops_everything_in_progress(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = open_sink(tmp_path, {})
    first.write([{"n": 1}])
    first.prepare(0)
    first.write([{"n": 2}])
    first.prepare(1)
    open_sink(tmp_path, {})
    assert files(out) == []


def test_sink_restart_leaves_other_subtasks_files_alone(tmp_path: Path) -> None:
    out = tmp_path / "out"
    other = open_sink(tmp_path, {}, index=1)
    other.write([{"other": 1}])
    other.prepare(0)
    mine = open_sink(tmp_path, {}, index=0)
    mine.write([{"mine": 1}])
    mine.prepare(0)
    open_sink(tmp_path, {}, index=0)  # subtask 0 restarts from nothing
    assert files(out) == ["part-0001-00000000.jsonl.inprogress"]


# -- GeneratorSource ---------------------------------------------------------------------


def make(i: int) -> dict[str, int]:
    return {"i": i, "ts": 1000 + i}


def drain(src: GeneratorSource | FileSource, batch: int) -> list[Any]:
    out: list[Any] = []
    while (got := src.read(batch)) is not None:
        out.extend(got)
    return out


@pytest.mark.parametrize(("count", "p"), [(10, 1), (10, 3), (7, 4), (2, 3), (0, 2)])
def test_generator_partitions_indices_across_subtasks(count: int, p: int) -> None:
    seen: list[int] = []
    for k in range(p):
        src = GeneratorSource(make, count, p)
        src.open(ctx(k), {})
        got = [r["i"] for r in drain(src, 2)]
        assert got == [i for i in range(count) if i % p == k]
        seen.extend(got)
    assert sorted(seen) == list(range(count))


def test_generator_returns_none_at_the_end_and_stays_there() -> None:
    src = GeneratorSource(make, 5, 2)
    src.open(ctx(1), {})
    assert src.read(10) == [make(1), make(3)]
    assert src.position() == {"next": 5, "watermark": None}
    assert src.read(10) is None
    assert src.read(10) is None


def test_generator_read_respects_max_records() -> None:
    src = GeneratorSource(make, 100, 3)
    src.open(ctx(2), {})
    assert [r["i"] for r in src.read(4)] == [2, 5, 8, 11]
    assert src.position() == {"next": 14, "watermark": None}


@pytest.mark.parametrize("stop_after", [0, 1, 2, 3, 5])
def test_generator_resumes_exactly_from_position(stop_after: int) -> None:
    p, count = 3, 31
    first = GeneratorSource(make, count, p)
    first.open(ctx(1), {})
    before: list[int] = []
    for _ in range(stop_after):
        got = first.read(2)
        assert got is not None
        before += [r["i"] for r in got]
    position = json.loads(json.dumps(first.position()))  # positions travel as JSON
    first.read(2)  # read after the checkpoint: lost with the crash, must be re-read
    resumed = GeneratorSource(make, count, p)
    resumed.open(ctx(1), position)
    after = [r["i"] for r in drain(resumed, 2)]
    assert before + after == list(range(1, count, p))


def test_generator_unbounded_never_ends() -> None:
    src = GeneratorSource(make, None, 2)
    src.open(ctx(0), {})
    for _ in range(10):
        assert len(src.read(100) or []) == 100
    assert src.position()["next"] == 2000


def test_generator_watermark_is_carried_in_the_position() -> None:
    src = GeneratorSource(make, 10, 2, event_time=lambda r: r["ts"])
    src.open(ctx(0), {})
    assert src.watermark() is None
    src.read(2)
    assert src.watermark() == 1002
    assert src.position() == {"next": 4, "watermark": 1002}
    resumed = GeneratorSource(make, 10, 2, event_time=lambda r: r["ts"])
    resumed.open(ctx(0), src.position())
    assert resumed.watermark() == 1002
    assert resumed.read(10) == [make(4), make(6), make(8)]
    assert resumed.watermark() == 1008


# -- FileSource --------------------------------------------------------------------------

ROWS = [{"id": i, "name": f"n{i}"} for i in range(7)]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    pcsv.write_csv(pa.Table.from_pylist(rows), path)


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> None:
    pq.write_table(pa.Table.from_pylist(rows), path)


WRITERS = {"jsonl": write_jsonl, "csv": write_csv, "parquet": write_parquet}


@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_file_source_reads_every_format(tmp_path: Path, fmt: str) -> None:
    WRITERS[fmt](tmp_path / f"a.{fmt}", ROWS[:4])
    WRITERS[fmt](tmp_path / f"b.{fmt}", ROWS[4:])
    src = FileSource(str(tmp_path / f"*.{fmt}"), fmt, 1)
    src.open(ctx(0), {})
    assert src.read(3) == ROWS[:3]
    assert src.read(3) == [ROWS[3]]  # a batch never spans two files
    assert src.read(3) == ROWS[4:7]
    assert src.read(3) is None
    assert src.watermark() is None


def test_file_source_splits_files_across_subtasks(tmp_path: Path) -> None:
    for n in range(5):
        write_jsonl(tmp_path / f"f{n}.jsonl", [{"file": n}])
    got = {}
    for k in range(2):
        src = FileSource(str(tmp_path / "*.jsonl"), "jsonl", 2)
        src.open(ctx(k), {})
        got[k] = [r["file"] for r in drain(src, 10)]
    assert got == {0: [0, 2, 4], 1: [1, 3]}


@pytest.mark.parametrize("fmt", sorted(WRITERS))
@pytest.mark.parametrize("stop_after", [0, 1, 2, 3, 4])
def test_file_source_resumes_exactly_from_position(
    tmp_path: Path, fmt: str, stop_after: int
) -> None:
    WRITERS[fmt](tmp_path / f"a.{fmt}", ROWS[:4])
    WRITERS[fmt](tmp_path / f"b.{fmt}", ROWS[4:])
    pattern = str(tmp_path / f"*.{fmt}")
    first = FileSource(pattern, fmt, 1)
    first.open(ctx(0), {})
    before: list[Any] = []
    for _ in range(stop_after):
        got = first.read(2)
        assert got is not None
        before += got
    position = json.loads(json.dumps(first.position()))
    first.read(2)
    resumed = FileSource(pattern, fmt, 1)
    resumed.open(ctx(0), position)
    assert before + drain(resumed, 2) == ROWS


def test_file_source_position_counts_file_and_row(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", ROWS[:2])
    write_jsonl(tmp_path / "b.jsonl", ROWS[2:])
    src = FileSource(str(tmp_path / "*.jsonl"), "jsonl", 1)
    src.open(ctx(0), {})
    names = [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]
    assert src.position() == {"files": names, "file": 0, "row": 0}
    src.read(2)
    assert src.position() == {"files": names, "file": 0, "row": 2}
    src.read(1)
    assert src.position() == {"files": names, "file": 1, "row": 1}
    drain(src, 10)
    assert src.position() == {"files": names, "file": 2, "row": 0}


def test_file_source_keeps_its_file_list_across_restarts(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "b.jsonl", ROWS[:2])
    src = FileSource(str(tmp_path / "*.jsonl"), "jsonl", 1)
    src.open(ctx(0), {})
    assert src.read(1) == ROWS[:1]
    position = src.position()
    write_jsonl(tmp_path / "a.jsonl", ROWS[2:])  # sorts first: would shift a re-globbed list
    again = FileSource(str(tmp_path / "*.jsonl"), "jsonl", 1)
    again.open(ctx(0), position)
    assert drain(again, 10) == ROWS[1:2]


def test_file_source_without_matching_files_is_a_config_error(tmp_path: Path) -> None:
    pattern = str(tmp_path / "*.jsonl")
    src = FileSource(pattern, "jsonl", 1)
    with pytest.raises(ConfigError) as info:
        src.open(ctx(0), {})
    assert str(info.value) == f"no input files match {pattern!r}"


def test_file_source_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.parquet"
    bad.write_text("not parquet", encoding="utf-8")
    src = FileSource(str(bad), "parquet", 1)
    src.open(ctx(0), {})
    with pytest.raises(ConfigError, match=re.escape(f"cannot read {bad} as parquet")):
        src.read(10)
