"""``make bench-brokerloss``: broker loss without restarts, measured over ``--kills`` kills.

Self-contained: starts a :class:`~spillway.devtools.localbroker.quorum.LocalQuorum` of three
KRaft nodes (replication 3, ``min.insync.replicas`` 2) in a temporary directory and runs
the click-stream job on it (bounded, a keyed count, 8 subtasks on Spark local mode, its
two sources paced at ``--rate`` records/s each, long enough for every kill). Every
``--interval`` seconds (uniform in that range, seeded) it SIGKILLs the next node round
robin (1, 2, 3, 1, ...), starts it again ``--down`` seconds later, and measures the
*stall* of that kill: from the kill until every subtask has committed a checkpoint
again (a checkpoint's own wall time, read from the checkpoint topics; the checkpoint
interval, 1 s, is part of it).

Reported: restarts (Spark attempts beyond the first; must be 0), redos within an
attempt (their ``redo`` events, per kill and in all, with their errors), the stall per
kill, its median and maximum, and whether the output equals the batch reference. Stored
in ``bench/results/brokerloss-<UTC>.json``. About ``kills x 45 s`` + 1 min.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, OperatorName
from spillway.devtools.localbroker.quorum import LocalQuorum
from spillway.examples import clicks
from spillway.offsets.store import CheckpointStore
from spillway.recovery.observe.events import read_events
from spillway.recovery.runtime.runner import SubtaskResult
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"
REF = "spillway.examples.clicks:pipeline"
PARALLELISM = 2
OPERATORS = ("clicks", "enrich", "count", "out")
STALL_LIMIT_S = 120.0  # a kill whose stall is not over by then is reported as not over


def _name(e: dict[str, Any]) -> str:
    return f"{e['operator']}[{e['index']}]"


class Checkpoints:
    """Every subtask's latest committed checkpoint's wall time, from the checkpoint topics."""

    def __init__(self, settings: KafkaSettings, job: str) -> None:
        self.stores = {
            op: CheckpointStore(settings, JobId(job), OperatorName(op), PARALLELISM)
            for op in OPERATORS
        }

    def first_after(self, since: float) -> dict[str, float | None]:
        """``operator[index]`` → the wall time of its first checkpoint committed after
        ``since`` (None: none yet, or unreadable just now: a broker is gone). Reads the
        last 90 checkpoints (90 s at the 1 s interval): a node's restart, which runs
        before the first read, takes far less."""
        out: dict[str, float | None] = {}
        for op, store in self.stores.items():
            for i in range(PARALLELISM):
                try:
                    recent = store.history(i, 90)
                except Exception:  # leaders moving under the reader: ask again later
                    recent = []
                after = [c.meta.wall_time for c in recent if c.meta.wall_time > since]
                out[f"{op}[{i}]"] = float(min(after)) if after else None
        return out

    def close(self) -> None:
        """Close every store's clients."""
        for store in self.stores.values():
            store.close()


class BackgroundJob:
    """``run_on_spark(config)`` in a thread of its own: the caller kills brokers meanwhile."""

    def __init__(self, config: JobConfig) -> None:
        self.results: list[SubtaskResult] = []
        self.failure: list[BaseException] = []
        self._thread = threading.Thread(
            target=self._drive, args=(config,), name="spark-driver", daemon=True
        )
        self._thread.start()

    def _drive(self, config: JobConfig) -> None:
        try:
            self.results.extend(run_on_spark(config))
        except BaseException as e:  # reported by the caller
            self.failure.append(e)

    def alive(self) -> bool:
        """True while the job runs."""
        return self._thread.is_alive()

    def join(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the job to end; True if it ended."""
        self._thread.join(timeout_s)
        return not self._thread.is_alive()


def stall_after(ckpts: Checkpoints, killed_at: float, finished: set[str]) -> float | None:
    """Seconds from ``killed_at`` until every subtask not in ``finished`` has committed a
    checkpoint after it (None: not within :data:`STALL_LIMIT_S`)."""
    while time.time() - killed_at < STALL_LIMIT_S:
        first = ckpts.first_after(killed_at)
        pending = [s for s, t in first.items() if t is None and s not in finished]
        if not pending:
            return max((t for t in first.values() if t is not None), default=killed_at) - killed_at
        time.sleep(0.25)
    return None


def run(a: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Start the quorum, run the job, kill and restart nodes; the figures."""
    rng = random.Random(a.seed)
    # The sources emit past the last kill. Kills are spaced from kill to kill, but never
    # sooner than 5 s after the previous stall ended; stalls of up to ~40 s were measured
    # (a first run that sized the job at 25 s per kill ended it after 9 kills), hence 45 s.
    emit_s = a.kills * (a.interval[1] + 25.0) + 60.0
    records = int(a.rate * PARALLELISM * emit_s)
    out = work / "out"
    os.environ.update(
        CLICKS_RECORDS=str(records),
        CLICKS_PARALLELISM=str(PARALLELISM),
        CLICKS_OUT=str(out),
        CLICKS_RATE=str(a.rate),
    )
    os.environ.pop("SPILLWAY_CRASH_AT", None)
    job = f"brokerloss-{datetime.now(UTC).strftime('%H%M%S')}"
    kills: list[dict[str, Any]] = []
    with LocalQuorum.with_free_ports(work / "quorum") as quorum:
        settings = KafkaSettings(quorum.bootstrap)
        t0 = time.monotonic()
        driver = BackgroundJob(JobConfig(REF, job, quorum.bootstrap, master="local[8,4]"))
        ckpts = Checkpoints(settings, job)
        try:
            while driver.alive() and None in ckpts.first_after(0.0).values():
                if time.monotonic() - t0 > 120:
                    raise RuntimeError("the job did not get going within 120 s")
                time.sleep(0.5)
            next_kill = time.time()
            for k in range(a.kills):
                # Never sooner than 5 s after the previous kill's stall ended.
                next_kill = max(next_kill + rng.uniform(*a.interval), time.time() + 5.0)
                time.sleep(max(0.0, next_kill - time.time()))
                if not driver.alive():
                    break
                node = k % len(quorum.nodes) + 1
                finished = {
                    _name(e)
                    for e in read_events(settings, JobId(job))
                    if e.get("event") == "finished"
                }
                quorum.kill(node)
                killed_at = time.time()
                time.sleep(a.down)
                quorum.restart(node)  # the stall is read from checkpoint times: no hurry
                stall = stall_after(ckpts, killed_at, finished)
                kills.append({"node": node, "killed_at": killed_at, "stall_s": stall})
                shown = "not over" if stall is None else f"{stall:.2f} s"
                print(f"kill {k + 1}: node {node}, stall {shown}", flush=True)
        finally:
            ckpts.close()
        ended = driver.join(emit_s + 300.0)
        events = list(read_events(settings, JobId(job)))
    fenced = [e for e in events if e.get("event") == "fencing" and "by" not in e]
    restarts = sum(1 for e in fenced if int(e["attempt"]) > 0)
    redos = [e for e in events if e.get("event") == "redo"]
    for i, kill in enumerate(kills):
        end = kills[i + 1]["killed_at"] if i + 1 < len(kills) else float("inf")
        kill["redos"] = sum(1 for r in redos if kill["killed_at"] <= float(r["time"]) < end)
    stalls = [float(kill["stall_s"]) for kill in kills if kill["stall_s"] is not None]
    failure = driver.failure
    exact = ended and not failure and _output(out) == clicks.reference(records)
    return {
        "job": job,
        "failure": repr(failure[0]) if failure else None,
        "finished": sorted(r.subtask for r in driver.results if r.status == "finished"),
        "output_exact": exact,
        "restarts": restarts,
        "redos": len(redos),
        "redo_errors": dict(Counter(str(r["error"]).split(":", 1)[0] for r in redos)),
        "redo_details": [
            {"subtask": _name(r), "time": r["time"], "error": r["error"][:300]} for r in redos
        ],
        "kills": kills,
        "stall_median_s": statistics.median(stalls) if stalls else None,
        "stall_max_s": max(stalls) if stalls else None,
        "stalls_not_over": sum(1 for kill in kills if kill["stall_s"] is None),
        "load": {
            "records": records,
            "rate_per_source": a.rate,
            "sources": PARALLELISM,
            "subtasks": len(OPERATORS) * PARALLELISM,
            "interval_s": list(a.interval),
            "down_s": a.down,
            "seed": a.seed,
        },
    }


def _output(out: Path) -> dict[str, tuple[str, int]]:
    """The job's JSONL output: page → (section, views); a page twice counts as wrong."""
    rows: dict[str, tuple[str, int]] = {}
    for f in sorted((out / "out").glob("*.jsonl")):
        for line in f.read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            if r["page"] in rows:
                return {}
            rows[r["page"]] = (r["section"], r["views"])
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the measurement, print and store the figures; exit 1 if any subtask restarted
    or the output is not exact."""
    ap = argparse.ArgumentParser(prog="python -m bench.brokerloss", description=__doc__)
    ap.add_argument("--kills", type=int, default=10, help="at least 10 (default %(default)s)")
    ap.add_argument("--interval", type=float, nargs=2, default=(15.0, 20.0), metavar=("MIN", "MAX"))
    ap.add_argument("--down", type=float, default=5.0, help="seconds a killed node stays down")
    ap.add_argument("--rate", type=float, default=250.0, help="records/s per source subtask")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=RESULTS_DIR)
    a = ap.parse_args(argv)
    if a.kills < 10:
        ap.error("--kills must be at least 10")
    work = Path(tempfile.mkdtemp(prefix="spillway-bench-brokerloss-"))
    load_before = os.getloadavg()
    try:
        result = run(a, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result.update(
        load_before=load_before,
        load_after=os.getloadavg(),
        machine={"cpus": os.cpu_count(), "python": platform.python_version()},
    )
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / f"brokerloss-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(
        f"{len(result['kills'])} kills: restarts {result['restarts']}, redos {result['redos']} "
        f"{result['redo_errors']}; stall median {result['stall_median_s']} s, max "
        f"{result['stall_max_s']} s ({result['stalls_not_over']} not over within "
        f"{STALL_LIMIT_S:.0f} s); output exact: {result['output_exact']}; stored in {path}"
    )
    return 0 if result["restarts"] == 0 and result["output_exact"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
