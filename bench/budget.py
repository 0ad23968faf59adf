"""``make bench-budget``: where a record's CPU goes in ``spillway run``, stage by stage.

Spillway's per-record cost split into its stages and set beside the
ceiling (a raw confluent-kafka consume and produce per record, B0s). Self-contained: starts
its own broker, pre-loads B1's input (:mod:`bench.workload`, 200-byte JSON events, 2
partitions) and runs B1's pipeline through ``spillway run`` (Spark local mode, as B1s does)
twice over it:

1. **measured**: CPU of every process of the run's tree, sampled from ``/proc`` for its
   whole life and grouped by role (the driver's Python, Spark's JVM, the PySpark workers
   that run the subtasks), plus the broker's;
2. **profiled**: the same run under ``py-spy record --subprocesses`` (200 samples a
   second); each sample of a subtask's Python process is put in one stage by its
   innermost frame that names one (:mod:`bench.budgetstats`), and the workers' measured
   CPU per record is shared out over the stages by their sample counts.

Shares come from the profiled run and CPU from the measured one (py-spy pauses the process
it samples, so the profiled run's own CPU is not used). Python only: librdkafka's own
threads are not sampled, so their CPU lands in the stages in proportion, not in
"produce"/"consume" alone — the table says so. Printed as a table; stored in
``bench/results/budget-<UTC time>.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import budgetstats, procstat, steadyrun, workload
from bench.suitebroker import start_broker

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"
PY_SPY = Path(sys.executable).parent / "py-spy"
TOP_FUNCTIONS = 25


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def measured_run(cmd: list[str], broker_pid: int, log: Any) -> dict[str, Any]:
    """Run ``cmd`` to its end; CPU seconds per role of its process tree, and the broker's."""
    latest: dict[int, int] = {}
    roles: dict[int, str] = {}
    b0 = procstat.cpu_seconds([s for s in [procstat.read_stat(broker_pid)] if s])
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=ROOT, start_new_session=True
    )
    done = threading.Event()

    def sample() -> None:
        while True:
            stats = procstat.read_tree(proc.pid)
            for s in stats:  # the latest: a forked child execs its own program later
                if cmd := _cmdline(s.pid):
                    roles[s.pid] = budgetstats.role_of(cmd)
            procstat.merge_latest(latest, stats)
            if done.wait(0.1):
                return

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    rc = proc.wait()
    done.set()
    sampler.join()
    if rc != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} exited {rc} (see the log)")
    b1 = procstat.cpu_seconds([s for s in [procstat.read_stat(broker_pid)] if s])
    by_role: dict[str, float] = {}
    for pid, ticks in latest.items():
        role = roles.get(pid, "other")
        by_role[role] = by_role.get(role, 0.0) + ticks / procstat.CLOCK_TICKS
    return {"seconds": time.monotonic() - t0, "cpu_s": by_role, "broker_cpu_s": b1 - b0}


def profiled_run(cmd: list[str], out: Path, log: Any) -> None:
    """Run ``cmd`` under ``py-spy record`` (raw collapsed stacks into ``out``)."""
    spy = [str(PY_SPY), "record", "--subprocesses", "--format", "raw", "--rate", "200"]
    rc = subprocess.run(
        [*spy, "-o", str(out), "--", *cmd],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        cwd=ROOT,
        check=False,
    ).returncode
    if rc != 0:
        raise RuntimeError(f"py-spy record exited {rc} (see the log)")


def run(records: int, chained: bool, work: Path) -> dict[str, Any]:
    """Measured runs at ``records // 5`` and ``records`` (the slope between them is the
    per-record cost, apart from the fixed start-up), one profiled run at ``records``, on a
    fresh broker; the budget (:func:`bench.budgetstats.budget`)."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    sizes = (records // 5, records)
    with contextlib.ExitStack() as stack, (work / "runs.log").open("w") as log:
        bootstrap, broker_pid, _ = start_broker(stack)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for n in sizes:
            admin.create_topics([NewTopic(f"budget-in-{n}", 2, 1)])[f"budget-in-{n}"].result(30)
            workload.preload(bootstrap, f"budget-in-{n}", n, 2)

        def command(n: int) -> list[str]:
            name = f"bench-budget-{uuid.uuid4().hex[:8]}"
            admin.create_topics([NewTopic(name + "-out", 2, 1)])[name + "-out"].result(30)
            topic = f"budget-in-{n}"
            return steadyrun.spillway_command(bootstrap, topic, name + "-out", name, 1.0, chained)

        measured = [measured_run(command(n), broker_pid, log) for n in sizes]
        profile = work / "profile.txt"
        profiled_run(command(records), profile, log)
        raw = profile.read_text().splitlines()
        samples = budgetstats.stage_samples(raw)
        functions = budgetstats.function_samples(raw)
    slope = budgetstats.slope(measured[0], measured[1], sizes[1] - sizes[0])
    b = budgetstats.budget(slope, samples, sizes[1] - sizes[0])
    worker_us = b["us_per_record"].get("worker", 0.0)
    return {
        "sizes": sizes,
        "chained": chained,
        "measured": measured,
        "samples": samples,
        "budget": b,
        # Where the stages' time is, function by function (a C call counts for its caller).
        "top_functions_us": budgetstats.top_functions(worker_us, functions, TOP_FUNCTIONS),
    }


def main(argv: list[str] | None = None) -> int:
    """Run, print the table, store the JSON."""
    from bench.channels import machine

    ap = argparse.ArgumentParser(prog="python -m bench.budget", description=__doc__)
    ap.add_argument("--records", type=int, default=1_000_000, help="the bigger size")
    ap.add_argument("--chained", action="store_true", help="one chain after the source")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR)
    a = ap.parse_args(argv)
    load_before = procstat.load_average()
    with tempfile.TemporaryDirectory(prefix="spillway-bench-budget-") as tmp:
        result = run(a.records, a.chained, Path(tmp))
    result.update(load_before=load_before, load_after=procstat.load_average(), machine=machine())
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / f"budget-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    for line in budgetstats.render(result["budget"]):
        print(line)
    print(f"the workers' {TOP_FUNCTIONS} busiest functions (µs per record, innermost frame):")
    for name, us in result["top_functions_us"].items():
        print(f"  {us:6.2f}  {name}")
    lb, la = result["load_before"], result["load_after"]
    print(f"load average (1 min) before {lb[0]:.2f}, after {la[0]:.2f}; stored in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
