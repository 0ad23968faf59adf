"""Pipelines on real Spark (local mode) against a real broker: localized, exactly-once recovery.

Every test compares the job's committed output with a batch computation of the same
input, exactly, and checks which subtasks restarted and what they replayed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, OperatorName
from spillway.channels.routing.keygroups import DEFAULT_MAX_PARALLELISM, key_group_range
from spillway.cli import main
from spillway.devtools.demo import run_demo
from spillway.examples import clicks
from spillway.offsets.store import CheckpointStore
from spillway.recovery.observe.events import read_events
from spillway.recovery.replay import replay_subtask
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from tests.integration.conftest import RECORDS
from tests.integration.support import output_files, read_output, starts

pytestmark = [pytest.mark.broker, pytest.mark.spark]

REF = "spillway.examples.clicks:pipeline"


def test_killed_subtask_alone_restarts_and_replays_only_its_partitions(
    kafka_bootstrap: str, unique: str, tmp_path: Path
) -> None:
    report = run_demo(
        kafka_bootstrap,
        records=100_000,
        parallelism=2,
        kill="count:0",
        kill_after=2,
        out_dir=str(tmp_path / "demo"),
        duration_s=10,
        job=unique,
    )
    assert report["checks"]["output equals the batch reference"]
    assert report["restarted"] == ["count[0]"]
    assert report["ok"], report["checks"]
    replay = report["replay"]
    # Key groups (docs/architecture.md): count[0] owns key groups 0..M/2-1 of the keyed channel, not
    # partition 0 alone as before; it replays only partitions of that range.
    m = DEFAULT_MAX_PARALLELISM
    own = {f"spillway.{unique}.ch.enrich.count[{g}]" for g in key_group_range(0, 2, m)}
    assert replay
    assert set(replay) <= own
    assert all(end >= start for start, end, _n in replay.values())
    assert sum(end - start for start, end, _n in replay.values()) > 0
    assert sum(n for _s, _e, n in replay.values()) > 0
    # Every other subtask started exactly once.
    counts: dict[str, int] = {}
    for e in starts(kafka_bootstrap, unique):
        key = f"{e['operator']}[{e['index']}]"
        counts[key] = counts.get(key, 0) + 1
    assert counts == {
        "clicks[0]": 1,
        "clicks[1]": 1,
        "enrich[0]": 1,
        "enrich[1]": 1,
        "count[0]": 2,
        "count[1]": 1,
        "out[0]": 1,
        "out[1]": 1,
    }


def test_crash_before_commit_then_during_restore_is_exactly_once(
    kafka_bootstrap: str, unique: str, clicks_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Attempt 0 of count[1] dies with its 2nd checkpoint produced but not committed;
    # attempt 1 dies while restoring; attempt 2 finishes. enrich[0] dies after a commit.
    monkeypatch.setenv("CLICKS_RATE", str(RECORDS / 2 / 6))
    monkeypatch.setenv(
        "SPILLWAY_CRASH_AT",
        "count:1:before-commit:0:2,count:1:restore:1,enrich:0:after-commit:0:2,"
        "out:0:after-final-commit:0",
    )
    results = run_on_spark(JobConfig(REF, unique, kafka_bootstrap, master="local[8,4]"))
    assert read_output(clicks_env) == clicks.reference(RECORDS)
    by_subtask = {r.subtask.split("/")[1]: r for r in results}
    assert by_subtask["count[1]"].attempt == 2
    assert by_subtask["enrich[0]"].attempt == 1
    # out[0] died between its final commit and publishing its file: the retry publishes it.
    assert (by_subtask["out[0]"].attempt, by_subtask["out[0]"].status) == (1, "skipped")
    restarted = {
        f"{e['operator']}[{e['index']}]"
        for e in starts(kafka_bootstrap, unique)
        if e["attempt"] > 0
    }
    assert restarted == {"count[1]", "enrich[0]"}  # out[0]'s retry skipped: "skipped" event


def test_bounded_job_rerun_after_finish_writes_nothing_twice(
    kafka_bootstrap: str, unique: str, clicks_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = JobConfig(REF, unique, kafka_bootstrap, master="local[8,2]")
    first = run_on_spark(config)
    assert {r.status for r in first} == {"finished"}
    files = output_files(clicks_env)
    assert read_output(clicks_env) == clicks.reference(RECORDS)
    settings = KafkaSettings(kafka_bootstrap)
    stores = [
        CheckpointStore(settings, JobId(unique), OperatorName(op), 2) for op in ("clicks", "count")
    ]
    before = [s.latest(i) for s in stores for i in range(2)]

    second = run_on_spark(config)
    assert {r.status for r in second} == {"skipped"}

    assert main(["status", "--job", unique, "--bootstrap", kafka_bootstrap, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["subtask"] for r in rows] == [
        f"{unique}/{op}[{i}]" for op in ("clicks", "enrich", "count", "out") for i in range(2)
    ]
    assert {r["state"] for r in rows} == {"finished"}
    assert all(r["checkpoint"] is not None and r["replay_debt"] == {} for r in rows)
    assert {r["restarts"] for r in rows} == {0}  # the second run skipped them, nothing restarted
    assert output_files(clicks_env) == files
    assert [s.latest(i) for s in stores for i in range(2)] == before
    for s in stores:
        s.close()


def start_driver(bootstrap: str, job: str, log: Path, **env: str) -> subprocess.Popen[bytes]:
    """``spillway run`` of the clicks job in its own session (so a test can kill its 'machine')."""
    cmd = [sys.executable, "-m", "spillway.cli", "run", REF, "--job-id", job]
    cmd += ["--bootstrap", bootstrap, "--master", "local[8,2]"]
    with open(log, "wb") as out:
        return subprocess.Popen(
            cmd,
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_for_checkpoints(
    driver: subprocess.Popen[bytes], log: Path, stores: dict[str, CheckpointStore], at_least: int
) -> None:
    """Wait until every subtask of ``stores``' operators has committed checkpoint ``at_least``."""
    deadline = time.monotonic() + 120
    while True:
        assert driver.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "no checkpoints before the deadline"
        try:
            ready = all(
                (c := s.latest(i)) is not None and c.checkpoint_id >= at_least
                for s in stores.values()
                for i in range(2)
            )
        except Exception:  # topics appear only once the driver has created them
            ready = False
        if ready:
            return
        time.sleep(0.5)


def test_driver_killed_then_restarted_resumes_every_subtask_from_its_checkpoint(
    kafka_bootstrap: str, unique: str, clicks_env: Path, tmp_path: Path
) -> None:
    log = tmp_path / "driver.log"
    driver = start_driver(kafka_bootstrap, unique, log, CLICKS_RATE=str(RECORDS / 2 / 20))
    settings = KafkaSettings(kafka_bootstrap)
    store = CheckpointStore(settings, JobId(unique), OperatorName("count"), 2)
    try:
        wait_for_checkpoints(driver, log, {"count": store}, 3)
    finally:
        # The driver's whole machine goes: driver, its JVM and every Python worker.
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(30)
    time.sleep(1)
    latest = {
        f"{op}[{i}]": CheckpointStore(settings, JobId(unique), OperatorName(op), 2).latest(i)
        for op in ("clicks", "enrich", "count", "out")
        for i in range(2)
    }
    assert all(
        c is not None and not c.meta.finished for k, c in latest.items() if k.startswith("count")
    )

    results = run_on_spark(JobConfig(REF, unique, kafka_bootstrap, master="local[8,2]"))
    assert read_output(clicks_env) == clicks.reference(RECORDS)
    second_run = {r.subtask.split("/")[1]: r for r in results}
    for key, ckpt in latest.items():
        if ckpt is not None and not ckpt.meta.finished:
            assert second_run[key].restored_from == ckpt.checkpoint_id, key
    store.close()


def test_replay_by_hand_catches_up_after_spark_gave_up(
    kafka_bootstrap: str, unique: str, clicks_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One attempt per task: when count[0] dies, Spark gives up on the whole job.
    monkeypatch.setenv("CLICKS_RATE", str(RECORDS / 2 / 6))
    monkeypatch.setenv("SPILLWAY_CRASH_AT", "count:0:after-commit:0:2")
    with pytest.raises(Exception, match=r"failed 1 times"):
        run_on_spark(JobConfig(REF, unique, kafka_bootstrap, master="local[8,1]", task_attempts=1))
    monkeypatch.delenv("SPILLWAY_CRASH_AT")
    settings = KafkaSettings(kafka_bootstrap)
    # Bounded job, durable channels: replaying the unfinished subtasks one after another,
    # upstream first, completes the job.
    replayed = []
    for op in ("clicks", "enrich", "count", "out"):
        for i in range(2):
            r = replay_subtask(settings, unique, op, i)
            assert r.status in ("finished", "skipped"), r
            replayed.append((f"{op}[{i}]", r.status, r.restored_from))
    assert ("count[0]", "finished", 1) in replayed
    assert read_output(clicks_env) == clicks.reference(RECORDS)


def test_sigterm_to_the_driver_checkpoints_every_subtask_and_exits_cleanly(
    kafka_bootstrap: str, unique: str, clicks_env: Path, tmp_path: Path
) -> None:
    log = tmp_path / "driver.log"
    driver = start_driver(
        kafka_bootstrap, unique, log, CLICKS_RECORDS="unbounded", CLICKS_RATE="2000"
    )
    settings = KafkaSettings(kafka_bootstrap)
    stores = {
        op: CheckpointStore(settings, JobId(unique), OperatorName(op), 2)
        for op in ("clicks", "enrich", "count", "out")
    }
    try:
        wait_for_checkpoints(driver, log, stores, 2)
        asked = time.time()
        driver.send_signal(signal.SIGTERM)
        assert driver.wait(90) == 0, log.read_text()[-3000:]
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    last: dict[str, str] = {}
    for e in read_events(settings, JobId(unique)):
        if "operator" in e:
            last[f"{e['operator']}[{e['index']}]"] = e["event"]
    assert set(last.values()) == {"stopped"}, last
    assert len(last) == 8
    for op, store in stores.items():
        for i in range(2):
            c = store.latest(i)
            assert c is not None, f"{op}[{i}]"
            assert not c.meta.finished
            assert c.meta.wall_time >= asked, f"{op}[{i}] has no checkpoint taken after SIGTERM"
        store.close()
