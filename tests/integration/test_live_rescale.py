"""`spillway rescale` on a running job (real Spark, real broker), with a kill.

The family (parametrized, in `make soak`): an operator goes from 2 subtasks to more and
then to 1 while its source keeps writing and its sink keeps reading; one new subtask is
SIGKILLed while it restores during the first rescale. The cases: the keyed count (2, 4,
1), and a stateless map behind a round-robin edge (2, 3, 1), whose input channel has
slots. The output must equal the plain-Python reference exactly (a record lost or
counted twice changes a count or a sum of sequence numbers), and no subtask of another
operator may start more than once.

In `make test`: a live rescale followed by a savepoint restart at another parallelism.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, OperatorName
from spillway.channels.kafka.admin import Admin
from spillway.channels.naming import channel_topic
from spillway.recovery.cli import main as recovery_main
from spillway.recovery.observe.events import last_submission, read_events, record_job_event
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from spillway.spark_jobs.spark.opruns import OperatorRuns
from tests.integration.gates import Gates
from tests.integration.keygroupjobs import (
    last_run_starts,
    print_pauses,
    read_output,
    reference,
    wait_until,
)
from tests.integration.slotjobs import checkpoint_ids, tagged_reference

pytestmark = [pytest.mark.broker, pytest.mark.spark]

REF = "tests.integration.keygroupjobs:keyed_count"
RECORDS = 24_000


def rescaled(settings: KafkaSettings, job: JobId) -> list[dict[str, Any]]:
    return [e for e in read_events(settings, job) if e.get("event") == "rescaled"]


@dataclass(frozen=True)
class LiveRescale:
    """One case of the family: which job, which operator, through which parallelisms."""

    ref: str
    operator: str
    wider: int  # the operator goes 2 -> wider -> 1; the new op[wider - 1] dies restoring
    reference: Callable[[int], dict[str, tuple[int, int]]]
    starts: dict[tuple[str, int], int]  # (operator[index], attempt) -> starts in the run
    slots: tuple[str, int] | None = None  # an upstream operator, its channel's slot count


CASES = {
    # The new count[3] dies while it restores (state rebuilt, inputs not yet assigned).
    # Nothing but count restarted; count ran as 2, then 4 (count[3] twice), then 1.
    "keyed-count-2-4-1": LiveRescale(
        ref=REF,
        operator="count",
        wider=4,
        reference=reference,
        starts={
            ("events[0]", 0): 1,
            ("events[1]", 0): 1,
            ("out[0]", 0): 1,
            ("count[0]", 0): 3,
            ("count[1]", 0): 2,
            ("count[2]", 0): 1,
            ("count[3]", 1): 1,  # attempt 0 died restoring, before it announced its start
        },
    ),
    # A stateless map behind a round-robin edge (32 slots): the new tag[2] dies while it
    # restores (positions handed over, inputs not assigned). Nothing but tag restarted;
    # tag ran as 2, then 3 (tag[2] twice), then 1; the round-robin channel kept its slots.
    "round-robin-map-2-3-1": LiveRescale(
        ref="tests.integration.slotjobs:rebalanced_tag",
        operator="tag",
        wider=3,
        reference=tagged_reference,
        starts={
            ("events[0]", 0): 1,
            ("events[1]", 0): 1,
            ("count[0]", 0): 1,
            ("count[1]", 0): 1,
            ("out[0]", 0): 1,
            ("tag[0]", 0): 3,
            ("tag[1]", 0): 2,
            ("tag[2]", 1): 1,  # attempt 0 died restoring, before it announced its start
        },
        slots=("events", 32),
    ),
}


@pytest.mark.soak
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_an_operator_rescaled_live_two_wider_one_with_a_kill(
    case: LiveRescale,
    kafka_bootstrap: str,
    unique: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    op, wider, killed = case.operator, case.wider, case.wider - 1
    out = tmp_path / "out"
    monkeypatch.setenv("SPILLWAY_TEST_OUT", str(out))
    monkeypatch.setenv("SPILLWAY_TEST_RECORDS", str(RECORDS))
    # The source holds at a quarter of its input until op's first checkpoints, then at a
    # half and at three quarters; each gate opens just before a rescale is requested, so
    # a burst of input is in flight through every handover, and the last gate only once
    # the second rescale was answered, so the job is still running when it comes.
    gates = Gates(tmp_path / "gates", monkeypatch, [RECORDS // 4, RECORDS // 2, RECORDS * 3 // 4])
    monkeypatch.setenv("SPILLWAY_CRASH_AT", f"{op}:{killed}:restore:0")
    settings = KafkaSettings(kafka_bootstrap)
    job = JobId(unique)
    answers: list[int] = []
    errors: list[BaseException] = []
    cli = ["rescale", "--job", unique, "--operator", op, "--bootstrap", kafka_bootstrap]

    def operate(_runs: OperatorRuns) -> None:
        try:
            wait_until(
                f"{op}'s first checkpoints",
                lambda: None not in checkpoint_ids(settings, job, op, 2),
            )
            gates.open(0)
            answers.append(recovery_main([*cli, "--parallelism", str(wider)]))
            floor = int(rescaled(settings, job)[0]["rescale"]["operators"][op]["floor"])
            wait_until(
                f"every new {op} subtask checkpointed",
                lambda: all(
                    c is not None and c > floor for c in checkpoint_ids(settings, job, op, wider)
                ),
            )
            gates.open(1)
            answers.append(recovery_main([*cli, "--parallelism", "1"]))
        except BaseException as e:  # reported by the test's thread, below
            errors.append(e)
        finally:
            gates.open_all()  # the job runs to its end either way

    def on_running(runs: OperatorRuns) -> None:
        threading.Thread(target=operate, args=(runs,), daemon=True).start()

    results = run_on_spark(
        JobConfig(case.ref, unique, kafka_bootstrap, master="local[8,3]"), on_running=on_running
    )
    assert errors == []
    assert answers == [0, 0]
    assert read_output(out) == case.reference(RECORDS)
    assert {r.status for r in results} == {"finished"}

    if case.slots is not None:  # the channel into op kept its slots through both rescales
        upstream, slots = case.slots
        counts = Admin(settings).partition_counts()
        assert counts[channel_topic(job, OperatorName(upstream), OperatorName(op))] == slots
    assert last_run_starts(settings, job) == Counter(case.starts)
    done = rescaled(settings, job)
    assert [(e["previous"], e["parallelism"]) for e in done] == [(2, wider), (wider, 1)]
    # After the SIGKILL, op[killed] restored from the handover again (it had no checkpoint).
    floor = done[0]["rescale"]["operators"][op]["floor"]
    (again,) = [
        e
        for e in read_events(settings, job)
        if e.get("event") == "started" and e.get("operator") == op and e.get("index") == killed
    ]
    assert (again["attempt"], again["restored_from"]) == (1, floor)
    with capsys.disabled():
        print_pauses(list(read_events(settings, job)), op)
    capsys.readouterr()
    assert recovery_main(["status", "--job", unique, "--bootstrap", kafka_bootstrap]) == 0
    assert f"rescale 2: {op} {wider} -> 1 subtasks" in capsys.readouterr().out


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
    # The source holds at half its input until the first run is stopped: the run is
    # stopped mid-stream however fast the machine.
    gates = Gates(tmp_path / "gates", monkeypatch, [RECORDS // 2])
    settings = KafkaSettings(kafka_bootstrap)
    job = JobId(unique)
    cli = ["rescale", "--job", unique, "--operator", "count", "--bootstrap", kafka_bootstrap]
    errors: list[BaseException] = []

    def operate(runs: OperatorRuns) -> None:
        try:
            wait_until(
                "count's first checkpoints",
                lambda: None not in checkpoint_ids(settings, job, "count", 2),
            )
            assert recovery_main([*cli, "--parallelism", "4"]) == 0
            floor = int(rescaled(settings, job)[0]["rescale"]["operators"]["count"]["floor"])
            wait_until(
                "every new count subtask checkpointed",
                lambda: all(
                    c is not None and c > floor for c in checkpoint_ids(settings, job, "count", 4)
                ),
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
    gates.open(0)
    second = run_on_spark(
        JobConfig(REF, unique, kafka_bootstrap, master="local[6,3]", parallelism={"count": 2})
    )
    assert {r.status for r in second} == {"finished"}
    assert read_output(out) == reference(RECORDS)
