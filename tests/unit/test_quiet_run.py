"""A quiet run: handled Kafka conditions at DEBUG, the run's log file,
the end-of-run summary."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

from spillway.channels.kafka.retry import retrying
from spillway.recovery.observe.metrics import Snapshot, SubtaskMetrics
from spillway.recovery.runtime.runner import SubtaskResult
from spillway.spark_jobs.spark.runlog import (
    LOG_ENV,
    jvm_options,
    jvm_stderr,
    log4j2_properties,
    run_log,
)
from spillway.spark_jobs.spark.summary import RunSummary, render


def flaky(code: int) -> list[int]:
    calls: list[int] = []

    @retrying(attempts=3, max_wait_s=0.001)
    def call() -> None:
        calls.append(1)
        if len(calls) < 3:
            raise KafkaException(KafkaError(code, "not yet", retriable=True))

    call()
    return calls


def test_metadata_not_propagated_yet_is_retried_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="spillway.kafka")
    assert len(flaky(KafkaError._UNKNOWN_PARTITION)) == 3
    assert [r.levelno for r in caplog.records] == [logging.DEBUG, logging.DEBUG]
    caplog.clear()
    assert len(flaky(KafkaError.REQUEST_TIMED_OUT)) == 3  # not a propagation delay: warned
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.WARNING]


def test_the_run_log_takes_info_lines_off_the_terminal_and_gives_them_back(
    tmp_path: Path,
) -> None:
    root = logging.getLogger()
    terminal = logging.StreamHandler(sys.stderr)
    root.addHandler(terminal)
    own = logging.getLogger("spillway.test-runlog")
    own.setLevel(logging.INFO)
    try:
        with run_log("job1", verbose=False, directory=tmp_path) as path:
            assert path.parent == tmp_path
            assert path.name.startswith("job1-")
            assert terminal.level == logging.WARNING
            assert os.environ[LOG_ENV] == str(path)
            assert (
                jvm_options("local[4,2]")
                == f"-Dlog4j2.configurationFile=file:{log4j2_properties(path)}"
            )
            assert jvm_options("spark://h:7077") is None  # executors log on their own hosts
            assert jvm_stderr("local[4,2]") == path  # the JVM's start-up warnings too
            assert jvm_stderr("spark://h:7077") is None
            own.info("an INFO line")
        assert terminal.level == logging.NOTSET
        assert LOG_ENV not in os.environ
        assert "an INFO line" in path.read_text()
        assert f"appender.file.fileName = {path}" in log4j2_properties(path).read_text()
        with run_log("job1", verbose=True, directory=tmp_path / "v") as vpath:
            assert terminal.level == logging.NOTSET  # --verbose: the terminal keeps it all
            assert LOG_ENV not in os.environ
            assert jvm_options("local[4,2]") is None
            assert jvm_stderr("local[4,2]") is None
        assert not vpath.exists()  # nothing was logged: no empty file left behind
    finally:
        root.removeHandler(terminal)


def result(name: str, attempt: int = 0, **kw: object) -> SubtaskResult:
    return SubtaskResult(f"demo/{name}", attempt, "finished", **kw)  # type: ignore[arg-type]


def test_summary_from_the_last_snapshot() -> None:
    results = [
        result("clicks[0]", records_in=500_000, records_out=500_000),
        result("clicks[1]", records_in=500_000, records_out=500_000),
        result(
            "count[0]",
            attempt=1,
            records_in=300,
            replay={"t[3]": [0, 1, 48], "t[10]": [0, 1, 56]},
            set_aside={"late": 7},
        ),
        result("count[1]", set_aside={"late": 5}),
        result("out[0]", records_in=900, records_out=900),
        result("out[1]", records_in=1_100, records_out=1_100),
    ]
    subs = [
        SubtaskMetrics("clicks", 0, "finished", records_in=500_000, source=True),
        SubtaskMetrics("clicks", 1, "finished", records_in=500_000, source=True),
        SubtaskMetrics("count", 0, "finished", restarts=1),
        SubtaskMetrics("count", 1, "finished"),
        SubtaskMetrics("out", 0, "finished", records_out=900),
        SubtaskMetrics("out", 1, "finished", records_out=1_100),
    ]
    summary = RunSummary(
        "demo", 86.8, results, ["clicks"], ["out"], Snapshot(subs, []), log_file="x.log"
    )
    assert render(summary) == "\n".join(
        [
            "demo finished in 1m27s",
            "  records in:   1,000,000 read by the sources",
            "  rows written: out 2,000",
            "  restarts:     1",
            "    count[0]: 1 restart, the last one re-processed 104 records of 2 partitions",
            "  set aside:    12 late (counted and dropped; --dead-letter keeps them)",
            "  log:          x.log",
        ]
    )


def test_summary_without_a_feed_says_it_counts_last_attempts_and_names_failures() -> None:
    failed = SubtaskResult("j/out[0]", 0, "failed", error="out[0]: bad record at t[0]@5")
    results = [result("src[0]", records_in=10, records_out=10), failed]
    text = render(RunSummary("j", 3.25, results, ["src"], ["out"], None, dead_letter=True))
    assert text.splitlines() == [
        "j failed in 3.2s",
        "  records in:   10 read by the sources (last attempts)",
        "  rows written: out 0 (last attempts)",
        "  restarts:     none",
        "  set aside:    none (no late records)",
        "  out[0] failed: out[0]: bad record at t[0]@5",
    ]


def test_summary_with_dead_letters_counts_them_per_stage() -> None:
    base = dict(
        job="j1", duration_s=3.0, results=[result("count[0]")], sources=[], sinks=[],
        dead_letter=True,
    )
    text = render(RunSummary(**base, dead_letters={"late": 2, "decode": 1_200}))  # type: ignore[arg-type]
    assert "  dead letters: 1,200 decode, 2 late (in spillway.j1.dlq, since the job began)" in (
        text.splitlines()
    )
    assert "  dead letters: none" in render(RunSummary(**base, dead_letters={})).splitlines()  # type: ignore[arg-type]
