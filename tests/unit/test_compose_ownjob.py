"""The compose test's own pipeline (composetest/ownjob.py), run in-process."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from composetest import ownjob
from spillway.channels.errors import ConfigError
from spillway.recovery.job import jobconf
from spillway.testing import TestDriver


@pytest.fixture
def module(tmp_path: Path) -> Iterator[object]:
    path = ownjob.write_module(tmp_path / "pipelines")
    assert path == tmp_path / "pipelines" / f"{ownjob.MODULE}.py"
    assert path.stat().st_mode & 0o777 == 0o644
    spec = importlib.util.spec_from_file_location(ownjob.MODULE, path)
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[ownjob.MODULE] = mod
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop(ownjob.MODULE, None)
    jobconf.install({})


def test_the_module_reads_its_settings_from_conf_and_its_output_is_the_expected(
    module: object,
) -> None:
    jobconf.install(ownjob.settings(records=25, factor=7, rate=100.0))
    with TestDriver(module.pipeline()) as t:  # type: ignore[attr-defined]
        assert [op.name for op in t.plan.operators] == list(ownjob.OPERATORS)
        t.run_source("numbers")
        assert sorted(t.output("out"), key=lambda r: r["n"]) == ownjob.expected_rows(25, 7)
    assert ownjob.expected_rows(3, 7) == [
        {"n": 0, "value": 0},
        {"n": 1, "value": 7},
        {"n": 2, "value": 14},
    ]


def test_the_module_without_its_settings_says_which_is_missing(module: object) -> None:
    jobconf.install({})
    with pytest.raises(ConfigError, match=r"pipeline setting 'own\.factor' is not set"):
        module.pipeline()  # type: ignore[attr-defined]


def test_run_argv_passes_every_setting_with_conf_and_publishes_metrics() -> None:
    argv = ownjob.run_argv("own-1", {"own.factor": "7", "own.out": "/data/out/own"})
    assert argv[:6] == ["exec", "-T", "spark-master", "spillway", "run", "compose_own_job:pipeline"]
    assert argv[-4:] == ["--conf", "own.factor=7", "--conf", "own.out=/data/out/own"]
    assert argv[argv.index("--bootstrap") + 1] == "kafka-1:19092,kafka-2:19092,kafka-3:19092"
    assert argv[argv.index("--metrics-port") + 1] == "9400"
    assert argv[argv.index("--metrics-host") + 1] == "spark-master"
    assert argv[argv.index("--job-id") + 1] == "own-1"


def test_checkpoints_by_subtask_reads_one_jobs_samples() -> None:
    page = (
        "# HELP spillway_subtask_checkpoints_total checkpoints\n"
        "# TYPE spillway_subtask_checkpoints_total counter\n"
        'spillway_subtask_checkpoints_total{index="0",job_id="own-1",operator="numbers"} 4.0\n'
        'spillway_subtask_checkpoints_total{index="0",job_id="own-1",operator="scale"} 3.0\n'
        'spillway_subtask_checkpoints_total{index="0",job_id="other",operator="scale"} 9.0\n'
    )
    assert ownjob.checkpoints_by_subtask(page, "own-1") == {"numbers[0]": 4.0, "scale[0]": 3.0}
