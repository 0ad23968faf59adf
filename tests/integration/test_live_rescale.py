"""`spillway rescale` on a running job (real Spark, real broker): the keyed count goes from
2 to 4 subtasks and then to 1 while its source keeps writing and its sink keeps reading;
one new subtask is SIGKILLed while it restores during the first rescale. The output must
equal the plain-Python reference exactly, and no subtask of another operator may start
more than once.
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId
from spillway.recovery.cli import main as recovery_main
from spillway.recovery.observe.events import last_submission, read_events, record_job_event
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from spillway.spark_jobs.spark.opruns import OperatorRuns
from tests.integration.keygroupjobs import (
    count_checkpoints,
    last_run_starts,
    print_pauses,
    read_output,
    reference,
    wait_until,
)

REF = "tests.integration.keygroupjobs:keyed_count"
RECORDS = 24_000


def count_ids(settings: KafkaSettings, job: JobId, p: int) -> list[int | None]:
    return [
        None if c is None else int(c.checkpoint_id) for c in count_checkpoints(settings, job, p)
    ]


def rescaled(settings: KafkaSettings, job: JobId) -> list[dict[str, Any]]:
    return [e for e in read_events(settings, job) if e.get("event") == "rescaled"]


def test_a_keyed_count_rescaled_live_two_four_one_with_a_kill(
    kafka_bootstrap: str,
    unique: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "out"
    monkeypatch.setenv("SPILLWAY_TEST_OUT", str(out))
    monkeypatch.setenv("SPILLWAY_TEST_RECORDS", str(RECORDS))
    monkeypatch.setenv("SPILLWAY_TEST_RATE", str(RECORDS / 2 / 60))  # about 60 s of input
    # The new count[3] dies while it restores (state rebuilt, inputs not yet assigned).
    monkeypatch.setenv("SPILLWAY_CRASH_AT", "count:3:restore:0")
    settings = KafkaSettings(kafka_bootstrap)
    job = JobId(unique)
    answers: list[int] = []
    errors: list[BaseException] = []
    cli = ["rescale", "--job", unique, "--operator", "count", "--bootstrap", kafka_bootstrap]

    def operate(_runs: OperatorRuns) -> None:
        try:
            wait_until("count's first checkpoints", lambda: None not in count_ids(settings, job, 2))
            answers.append(recovery_main([*cli, "--parallelism", "4"]))
            handover = rescaled(settings, job)[0]["rescale"]["operators"]["count"]
            floor = int(handover["floor"])
            wait_until(
                "every new count subtask checkpointed",
                lambda: all(c is not None and c > floor for c in count_ids(settings, job, 4)),
            )
            answers.append(recovery_main([*cli, "--parallelism", "1"]))
        except BaseException as e:  # reported by the test's thread, below
            errors.append(e)

    def on_running(runs: OperatorRuns) -> None:
        threading.Thread(target=operate, args=(runs,), daemon=True).start()

    results = run_on_spark(
        JobConfig(REF, unique, kafka_bootstrap, master="local[8,3]"), on_running=on_running
    )
    assert errors == []
    assert answers == [0, 0]
    assert read_output(out) == reference(RECORDS)
    assert {r.status for r in results} == {"finished"}

    starts = last_run_starts(settings, job)
    # Nothing but count restarted; count ran as 2, then 4 (count[3] twice), then 1.
    assert starts == Counter(
        {
            ("events[0]", 0): 1,
            ("events[1]", 0): 1,
            ("out[0]", 0): 1,
            ("count[0]", 0): 3,
            ("count[1]", 0): 2,
            ("count[2]", 0): 1,
            ("count[3]", 1): 1,  # attempt 0 died restoring, before it announced its start
        }
    )
    done = rescaled(settings, job)
    assert [(e["previous"], e["parallelism"]) for e in done] == [(2, 4), (4, 1)]
    # After the SIGKILL, count[3] restored from the handover again (it had no checkpoint).
    floor = done[0]["rescale"]["operators"]["count"]["floor"]
    (again,) = [
        e
        for e in read_events(settings, job)
        if e.get("event") == "started" and e.get("operator") == "count" and e.get("index") == 3
    ]
    assert (again["attempt"], again["restored_from"]) == (1, floor)
    with capsys.disabled():
        print_pauses(list(read_events(settings, job)), "count")
    capsys.readouterr()
    assert recovery_main(["status", "--job", unique, "--bootstrap", kafka_bootstrap]) == 0
    assert "rescale 2: count 4 -> 1 subtasks" in capsys.readouterr().out


def test_a_savepoint_restart_after_a_live_rescale_counts_the_new_writers(
    kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """count goes 2 -> 4 live, the job is stopped, then resumed from its savepoint with
    count at 2. The sink had checkpointed the live rescale's writer count (4): unless the
    savepoint rescale announces 2 in-band, it waits for end-of-stream from count[2] and
    count[3], which no longer exist, and the job never finishes."""
    out = tmp_path / "out"
    monkeypatch.setenv("SPILLWAY_TEST_OUT", str(out))
    monkeypatch.setenv("SPILLWAY_TEST_RECORDS", str(RECORDS))
    monkeypatch.setenv("SPILLWAY_TEST_RATE", str(RECORDS / 2 / 40))  # about 40 s of input
    settings = KafkaSettings(kafka_bootstrap)
    job = JobId(unique)
    cli = ["rescale", "--job", unique, "--operator", "count", "--bootstrap", kafka_bootstrap]
    errors: list[BaseException] = []

    def operate(runs: OperatorRuns) -> None:
        try:
            wait_until("count's first checkpoints", lambda: None not in count_ids(settings, job, 2))
            assert recovery_main([*cli, "--parallelism", "4"]) == 0
            floor = int(rescaled(settings, job)[0]["rescale"]["operators"]["count"]["floor"])
            wait_until(
                "every new count subtask checkpointed",
                lambda: all(c is not None and c > floor for c in count_ids(settings, job, 4)),
            )
            submitted = last_submission(settings, job)
            assert submitted is not None
            # What SIGTERM to `spillway run` does: every subtask checkpoints and stops.
            record_job_event(settings, job, "stop-requested", run=submitted["run"])
            runs.stop_all()
        except BaseException as e:  # reported by the test's thread, below
            errors.append(e)
            runs.stop_all()

    def on_running(runs: OperatorRuns) -> None:
        threading.Thread(target=operate, args=(runs,), daemon=True).start()

    first = run_on_spark(
        JobConfig(REF, unique, kafka_bootstrap, master="local[8,3]"), on_running=on_running
    )
    assert errors == []
    assert {r.status for r in first} == {"stopped"}
    second = run_on_spark(
        JobConfig(REF, unique, kafka_bootstrap, master="local[6,3]", parallelism={"count": 2})
    )
    assert {r.status for r in second} == {"finished"}
    assert read_output(out) == reference(RECORDS)
