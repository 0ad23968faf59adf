"""``make bench-rescale``: a series of live rescales of one operator, phase by phase.

Self-contained: starts its own local broker and runs one bounded job with ``spillway
run`` on Spark local mode, the pipeline of :mod:`bench.rescale`: a paced source (2
subtasks) → ``key_by`` → a keyed count over ``--keys`` keys (2 subtasks) → one sink; and
the source → a second sink (``side``), the operators that are not rescaled, whose output
is sampled every 0.25 s.

Once the source has written ``--keys`` records (so the count holds every key's state),
``spillway rescale --operator count`` runs ``--rescales`` times, alternating 2 → 4 and
4 → 2. Each one is timed from the job's events, phase by phase
(:mod:`spillway.recovery.observe.rescalephases`: requested, stop requested, last
checkpoint, handover, new Spark job scheduled, Python started, restored, processing); the
**pause** is request → every new subtask processing. The **dip** is the side sink's
output rate from the request to the end of the pause (at least 5 s) against the 10 s
before the request. The next request comes ``SETTLE_S`` after the previous pause ended,
so each "before" window sees the job steady. The job then runs to its end and both
outputs are checked exactly against a plain-Python reference.

Results: ``bench/results/rescaleseries-<UTC time>.json`` (every rescale's phases, and per
direction the median and min–max of each phase, the pause and the dip).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.rescale import (
    ENV_KEYS,
    ENV_OUT,
    ENV_RATE,
    ENV_RECORDS,
    FROM,
    KEYS,
    OP,
    RATE,
    RESULTS_DIR,
    ROOT,
    TO,
    LineSampler,
    _spillway,
    _wait_lines,
    check_output,
)
from bench.restart import _Job, _wait_for

RESCALES = 20  # 10 each way
BEFORE_S = 10.0  # the dip's reference window before each request
SETTLE_S = 10.0  # from a pause's end to the next request (>= BEFORE_S: a clean reference)
BUDGET_S = 19.0  # input per rescale (request, pause, settle) at the source's rate
TAIL_S = 30.0  # input after the last rescale


def records_for(keys: int, rate: float, rescales: int) -> int:
    """Input for the run: every key before the first rescale, then ``BUDGET_S`` per
    rescale and a tail, at ``rate`` per source subtask (2 of them)."""
    return keys + int(2 * rate * (rescales * BUDGET_S + TAIL_S))


def _rescale(job: str, bootstrap: str, env: dict[str, str], n: int) -> int:
    cli = ["rescale", "--operator", OP, "--parallelism", str(n)]
    answer = subprocess.run(_spillway(job, bootstrap, *cli), env=env, cwd=ROOT, check=False)
    return answer.returncode


def run(
    bootstrap: str, rescales: int, records: int, keys: int, rate: float, work: Path
) -> dict[str, Any]:
    """One job, ``rescales`` live rescales of the count; every rescale's figures and the
    output check."""
    from bench import rescalestats as rs
    from spillway.recovery.observe.rescalephases import fold_rescales

    job = f"bench-rescaleseries-{uuid.uuid4().hex[:8]}"
    out = work / job
    env = {**os.environ, ENV_OUT: str(out), ENV_RATE: str(rate)}
    env |= {ENV_RECORDS: str(records), ENV_KEYS: str(keys)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    spillway = str(Path(sys.executable).parent / "spillway")
    args = [spillway, "run", "bench.rescale:pipeline", "--job-id", job, "--bootstrap", bootstrap]
    args += ["--checkpoint-interval", "1", "--master", "local[10,4]"]
    sampler = LineSampler(out / "side")
    done: list[dict[str, Any]] = []
    with (work / f"{job}.log").open("w") as log:
        driver = _Job(args, env, log)
        try:
            _wait_for(bootstrap, job, lambda ev: rs.all_started(ev, OP, FROM, 0.0), 300)
            _wait_lines(sampler, driver, keys)  # every key's state is in the count
            time.sleep(BEFORE_S)
            width = FROM
            for k in range(rescales):
                width = TO if width == FROM else FROM
                load = os.getloadavg()[0]
                answer = _rescale(job, bootstrap, env, width)

                def complete(ev: list[dict[str, Any]], k: int = k) -> bool:
                    found = fold_rescales(ev)
                    return len(found) > k and found[k].complete()

                events = _wait_for(bootstrap, job, complete, 300)
                phases = fold_rescales(events)[k]
                pause_end = phases.times["processing"]
                time.sleep(max(0.0, pause_end + SETTLE_S - time.time()))
                requested = phases.times["requested"]
                dip = rs.dip(sampler.samples, requested, pause_end, BEFORE_S)
                done.append({"exit": answer, "load_1min": load, **phases.to_json(), "dip": dip})
                print(
                    f"rescale {k + 1}/{rescales} {phases.previous} → {phases.parallelism}: "
                    f"pause {phases.pause_s():.2f} s, dip {100 * dip['dip']:.1f} % "
                    f"({' '.join(f'{p} {s:.2f}' for p, s in phases.durations().items())}; "
                    f"load {load:.1f})",
                    flush=True,
                )
            driver.proc.wait(records / (2 * rate) + 600)
        finally:
            driver.stop()
            sampler.close()
    result = {
        "job": job,
        "final_exit": driver.proc.returncode,
        "rescales": done,
        "output": check_output(out, records, keys),
    }
    shutil.rmtree(out, ignore_errors=True)
    return result


def main(argv: list[str] | None = None) -> int:
    """Start a broker, run the series, print and store the figures."""
    import argparse

    from bench import procstat
    from bench import rescaleseriesstats as rss
    from bench.channels import machine
    from spillway.devtools.localbroker import BrokerConfig, LocalBroker

    ap = argparse.ArgumentParser(prog="python -m bench.rescaleseries", description=__doc__)
    ap.add_argument("--rescales", type=int, default=RESCALES, help="alternating 2→4, 4→2")
    ap.add_argument("--keys", type=int, default=KEYS, help="keys of count's state")
    ap.add_argument("--rate", type=float, default=RATE, help="records/s per source subtask")
    ap.add_argument("--bootstrap", default=None, help="use this broker instead of starting one")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR)
    a = ap.parse_args(argv)
    records = records_for(a.keys, a.rate, a.rescales)
    work = Path(tempfile.mkdtemp(prefix="spillway-bench-rescaleseries-"))
    broker = None
    load_before = procstat.load_average()
    try:
        bootstrap = a.bootstrap
        if bootstrap is None:
            broker = LocalBroker(BrokerConfig.with_free_ports(work / "broker"))
            broker.start()
            bootstrap = broker.bootstrap
        r = run(bootstrap, a.rescales, records, a.keys, a.rate, work)
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    result: dict[str, Any] = {
        **r,
        "summary": rss.summarise(r["rescales"]),
        "load_before": load_before,
        "load_after": procstat.load_average(),
        "machine": machine(),
        "settings": {
            "rescales": a.rescales,
            "keys": a.keys,
            "rate": a.rate,
            "records": records,
            "settle_s": SETTLE_S,
            "before_s": BEFORE_S,
        },
        "operator": OP,
    }
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / f"rescaleseries-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    lb, la = result["load_before"], result["load_after"]
    print()
    print(f"{a.rescales} live rescales of a keyed count over {a.keys} keys, Spark local mode")
    print(
        f"load average (1/5/15 min) before {lb[0]:.2f}/{lb[1]:.2f}/{lb[2]:.2f}, "
        f"after {la[0]:.2f}/{la[1]:.2f}/{la[2]:.2f}"
    )
    for line in rss.render(result["summary"]):
        print(line)
    exact = r["output"]["exact"] and all(x["exit"] == 0 for x in r["rescales"])
    print(f"output exact: {r['output']['exact']}; final exit {r['final_exit']}")
    print(f"stored in {path}")
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
