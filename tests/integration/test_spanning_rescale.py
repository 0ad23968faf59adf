"""Records that span messages through an operator rescaled live: 10
records of 5 MB among 1,490 small ones go through a keyed channel (messages of at most
256 KiB, so 21 parts each) into ``count``, which ``spillway rescale`` takes from 2 to 3
subtasks while the generators keep writing; the new ``count[2]`` is SIGKILLed after its
third checkpoint and retried.

A record's parts lie in one partition, ownership moves whole partitions, and no
checkpoint position lies inside a record: a record the old owner had not completed at its
stop checkpoint is read again from its first part by the new owner. The output (per key:
count, sum of sequence numbers, bytes, sum of content hashes; each big record under a key
of its own) must equal the reference exactly: a record lost, repeated or altered changes
a row. Only count restarts, and the old subtasks' last checkpoints carry the handed-over
mark.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, OperatorName
from spillway.channels.routing.keygroups import key_group, key_group_range
from spillway.offsets.checkpoint import Checkpoint
from spillway.offsets.store import CheckpointStore
from spillway.recovery.cli import main as recovery_main
from spillway.recovery.observe.events import read_events
from spillway.spark_jobs.spark.jobconfig import JobConfig
from tests.integration.keygroupjobs import (
    count_checkpoints,
    last_run_starts,
    run_operated,
    wait_until,
)
from tests.integration.spanjobs import BIG_BYTES, is_big, make_event, read_output, reference

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.soak]

REF = "tests.integration.spanjobs:span_totals_rescalable"
RECORDS = 1500  # 10 big ones
RATE = 25.0  # records per second per generator subtask: about 30 s of input
MAX_PARALLELISM = 32  # the default of key_by


def handed_over(settings: KafkaSettings, job: JobId, handover: dict[str, Any]) -> list[Checkpoint]:
    """The checkpoints a live rescale's ``handover`` record names (read before the new
    subtasks may prune them)."""
    store = CheckpointStore(settings, job, OperatorName("count"), 3)
    try:
        found = [store.get(int(j), int(c)) for j, c in handover["checkpoints"].items()]
    finally:
        store.close()
    assert None not in found, f"handed-over checkpoints {handover['checkpoints']} not all kept"
    return [c for c in found if c is not None]


def test_five_megabyte_records_through_a_live_rescale_two_to_three_with_a_kill(
    kafka_bootstrap: str,
    unique: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bigs = [i for i in range(RECORDS) if is_big(i)]
    assert len(bigs) == 10
    # The new count[2] owns key groups of big records emitted late (after the rescale).
    owned_by_2 = set(key_group_range(2, 3, MAX_PARALLELISM))
    assert [i for i in bigs if key_group(f"big{i}", MAX_PARALLELISM) in owned_by_2][-1] > 1000

    out = tmp_path / "out"
    monkeypatch.setenv("SPILLWAY_TEST_OUT", str(out))
    monkeypatch.setenv("SPILLWAY_TEST_RECORDS", str(RECORDS))
    monkeypatch.setenv("SPILLWAY_TEST_RATE", str(RATE))
    # count[2] exists only after the rescale: its first attempt dies after 3 checkpoints.
    monkeypatch.setenv("SPILLWAY_CRASH_AT", "count:2:after-commit:0:3")
    settings = KafkaSettings(kafka_bootstrap)
    job = JobId(unique)
    answers: list[int] = []
    handed: list[Checkpoint] = []
    cli = ["rescale", "--job", unique, "--operator", "count", "--bootstrap", kafka_bootstrap]

    def operate() -> None:
        wait_until(
            "count's first checkpoints", lambda: None not in count_checkpoints(settings, job, 2)
        )
        answers.append(recovery_main([*cli, "--parallelism", "3"]))
        (done,) = [e for e in read_events(settings, job) if e.get("event") == "rescaled"]
        handed.extend(handed_over(settings, job, done["rescale"]["operators"]["count"]))

    # As in test_spanning_records.py: small fetches and a checkpoint every 20 ms, so that
    # checkpoints (the stop checkpoints of the rescale among them) often fall while a
    # reader holds some parts of a record.
    config = JobConfig(
        REF,
        unique,
        kafka_bootstrap,
        master="local[8,3]",
        checkpoint_interval_s=0.02,
        client={"max.partition.fetch.bytes": 256 * 1024, "queued.max.messages.kbytes": 512},
    )
    results = run_operated(config, operate)
    assert answers == [0]
    assert {r.status for r in results} == {"finished"}

    got = read_output(out)
    assert got == reference(RECORDS)
    assert all(got[f"big{i}"][2] == len(make_event(i)["data"]) >= BIG_BYTES - 32 for i in bigs)

    # Nothing but count restarted: 2 subtasks, then 3, count[2]'s first attempt killed.
    assert last_run_starts(settings, job) == Counter(
        {
            ("events[0]", 0): 1,
            ("events[1]", 0): 1,
            ("out[0]", 0): 1,
            ("count[0]", 0): 2,
            ("count[1]", 0): 2,
            ("count[2]", 0): 1,
            ("count[2]", 1): 1,
        }
    )
    events = list(read_events(settings, job))
    (done,) = [e for e in events if e.get("event") == "rescaled"]
    assert (done["previous"], done["parallelism"]) == (2, 3)
    assert done["rescale"]["operators"]["count"]["live"] is True
    # Each old subtask's last checkpoint is its stop checkpoint, marked handed over, and
    # no new subtask found one without the mark.
    assert sorted(c.subtask.index for c in handed) == [0, 1]
    assert all(c.meta.handed_over for c in handed)
    assert not [e for e in events if e.get("handover_unmarked")]
    # Measured, not asserted (`pytest -s` shows it): stop checkpoints taken while a record
    # was open among another writer's messages (the only kind a checkpoint shows: skips).
    inside = [c.subtask.index for c in handed if any(c.reader.skip.values())]
    with capsys.disabled():
        print(f"\nstop checkpoints with a record open among others (skip state): count{inside}")
    capsys.readouterr()
    assert recovery_main(["status", "--job", unique, "--bootstrap", kafka_bootstrap]) == 0
    status = capsys.readouterr().out
    assert "rescale 1: count 2 -> 3 subtasks" in status
    assert "died before its handed-over checkpoint" not in status
