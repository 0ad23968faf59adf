"""`spillway rescale`, `spillway upgrade` and a savepoint restart on a Spark standalone
cluster (:class:`spillway.devtools.cluster.LocalCluster`: a master, two workers and a broker, all
on 127.0.0.1), as asked: "the commands work on local mode and on `spillway
cluster`". One job (generate → map ``tag`` → keyed ``count`` → files, and ``tag`` → a
``rows`` file sink) goes through three changes:

1. ``spillway rescale`` of ``count`` 2 → 3 while the job runs; the new ``count[2]``
   SIGKILLs its own Python worker while it restores (``SPILLWAY_CRASH_AT``), so Spark
   retries it on an executor and it restores from the handover again;
2. ``spillway upgrade`` of ``tag`` after its source file changed on disk (v1 → v2). Then a
   v3 is put on disk that was never upgraded to, and the upgraded ``tag[0]`` is
   SIGKILLed after its first checkpoint: its retry on the executor must run the v2 that
   the driver checked and shipped with the task, not what lies on disk;
3. the job is stopped (what SIGTERM to ``spillway run`` does), v4 is put on disk, and
   ``spillway run --master spark://... --from-savepoint latest --parallelism count=4``
   resumes it to the end.

Every record must reach ``rows`` exactly once and, per source partition, as v1, then v2,
then v4 (never v3); ``count``'s output must equal the plain-Python reference exactly. In
the first run nothing but ``count`` and ``tag`` restarted, each as asked; in the second
every subtask started once.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, OperatorName
from spillway.cli import main as spillway_main
from spillway.devtools.cluster import LocalCluster
from spillway.offsets.store import CheckpointStore
from spillway.recovery.cli import main as recovery_main
from spillway.recovery.observe.events import last_submission, read_events, record_job_event
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from spillway.spark_jobs.spark.opruns import OperatorRuns
from tests.integration.keygroupjobs import (
    first_starts,
    last_run_starts,
    read_output,
    reference,
    wait_until,
)

pytestmark = pytest.mark.soak

RECORDS = 12_000
# The source's pace in the first run: it must still be writing when that run stops (at
# load 35 on 2 cores the first run took 91 s, Spark's start included). The second run
# emits the rest unpaced: what it checks does not need the pace.
EMIT_S = 150.0
# 2 workers x 5 cores: 10 task slots, one per subtask of the widest run (count at 4).
WORKER_CORES = 5
MODULE = "cluster_changes_pipeline"
PIPELINE = """
import os

from spillway.spark_jobs.api.pipeline import Pipeline
from tests.integration.keygroupjobs import COUNT, EVENT, add, make_event

VERSION = "{version}"
TAGGED = {{"type": "record", "name": "Tagged", "fields": [
    {{"name": "seq", "type": "long"}}, {{"name": "key", "type": "string"}},
    {{"name": "version", "type": "string"}}]}}


def tag(r):
    return {{"seq": r["seq"], "key": r["key"], "version": VERSION}}


def pipeline():
    out = os.environ["SPILLWAY_TEST_OUT"]
    p = Pipeline("cluster-changes")
    tagged = p.generate(
        "events", make=make_event, schema=EVENT,
        count=int(os.environ["SPILLWAY_TEST_RECORDS"]), parallelism=2,
        rate=float(os.environ["SPILLWAY_TEST_RATE"]) or None,
    ).map("tag", tag, schema=TAGGED, parallelism=2)
    tagged.write_jsonl("rows", out, parallelism=1)
    tagged.key_by(lambda r: r["key"], max_parallelism=8).aggregate(
        "count", init=lambda: [0, 0], add=add,
        result=lambda k, acc: {{"key": k, "n": acc[0], "seqs": acc[1]}},
        schema=COUNT, parallelism=2,
    ).write_jsonl("out", out, parallelism=1)
    return p
"""


def write_pipeline(path: Path, version: str) -> None:
    path.write_text(PIPELINE.format(version=version))


def checkpoint_ids(settings: KafkaSettings, job: JobId, op: str, p: int) -> list[int | None]:
    """The latest checkpoint id of each of ``op``'s subtasks 0..p-1 (None: none yet)."""
    store = CheckpointStore(settings, job, OperatorName(op), p)
    try:
        latest = [store.latest(i) for i in range(p)]
    finally:
        store.close()
    return [None if c is None else int(c.checkpoint_id) for c in latest]


def events_of(settings: KafkaSettings, job: JobId, kind: str) -> list[dict[str, Any]]:
    return [e for e in read_events(settings, job) if e.get("event") == kind]


def starts_of(
    settings: KafkaSettings, job: JobId, op: str, index: int, after: float
) -> list[dict[str, Any]]:
    """``started`` events of ``op[index]`` later than ``after`` (wall time)."""
    return [
        e
        for e in events_of(settings, job, "started")
        if (e["operator"], e["index"]) == (op, index) and e["time"] > after
    ]


def read_rows(out: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for f in sorted(glob.glob(str(out / "rows" / "*.jsonl")))
        for line in Path(f).read_text().splitlines()
    ]


class Operator:
    """The changes of the first run, made from a thread while the driver runs."""

    def __init__(self, settings: KafkaSettings, job: JobId, source: Path) -> None:
        self.settings, self.job, self.source = settings, job, source
        self.answers: list[int] = []
        self.errors: list[BaseException] = []
        self.killed: list[tuple[int, float]] = []  # (pid, wall time)

    def cli(self, command: str, *args: str) -> int:
        bootstrap = self.settings.bootstrap_servers
        return recovery_main([command, "--job", self.job, "--bootstrap", bootstrap, *args])

    def __call__(self, runs: OperatorRuns) -> None:
        try:
            self.rescale()
            self.upgrade()
            # Still mid-stream, or the savepoint restart would have nothing left to do.
            finished = events_of(self.settings, self.job, "finished")
            sources = [f"events[{e['index']}]" for e in finished if e["operator"] == "events"]
            assert sources == [], f"{sources} finished before the stop: raise EMIT_S"
            write_pipeline(self.source, "v4")  # deployed for the restart from the savepoint
            submitted = last_submission(self.settings, self.job)
            assert submitted is not None
            # What SIGTERM to `spillway run` does: every subtask checkpoints and stops.
            record_job_event(self.settings, self.job, "stop-requested", run=submitted["run"])
        except BaseException as e:  # reported by the test's thread
            self.errors.append(e)
        runs.stop_all()

    def rescale(self) -> None:
        wait_until(
            "count's first checkpoints",
            lambda: None not in checkpoint_ids(self.settings, self.job, "count", 2),
        )
        self.answers.append(self.cli("rescale", "--operator", "count", "--parallelism", "3"))
        (done,) = events_of(self.settings, self.job, "rescaled")
        floor = int(done["rescale"]["operators"]["count"]["floor"])
        wait_until(
            "every new count subtask checkpointed",
            lambda: all(
                c is not None and c > floor
                for c in checkpoint_ids(self.settings, self.job, "count", 3)
            ),
        )

    def upgrade(self) -> None:
        settings, job = self.settings, self.job
        write_pipeline(self.source, "v2")
        self.answers.append(self.cli("upgrade", "--operator", "tag"))
        # Deployed later, never upgraded to: the executors must not run it.
        write_pipeline(self.source, "v3-never-upgraded")
        (done,) = events_of(settings, job, "upgraded")
        wait_until(
            "tag[0] restarted", lambda: bool(starts_of(settings, job, "tag", 0, done["time"]))
        )
        at_restart = checkpoint_ids(settings, job, "tag", 2)[0]
        assert at_restart is not None
        # Right after its first checkpoint with the new code: v2 committed, more in flight.
        wait_until("tag[0] checkpointed again",
                   lambda: checkpoint_ids(settings, job, "tag", 2)[0] != at_restart)  # fmt: skip
        pid = int(starts_of(settings, job, "tag", 0, done["time"])[0]["pid"])
        os.kill(pid, signal.SIGKILL)  # the Python worker on the executor (same machine)
        killed_at = time.time()
        self.killed.append((pid, killed_at))
        wait_until("tag[0] retried", lambda: bool(starts_of(settings, job, "tag", 0, killed_at)))
        at_retry = checkpoint_ids(settings, job, "tag", 2)[0]
        assert at_retry is not None
        # Two checkpoints of the retry: it processed records with the code it was given.
        wait_until(
            "tag[0]'s retry checkpointed twice",
            lambda: (checkpoint_ids(settings, job, "tag", 2)[0] or 0) >= at_retry + 2,
        )


def print_figures(settings: KafkaSettings, job: JobId, killed_at: float) -> None:
    """Measured, not asserted (`pytest -s` shows it): the rescale's and the upgrade's
    pauses on the cluster, and the tag[0] retry after the SIGKILL."""
    events = list(read_events(settings, job))
    for kind, answer in (("rescale", "rescaled"), ("upgrade", "upgraded")):
        (req,) = [e for e in events if e.get("event") == f"{kind}-requested"]
        (done,) = [e for e in events if e.get("event") == answer]
        op = done["target"]
        width = int(done["parallelism"])
        firsts = first_starts(events, op, width, done["time"])
        print(
            f"cluster {kind} of {op}: stopped after {done['stopped_s']} s, handed over after "
            f"{done['time'] - req['time']:.1f} s, all {width} new subtasks started after "
            f"{max(firsts.values()) - req['time']:.1f} s"
        )
    retry = min(e["time"] for e in events if e.get("event") == "started"
                and (e["operator"], e["index"], e["attempt"]) == ("tag", 0, 1))  # fmt: skip
    print(f"cluster: the upgraded tag[0] retried {retry - killed_at:.1f} s after its SIGKILL")


@pytest.mark.broker
@pytest.mark.spark
def test_rescale_upgrade_and_savepoint_restart_on_a_standalone_cluster(
    tmp_path: Path, unique: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    source = code_dir / f"{MODULE}.py"
    write_pipeline(source, "v1")
    # The driver imports the module from here; it reads each upgrade's source here too.
    monkeypatch.syspath_prepend(str(code_dir))
    out = tmp_path / "out"
    monkeypatch.setenv("SPILLWAY_TEST_OUT", str(out))
    monkeypatch.setenv("SPILLWAY_TEST_RECORDS", str(RECORDS))
    monkeypatch.setenv("SPILLWAY_TEST_RATE", str(RECORDS / 2 / EMIT_S))
    # The new count[2] dies restoring (state rebuilt, inputs not yet assigned).
    monkeypatch.setenv("SPILLWAY_CRASH_AT", "count:2:restore:0")
    root = tmp_path / "cluster"
    cluster = LocalCluster(root, worker_cores=WORKER_CORES, worker_memory="2g")
    job = JobId(unique)
    timings: dict[str, float] = {}
    with cluster:
        settings = KafkaSettings(cluster.bootstrap)
        operator = Operator(settings, job, source)

        def on_running(runs: OperatorRuns) -> None:
            threading.Thread(target=operator, args=(runs,), daemon=True).start()

        t0 = time.monotonic()
        config = JobConfig(f"{MODULE}:pipeline", unique, cluster.bootstrap,
                           master=cluster.master_url)  # fmt: skip
        first = run_on_spark(config, on_running=on_running)
        timings["first run"] = time.monotonic() - t0
        assert operator.errors == []
        assert operator.answers == [0, 0]
        assert len(operator.killed) == 1
        assert {r.status for r in first} == {"stopped"}
        # Only what was asked restarted: count as 2 then 3 (count[2]'s attempt 0 died
        # restoring, before it announced its start); tag once for the upgrade, and tag[0]
        # once more after the SIGKILL.
        assert last_run_starts(settings, job) == Counter(
            {
                ("events[0]", 0): 1,
                ("events[1]", 0): 1,
                ("rows[0]", 0): 1,
                ("out[0]", 0): 1,
                ("count[0]", 0): 2,
                ("count[1]", 0): 2,
                ("count[2]", 1): 1,
                ("tag[0]", 0): 2,
                ("tag[1]", 0): 2,
                ("tag[0]", 1): 1,
            }
        )
        (again,) = starts_of(settings, job, "count", 2, 0.0)
        (done,) = events_of(settings, job, "rescaled")
        floor = done["rescale"]["operators"]["count"]["floor"]
        assert (again["attempt"], again["restored_from"]) == (1, floor)
        with capsys.disabled():
            print_figures(settings, job, operator.killed[0][1])

        monkeypatch.delenv("SPILLWAY_CRASH_AT")
        monkeypatch.setenv("SPILLWAY_TEST_RATE", "0")  # unpaced
        t1 = time.monotonic()
        code = spillway_main(
            [
                "run", f"{MODULE}:pipeline", "--job-id", unique,
                "--master", cluster.master_url, "--bootstrap", cluster.bootstrap,
                "--from-savepoint", "latest", "--parallelism", "count=4", "--progress", "off",
            ]
        )  # fmt: skip
        timings["savepoint restart"] = time.monotonic() - t1
        assert code == 0
        assert last_run_starts(settings, job) == Counter(
            {(f"{op}[{i}]", 0): 1 for op, p in
             (("events", 2), ("tag", 2), ("count", 4), ("out", 1), ("rows", 1))
             for i in range(p)}
        )  # fmt: skip
        # The executors ran on both workers (their work dirs hold the application's logs).
        assert all(any((root / "work" / w).iterdir()) for w in cluster.worker_names)
        capsys.readouterr()
        assert recovery_main(["status", "--job", unique, "--bootstrap", cluster.bootstrap]) == 0
        status = capsys.readouterr().out
    assert "count 3 -> 4 subtasks" in status

    assert read_output(out) == reference(RECORDS)
    rows = read_rows(out)
    assert sorted(r["seq"] for r in rows) == list(range(RECORDS))  # each exactly once
    assert {r["version"] for r in rows} <= {"v1", "v2", "v4"}  # v3 never ran
    for partition in (0, 1):  # events[i] makes seq i, i + 2, ... into tag[i]
        versions = [r["version"] for r in sorted(rows, key=lambda r: r["seq"])
                    if r["seq"] % 2 == partition]  # fmt: skip
        runs = [v for i, v in enumerate(versions) if i == 0 or versions[i - 1] != v]
        assert runs in (["v1", "v2", "v4"], ["v1", "v2"]), (partition, runs)
    assert "v4" in {r["version"] for r in rows}
    with capsys.disabled():
        print(", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
