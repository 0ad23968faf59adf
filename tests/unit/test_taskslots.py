"""``spillway run --slots N``: the master and ``spark.cores.max`` it means, its validation,
and the CLI's parsing of it (spark_jobs/spark/taskslots.py, spark_jobs/cli.py)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from spillway.channels.errors import ConfigError
from spillway.spark_jobs.cli import add_parser, main
from spillway.spark_jobs.spark.jobconfig import JobConfig
from spillway.spark_jobs.spark.taskslots import (
    StartSlots,
    check_slots_option,
    mode_of,
    slots_needed,
    start_slots,
)


def test_modes_of_master_urls() -> None:
    for master in ("local", "local[4]", "local[4,2]", "local[*]"):
        assert mode_of(master) == "local"
    for master in ("spark://m:7077", "yarn", "k8s://https://k:443", "localhost"):
        assert mode_of(master) == "cluster"


def test_an_unbounded_job_needs_a_slot_per_subtask_a_bounded_one_one() -> None:
    assert slots_needed(9, bounded=False) == 9
    assert slots_needed(9, bounded=True) == 1


def test_without_slots_local_mode_gets_one_slot_per_subtask() -> None:
    assert start_slots(None, None, 5, False, 4, submitted=False) == StartSlots("local[5,4]", None)
    # Under spark-submit, or with --master, the master is theirs.
    assert start_slots(None, None, 5, False, 4, submitted=True) == StartSlots(None, None)
    assert start_slots("local[8,2]", None, 5, False, 4, False) == StartSlots("local[8,2]", None)


def test_slots_is_local_threads_in_local_mode_and_cores_max_on_a_cluster() -> None:
    assert start_slots(None, 8, 5, False, 4, submitted=False) == StartSlots("local[8,4]", None)
    assert start_slots("spark://m:7077", 8, 5, False, 4, False) == StartSlots("spark://m:7077", 8)
    assert start_slots(None, 8, 5, False, 4, submitted=True) == StartSlots(None, 8)


def test_slots_fewer_than_the_job_needs_at_start_are_refused() -> None:
    with pytest.raises(ConfigError) as e:
        start_slots(None, 4, 5, False, 4, submitted=False)
    assert str(e.value) == (
        "--slots 4: the job needs at least 5 task slot(s) at start (one per subtask of this "
        "unbounded job, which has 5); give --slots 5 or more (the slots beyond it are room "
        "for spillway rescale)"
    )
    check_slots_option(5, 5, bounded=False)
    check_slots_option(1, 5, bounded=True)  # a bounded job queues
    with pytest.raises(ConfigError, match=r"^--slots 0: the job needs at least 1 task slot"):
        check_slots_option(0, 5, bounded=True)


def test_slots_with_a_local_master_is_refused() -> None:
    with pytest.raises(ConfigError) as e:
        start_slots("local[4,2]", 8, 5, False, 2, submitted=False)
    assert str(e.value) == (
        "--slots 8 with --master local[4,2]: give one of them (--slots 8 alone runs in "
        "local mode as local[8,2])"
    )


def test_run_parses_slots() -> None:
    parser = argparse.ArgumentParser(prog="spillway")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["run", "m:p", "--job-id", "j", "--slots", "6"])
    assert args.slots == 6
    assert parser.parse_args(["run", "m:p", "--job-id", "j"]).slots is None
    with pytest.raises(SystemExit) as e:
        parser.parse_args(["run", "m:p", "--job-id", "j", "--slots", "six"])
    assert e.value.code == 2


def test_run_hands_the_slots_to_the_job_config(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from spillway.spark_jobs.spark import driver

    seen: list[JobConfig] = []

    def fake_run(config: JobConfig, **_: Any) -> list[Any]:
        seen.append(config)
        return []

    monkeypatch.setattr(driver, "run_on_spark", fake_run)
    monkeypatch.setattr(driver, "job_extent", lambda *_a, **_k: (5, False))
    monkeypatch.delenv("SPARK_ENV_LOADED", raising=False)
    monkeypatch.delenv("SPILLWAY_SPARK_SUBMIT", raising=False)
    common = ["m:p", "--job-id", "j", "--log-dir", str(tmp_path), "--task-attempts", "3"]
    assert main([*common, "--slots", "8"]) == 0
    assert main([*common, "--slots", "8", "--master", "spark://m:7077"]) == 0
    assert main(common) == 0
    assert [(c.master, c.cores_max) for c in seen] == [
        ("local[8,3]", None),
        ("spark://m:7077", 8),
        ("local[5,3]", None),
    ]
    assert main([*common, "--slots", "4"]) == 2  # too few: refused before the run
    assert len(seen) == 3
