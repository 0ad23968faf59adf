"""The click-stream job on a local Spark standalone cluster: a master, two workers, a broker.

The cluster (:class:`spillway.devtools.cluster.LocalCluster`) runs real processes on 127.0.0.1
from the pyspark installation, with its own :class:`LocalBroker`; the job's output must
equal the batch reference exactly, and after ``stop`` no process of the cluster may be
left: not the daemons, not the executors, not their Python workers.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest

from spillway.cli import main
from spillway.devtools.cluster import EXIT_NOT_RUNNING, LocalCluster, StopResult
from spillway.examples import clicks
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from tests.integration.support import leftovers, live_processes, read_output

pytestmark = pytest.mark.soak

# Each run its own Spark context (tests/integration/conftest.py): a context kept for the
# next test would keep executors and its Python daemon alive, which the leftover-process
# checks here must not see, and hold_executors() builds a context of its own.
SHARE_SPARK = False

log = logging.getLogger(__name__)

REF = "spillway.examples.clicks:pipeline"
RECORDS = 20_000


def hold_executors(master_url: str) -> Any:
    """A Spark application on ``master_url`` whose executors keep live Python workers."""
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master_url)
        .appName("spillway-hold-executors")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.python.worker.reuse", "true")  # workers stay alive between tasks
        .getOrCreate()
    )
    return spark


def session_of(pid: int) -> int | None:
    entry = live_processes().get(pid)
    return entry[0] if entry is not None else None


@pytest.mark.broker
@pytest.mark.spark
def test_clicks_on_a_standalone_cluster_then_stop_leaves_nothing(
    tmp_path: Path, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    env = {"CLICKS_RECORDS": str(RECORDS), "CLICKS_PARALLELISM": "2", "CLICKS_OUT": str(out)}
    for key, value in env.items():
        monkeypatch.setenv(key, value)  # the driver builds the plan from them
    monkeypatch.delenv("CLICKS_RATE", raising=False)
    monkeypatch.delenv("SPILLWAY_CRASH_AT", raising=False)
    root = tmp_path / "cluster"
    # Executors inherit the workers' environment, not the driver's: hand them the job's.
    cluster = LocalCluster(root, env=env)
    stopped: dict[str, StopResult] = {}

    t0 = time.monotonic()
    cluster.start()
    try:
        started_s = time.monotonic() - t0
        status = cluster.status()
        assert status.running, [c.describe() for c in status.components]
        assert status.alive_workers == 2
        assert len(cluster.worker_pids()) == 2
        assert cluster.master_url.startswith("spark://127.0.0.1:")
        assert cluster.bootstrap.startswith("127.0.0.1:")
        sessions = {int((root / f"{n}.pid").read_text()) for n in ("master", *cluster.worker_names)}

        t1 = time.monotonic()
        config = JobConfig(
            REF, unique, cluster.bootstrap, master=cluster.master_url, task_attempts=4
        )
        results = run_on_spark(config)
        job_s = time.monotonic() - t1

        assert len(results) == 8
        assert all(r.status == "finished" for r in results), results
        assert read_output(out) == clicks.reference(RECORDS)
        # The executors ran on the workers (their work dirs hold this application's logs).
        assert all(any((root / "work" / w).iterdir()) for w in ("worker-1", "worker-2"))

        # Stop while an application holds executors with live Python workers: they are
        # children of the worker JVMs and must go with them.
        spark = hold_executors(cluster.master_url)
        try:
            rdd = spark.sparkContext.parallelize(range(2), 2)
            python_workers = set(rdd.map(lambda _: os.getpid()).collect())
            worker_sessions = {int((root / f"{w}.pid").read_text()) for w in cluster.worker_names}
            assert {session_of(pid) for pid in python_workers} <= worker_sessions
            pids = set(cluster.processes())
            assert pids >= sessions | python_workers
            t2 = time.monotonic()
            stopped = cluster.stop()
            stop_s = time.monotonic() - t2
        finally:
            spark.stop()
    finally:
        if not stopped:
            cluster.stop()

    assert stopped == {
        "worker-2": StopResult.STOPPED,
        "worker-1": StopResult.STOPPED,
        "master": StopResult.STOPPED,
        "broker": StopResult.STOPPED,
    }
    assert cluster.processes() == []
    assert leftovers(root, pids, sessions) == []
    log.info(
        "cluster start %.1f s, job (%d records) %.1f s, stop with live executors %.1f s",
        started_s,
        RECORDS,
        job_s,
        stop_s,
    )


def test_status_and_stop_of_a_cluster_never_started(tmp_path: Path) -> None:
    root = tmp_path / "never"
    assert main(["cluster", "status", "--dir", str(root)]) == EXIT_NOT_RUNNING
    assert main(["cluster", "stop", "--dir", str(root)]) == 0
    assert set(LocalCluster(root).stop().values()) == {StopResult.NOT_RUNNING}
    assert not root.exists()  # status and stop create nothing
