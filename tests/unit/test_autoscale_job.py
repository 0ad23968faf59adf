"""The job of the autoscale soak test (tests/integration/autoscalejobs.py) has the shape the
autoscaler needs: its bottleneck ``count`` can change width while the job runs, through
every width the test's bounds allow (checked on the plan, without Spark or a broker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spillway.channels.ids import JobId
from spillway.recovery.restore.rescale import with_parallelism
from spillway.spark_jobs.spark.liverescale import check_live
from tests.integration.autoscalejobs import stepped_count


def test_count_can_be_rescaled_live_up_to_its_bounds_and_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPILLWAY_TEST_OUT", str(tmp_path))
    plan = stepped_count().plan(JobId("autoscale-shape"))
    edges = {(e.upstream, e.downstream): e.kind for e in plan.edges}
    assert edges == {("events", "count"): "hash", ("count", "out"): "rebalance"}
    previous = 1
    for width in (2, 4, 3, 1):
        check_live(with_parallelism(plan, {"count": width}), "count", previous, "interval")
        previous = width
