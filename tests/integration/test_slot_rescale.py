"""`spillway rescale` of an operator whose input is round-robin (real Spark, real broker):
a stateless map behind a round-robin edge (32 slots) goes from 2 to 3 subtasks and then
to 1 while its source keeps writing and the keyed count after it keeps reading; the new
``tag[2]`` is SIGKILLed while it restores during the first rescale. The output must equal
the plain-Python reference exactly (a record lost or mapped twice changes a count or a sum
of sequence numbers), and no subtask of another operator may start more than once.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, OperatorName
from spillway.channels.kafka.admin import Admin
from spillway.channels.naming import channel_topic
from spillway.recovery.cli import main as recovery_main
from spillway.recovery.observe.events import last_submission, read_events
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from spillway.spark_jobs.spark.opruns import OperatorRuns
from tests.integration.keygroupjobs import (
    last_run_starts,
    print_pauses,
    read_output,
    run_stopped,
    wait_until,
)
from tests.integration.slotjobs import checkpoint_ids, tagged_reference

REF = "tests.integration.slotjobs:rebalanced_tag"
RECORDS = 24_000


def rescaled(settings: KafkaSettings, job: JobId) -> list[dict[str, Any]]:
    return [e for e in read_events(settings, job) if e.get("event") == "rescaled"]


def test_a_round_robin_fed_map_rescaled_live_two_three_one_with_a_kill(
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
    # The new tag[2] dies while it restores (positions handed over, inputs not assigned).
    monkeypatch.setenv("SPILLWAY_CRASH_AT", "tag:2:restore:0")
    settings = KafkaSettings(kafka_bootstrap)
    job = JobId(unique)
    answers: list[int] = []
    errors: list[BaseException] = []
    cli = ["rescale", "--job", unique, "--operator", "tag", "--bootstrap", kafka_bootstrap]

    def operate(_runs: OperatorRuns) -> None:
        try:
            wait_until(
                "tag's first checkpoints",
                lambda: None not in checkpoint_ids(settings, job, "tag", 2),
            )
            answers.append(recovery_main([*cli, "--parallelism", "3"]))
            floor = int(rescaled(settings, job)[0]["rescale"]["operators"]["tag"]["floor"])
            wait_until(
                "every new tag subtask checkpointed",
                lambda: all(
                    c is not None and c > floor for c in checkpoint_ids(settings, job, "tag", 3)
                ),
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
    assert read_output(out) == tagged_reference(RECORDS)
    assert {r.status for r in results} == {"finished"}

    # The round-robin channel kept its 32 slots through both rescales.
    counts = Admin(settings).partition_counts()
    assert counts[channel_topic(job, OperatorName("events"), OperatorName("tag"))] == 32
    starts = last_run_starts(settings, job)
    # Nothing but tag restarted; tag ran as 2, then 3 (tag[2] twice), then 1.
    assert starts == Counter(
        {
            ("events[0]", 0): 1,
            ("events[1]", 0): 1,
            ("count[0]", 0): 1,
            ("count[1]", 0): 1,
            ("out[0]", 0): 1,
            ("tag[0]", 0): 3,
            ("tag[1]", 0): 2,
            ("tag[2]", 1): 1,  # attempt 0 died restoring, before it announced its start
        }
    )
    done = rescaled(settings, job)
    assert [(e["previous"], e["parallelism"]) for e in done] == [(2, 3), (3, 1)]
    # After the SIGKILL, tag[2] restored from the handover again (it had no checkpoint).
    floor = done[0]["rescale"]["operators"]["tag"]["floor"]
    (again,) = [
        e
        for e in read_events(settings, job)
        if e.get("event") == "started" and e.get("operator") == "tag" and e.get("index") == 2
    ]
    assert (again["attempt"], again["restored_from"]) == (1, floor)
    with capsys.disabled():
        print_pauses(list(read_events(settings, job)), "tag")
    capsys.readouterr()
    assert recovery_main(["status", "--job", unique, "--bootstrap", kafka_bootstrap]) == 0
    assert "rescale 2: tag 3 -> 1 subtasks" in capsys.readouterr().out


def test_a_round_robin_fed_map_restarted_from_savepoints_at_three_then_one(
    kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tag runs with 2 subtasks, is stopped, resumes with 3 (the new tag[2] SIGKILLed while
    it restores, so it restores from the handover twice), is stopped again once each new
    subtask checkpointed, and finishes with 1: `--parallelism tag=N` both ways."""
    out = tmp_path / "out"
    monkeypatch.setenv("SPILLWAY_TEST_OUT", str(out))
    monkeypatch.setenv("SPILLWAY_TEST_RECORDS", str(RECORDS))
    monkeypatch.setenv("SPILLWAY_TEST_RATE", str(RECORDS / 2 / 40))  # about 40 s of input
    monkeypatch.setenv("SPILLWAY_CRASH_AT", "tag:2:restore:0")
    job = JobId(unique)

    def checkpointed(p: int) -> Callable[[KafkaSettings], bool]:
        def ready(settings: KafkaSettings) -> bool:
            submitted = last_submission(settings, job)
            handover = ((submitted or {}).get("rescale") or {}).get("operators", {}).get("tag")
            floor = int(handover["floor"]) if handover else 0
            ids = checkpoint_ids(settings, job, "tag", p)
            return all(c is not None and c > floor for c in ids)

        return ready

    def config(tag_p: int) -> JobConfig:
        return JobConfig(
            REF, unique, kafka_bootstrap, master=f"local[{tag_p + 5},3]", parallelism={"tag": tag_p}
        )

    first = run_stopped(config(2), checkpointed(2))
    second = run_stopped(config(3), checkpointed(3))
    third = run_stopped(config(1), None)
    assert {r.status for r in first} == {r.status for r in second} == {"stopped"}
    assert {r.status for r in third} == {"finished"}
    assert read_output(out) == tagged_reference(RECORDS)
    settings = KafkaSettings(kafka_bootstrap)
    rescales = [
        (e["rescale"]["number"], e["rescale"]["operators"]["tag"]["previous"])
        for e in read_events(settings, job)
        if e.get("event") == "submitted" and e.get("rescale")
    ]
    assert rescales == [(1, 2), (2, 3)]
    # tag[2] ran only in the second run, and only its retry started: attempt 0 was killed.
    tag2 = [
        e["attempt"]
        for e in read_events(settings, job)
        if e.get("event") == "started" and e.get("operator") == "tag" and e.get("index") == 2
    ]
    assert tag2 == [1]
    counts = Admin(settings).partition_counts()
    assert counts[channel_topic(job, OperatorName("events"), OperatorName("tag"))] == 32
