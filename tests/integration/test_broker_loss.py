"""Broker loss without restarts (issue 33): one of three brokers SIGKILLed mid-job.

A :class:`~spillway.devtools.localbroker.quorum.LocalQuorum` of three KRaft nodes
(replication 3, ``min.insync.replicas`` 2, transaction log and offsets topic replicated 3)
carries the click-stream job (a keyed count, 8 subtasks on local Spark) under a paced,
steady input. Once every subtask has committed a checkpoint, the node leading the most
transaction-log and job partitions is SIGKILLed (transaction coordinators and leaders
move) and started again a few seconds later.

The job must finish with output equal to the batch reference (nothing lost, nothing
counted twice), with no subtask restarted (every ``fencing`` of attempt 0: a transaction
the moving cluster would not let finish is redone within the attempt,
spillway.recovery.runtime.redo), and every redo visible as its ``redo`` event, counted by
``spillway status`` apart from restarts. What happened (redos, their errors) is logged.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from bench.brokerloss import BackgroundJob, Checkpoints
from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId
from spillway.channels.kafka.clients import admin_client
from spillway.devtools.localbroker.quorum import LocalQuorum
from spillway.examples import clicks
from spillway.recovery.observe.events import read_events
from spillway.recovery.observe.status import fold_events
from spillway.spark_jobs.spark.jobconfig import JobConfig
from tests.integration.support import read_output

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.soak]

log = logging.getLogger(__name__)

REF = "spillway.examples.clicks:pipeline"
RECORDS = 40_000
PARALLELISM = 2
EMIT_S = 24.0  # the sources are paced to emit for about this long: the kill lands mid-stream
DOWN_S = 4.0  # the killed node stays down this long
READY_TIMEOUT_S = 90.0  # job submitted → every subtask started and checkpointed
JOB_TIMEOUT_S = 240.0  # job submitted → job finished


def busiest_node(bootstrap: str, job: str) -> int:
    """The node leading the most partitions of the transaction log and of ``job``'s topics
    (its loss moves the most transaction coordinators and leaders)."""
    md = admin_client(bootstrap).list_topics(timeout=10.0)
    led: Counter[int] = Counter()
    for name, topic in md.topics.items():
        if name == "__transaction_state" or job in name:
            led.update(p.leader for p in topic.partitions.values() if p.leader >= 0)
    return led.most_common(1)[0][0]


def name(e: dict[str, Any]) -> str:
    """The subtask an event is of, ``operator[index]``."""
    return f"{e['operator']}[{e['index']}]"


def _events(settings: KafkaSettings, job: str) -> list[dict[str, Any]]:
    try:
        return list(read_events(settings, JobId(job)))
    except Exception:  # the driver has not created the event topic yet
        return []


def test_one_broker_of_three_killed_mid_job_restarts_no_subtask(
    tmp_path: Path, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    for key, value in {
        "CLICKS_RECORDS": str(RECORDS),
        "CLICKS_PARALLELISM": str(PARALLELISM),
        "CLICKS_OUT": str(out),
        "CLICKS_RATE": str(RECORDS / PARALLELISM / EMIT_S),
    }.items():
        monkeypatch.setenv(key, value)  # the driver builds the plan from them
    monkeypatch.delenv("SPILLWAY_CRASH_AT", raising=False)
    job = unique
    with LocalQuorum.with_free_ports(tmp_path / "quorum") as quorum:
        settings = KafkaSettings(quorum.bootstrap)
        t0 = time.monotonic()
        job_run = BackgroundJob(JobConfig(REF, job, quorum.bootstrap, master="local[8,4]"))
        ckpts = Checkpoints(settings, job)
        try:
            # Every subtask runs and has committed a checkpoint (its first transaction).
            while None in ckpts.first_after(0.0).values():
                assert job_run.alive(), f"the job ended before the kill: {job_run.failure}"
                assert time.monotonic() - t0 < READY_TIMEOUT_S, "the job did not get going"
                time.sleep(0.5)
        finally:
            ckpts.close()
        victim = busiest_node(quorum.bootstrap, job)
        assert quorum.kill(victim)
        log.info("killed node %d %.1f s after the job was submitted", victim, time.monotonic() - t0)
        time.sleep(DOWN_S)
        quorum.restart(victim)
        ended = job_run.join(max(1.0, JOB_TIMEOUT_S - (time.monotonic() - t0)))
        assert ended, f"the job did not finish within {JOB_TIMEOUT_S:.0f} s"
        assert not job_run.failure, job_run.failure
        results = job_run.results
        assert {r.status for r in results} == {"finished"}, results
        assert read_output(out) == clicks.reference(RECORDS)

        events = _events(settings, job)
        fenced = [e for e in events if e.get("event") == "fencing" and "by" not in e]
        assert {e["attempt"] for e in fenced} == {0}, "a subtask restarted (a new attempt)"
        redos = [e for e in events if e.get("event") == "redo"]
        folded = fold_events(events)
        assert sum(log.restarts for log in folded.values()) == 0
        assert sum(log.redos for log in folded.values()) == len(redos)
        # Every redo's runner announced itself again in the same attempt and process.
        for r in redos:
            assert r["attempt"] == 0
            assert any(
                e.get("event") == "fencing"
                and (e["operator"], e["index"], e["pid"]) == (r["operator"], r["index"], r["pid"])
                and e["time"] >= r["time"]
                for e in fenced
            ), r
        log.info(
            "node %d killed for %.0f s: %d redos (%s); results: %s",
            victim,
            DOWN_S,
            len(redos),
            [(name(r), r["error"][:160]) for r in redos],
            sorted((r.subtask, r.redos) for r in results),
        )
