"""``make bench-restart``: how long a SIGKILLed subtask takes to process again, phase by phase.

Self-contained: starts its own local broker, runs an unbounded 15-subtask job with
``spillway run`` on Spark local mode (:func:`pipeline`: generate → enrich → count per
page → files, and enrich → files as a second branch; 3 subtasks each), then SIGKILLs the
Python process of one chosen subtask ``--kills`` times (default 12), each at a random
moment 1–3 s after its previous attempt started processing (seeded), so the kills land
at different points of its checkpoint cycle. After each kill it waits for the new
attempt's ``started`` event (and its ``caught-up``).

Per restart (:mod:`bench.restartstats`): kill → new attempt processing (its ``restored``
phase), kill → caught up, and every phase step of :mod:`spillway.recovery.observe.phases`. Printed
as
medians with min–max, with the load average before, during and after; stored in
``bench/results/restart-<UTC time>.json``. About 3–5 minutes.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"
ENV_OUT, ENV_RATE = "SPILLWAY_RB_OUT", "SPILLWAY_RB_RATE"
# Every Spark worker imports this module for pipeline(): what only the benchmark itself
# uses is imported inside the functions that use it (bench.channels alone took 76 ms).
PARALLELISM = 3


def pipeline() -> Any:
    """15 subtasks: clicks → enrich → count → out, and enrich → views (3 each), unbounded."""
    from spillway.examples import clicks
    from spillway.spark_jobs.api.pipeline import Pipeline

    out = Path(os.environ[ENV_OUT])
    p = Pipeline("bench-restart")
    src = p.generate(
        "clicks",
        make=clicks.make_click,
        schema=clicks.CLICK,
        count=None,
        parallelism=PARALLELISM,
        rate=float(os.environ.get(ENV_RATE, "300")),
    )
    views = src.map("enrich", clicks.enrich, schema=clicks.PAGE_VIEW)
    views.key_by(_page).aggregate(
        "count",
        init=_init,
        add=clicks.add_view,
        result=clicks.count_result,
        schema=clicks.PAGE_COUNT,
        emit="updates",
    ).write_jsonl("out", str(out / "counts"))
    views.write_jsonl("views", str(out / "views"))
    return p


def _page(v: dict[str, Any]) -> str:
    return str(v["page"])


def _init() -> list[Any]:
    return ["", 0]


def _events(bootstrap: str, job: str) -> list[dict[str, Any]]:
    from spillway.channels.config import KafkaSettings
    from spillway.channels.ids import JobId
    from spillway.recovery.observe.events import read_events

    return list(read_events(KafkaSettings(bootstrap), JobId(job)))


def _wait_for(
    bootstrap: str, job: str, what: Any, timeout_s: float, poll_s: float = 0.2
) -> list[dict[str, Any]]:
    """Events of ``job`` once ``what(events)`` is true; RuntimeError after ``timeout_s``."""
    from spillway.channels.errors import SpillwayError

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            events = _events(bootstrap, job)
        except SpillwayError:  # the driver has not created the job's topics yet
            events = []
        if events and what(events):
            return events
        if time.monotonic() > deadline:
            raise RuntimeError(f"job {job}: gave up waiting after {timeout_s:.0f} s")
        time.sleep(poll_s)


def _of(events: list[dict[str, Any]], kind: str, op: str, index: int) -> list[dict[str, Any]]:
    return [
        e
        for e in events
        if e.get("event") == kind and e.get("operator") == op and e.get("index") == index
    ]


def _caught_up(events: list[dict[str, Any]], op: str, index: int, after: int) -> bool:
    """True once an attempt after ``after`` has caught up (nothing to re-read: at its start)."""
    return any(
        int(e["attempt"]) > after and "caught_up" in (e.get("phases") or {})
        for kind in ("started", "caught-up")
        for e in _of(events, kind, op, index)
    )


def _all_started(events: list[dict[str, Any]]) -> bool:
    return len({(e["operator"], e["index"]) for e in events if e.get("event") == "started"}) >= (
        5 * PARALLELISM
    )


class _Job:
    """``spillway run bench.restart:pipeline`` in a process group of its own."""

    def __init__(self, args: list[str], env: dict[str, str], log: Any) -> None:
        self.proc = subprocess.Popen(
            args, env=env, stdout=log, stderr=log, start_new_session=True, cwd=ROOT
        )

    def stop(self, timeout_s: float = 60.0) -> int | None:
        """SIGTERM (subtasks checkpoint and stop), then SIGKILL whatever of its tree is left."""
        from bench import procstat

        pids = [s.pid for s in procstat.read_tree(self.proc.pid)]
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in pids:  # the PySpark daemon and workers sit in a group of their own
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        return self.proc.returncode


def run(
    bootstrap: str, target: tuple[str, int], kills: int, seed: int, rate: float, work: Path
) -> dict[str, Any]:
    """Run the job, kill ``target`` ``kills`` times; the restarts and their summary."""
    from bench import restartstats

    job = f"bench-restart-{uuid.uuid4().hex[:8]}"
    op, index = target
    env = {**os.environ, ENV_OUT: str(work / "out"), ENV_RATE: str(rate)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    spillway = str(Path(sys.executable).parent / "spillway")
    args = [spillway, "run", "bench.restart:pipeline", "--job-id", job, "--bootstrap", bootstrap]
    args += ["--task-attempts", str(kills + 4), "--checkpoint-interval", "1"]
    rng = random.Random(seed)
    restarts: list[dict[str, Any]] = []
    loads: list[float] = []
    with (work / "job.log").open("w") as log:
        t0 = time.time()
        driver = _Job(args, env, log)
        try:
            events = _wait_for(bootstrap, job, _all_started, 300)
            startup_s = max(float(e["time"]) for e in events if e.get("event") == "started") - t0
            print(f"job {job}: 15 subtasks processing {startup_s:.1f} s after launch", flush=True)
            for k in range(kills):
                last = _of(events, "started", op, index)[-1]
                attempt = int(last["attempt"])
                # A random moment 1-3 s after the attempt started processing.
                time.sleep(max(0.0, float(last["time"]) + rng.uniform(1.0, 3.0) - time.time()))
                loads.append(os.getloadavg()[0])
                killed = time.time()  # before the call: the death comes after, never before
                os.kill(int(last["pid"]), signal.SIGKILL)
                events = _wait_for(
                    bootstrap, job, lambda ev, a=attempt: _caught_up(ev, op, index, a), 120
                )
                new = max(int(e["attempt"]) for e in _of(events, "started", op, index))
                r = restartstats.restart_of(events, op, index, new, killed)
                restarts.append(r)
                print(
                    f"kill {k + 1}/{kills}: attempt {new} processing "
                    f"{_fmt(r['kill_to_processing_s'])} after the kill, caught up "
                    f"{_fmt(r['kill_to_caught_up_s'])} (load {loads[-1]:.2f})",
                    flush=True,
                )
        finally:
            exit_code = driver.stop()
    events = _events(bootstrap, job)
    # Re-join at the end: the driver's task-retried events may have come after a wait ended.
    restarts = [
        restartstats.restart_of(events, op, index, int(r["attempt"]), float(r["killed"]))
        for r in restarts
    ]
    return {
        "job": job,
        "target": f"{op}[{index}]",
        "startup_s": startup_s,
        "exit_code": exit_code,
        "load_at_kills": loads,
        "restarts": restarts,
        "summary": restartstats.summarise(restarts),
    }


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f} s"


def main(argv: list[str] | None = None) -> int:
    """Start a broker, run the benchmark, print and store the figures."""
    import argparse

    from bench import procstat, restartstats
    from bench.channels import machine
    from spillway.devtools.localbroker import BrokerConfig, LocalBroker

    ap = argparse.ArgumentParser(prog="python -m bench.restart", description=__doc__)
    ap.add_argument("--kills", type=int, default=12, help="at least 10 (default %(default)s)")
    ap.add_argument("--target", default="count:0", help="OPERATOR:INDEX to kill")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rate", type=float, default=300.0, help="records/s per source subtask")
    ap.add_argument("--bootstrap", default=None, help="use this broker instead of starting one")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR)
    a = ap.parse_args(argv)
    if a.kills < 10:
        ap.error("--kills must be at least 10")
    op, _, idx = a.target.partition(":")
    work = Path(tempfile.mkdtemp(prefix="spillway-bench-restart-"))
    broker = None
    load_before = procstat.load_average()
    try:
        bootstrap = a.bootstrap
        if bootstrap is None:
            broker = LocalBroker(BrokerConfig.with_free_ports(work / "broker"))
            broker.start()
            bootstrap = broker.bootstrap
        result = run(bootstrap, (op, int(idx or 0)), a.kills, a.seed, a.rate, work)
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    result.update(
        load_before=load_before,
        load_after=procstat.load_average(),
        machine=machine(),
        settings={"kills": a.kills, "seed": a.seed, "rate": a.rate, "subtasks": 5 * PARALLELISM},
    )
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / f"restart-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    lb, la = result["load_before"], result["load_after"]
    print()
    print(f"Restart latency, {result['target']} of a 15-subtask job on Spark local mode")
    at = result["load_at_kills"]
    print(
        f"load average (1/5/15 min) before {lb[0]:.2f}/{lb[1]:.2f}/{lb[2]:.2f}, after "
        f"{la[0]:.2f}/{la[1]:.2f}/{la[2]:.2f}; 1-min at the kills {min(at):.2f}–{max(at):.2f}"
    )
    for line in restartstats.render(result["summary"]):
        print(line)
    print(f"stored in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
