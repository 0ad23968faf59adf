"""Restarting a stopped job with changed code and topology (real Spark, real broker): a
keyed count runs with 2 subtasks and is stopped with state checkpointed; the next version
inserts a map ``tag`` between ``count`` and ``out`` and runs count with 3 subtasks. Without
--allow-dropped-state the restart is refused with the compatibility report (the removed
channel count -> out); with it, the job runs to the end from the savepoint, count[0]
SIGKILLed at its first checkpoint. The output must equal the plain-Python reference with
every key tagged: a record lost or counted twice changes a count or a sum.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import EvolutionError
from spillway.channels.ids import JobId
from spillway.offsets.checkpoint import fingerprint
from spillway.recovery.observe.events import last_submission, read_events, record_job_event
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from spillway.spark_jobs.spark.opruns import OperatorRuns
from tests.integration.gates import Gates
from tests.integration.keygroupjobs import count_checkpoints, read_output, reference, wait_until

pytestmark = [pytest.mark.broker, pytest.mark.spark]

OLD = "tests.integration.keygroupjobs:keyed_count"
NEW = "tests.integration.keygroupjobs:tagged_count"
RECORDS = 8_000


def test_a_savepoint_restart_with_an_added_operator_and_a_new_parallelism(
    kafka_bootstrap: str,
    unique: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "out"
    monkeypatch.setenv("SPILLWAY_TEST_OUT", str(out))
    monkeypatch.setenv("SPILLWAY_TEST_RECORDS", str(RECORDS))
    # The source holds at half its input until run 1 is stopped, so it stops mid-stream.
    gates = Gates(tmp_path / "gates", monkeypatch, [RECORDS // 2])
    settings = KafkaSettings(kafka_bootstrap)
    job = JobId(unique)

    # Run 1, the old code: stop once both count subtasks checkpointed some state.
    errors: list[BaseException] = []

    def stop_with_state(runs: OperatorRuns) -> None:
        try:
            wait_until("count state checkpointed", lambda: all(
                c is not None and c.state.changelogs for c in count_checkpoints(settings, job, 2)
            ))  # fmt: skip
            last = last_submission(settings, job)
            record_job_event(settings, job, "stop-requested", run=last["run"] if last else "")
            runs.stop_all()
        except BaseException as e:  # reported by the test's thread, below
            errors.append(e)
            runs.stop_all()

    first = run_on_spark(
        JobConfig(OLD, unique, kafka_bootstrap, master="local[5,3]"),
        on_running=lambda runs: threading.Thread(
            target=stop_with_state, args=(runs,), daemon=True
        ).start(),
    )
    assert errors == []
    assert {r.status for r in first} == {"stopped"}
    gates.open(0)  # the later runs read the rest
    sub1 = last_submission(settings, job)
    assert sub1 is not None
    old_fingerprint = fingerprint(sub1["topology"]["description"])
    saved = count_checkpoints(settings, job, 2)
    assert all(c is not None and c.meta.topology == old_fingerprint for c in saved)

    # The new code without --allow-dropped-state: refused before anything starts.
    new = JobConfig(NEW, unique, kafka_bootstrap, master="local[8,3]", parallelism={"count": 3})
    with pytest.raises(EvolutionError) as refused:
        run_on_spark(new)
    report = str(refused.value)
    assert "REFUSED, nothing was started" in report
    assert (
        "REFUSED channel count -> out: removed: records its reader had not consumed at the "
        "savepoint are dropped (refused without --allow-dropped-state)"
    ) in report
    assert last_submission(settings, job)["run"] == sub1["run"]  # type: ignore[index]

    # With it: count at 3 from the savepoint, count[0] killed at its first checkpoint.
    monkeypatch.setenv("SPILLWAY_CRASH_AT", "count:0:after-produce:0:1")
    results = run_on_spark(JobConfig(
        NEW, unique, kafka_bootstrap, master="local[8,3]", parallelism={"count": 3},
        allow_dropped_state=True,
    ))  # fmt: skip
    assert {r.status for r in results} == {"finished"}
    printed = capsys.readouterr().err
    assert "ok      operator 'tag': added: starts with no state" in printed
    assert "ok      operator 'count': parallelism 2 -> 3 (rescaled from the savepoint)" in printed
    assert read_output(out) == {f"m:{k}": v for k, v in reference(RECORDS).items()}

    sub2 = last_submission(settings, job)
    assert sub2 is not None
    assert sub2["rescale"]["fingerprints"][0] == old_fingerprint
    assert sub2["rescale"]["operators"]["count"]["previous"] == 2
    starts = sorted(
        (f"{e['operator']}[{e['index']}]", int(e["attempt"]))
        for e in read_events(settings, job)
        if e.get("event") == "started" and e.get("run") == sub2["run"]
    )
    assert starts == sorted(
        [("events[0]", 0), ("events[1]", 0), ("out[0]", 0), ("tag[0]", 0), ("count[0]", 1)]
        + [(f"count[{i}]", 0) for i in range(3)]
    )
