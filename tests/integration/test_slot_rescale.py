"""Restarting a job with another parallelism of an operator whose input is round-robin
(real Spark, real broker): a stateless map behind a round-robin edge (32 slots) runs with
2 subtasks, is stopped, resumes with 3 and finishes with 1 (`--parallelism tag=N` both
ways); the new ``tag[2]`` is SIGKILLed while it restores. The output must equal the
plain-Python reference exactly (a record lost or mapped twice changes a count or a sum of
sequence numbers). Its live rescale is a case of test_live_rescale.py's family.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, OperatorName
from spillway.channels.kafka.admin import Admin
from spillway.channels.naming import channel_topic
from spillway.recovery.observe.events import last_submission, read_events
from spillway.spark_jobs.spark.jobconfig import JobConfig
from tests.integration.gates import Gates
from tests.integration.keygroupjobs import read_output, run_stopped
from tests.integration.slotjobs import checkpoint_ids, tagged_reference

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.soak]

REF = "tests.integration.slotjobs:rebalanced_tag"
RECORDS = 24_000


def test_a_round_robin_fed_map_restarted_from_savepoints_at_three_then_one(
    kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tag runs with 2 subtasks, is stopped, resumes with 3 (the new tag[2] SIGKILLed while
    it restores, so it restores from the handover twice), is stopped again once each new
    subtask checkpointed, and finishes with 1: `--parallelism tag=N` both ways."""
    out = tmp_path / "out"
    monkeypatch.setenv("SPILLWAY_TEST_OUT", str(out))
    monkeypatch.setenv("SPILLWAY_TEST_RECORDS", str(RECORDS))
    # The source holds at a third of its input in the first run and at two thirds in the
    # second, so each is stopped mid-stream however fast the machine; each gate opens
    # between runs, so every run reads new input.
    gates = Gates(tmp_path / "gates", monkeypatch, [RECORDS // 3, RECORDS * 2 // 3])
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
    gates.open(0)
    second = run_stopped(config(3), checkpointed(3))
    gates.open(1)
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
