"""`spillway upgrade` on a running job (real Spark, real broker): ``tag`` stamps every
record with the VERSION of the pipeline file, which the test rewrites while the job runs.
An incompatible rewrite (a changed output schema) is refused and changes nothing; a
compatible one restarts only ``tag``, whose subtask 0 is then SIGKILLed. Every record
must come out exactly once, each source partition's records v1 up to a point and v2 after
it, and no other operator's subtask may start more than once. A third version written
after the upgrade must not reach the killed subtask's retry: it runs the code that the
driver checked and shipped with its task.

The source holds at two gates (tests/integration/gates.py) rather than being paced: the
first half of the records goes through v1; the next quarter is released once ``tag`` runs
the upgraded code, and the last once the killed subtask's retry has started.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, OperatorName
from spillway.offsets.store import CheckpointStore
from spillway.recovery.cli import main as recovery_main
from spillway.recovery.observe.events import read_events
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from spillway.spark_jobs.spark.opruns import OperatorRuns
from tests.integration.gates import Gates
from tests.integration.keygroupjobs import last_run_starts, wait_until

pytestmark = [pytest.mark.broker, pytest.mark.spark]

RECORDS = 4000
MODULE = "upgradable_pipeline"
PIPELINE = """
import os
from tests.integration.gates import held_generate
from spillway.spark_jobs.api.pipeline import Pipeline

VERSION = "{version}"
EVENT = {{"type": "record", "name": "Event", "fields": [{{"name": "seq", "type": "long"}}]}}
TAGGED = {{"type": "record", "name": "Tagged", "fields": [
    {{"name": "seq", "type": "long"}}, {{"name": "{field}", "type": "string"}}]}}


def tag(r):
    return {{"seq": r["seq"], "{field}": VERSION}}


def pipeline():
    p = Pipeline("upgrade")
    held_generate(
        p, "events", make=lambda i: {{"seq": i}}, schema=EVENT,
        count=int(os.environ["SPILLWAY_TEST_RECORDS"]), parallelism=2,
    ).map("tag", tag, schema=TAGGED, parallelism=2).write_jsonl(
        "out", os.environ["SPILLWAY_TEST_OUT"], parallelism=1
    )
    return p
"""


def write_pipeline(path: Path, version: str, field: str = "version") -> None:
    path.write_text(PIPELINE.format(version=version, field=field))


def tag_checkpoints(settings: KafkaSettings, job: JobId) -> list[int | None]:
    store = CheckpointStore(settings, job, OperatorName("tag"), 2)
    try:
        latest = [store.latest(i) for i in range(2)]
    finally:
        store.close()
    return [None if c is None else int(c.checkpoint_id) for c in latest]


def events_of(settings: KafkaSettings, job: JobId, kind: str) -> list[dict[str, Any]]:
    return [e for e in read_events(settings, job) if e.get("event") == kind]


def read_rows(out: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for f in sorted(glob.glob(str(out / "out" / "*.jsonl")))
        for line in Path(f).read_text().splitlines()
    ]


def test_an_upgraded_map_function_takes_over_exactly_once_with_a_kill(
    kafka_bootstrap: str,
    unique: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    source = code_dir / f"{MODULE}.py"
    write_pipeline(source, "v1")
    monkeypatch.syspath_prepend(str(code_dir))  # driver, and executors (their PYTHONPATH)
    out = tmp_path / "out"
    monkeypatch.setenv("SPILLWAY_TEST_OUT", str(out))
    monkeypatch.setenv("SPILLWAY_TEST_RECORDS", str(RECORDS))
    # The first half is there before the upgrade; the gates release the rest to the new code.
    gates = Gates(tmp_path / "gates", monkeypatch, [RECORDS // 2, RECORDS * 3 // 4])
    settings = KafkaSettings(kafka_bootstrap)
    job = JobId(unique)
    answers: list[int] = []
    errors: list[BaseException] = []
    killed: list[int] = []
    cli = ["upgrade", "--job", unique, "--operator", "tag", "--bootstrap", kafka_bootstrap]

    def operate(_runs: OperatorRuns) -> None:
        try:
            wait_until("first checkpoints", lambda: None not in tag_checkpoints(settings, job))
            write_pipeline(source, "v2-incompatible", field="release")  # output schema changed
            answers.append(recovery_main(cli))
            write_pipeline(source, "v2-upgraded")  # another size: no stale bytecode
            answers.append(recovery_main(cli))
            # Deployed later, never upgraded to: tasks run the source the driver checked
            # (shipped with them), not what lies on the executors' path now.
            write_pipeline(source, "v3-not-upgraded")
            (done,) = events_of(settings, job, "upgraded")

            def restarted() -> list[dict[str, Any]]:
                return [
                    e
                    for e in events_of(settings, job, "started")
                    if (e["operator"], e["index"]) == ("tag", 0) and e["time"] > done["time"]
                ]

            wait_until("tag[0] restarted", lambda: bool(restarted()))
            at_restart = tag_checkpoints(settings, job)[0]
            assert at_restart is not None
            gates.open(0)  # records for the upgraded code
            # Right after its first checkpoint with the new code: v2 output committed, more
            # in flight.
            wait_until("tag[0] checkpointed again", lambda: tag_checkpoints(settings, job)[0]
                       != at_restart)  # fmt: skip
            pid = int(restarted()[0]["pid"])
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            wait_until("tag[0]'s retry started", lambda: any(
                e["attempt"] == 1 for e in restarted()
            ))  # fmt: skip
            gates.open(1)  # the rest, for the retry (and tag[1])
        except BaseException as e:  # reported by the test's thread, below
            errors.append(e)
            gates.open_all()

    def on_running(runs: OperatorRuns) -> None:
        threading.Thread(target=operate, args=(runs,), daemon=True).start()

    results = run_on_spark(
        JobConfig(f"{MODULE}:pipeline", unique, kafka_bootstrap, master="local[5,3]"),
        on_running=on_running,
    )
    assert errors == []
    assert answers == [2, 0]
    assert len(killed) == 1
    assert {r.status for r in results} == {"finished"}

    rows = read_rows(out)
    assert sorted(r["seq"] for r in rows) == list(range(RECORDS))  # each exactly once
    assert {r["version"] for r in rows} == {"v1", "v2-upgraded"}
    for partition in (0, 1):  # generator subtask i makes seq i, i + 2, ... into tag[i]
        versions = [r["version"] for r in sorted(rows, key=lambda r: r["seq"])
                    if r["seq"] % 2 == partition]  # fmt: skip
        switch = versions.index("v2-upgraded")
        assert switch > 0
        assert versions == ["v1"] * switch + ["v2-upgraded"] * (len(versions) - switch)

    (done_event,) = events_of(settings, job, "upgraded")
    (refused,) = events_of(settings, job, "upgrade-failed")
    assert "output to out: schema" in refused["error"]
    assert "release" in refused["error"]
    starts = last_run_starts(settings, job)
    # Only tag restarted: once for the upgrade, and tag[0] once more after the SIGKILL.
    assert starts == Counter(
        {
            ("events[0]", 0): 1,
            ("events[1]", 0): 1,
            ("out[0]", 0): 1,
            ("tag[0]", 0): 2,
            ("tag[1]", 0): 2,
            ("tag[0]", 1): 1,
        }
    )
    with capsys.disabled():  # measured, not asserted (`pytest -s` shows it)
        (requested,) = [e for e in events_of(settings, job, "upgrade-requested")
                        if e["request"] == done_event["request"]]  # fmt: skip
        first = min(e["time"] for e in events_of(settings, job, "started")
                    if e["operator"] == "tag" and e["time"] > done_event["time"])  # fmt: skip
        print(f"upgrade: tag stopped after {done_event['stopped_s']} s, handed over after "
              f"{done_event['time'] - requested['time']:.1f} s, first new subtask started "
              f"after {first - requested['time']:.1f} s")  # fmt: skip
    capsys.readouterr()
    assert recovery_main(["status", "--job", unique, "--bootstrap", kafka_bootstrap]) == 0
    assert f"upgrade 1: tag restarted with the code of {source}" in capsys.readouterr().out
