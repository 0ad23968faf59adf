"""The at-least-once guarantee on real Spark and a real broker: nothing lost, repeats allowed.

Outputs go out without transactions and are flushed before each checkpoint commits, so a
subtask killed after flushing but before committing re-sends them after its restart.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spillway.examples import clicks
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from tests.integration.conftest import RECORDS
from tests.integration.support import read_output

pytestmark = [pytest.mark.broker, pytest.mark.spark]

REF = "spillway.examples.clicks:pipeline"


def test_at_least_once_repeats_after_a_crash_but_loses_nothing(
    kafka_bootstrap: str, unique: str, clicks_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # enrich[0] dies at its 2nd checkpoint that read records, with its outputs flushed
    # (hence visible downstream) and the checkpoint not committed: its restart sends them
    # again. (At its plain 2nd checkpoint it had sometimes read nothing on a loaded machine.)
    monkeypatch.setenv("CLICKS_RATE", str(RECORDS / 2 / 6))
    monkeypatch.setenv("SPILLWAY_CRASH_AT", "enrich:0:after-produce-read:0:2")
    config = JobConfig(REF, unique, kafka_bootstrap, master="local[8,4]", guarantee="at-least-once")
    results = run_on_spark(config)
    assert {r.status for r in results} == {"finished"}
    got = read_output(clicks_env)
    want = clicks.reference(RECORDS)
    assert set(got) == set(want)
    lost = {p: (want[p], got[p]) for p in want if got[p][1] < want[p][1]}
    assert lost == {}
    repeated = sum(got[p][1] for p in got) - sum(want[p][1] for p in want)
    assert repeated > 0
