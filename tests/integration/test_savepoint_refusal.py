"""``spillway run --from-savepoint X`` where X does not exist: one line on stderr, exit 2,
before anything starts (no log file, no Spark)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId
from spillway.channels.kafka.admin import Admin
from spillway.recovery.observe.events import events_topic, events_topic_spec, record_job_event

pytestmark = [pytest.mark.broker]

REF = "spillway.examples.clicks:pipeline"


def _run(
    bootstrap: str, job: str, savepoint: str, tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CLICKS_RECORDS": "100", "CLICKS_OUT": str(tmp_path / "out")}
    return subprocess.run(
        [sys.executable, "-m", "spillway", "run", REF, "--job-id", job,
         "--bootstrap", bootstrap, "--log-dir", str(tmp_path / "logs"),
         "--from-savepoint", savepoint],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("savepoint", ["latest", "7"])
def test_a_savepoint_of_a_job_that_never_ran_is_refused_in_one_line(
    kafka_bootstrap: str, unique: str, tmp_path: Path, savepoint: str
) -> None:
    done = _run(kafka_bootstrap, unique, savepoint, tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.splitlines() == [
        f"spillway: error: --from-savepoint {savepoint}: job {unique} has never run at "
        f"{kafka_bootstrap}, so it has no savepoint; check --job-id and --bootstrap, or "
        + (
            "run it without --from-savepoint to start it from scratch"
            if savepoint == "latest"
            else f"savepoints of a running job are listed by spillway checkpoints --job "
            f"{unique} --bootstrap {kafka_bootstrap}"
        )
    ]
    assert done.stdout == ""
    assert not (tmp_path / "logs").exists()  # refused before the run's log file
    # Nothing was created for the job that never ran.
    assert (
        events_topic(JobId(unique)) not in Admin(KafkaSettings(kafka_bootstrap)).partition_counts()
    )


def test_a_global_checkpoint_the_job_does_not_have_is_refused_in_one_line(
    kafka_bootstrap: str, unique: str, tmp_path: Path
) -> None:
    settings = KafkaSettings(kafka_bootstrap)
    # A job that was submitted (its events say so) but completed no global checkpoint.
    Admin(settings).ensure_topics([events_topic_spec(JobId(unique))])
    record_job_event(settings, JobId(unique), "submitted", run="r1", pipeline=REF)
    done = _run(kafka_bootstrap, unique, "3", tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.splitlines() == [
        f"spillway: error: --from-savepoint 3: job {unique} has no completed global "
        "checkpoint at all (they are taken with --checkpoint-mode unaligned or aligned); "
        "give 'latest' to start from every subtask's latest checkpoint"
    ]
    assert not (tmp_path / "logs").exists()
