"""A quiet run and liveness from fresh data, on real Spark and a real broker.

Liveness on a loaded machine: the clicks job runs with a busy-loop process per core beside
it, and the metrics endpoint is scraped throughout. No subtask is ever reported ``lost``
(nothing is killed, so every subtask's heartbeats keep arriving); a feed that falls
behind may say ``unknown``, never ``lost``. The plain progress lines agree.

A quiet run: ``spillway run`` of the same job with a subtask SIGKILLed part way shows no
Java stack frames, no JVM start-up warning, no "Unknown partition" warnings and no INFO
lines on its terminal (stdout and stderr); they are in the log file it names at start,
and the run ends with a summary naming the sink's rows and the restart. No wall-clock
limit is asserted (the guards only stop a hang).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId
from spillway.channels.kafka.admin import Admin, TopicSpec
from spillway.channels.kafka.clients import idempotent_producer
from spillway.examples import clicks
from spillway.recovery.control.globalckpt import checkpoints_topic_spec
from spillway.recovery.job.plandoc import InputDoc, OperatorDoc, PlanDoc
from spillway.recovery.observe.events import events_topic_spec, record_job_event
from spillway.recovery.observe.heartbeat import heartbeats_topic, heartbeats_topic_spec
from spillway.recovery.observe.metrics import as_of
from spillway.spark_jobs.spark.metrics_http import MetricsFeed
from tests.integration.conftest import RECORDS
from tests.integration.support import free_port, read_output, scrape, states_of

# every test here runs against the real broker
pytestmark = [pytest.mark.broker, pytest.mark.extended]

REF = "spillway.examples.clicks:pipeline"


@contextmanager
def cpu_hogs() -> Iterator[None]:
    """A busy-loop process per core, as long as the block runs."""
    n = os.cpu_count() or 2
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for h in hogs:
            h.kill()
            h.wait()


@pytest.mark.spark
def test_no_subtask_is_reported_lost_on_a_loaded_machine(
    kafka_bootstrap: str, unique: str, clicks_env: Path, tmp_path: Path
) -> None:
    port = free_port()
    log = tmp_path / "driver.log"
    cmd = [sys.executable, "-m", "spillway.cli", "run", REF, "--job-id", unique]
    cmd += ["--bootstrap", kafka_bootstrap, "--master", "local[8,2]", "--metrics-port", str(port)]
    cmd += ["--log-dir", str(tmp_path / "logs")]
    env = {**os.environ, "CLICKS_RATE": str(RECORDS / 2 / 15)}  # about 15 s of input
    seen: list[dict[str, str]] = []
    with cpu_hogs(), open(log, "wb") as out:
        driver = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 600  # a hang guard, not a limit asserted
            while time.monotonic() < deadline and driver.poll() is None:
                got = scrape(port)
                if got is not None:
                    seen.append(states_of(got))
                time.sleep(0.5)
            assert driver.wait(60) == 0, log.read_text()[-3000:]
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.wait()
    lost = [(i, s) for i, states in enumerate(seen) for s, st in states.items() if st == "lost"]
    assert not lost, f"reported lost while alive (scrape, subtask): {lost}"
    running = [s for states in seen for s, st in states.items() if st == "running"]
    assert running, f"no scrape saw a running subtask: {seen}"  # the check was not vacuous
    progress = [ln for ln in log.read_text().splitlines() if ln.startswith("[progress] ")]
    assert progress
    assert not [ln for ln in progress if " lost" in ln], progress
    assert read_output(clicks_env) == clicks.reference(RECORDS)


@pytest.mark.spark
def test_a_run_with_a_killed_subtask_keeps_the_terminal_quiet(
    kafka_bootstrap: str, unique: str, clicks_env: Path, tmp_path: Path
) -> None:
    cmd = [sys.executable, "-m", "spillway.cli", "run", REF, "--job-id", unique]
    cmd += ["--bootstrap", kafka_bootstrap, "--master", "local[8,2]"]
    cmd += ["--log-dir", str(tmp_path / "logs")]
    env = {
        **os.environ,
        "CLICKS_RATE": str(RECORDS / 2 / 10),
        "SPILLWAY_CRASH_AT": "count:0:after-produce-read:0:3",
    }
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
    terminal = proc.stdout + proc.stderr
    assert proc.returncode == 0, terminal[-3000:]
    assert "\tat org.apache" not in terminal, terminal[-3000:]
    assert "Unknown partition" not in terminal, terminal[-3000:]
    assert "Using incubator modules" not in terminal, terminal[-3000:]  # the JVM's own stderr
    assert not re.search(r"^\S+ INFO ", terminal, re.MULTILINE), terminal[-3000:]
    named = re.search(r"log in (\S+\.log)", proc.stderr)
    assert named, proc.stderr[-3000:]
    logged = Path(named.group(1)).read_text()
    assert "INFO spillway" in logged  # the INFO lines went to the file
    assert "WARNING: Using incubator modules" in logged  # and the driver JVM's stderr
    assert f"{unique} finished in " in proc.stdout
    assert "  restarts:     1\n    count[0]: 1 restart" in proc.stdout, proc.stdout
    rows = re.search(r"rows written: out ([\d,]+)", proc.stdout)
    assert rows, proc.stdout
    assert int(rows.group(1).replace(",", "")) >= len(clicks.reference(RECORDS))
    assert read_output(clicks_env) == clicks.reference(RECORDS)


PROBED = 1000  # input partitions the feed probes the ends of (the job had 65)


def test_the_driver_feed_judges_fresh_heartbeats_however_long_the_ends_take(
    kafka_bootstrap: str, unique: str
) -> None:
    """The driver's metrics feed on a real broker, for a subtask owning many partitions
    and sending a heartbeat every 0.5 s, beside a busy loop per core. Probing the ends of
    that many partitions one by one took longer than the liveness limit; now
    they are probed in one batched query on a thread of their own, and the subtask is
    never reported lost."""
    settings = KafkaSettings(kafka_bootstrap)
    job = JobId(unique)
    run = "run-1"
    inputs = f"spillway.{unique}.ch.src.sink"
    Admin(settings).ensure_topics(
        [
            events_topic_spec(job),
            heartbeats_topic_spec(job),
            checkpoints_topic_spec(job),
            TopicSpec(inputs, PROBED),
        ]
    )
    op = OperatorDoc(
        "sink", 1, "sink", False, f"spillway.{unique}.ckpt.sink", (InputDoc(inputs, PROBED),)
    )
    plan = PlanDoc((op,))
    assert len(op.owned_inputs(0)) == PROBED
    me = {"operator": "sink", "index": 0, "attempt": 0, "run": run, "host": "h"}
    for kind in ("fencing", "started"):
        record_job_event(
            settings, job, kind, operator="sink", index=0, attempt=0, run=run, host="h"
        )
    producer = idempotent_producer(settings)
    stop = threading.Event()

    def beat() -> None:
        while not stop.is_set():
            doc = {**me, "pid": os.getpid(), "time": time.time(), "records_in": 1}
            producer.produce(heartbeats_topic(job), json.dumps(doc).encode(), b"sink[0]")
            producer.poll(0)
            stop.wait(0.5)

    beater = threading.Thread(target=beat, daemon=True)
    feed = MetricsFeed(settings, job, plan, run)
    states: list[str] = []
    with cpu_hogs():
        beater.start()
        feed.start()
        try:
            end = time.monotonic() + 20  # how long to watch, not a limit asserted
            while time.monotonic() < end:
                (s,) = as_of(feed.snapshot(), time.time()).subtasks
                states.append(s.state)
                time.sleep(0.2)
        finally:
            feed.stop()
            stop.set()
            beater.join(5)
            producer.flush(10)
    assert "lost" not in states, states
    assert "running" in states, states
