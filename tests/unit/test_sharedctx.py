"""Keeping a Spark context across runs (spark_jobs/spark/sharedctx.py): when a kept context
may run the next job, and what the scope keeps and stops — with stand-in sessions, no Spark."""

from __future__ import annotations

import pytest

from spillway.spark_jobs.spark import sharedctx
from spillway.spark_jobs.spark.driver import _spark_conf
from spillway.spark_jobs.spark.jobconfig import JobConfig
from spillway.spark_jobs.spark.sharedctx import release, reusable, session_for, shared_spark

BASE = {
    "spark.app.name": "spillway-a",
    "spark.master": "local[4,2]",
    "spark.task.maxFailures": "4",
    "spark.python.daemon.module": "spillway.spark_jobs.spark.daemon",
    "spark.executorEnv.PYTHONPATH": "/x:/y",
}


def test_same_configuration_is_reused() -> None:
    assert reusable(BASE, dict(BASE))


def test_only_the_application_name_may_differ() -> None:
    assert reusable(BASE, {**BASE, "spark.app.name": "spillway-b"})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("spark.master", "local[4,1]"),  # local mode's task attempts
        ("spark.task.maxFailures", "1"),
        ("spark.executorEnv.PYTHONPATH", "/x:/y:/z"),
        ("spark.python.daemon.module", "pyspark.daemon"),
        ("spark.cores.max", "2"),  # set now, unset before
        ("spark.driver.extraJavaOptions", "-Dlog4j2.configurationFile=file:/l"),
    ],
)
def test_any_other_difference_rebuilds(key: str, value: str) -> None:
    assert not reusable(BASE, {**BASE, key: value})
    assert not reusable({**BASE, key: value}, BASE)  # set before, unset now


def test_no_kept_context_is_never_reused() -> None:
    assert not reusable(None, BASE)


def test_the_job_conf_differs_only_in_name_between_jobs() -> None:
    a = _spark_conf(JobConfig("m:p", "job-a", "b:9092", master="local[4,2]"))
    b = _spark_conf(JobConfig("m:p", "job-b", "b:9092", master="local[4,2]"))
    c = _spark_conf(JobConfig("m:p", "job-a", "b:9092", master="local[4,2]", task_attempts=1))
    assert a["spark.app.name"] != b["spark.app.name"]
    assert reusable(a, b)
    assert not reusable(a, c)


class FakeSession:
    def __init__(self, name: str) -> None:
        self.name = name
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


@pytest.fixture
def active(monkeypatch: pytest.MonkeyPatch) -> None:
    # A stand-in session is active until stopped (pyspark's active context, without Spark).
    monkeypatch.setattr(sharedctx, "_is_active", lambda s: not s.stopped)


def test_outside_the_scope_every_run_creates_and_stops(active: None) -> None:
    first = session_for(lambda: BASE, lambda _c: FakeSession("1"))
    release(first, ended_normally=True)
    second = session_for(lambda: BASE, lambda _c: FakeSession("2"))
    assert second is not first
    assert first.stopped


def test_inside_the_scope_a_run_reuses_then_the_scope_stops_it(active: None) -> None:
    with shared_spark():
        first = session_for(lambda: BASE, lambda _c: FakeSession("1"))
        release(first, ended_normally=True)
        assert not first.stopped
        again = session_for(
            lambda: {**BASE, "spark.app.name": "other"}, lambda _c: FakeSession("2")
        )
        assert again is first
        release(again, ended_normally=True)
        assert not first.stopped
    assert first.stopped


def test_a_different_conf_stops_the_kept_context_and_creates_one(active: None) -> None:
    with shared_spark():
        first = session_for(lambda: BASE, lambda _c: FakeSession("1"))
        release(first, ended_normally=True)
        other = session_for(
            lambda: {**BASE, "spark.master": "local[2]"}, lambda _c: FakeSession("2")
        )
        assert other is not first
        assert first.stopped
        release(other, ended_normally=True)
        assert not other.stopped
    assert other.stopped


def test_a_run_that_raised_stops_its_context(active: None) -> None:
    with shared_spark():
        first = session_for(lambda: BASE, lambda _c: FakeSession("1"))
        release(first, ended_normally=False)
        assert first.stopped
        second = session_for(lambda: BASE, lambda _c: FakeSession("2"))
        assert second is not first
        release(second, ended_normally=True)
    assert second.stopped


def test_a_context_someone_stopped_is_not_reused(active: None) -> None:
    with shared_spark():
        first = session_for(lambda: BASE, lambda _c: FakeSession("1"))
        release(first, ended_normally=True)
        first.stop()  # e.g. a test that stops the active context itself
        second = session_for(lambda: BASE, lambda _c: FakeSession("2"))
        assert second is not first
        release(second, ended_normally=True)


def test_scopes_do_not_nest() -> None:
    with shared_spark(), pytest.raises(RuntimeError), shared_spark():
        pass
