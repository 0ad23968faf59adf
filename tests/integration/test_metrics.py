"""``spillway run --metrics-port``: Prometheus metrics of a run with a SIGKILLed subtask.

The clicks job runs in a child process (real Spark, real broker) with count[0] SIGKILLed
while taking its third checkpoint that read records, after its outputs were written and
its read mark recorded but before the commit (``after-produce-read``). The source is
rate-limited, so records keep arriving between checkpoints: the dead attempt had read past its last
committed checkpoint, and the restarted attempt must replay exactly that span (a
replay counts what the dead attempt had read, not what arrived while it was dead). The
test scrapes the endpoint while the job runs and checks the restart (exactly one, of
count[0] only), the replay, checkpoints and record counts, and that the output still
equals the reference.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spillway.channels.routing.keygroups import DEFAULT_MAX_PARALLELISM
from spillway.examples import clicks
from tests.integration.conftest import RECORDS
from tests.integration.support import Samples, free_port, read_output, scrape

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.extended]

REF = "spillway.examples.clicks:pipeline"
SUBTASKS = [f"{op}[{i}]" for op in ("clicks", "enrich", "count", "out") for i in range(2)]


def per_subtask(samples: Samples, name: str) -> dict[str, float]:
    """``operator[index]`` → value of metric ``name`` (summed over partitions)."""
    out: dict[str, float] = {}
    for (n, labels), v in samples.items():
        if n == name:
            d = dict(labels)
            key = f"{d['operator']}[{d['index']}]"
            out[key] = out.get(key, 0.0) + v
    return out


def test_metrics_show_the_restart_and_the_replay_of_a_killed_subtask(
    kafka_bootstrap: str, unique: str, clicks_env: Path, tmp_path: Path
) -> None:
    port = free_port()
    log = tmp_path / "driver.log"
    cmd = [sys.executable, "-m", "spillway.cli", "run", REF, "--job-id", unique]
    cmd += ["--bootstrap", kafka_bootstrap, "--master", "local[8,2]", "--metrics-port", str(port)]
    env = {
        **os.environ,
        "CLICKS_RATE": str(RECORDS / 2 / 12),  # about 12 s of input
        "SPILLWAY_CRASH_AT": "count:0:after-produce-read:0:3",
    }
    with open(log, "wb") as out:
        driver = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    seen: Samples = {}
    try:
        # Scrape until the restarted count[0] reported replayed records (the guard only
        # stops a hang; the job itself ends with the endpoint).
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and driver.poll() is None:
            got = scrape(port)
            if got is not None:
                seen = got
                replayed = per_subtask(got, "spillway_subtask_replayed_records_total")
                if replayed.get("count[0]", 0) > 0:
                    break
            time.sleep(0.5)
        assert seen, f"no scrape answered; driver log:\n{log.read_text()[-3000:]}"
        restarts = per_subtask(seen, "spillway_subtask_restarts_total")
        assert restarts == {s: (1.0 if s == "count[0]" else 0.0) for s in SUBTASKS}
        replayed = per_subtask(seen, "spillway_subtask_replayed_records_total")
        assert replayed.get("count[0]", 0) > 0, seen
        assert {s for s, n in replayed.items() if n > 0} == {"count[0]"}
        debt_parts = {
            dict(labels)["partition"]
            for (n, labels), _ in seen.items()
            if n == "spillway_subtask_replay_debt_offsets" and dict(labels)["operator"] == "count"
        }
        groups = range(DEFAULT_MAX_PARALLELISM)  # the keyed channel: a partition per key group
        assert debt_parts <= {f"spillway.{unique}.ch.enrich.count[{g}]" for g in groups}
        # Counted before the replay (runner._step): a heartbeat with replayed records has both.
        assert per_subtask(seen, "spillway_subtask_records_in_total")["count[0]"] > 0
        assert driver.wait(300) == 0, log.read_text()[-3000:]
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert read_output(clicks_env) == clicks.reference(RECORDS)
    # Not a terminal: plain progress lines went to the log; the last one, drawn after the
    # Spark job ended, has every source record (read once: no source restarted), the one
    # restart, every subtask finished and the bounded job done.
    lines = [ln for ln in log.read_text().splitlines() if ln.startswith("[progress] ")]
    last = lines[-1]
    assert last.startswith(f"[progress] {unique}: {RECORDS:,} records ("), last
    assert last.endswith(" · 1 restart · 8/8 subtasks finished · 100% done"), last


def test_metrics_show_global_checkpoint_durations_as_the_coordinator_logs_them(
    kafka_bootstrap: str, unique: str, clicks_env: Path, tmp_path: Path
) -> None:
    port = free_port()
    log = tmp_path / "driver.log"
    cmd = [sys.executable, "-m", "spillway.cli", "run", REF, "--job-id", unique]
    cmd += ["--bootstrap", kafka_bootstrap, "--master", "local[8,2]", "--metrics-port", str(port)]
    cmd += ["--checkpoint-mode", "unaligned", "--global-interval", "1"]
    cmd += ["--log-dir", str(tmp_path / "logs")]  # the coordinator's INFO lines go there
    env = {**os.environ, "CLICKS_RATE": str(RECORDS / 2 / 12)}
    with open(log, "wb") as out:
        driver = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    last: Samples = {}
    try:
        deadline = time.monotonic() + 300  # only stops a hang
        while driver.poll() is None and time.monotonic() < deadline:
            last = scrape(port) or last
            time.sleep(0.5)
        assert driver.wait(300) == 0, log.read_text()[-3000:]
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    h = "spillway_global_checkpoint_duration_seconds"
    count = int(last[(f"{h}_count", (("job_id", unique),))])
    total = last[(f"{h}_sum", (("job_id", unique),))]
    # The coordinator logs each completed checkpoint's duration (3 decimals) in id order;
    # the metrics fold the same records, so the first `count` of them add up to the sum.
    (run_log,) = (tmp_path / "logs").glob(f"{unique}-*.log")
    logged = [
        float(line.rsplit(" in ", 1)[1].rstrip("s"))
        for line in run_log.read_text().splitlines()
        if "global checkpoint " in line and f" of {unique} complete in " in line
    ]
    assert 1 <= count <= len(logged)
    assert abs(sum(logged[:count]) - total) <= 0.0005 * count + 1e-9
    assert read_output(clicks_env) == clicks.reference(RECORDS)
