"""Restarting a stopped job with another parallelism (real Spark, real broker): a keyed
count runs with 2 subtasks, is stopped, resumes with 4 (one of them SIGKILLed at its first
checkpoint, so it restores from the handover a second time), is stopped again and
finishes with 1 (SIGKILLed once after its own first checkpoint). The output must equal
the plain-Python reference exactly: a record lost or counted twice changes a count or a
sum of sequence numbers, and a key whose records reached two subtasks gives two rows.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import RescaleError
from spillway.channels.ids import JobId, OperatorName
from spillway.channels.kafka.admin import Admin
from spillway.channels.naming import checkpoint_topic
from spillway.cli import main as cli_main
from spillway.recovery.cli import main as recovery_main
from spillway.recovery.control.globalckpt import read_completed
from spillway.recovery.observe.events import last_submission, read_events
from spillway.recovery.runtime.options import SubtaskResult
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from tests.integration.gates import Gates, started
from tests.integration.keygroupjobs import (
    count_checkpoints,
    read_output,
    reference,
    run_stopped,
    wait_until,
)

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.soak]

REF = "tests.integration.keygroupjobs:keyed_count"
RECORDS = 24_000


def starts(settings: KafkaSettings, job: JobId, run: str) -> list[tuple[str, int]]:
    """(operator[index], attempt) of every subtask start of run ``run``."""
    return sorted(
        (f"{e['operator']}[{e['index']}]", int(e["attempt"]))
        for e in read_events(settings, job)
        if e.get("event") == "started" and e.get("run") == run
    )


def run(
    bootstrap: str,
    job: str,
    p: int,
    stop_when: Callable[[KafkaSettings], bool] | None,
    **config: Any,
) -> tuple[list[SubtaskResult], dict[str, Any]]:
    """Run the job with count at ``p``; stop it once ``stop_when`` holds (None: to the end).
    Returns the results and the run's submitted event."""
    job_config = JobConfig(
        REF, job, bootstrap, master=f"local[{p + 3},3]", parallelism={"count": p}, **config
    )
    results = run_stopped(job_config, stop_when)
    submitted = last_submission(KafkaSettings(bootstrap), JobId(job))
    assert submitted is not None
    return results, submitted


def test_a_keyed_count_rescaled_two_four_one_from_savepoints_with_kills(
    kafka_bootstrap: str,
    unique: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "out"
    monkeypatch.setenv("SPILLWAY_TEST_OUT", str(out))
    monkeypatch.setenv("SPILLWAY_TEST_RECORDS", str(RECORDS))
    # The source holds at a third of its input in run 1 and at two thirds in run 2, so each
    # is stopped mid-stream however fast the machine; in run 3 it holds at five sixths
    # until count[0] was killed and restarted, so the kill lands while input is left.
    gates = Gates(
        tmp_path / "gates", monkeypatch, [RECORDS // 3, RECORDS * 2 // 3, RECORDS * 5 // 6]
    )
    settings = KafkaSettings(kafka_bootstrap)
    job = JobId(unique)

    # Run 1: p = 2 until both subtasks checkpointed some state, then stop.
    def some_state(s: KafkaSettings) -> bool:
        return all(c is not None and c.state.changelogs for c in count_checkpoints(s, job, 2))

    first, sub1 = run(kafka_bootstrap, unique, 2, some_state)
    assert {r.status for r in first} == {"stopped"}
    assert sub1["rescale"] is None
    handed = count_checkpoints(settings, job, 2)

    # Run 2: p = 4. count[3] dies at its first checkpoint (outputs flushed, not committed)
    # and restores from the handover again; stop once every subtask checkpointed itself.
    monkeypatch.setenv("SPILLWAY_CRASH_AT", "count:3:after-produce:0:1")
    floor2: list[int] = []

    def all_four_checkpointed(s: KafkaSettings) -> bool:
        if not floor2:
            last = last_submission(s, job)
            if not last or not last.get("rescale"):
                return False
            floor2.append(int(last["rescale"]["operators"]["count"]["floor"]))
        restarted = any(e == ("count[3]", 1) for e in starts(s, job, last_run(s, job)))
        ckpts = count_checkpoints(s, job, 4)
        return restarted and all(c is not None and c.checkpoint_id > floor2[0] for c in ckpts)

    gates.open(0)
    second, sub2 = run(kafka_bootstrap, unique, 4, all_four_checkpointed)
    assert {r.status for r in second} == {"stopped"}
    rescale2 = sub2["rescale"]
    assert rescale2["number"] == 1
    handover = rescale2["operators"]["count"]
    assert handover["previous"] == 2
    assert handover["checkpoints"] == {
        str(i): int(c.checkpoint_id) for i, c in enumerate(handed) if c is not None
    }
    floor = int(handover["floor"])
    # Every count subtask started from the handover (count[3] twice, the SIGKILL between);
    # nothing else restarted.
    assert starts(settings, job, sub2["run"]) == sorted(
        [("events[0]", 0), ("events[1]", 0), ("out[0]", 0)]
        + [(f"count[{i}]", 0) for i in range(4)]
        + [("count[3]", 1)]
    )
    restored = restored_from(settings, job, sub2["run"])
    assert restored == {("count[0]", 0): floor, ("count[1]", 0): floor, ("count[2]", 0): floor,
                        ("count[3]", 0): floor, ("count[3]", 1): floor}  # fmt: skip
    four = count_checkpoints(settings, job, 4)
    assert [c.meta.owned.to_json() for c in four if c is not None] == [
        {
            f"spillway.{unique}.ch.events.count": list(r),
            f"spillway.{unique}.changelog.count": list(r),
        }
        for r in (range(2), range(2, 4), range(4, 6), range(6, 8))
    ]
    counts = Admin(settings).partition_counts()
    assert counts[checkpoint_topic(job, OperatorName("count"))] == 4

    # Run 3: p = 1 to the end; count[0] dies once after its own first checkpoint.
    monkeypatch.setenv("SPILLWAY_CRASH_AT", "count:0:after-produce:0:2")
    gates.open(1)

    def open_once_restarted() -> None:
        try:
            wait_until("count[0] restarted", lambda: started(settings, job, ["count[0]"], 1))
        finally:
            gates.open_all()  # run 3 goes to its end either way; the asserts below judge it

    threading.Thread(target=open_once_restarted, daemon=True).start()
    third, sub3 = run(kafka_bootstrap, unique, 1, None)
    assert {r.status for r in third} == {"finished"}
    assert sub3["rescale"]["number"] == 2
    assert sub3["rescale"]["operators"]["count"]["previous"] == 4
    assert sub3["rescale"]["operators"]["count"]["checkpoints"] == {
        str(i): int(c.checkpoint_id) for i, c in enumerate(four) if c is not None
    }
    assert read_output(out) == reference(RECORDS)
    assert starts(settings, job, sub3["run"]) == [
        ("count[0]", 0),
        ("count[0]", 1),
        ("events[0]", 0),
        ("events[1]", 0),
        ("out[0]", 0),
    ]
    restored3 = restored_from(settings, job, sub3["run"])
    floor3 = int(sub3["rescale"]["operators"]["count"]["floor"])
    assert restored3[("count[0]", 0)] == floor3
    assert restored3[("count[0]", 1)] == floor3 + 1  # its own checkpoint since the handover
    # The key groups all went to the one subtask left, and it read them to the end.
    (last,) = count_checkpoints(settings, job, 1)
    assert last is not None
    assert last.meta.finished
    assert last.meta.owned.of_topic(f"spillway.{unique}.ch.events.count") == tuple(range(8))

    # spillway status names the rescale.
    assert recovery_main(["status", "--job", unique, "--bootstrap", kafka_bootstrap]) == 0
    shown = capsys.readouterr().out
    handed4 = ", ".join(f"{i}:{c.checkpoint_id}" for i, c in enumerate(four) if c is not None)
    assert f"rescale 2: count 4 -> 1 subtasks (from checkpoints {handed4})\n" in shown

    # A source cannot be rescaled: refused before anything starts, with the reason.
    with pytest.raises(RescaleError, match="a source cannot be rescaled"):
        run_on_spark(JobConfig(REF, unique, kafka_bootstrap, master="local[4,1]",
                               parallelism={"count": 1, "events": 3}))  # fmt: skip


def last_run(settings: KafkaSettings, job: str) -> str:
    last = last_submission(settings, JobId(job))
    return str(last["run"]) if last else ""


def restored_from(settings: KafkaSettings, job: JobId, run: str) -> dict[tuple[str, int], int]:
    """(operator[index], attempt) → the checkpoint id it restored from, for run ``run``."""
    return {
        (f"{e['operator']}[{e['index']}]", int(e["attempt"])): e["restored_from"]
        for e in read_events(settings, job)
        if e.get("event") == "started" and e.get("run") == run and e["operator"] == "count"
    }


def test_from_a_global_savepoint_with_another_parallelism(
    kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`spillway run --from-savepoint N --parallelism count=3`: the job is rewound to global
    checkpoint N (what the first run did after N is discarded) and count resumes with 3
    subtasks, one of them SIGKILLed at its first checkpoint."""
    out = tmp_path / "out"
    monkeypatch.setenv("SPILLWAY_TEST_OUT", str(out))
    monkeypatch.setenv("SPILLWAY_TEST_RECORDS", str(RECORDS))
    # The source holds at a quarter of its input until the first savepoint N, then at a
    # half until the run is stopped: the first run read input after N (which the rewind
    # discards) and stopped mid-stream however fast the machine.
    gates = Gates(tmp_path / "gates", monkeypatch, [RECORDS // 4, RECORDS // 2])
    settings = KafkaSettings(kafka_bootstrap)
    job = JobId(unique)
    mode = {"checkpoint_mode": "unaligned", "global_interval_s": 1.0}

    def two_savepoints(s: KafkaSettings) -> bool:
        done = len(read_completed(s, job))
        if done >= 1:
            gates.open(0)
        return done >= 2

    first, _ = run(kafka_bootstrap, unique, 2, two_savepoints, **mode)
    gates.open_all()
    assert {r.status for r in first} == {"stopped"}
    n = int(read_completed(settings, job)[0]["id"])

    monkeypatch.setenv("SPILLWAY_CRASH_AT", "count:2:after-produce:0:1")
    common = ["--job-id", unique, "--bootstrap", kafka_bootstrap, "--master", "local[6,3]"]
    args = ["run", REF, *common, "--checkpoint-mode", "unaligned"]
    assert cli_main([*args, "--from-savepoint", str(n), "--parallelism", "count=3"]) == 0
    assert read_output(out) == reference(RECORDS)
    submitted = last_submission(settings, job)
    assert submitted is not None
    assert submitted["rewound_to"] == n
    assert submitted["rescale"]["operators"]["count"]["previous"] == 2
    rewound = [e for e in read_events(settings, job) if e.get("event") == "rewound"]
    assert [e["to"] for e in rewound] == [n]
    # The handover is the rewind's checkpoints (copies of N's parts), not the stop's.
    handed = submitted["rescale"]["operators"]["count"]["checkpoints"]
    assert handed == {str(i): rewound[0]["checkpoints"][f"{unique}/count[{i}]"] for i in range(2)}
    assert starts(settings, job, submitted["run"]) == sorted(
        [("events[0]", 0), ("events[1]", 0), ("out[0]", 0)]
        + [(f"count[{i}]", 0) for i in range(3)]
        + [("count[2]", 1)]
    )
