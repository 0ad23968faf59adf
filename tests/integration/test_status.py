"""``spillway status`` for any job, and pipeline settings (``--conf`` / ``--env``) on real Spark.

Status reads the plan the driver recorded at submission, so it runs without the job's
environment or code; it tells a subtask whose process died (``lost``) from a running one
by heartbeats. ``--conf`` settings and ``--env`` variables reach the pipeline in every
task, including when the Spark JVM was started before the variable was set.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId
from spillway.channels.routing.keygroups import key_group_range
from spillway.cli import main
from spillway.recovery.observe.events import last_submission, read_events

pytestmark = [pytest.mark.broker]

# Each run its own Spark context (tests/integration/conftest.py): a test here starts and
# stops a context of its own before a run, to stand for a JVM started before a variable
# was set; a kept context would be the one it got instead.
SHARE_SPARK = False

ENV_REF = "tests.integration.pipelines:env_configured"
CONF_REF = "tests.integration.pipelines:configured"
WIDTH = 3  # parallelism of env_configured's sink, from $STATUS_TEST_WIDTH (2 would be ambiguous)


def bare_env() -> dict[str, str]:
    """This process's environment without the test pipelines' configuration."""
    return {k: v for k, v in os.environ.items() if not k.startswith("STATUS_TEST_")}


def spillway(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """A ``spillway`` command line in a child process with exactly ``env`` (default: bare)."""
    return subprocess.run(
        [sys.executable, "-m", "spillway.cli", *argv],
        env=env if env is not None else bare_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def status(bootstrap: str, job: str) -> dict[str, dict[str, Any]]:
    """``spillway status --json`` without the job's environment, rows by ``operator[index]``."""
    proc = spillway("status", "--job", job, "--bootstrap", bootstrap, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {r["subtask"].split("/", 1)[1]: r for r in json.loads(proc.stdout)}


def started(bootstrap: str, job: str) -> set[str]:
    return {
        f"{e['operator']}[{e['index']}]"
        for e in read_events(KafkaSettings(bootstrap), JobId(job))
        if e.get("event") == "started"
    }


def wait_until(what: str, check: Any, guard_s: float = 180.0) -> float:
    """Poll ``check()`` until true; returns the seconds it took (the guard only stops a hang)."""
    t0 = time.monotonic()
    while not check():
        assert time.monotonic() - t0 < guard_s, f"still not {what} after {guard_s} s"
        time.sleep(0.5)
    return time.monotonic() - t0


@pytest.mark.spark
def test_status_needs_nothing_from_the_job_environment_and_shows_a_killed_subtask_lost(
    kafka_bootstrap: str, unique: str, tmp_path: Path
) -> None:
    job_env = {**bare_env(), "STATUS_TEST_WIDTH": str(WIDTH), "STATUS_TEST_OUT": str(tmp_path)}
    log = tmp_path / "driver.log"
    argv = ["run", ENV_REF, "--job-id", unique, "--bootstrap", kafka_bootstrap]
    argv += ["--master", f"local[{WIDTH + 1},1]", "--checkpoint-interval", "0.5"]
    with open(log, "wb") as out:
        driver = subprocess.Popen(
            [sys.executable, "-m", "spillway.cli", *argv],
            env=job_env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    names = ["events[0]", *(f"out[{i}]" for i in range(WIDTH))]
    replay: subprocess.Popen[bytes] | None = None
    try:

        def all_started() -> bool:
            assert driver.poll() is None, log.read_text()[-3000:]
            try:
                return started(kafka_bootstrap, unique) == set(names)
            except Exception:  # the event topic appears once the driver created it
                return False

        wait_until("started", all_started)
        # Status in a process without STATUS_TEST_*: the pipeline would raise KeyError
        # there (and build another width with a default); status does not build it.
        rows = status(kafka_bootstrap, unique)
        assert list(rows) == names
        host = socket.gethostname()
        for r in rows.values():
            assert (r["state"], r["attempt"], r["host"], r["restarts"]) == ("running", 0, host, 0)
            assert isinstance(r["pid"], int)
        # out reads a round-robin edge: 32 slots, out[1] owns the second of 3 ranges.
        slots = {f"spillway.{unique}.ch.events.out[{s}]" for s in key_group_range(1, WIDTH, 32)}
        assert set(rows["out[1]"]["replay_debt"]) == slots

        driver.send_signal(signal.SIGTERM)  # every subtask checkpoints and stops
        assert driver.wait(180) == 0, log.read_text()[-3000:]
        assert {r["state"] for r in status(kafka_bootstrap, unique).values()} == {"stopped"}

        # events[0] (an endless source) goes on in a `spillway replay` process...
        replay_argv = ["replay", "--job", unique, "--operator", "events", "--subtask", "0"]
        replay = subprocess.Popen(
            [sys.executable, "-m", "spillway.cli", *replay_argv, "--bootstrap", kafka_bootstrap],
            env=job_env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        proc = replay

        def replaying() -> bool:
            assert proc.poll() is None, "the replay process ended"
            r = status(kafka_bootstrap, unique)["events[0]"]
            return bool(r["state"] == "running" and r["pid"] == proc.pid)

        wait_until("replaying", replaying)
        # ... which dies. Its last event stays `started`; its heartbeats stop.
        replay.kill()
        replay.wait()
        killed = time.monotonic()
        final: dict[str, dict[str, Any]] = {}

        def lost() -> bool:
            final.update(status(kafka_bootstrap, unique))
            return bool(final["events[0]"]["state"] == "lost")

        wait_until("lost", lost, guard_s=90)
        print(f"events[0] shown lost {time.monotonic() - killed:.1f} s after SIGKILL")
        ev = final["events[0]"]
        # The replay restarted events[0] after its clean stop: planned, not after a failure.
        assert (ev["attempt"], ev["pid"], ev["host"], ev["restarts"], ev["planned_restarts"]) == (
            1000,
            proc.pid,
            host,
            0,
            1,
        )
        # Lost means unseen for more than LOST_AFTER_S (5 s); the age is shown rounded to
        # 0.1 s, so 5.04 s reads 5.0.
        assert ev["seen_age_s"] >= 5.0  # heartbeat.LOST_AFTER_S
        assert {n: r["state"] for n, r in final.items() if n != "events[0]"} == {
            f"out[{i}]": "stopped" for i in range(WIDTH)
        }
    finally:
        for p in (driver, replay):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def test_status_of_a_job_never_submitted_says_so_and_creates_nothing(
    kafka_bootstrap: str, unique: str
) -> None:
    proc = spillway("status", "--job", unique, "--bootstrap", kafka_bootstrap)
    assert proc.returncode == 2
    assert proc.stderr == (
        f"spillway: error: job {unique} was never submitted to {kafka_bootstrap}; "
        "check --job and --bootstrap\n"
    )
    topics = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
    assert not [t for t in topics if unique in t]


@pytest.mark.spark
def test_conf_settings_and_forwarded_env_reach_the_pipeline_in_every_task(
    kafka_bootstrap: str,
    unique: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pyspark.sql import SparkSession

    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    monkeypatch.delenv("STATUS_TEST_SUFFIX", raising=False)
    # A Spark JVM that was started before the variable was set, as a long-lived JVM or a
    # cluster's executors were: its Python workers do not see it unless it is forwarded.
    (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
        .stop()
    )
    monkeypatch.setenv("STATUS_TEST_SUFFIX", "-from-env")
    secret = "s3cret-token-value"
    code = main(
        [
            "run",
            CONF_REF,
            "--job-id",
            unique,
            "--bootstrap",
            kafka_bootstrap,
            "--master",
            "local[3,1]",
            "--conf",
            "records=500",
            "--conf",
            "greeting=hello",
            "--conf",
            f"out.dir={tmp_path}",
            "--conf",
            f"api.token={secret}",  # not used by the pipeline; must not be recorded
            "--env",
            "STATUS_TEST_SUFFIX",
        ]
    )
    assert code == 0
    rows = [
        json.loads(line)
        for f in sorted((tmp_path / "out").glob("*.jsonl"))
        for line in f.read_text().splitlines()
    ]
    assert sorted(rows, key=lambda r: int(r["seq"])) == [
        {"seq": i, "label": "hello-from-env"} for i in range(500)
    ]
    settings = KafkaSettings(kafka_bootstrap)
    sub = last_submission(settings, JobId(unique))
    assert sub is not None
    assert sub["conf"] == {
        "records": "500",
        "greeting": "hello",
        "out.dir": str(tmp_path),
        "api.token": "***",
    }
    assert sub["env"] == ["STATUS_TEST_SUFFIX"]
    assert secret not in json.dumps(list(read_events(settings, JobId(unique))))
