"""write_parquet and write_delta on real Spark and a real broker, with their sink subtasks
killed at every phase of a checkpoint: pyarrow.dataset (and, for Delta, the table) reads
back exactly the reference, and never sees a staged or partial file while the job runs."""

from __future__ import annotations

import threading
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from deltalake import DeltaTable

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from tests.integration.gates import Gates, committed, started
from tests.integration.pipelines import make_visit

pytestmark = [pytest.mark.broker, pytest.mark.spark]

PARTITIONING = ds.partitioning(pa.schema([("section", pa.string())]), flavor="hive")


def read_rows(root: Path) -> Counter[tuple[Any, ...]]:
    table = ds.dataset(root, format="parquet", partitioning=PARTITIONING).to_table()
    return Counter((r["seq"], r["page"], r["section"], r["user"]) for r in table.to_pylist())


class Watcher(threading.Thread):
    """Lists and reads the dataset over and over while the job runs; keeps what went wrong."""

    def __init__(self, root: Path, delta: bool) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.delta = delta
        self.stop = threading.Event()
        self.polls = 0
        self.problems: list[str] = []

    def run(self) -> None:
        while not self.stop.wait(0.1):
            if not self.root.exists():
                continue
            try:
                data = ds.dataset(self.root, format="parquet", partitioning=PARTITIONING)
                staged = [f for f in data.files if "/." in f or f.endswith(".inprogress")]
                if staged:
                    self.problems.append(f"dataset lists staged files {staged}")
                data.to_table()  # a partial file fails here
                if self.delta and (self.root / "_delta_log").exists():
                    DeltaTable(str(self.root)).to_pyarrow_table()
            except Exception as e:  # anything at all is a visible inconsistency
                self.problems.append(f"{type(e).__name__}: {e}")
            self.polls += 1


@pytest.mark.parametrize("sink", ["parquet", "delta"])
def test_killed_file_sinks_publish_exactly_the_reference(
    kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sink: str
) -> None:
    records = 20_000
    out = tmp_path / "lake"
    monkeypatch.setenv("SPILLWAY_TEST_SINK", sink)
    monkeypatch.setenv("SPILLWAY_TEST_RECORDS", str(records))
    monkeypatch.setenv("SPILLWAY_TEST_OUT", str(out))
    # The source holds at a quarter, a half and three quarters of its input
    # (tests/integration/gates.py): the next quarter runs once both sink subtasks
    # committed a checkpoint in their first attempt, then in their second (so the 2nd
    # checkpoint of each, where it dies, has files of it), the last once their third
    # attempts started; each attempt reaches its kill mid-stream.
    gates = Gates(tmp_path / "gates", monkeypatch, [records // 4, records // 2, records * 3 // 4])
    settings, job, sinks = KafkaSettings(kafka_bootstrap), JobId(unique), ["out[0]", "out[1]"]
    monkeypatch.setenv("SPILLWAY_TEST_FILE_BYTES", str(16 << 10))  # rolls by size too
    # out[0]: dies with its 2nd checkpoint's files staged and flushed (after-produce), then
    # while its commit is in flight; out[1]: before a commit, after one (files staged but
    # not yet renamed), and after its final commit.
    monkeypatch.setenv(
        "SPILLWAY_CRASH_AT",
        "out:0:after-produce:0:2,out:0:during-commit:1:2,"
        "out:1:before-commit:0:2,out:1:after-commit:1:2,out:1:after-final-commit:2",
    )
    watcher = Watcher(out / "out", delta=sink == "delta")
    watcher.start()
    try:
        results = run_on_spark(
            JobConfig(
                "tests.integration.pipelines:visits_to_parquet",
                unique,
                kafka_bootstrap,
                master="local[4,4]",
            ),
            on_running=gates.on_running(
                (
                    "both sinks committed in attempt 0",
                    partial(committed, settings, job, sinks, 0, 2),
                ),
                (
                    "both sinks committed in attempt 1",
                    partial(committed, settings, job, sinks, 1, 2),
                ),
                ("both sinks' third attempts started", partial(started, settings, job, sinks, 2)),
            ),
        )
    finally:
        watcher.stop.set()
        watcher.join()
    assert gates.missed == []

    expected: Counter[tuple[Any, ...]] = Counter()
    for i in range(records):
        v = make_visit(i)
        expected[(v.seq, v.page, v.section, v.user)] += 1
    assert read_rows(out / "out") == expected  # no duplicate, no gap
    if sink == "delta":
        table = DeltaTable(str(out / "out")).to_pyarrow_table().to_pylist()
        assert Counter((r["seq"], r["page"], r["section"], r["user"]) for r in table) == expected
    assert watcher.problems == []
    assert watcher.polls > 0
    # Nothing staged is left behind, and the files rolled (more than one per partition).
    assert [p.name for p in out.rglob(".*")] == []
    parts = sorted(p.parent.name for p in out.rglob("*.parquet"))
    assert set(parts) == {
        "section=news",
        "section=sport",
        "section=shop%20%26%20more",
        "section=help%2Ffaq",
    }
    assert len(parts) > 4
    attempts = {r.subtask.split("/")[1]: (r.attempt, r.status) for r in results}
    assert attempts == {
        "visits[0]": (0, "finished"),
        "visits[1]": (0, "finished"),
        "out[0]": (2, "finished"),
        "out[1]": (3, "skipped"),
    }
