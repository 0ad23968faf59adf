"""B3 for Structured Streaming: one executor of a standalone cluster SIGKILLed (part ``b3s``).

A Spark standalone cluster (:class:`spillway.devtools.cluster.LocalCluster`, 2 workers with 1
core each) runs the traced keyed count of :mod:`bench.sssb3job` (the B1/B2 query:
RocksDB state store with changelog checkpointing, ``maxOffsetsPerTrigger``, update mode,
trigger every 500 ms) with two 1-core executors, one per worker. The input topic (2
partitions) is fed at :attr:`Settings.rate` by :class:`bench.kstreamsb3.Pacer` (every
record carries ``seq`` and its send time ``ts``); a read_committed observer
(:class:`bench.kstreamsb3.Observer`) notes when each output row arrives. Each row
carries ``seq`` and ``ts`` of the *last* record counted for its page in that micro-batch,
so its latency (arrival − ts) is that of the youngest record it covers (earlier records
of the same page in the same micro-batch waited longer; at ~400 records/s over 2,000
pages a row almost always covers one record).

After :attr:`Settings.warmup_s` the executor on ``worker-2`` (the
``CoarseGrainedExecutorBackend`` JVM in that worker's process tree, found by PID) is
SIGKILLed. The driver notices, re-runs the lost tasks (and the map stage whose shuffle
output died with it), and the master has the worker start a replacement executor on the
freed core. Measured per round (:mod:`bench.sssb3stats`):

* kill → the latency's 1-s windows back within 10 % of its 0.9-quantile over the
  :attr:`Settings.base_s` seconds before the kill, for good;
* kill → the first output row after the kill; kill → the replacement executor's process
  seen in a worker's tree (polled every 0.2 s);
* the highest latency after the kill; p99 of the rows arriving in ``[kill − base,
  kill)`` vs ``[kill, kill + base)``, and the highest p99 of a 100 ms window in each;
* rows output more than once (Spark's Kafka sink is at-least-once: a re-run task writes
  its rows again) and the input records those repeated rows stand for — Structured
  Streaming's re-processing as far as it is visible downstream;
* the output checked: every row's ``seq`` is that of the views-th record of its page,
  and every input record is covered by some row (no gap).

Not measured: records re-processed inside Spark whose re-output is identical to a row
not yet written (a task that died before writing anything is invisible downstream), and
the latency of each record rather than each row. Spark's own recovery events (executor
lost, stage resubmitted) are in the driver's log, not parsed.

``round_on(bootstrap, admin, settings, log)`` runs one round (its own cluster, whose
bundled broker idles: the query uses ``bootstrap``); :func:`summarise` gives the medians
with min–max over rounds; ``python -m bench.sssb3`` runs one round on a throw-away broker
and prints JSON.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from bench import procstat, sparkkafka, workload
from bench.kstreamsb3 import PARTITIONS, Observer, Pacer
from bench.measure import MeasureError
from bench.sssb3stats import Timeline, latency_figures, output_check
from bench.stats import spread
from bench.suitebroker import start_broker
from spillway.devtools.cluster import LocalCluster
from spillway.devtools.localbroker import process as proc_util

REPO = Path(__file__).resolve().parent.parent
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
VICTIM_WORKER = 1  # index into the cluster's workers: worker-2


@dataclass(frozen=True)
class Settings:
    """Pace and timeline of one round (seconds)."""

    rate: float = 400.0  # records/s into the input topic
    warmup_s: float = 30.0  # the query running (first micro-batch done) before the kill
    # Added to warmup_s: a caller varies it per round (0 .. 0.5, one trigger interval) so
    # the kill does not land at one moment of the micro-batch cycle every time. Batches are
    # not aligned to READY, so this spreads the phase rather than setting it.
    kill_offset_s: float = 0.0
    base_s: float = 10.0  # the baseline latency: this long before the kill
    after_s: float = 40.0  # measured after the kill
    ready_timeout_s: float = 300.0  # driver start → its first micro-batch with input done


def executors_in(
    worker_pids: list[int], parents: Mapping[int, int], argv_of: Callable[[int], list[str] | None]
) -> dict[int, list[int]]:
    """Per worker PID, the executor JVMs (``CoarseGrainedExecutorBackend``) in its tree."""
    return {
        w: sorted(
            p
            for p in procstat.tree_of(w, parents)
            if p != w and EXECUTOR_CLASS in (argv_of(p) or [])
        )
        for w in worker_pids
    }


def _executors(cluster: LocalCluster) -> dict[int, list[int]]:
    parents = {pid: st.ppid for pid, st in procstat.read_all().items()}
    return executors_in(cluster.worker_pids(), parents, proc_util.command_line)


def page_of(seq: int) -> str:
    """The page of input record ``seq`` (the workload's events are a function of seq)."""
    return str(workload.parse(workload.make_event(seq))["page"])


def _start_driver(
    cluster: LocalCluster, bootstrap: str, src: str, out: str, workdir: Path, log: TextIO
) -> subprocess.Popen[str]:
    jars = ",".join(str(p) for p in sparkkafka.connector_jars())
    cmd = [
        sys.executable, "-m", "bench.sssb3job", "--master", cluster.master_url,
        "--bootstrap", bootstrap, "--input", src, "--output", out,
        "--workdir", str(workdir), "--jars", jars,
    ]  # fmt: skip
    return subprocess.Popen(
        cmd, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
    )


def _await_ready(driver: subprocess.Popen[str], timeout_s: float) -> None:
    assert driver.stdout is not None
    ready, _, _ = select.select([driver.stdout], [], [], timeout_s)
    if not ready:
        raise MeasureError(
            f"the Structured Streaming driver (pid {driver.pid}) completed no micro-batch "
            f"within {timeout_s:.0f} s; see the driver's log and the cluster's worker logs"
        )
    line = driver.stdout.readline()
    if not line.startswith("READY "):
        raise MeasureError(
            f"the Structured Streaming driver said {line.strip()!r} instead of READY "
            f"(exit {driver.poll()}); see the driver's log for Spark's error"
        )


def _stop_driver(driver: subprocess.Popen[str]) -> None:
    if driver.poll() is None:
        assert driver.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            driver.stdin.close()
        try:
            driver.wait(90)
        except subprocess.TimeoutExpired:
            os.kill(driver.pid, signal.SIGKILL)  # our own child, by PID
            driver.wait()


def _kill_executor(cluster: LocalCluster) -> tuple[float, int, set[int]]:
    """SIGKILL the victim worker's executor: (kill time, its PID, executors before)."""
    found = _executors(cluster)
    workers = cluster.worker_pids()
    victims = found.get(workers[VICTIM_WORKER], []) if len(workers) > VICTIM_WORKER else []
    if len(victims) != 1:
        raise MeasureError(
            f"expected one executor JVM under worker-{VICTIM_WORKER + 1}, found {found}; "
            f"see the worker logs in {cluster.root}"
        )
    before = {p for ps in found.values() for p in ps}
    kill = time.time()
    os.kill(victims[0], signal.SIGKILL)
    return kill, victims[0], before


def _replacement_after(
    cluster: LocalCluster, before: set[int], kill: float, until: float
) -> float | None:
    """Seconds from ``kill`` until an executor not in ``before`` runs (polled), or None."""
    while time.time() < until:
        now = {p for ps in _executors(cluster).values() for p in ps}
        if now - before:
            return time.time() - kill
        time.sleep(0.2)
    return None


def round_on(bootstrap: str, admin: AdminClient, s: Settings, log: TextIO) -> dict[str, Any]:
    """One round on the broker at ``bootstrap``: a fresh cluster, topics and query, one
    executor SIGKILLed; the figures of :mod:`bench.sssb3stats` plus the load average.
    ``log`` receives the Spark driver's stderr. Everything started is stopped again."""
    name = f"bench-sss-b3-{uuid.uuid4().hex[:8]}"
    src, out = name + "-in", name + "-out"
    for t in (src, out):
        admin.create_topics([NewTopic(t, PARTITIONS, 1)])[t].result(30)
    workdir = Path(tempfile.mkdtemp(prefix=name + "-"))
    cluster = LocalCluster(workdir / "cluster", workers=2, worker_cores=1, worker_memory="1g")
    observer, pacer = Observer(bootstrap, out), Pacer(bootstrap, src, s.rate)
    load0 = procstat.load_average()
    driver: subprocess.Popen[str] | None = None
    try:
        cluster.start()
        observer.start()
        pacer.start()
        driver = _start_driver(cluster, bootstrap, src, out, workdir, log)
        _await_ready(driver, s.ready_timeout_s)
        time.sleep(s.warmup_s + s.kill_offset_s)
        kill, victim, before = _kill_executor(cluster)
        replaced = _replacement_after(cluster, before, kill, kill + s.after_s)
        time.sleep(max(0.0, kill + s.after_s - time.time()))
        pacer.stop.set()
        pacer.join()
        _drain(observer, pacer.sent, deadline_s=60.0)
    finally:
        pacer.stop.set()
        if driver is not None:
            _stop_driver(driver)
        cluster.stop()
        observer.stop.set()
        if observer.is_alive():
            observer.join()
        topics = [t for t in admin.list_topics(timeout=10).topics if name in t]
        for f in admin.delete_topics(topics).values():
            with contextlib.suppress(Exception):  # tidying up, not a result
                f.result(30)
        shutil.rmtree(workdir, ignore_errors=True)
    seen = list(observer.seen)
    return {
        "killed_executor_pid": victim,
        "replacement_executor_after_s": replaced,
        **latency_figures(seen, Timeline(kill, s.base_s, s.after_s)),
        **output_check(seen, pacer.sent, page_of),
        "load_before": load0,
        "load_after": procstat.load_average(),
    }


def _drain(observer: Observer, sent: int, deadline_s: float) -> None:
    """Wait until the output covers all ``sent`` records (highest views per page), or time out."""
    reference = workload.reference(sent)
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        top: dict[str, int] = {}
        for _, _, _, page, views in list(observer.seen):
            top[page] = max(top.get(page, 0), views)
        if all(top.get(p, 0) >= n for p, n in reference.items()):
            return
        time.sleep(0.5)


FIGURES = (
    "back_within_10pct_s",
    "first_output_after_kill_s",
    "replacement_executor_after_s",
    "max_latency_after_kill_s",
    "baseline_latency_q90_s",
    "p99_before_s",
    "p99_after_s",
    "window_p99_before_max_s",
    "window_p99_after_max_s",
    "duplicate_rows",
    "duplicate_records",
)


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Median (min–max) of each figure over the rounds where it was measured, the rounds
    not back within the measurement, and whether every round's output had no gap and no
    wrong row (duplicates allowed: at-least-once). Pure."""
    out: dict[str, Any] = {}
    for f in FIGURES:
        values = [float(r[f]) for r in rounds if r.get(f) is not None]
        if values:
            out[f] = asdict(spread(values))
    out["rounds"] = len(rounds)
    out["not_back"] = sum(1 for r in rounds if r.get("back_within_10pct_s") is None)
    out["output_exact_but_duplicates"] = all(r["exact_but_duplicates"] for r in rounds)
    return out


def main(argv: list[str] | None = None) -> int:
    """``--rounds`` rounds (default 1) on a throw-away broker (or ``--bootstrap``); prints
    the settings, each round's figures and, for several rounds, their summary as JSON."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m bench.sssb3", description=__doc__)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--rate", type=float, default=Settings.rate, help="records/s")
    ap.add_argument("--bootstrap", default=None, help="use this broker instead of starting one")
    a = ap.parse_args(argv)
    s = Settings(rate=a.rate)
    log_path = Path(tempfile.mkstemp(prefix="spillway-bench-sssb3-", suffix=".log")[1])
    print(f"the Spark driver's log: {log_path}", file=sys.stderr, flush=True)
    with contextlib.ExitStack() as stack, log_path.open("w") as log:
        bootstrap = a.bootstrap or start_broker(stack)[0]  # a throw-away broker by default
        admin = AdminClient({"bootstrap.servers": bootstrap})
        rounds = [round_on(bootstrap, admin, s, log) for _ in range(a.rounds)]
    doc: dict[str, Any] = {"settings": asdict(s), "rounds": rounds}
    if len(rounds) > 1:
        doc["summary"] = summarise(rounds)
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
