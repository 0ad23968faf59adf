"""``python -m bench.rescale`` (the suite's B6): a live rescale of one operator beside a
whole-job restart with the new parallelism, in the same run. ``make bench-rescale`` runs
the series of live rescales, phase by phase (:mod:`bench.rescaleseries`).

Self-contained: starts its own local broker and, per round, runs a bounded job with
``spillway run`` on Spark local mode (:func:`pipeline`): a paced source (2 subtasks) →
``key_by`` → a keyed count over ``--keys`` keys (2 subtasks) → one sink; and the source
→ a second sink (``side``), the unaffected operators whose throughput is observed (its
published lines, sampled every 0.25 s). Each round:

1. once the source has written ``--keys`` records (so the count holds every key's state),
   the **whole-job path**: SIGTERM to the driver (every subtask checkpoints and stops),
   then ``spillway run ... --from-savepoint latest --parallelism count=4``; timed from the
   SIGTERM to every count subtask's first ``started`` event;
2. 25 s later (the restart's backlog read, the job steady again), ``spillway rescale
   --operator count --parallelism 2``: the **live pause** is ``rescale-requested`` →
   every new subtask's first ``started`` event; the **dip** is the side sink's
   throughput from the request to the end of the pause (at least 5 s) against the 10 s
   before the request;
3. the job runs to its end; both outputs are checked exactly against a plain-Python
   reference (per key count and sum of sequence numbers; every record once on ``side``).

The two paths differ in direction (2 → 4 whole-job, 4 → 2 live; both hand over the same
state). The measured run took this order because the other one (live first) could not
finish then: after a live 2 → 4 and a savepoint restart at 2 the sink waited for writers
that no longer existed; a savepoint rescale now announces its width in-band too
(spillway.recovery.control.savepoint, tests/integration/test_live_rescale.py), so both orders work.
Results: ``bench/results/rescale-<UTC time>.json``, medians with min–max.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.restart import _Job, _wait_for

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"
ENV_OUT, ENV_RATE = "SPILLWAY_RS_OUT", "SPILLWAY_RS_RATE"
ENV_RECORDS, ENV_KEYS = "SPILLWAY_RS_RECORDS", "SPILLWAY_RS_KEYS"
OP, FROM, TO = "count", 2, 4
MAX_PARALLELISM = 16
BEFORE_S, AFTER_S = 10.0, 10.0
# From the whole-job restart's subtasks processing to the live rescale request.
SETTLE_S = 25.0
KEYS, RATE = 100_000, 1000.0  # keys of count's state; records/s per source subtask
EVENT = {
    "type": "record",
    "name": "RescaleEvent",
    "fields": [{"name": "seq", "type": "long"}, {"name": "key", "type": "string"}],
}
TOTAL = {
    "type": "record",
    "name": "RescaleTotal",
    "fields": [
        {"name": "key", "type": "string"},
        {"name": "n", "type": "long"},
        {"name": "seqs", "type": "long"},
    ],
}


def pipeline() -> Any:
    """events (p=2, paced, bounded) → key_by → count (p=2) → out; events → side."""
    from spillway.spark_jobs.api.pipeline import Pipeline

    out = os.environ[ENV_OUT]
    p = Pipeline("bench-rescale")
    events = p.generate(
        "events",
        make=make_event,
        schema=EVENT,
        count=int(os.environ[ENV_RECORDS]),
        parallelism=2,
        rate=float(os.environ[ENV_RATE]),
    )
    events.key_by(_key, max_parallelism=MAX_PARALLELISM).aggregate(
        OP, init=_init, add=_add, result=_result, schema=TOTAL, parallelism=FROM
    ).write_jsonl("out", out, parallelism=1)
    events.write_jsonl("side", out, parallelism=1)
    return p


def make_event(i: int) -> dict[str, Any]:
    """Event ``i`` of key ``k{i % keys}``."""
    return {"seq": i, "key": f"k{i % int(os.environ[ENV_KEYS])}"}


def _key(r: dict[str, Any]) -> str:
    return str(r["key"])


def _init() -> list[int]:
    return [0, 0]


def _add(acc: list[int], r: dict[str, Any]) -> list[int]:
    # Count and sum of seq: a record lost or counted twice changes one of them.
    return [acc[0] + 1, acc[1] + int(r["seq"])]


def _result(k: str, acc: list[int]) -> dict[str, Any]:
    return {"key": k, "n": acc[0], "seqs": acc[1]}


def reference(records: int, keys: int) -> dict[str, tuple[int, int]]:
    """Per key, (count, sum of seq) of events 0..records-1."""
    out: dict[str, list[int]] = {}
    for i in range(records):
        acc = out.setdefault(f"k{i % keys}", [0, 0])
        acc[0], acc[1] = acc[0] + 1, acc[1] + i
    return {k: (n, s) for k, (n, s) in out.items()}


def check_output(out: Path, records: int, keys: int) -> dict[str, Any]:
    """Both outputs against the reference: mismatches listed (empty: exact)."""
    rows: dict[str, tuple[int, int]] = {}
    twice: list[str] = []
    for f in sorted(glob.glob(str(out / "out" / "*.jsonl"))):
        for line in Path(f).read_text().splitlines():
            r = json.loads(line)
            if r["key"] in rows:
                twice.append(r["key"])
            rows[r["key"]] = (r["n"], r["seqs"])
    ref = reference(records, keys)
    wrong = sorted(k for k in ref.keys() | rows.keys() if ref.get(k) != rows.get(k))
    seqs = [
        json.loads(line)["seq"]
        for f in sorted(glob.glob(str(out / "side" / "*.jsonl")))
        for line in Path(f).read_text().splitlines()
    ]
    exact = not twice and not wrong and sorted(seqs) == list(range(records))
    return {
        "exact": exact,
        "count_keys": len(rows),
        "count_keys_twice": twice[:10],
        "count_keys_wrong": wrong[:10],
        "side_records": len(seqs),
        "side_distinct": len(set(seqs)),
    }


class LineSampler:
    """Counts the published lines under ``directory`` every ``period_s`` in a thread of its
    own: (time, lines) samples. Reads only what was appended since the last look."""

    def __init__(self, directory: Path, period_s: float = 0.25) -> None:
        self.directory, self.period_s = directory, period_s
        self.samples: list[tuple[float, int]] = []
        self._seen: dict[str, tuple[int, int]] = {}  # file -> (bytes read, lines)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _count(self) -> int:
        for f in glob.glob(str(self.directory / "*.jsonl")):
            pos, lines = self._seen.get(f, (0, 0))
            try:
                with open(f, "rb") as fh:
                    fh.seek(pos)
                    chunk = fh.read()
            except FileNotFoundError:
                continue
            # Only whole lines: a partly written last line is counted next time.
            whole = chunk.rfind(b"\n") + 1
            self._seen[f] = (pos + whole, lines + chunk.count(b"\n", 0, whole))
        return sum(n for _, n in self._seen.values())

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time(), self._count()))
            self._stop.wait(self.period_s)

    def close(self) -> None:
        """Stop sampling."""
        self._stop.set()
        self._thread.join()


def _spillway(job: str, bootstrap: str, *extra: str) -> list[str]:
    spillway = str(Path(sys.executable).parent / "spillway")
    return [spillway, *extra, "--job", job, "--bootstrap", bootstrap]


def one_round(bootstrap: str, records: int, keys: int, rate: float, work: Path) -> dict[str, Any]:
    """One job: live rescale, then whole-job restart; the figures and the output check."""
    from bench import rescalestats as rs

    job = f"bench-rescale-{uuid.uuid4().hex[:8]}"
    out = work / job
    env = {**os.environ, ENV_OUT: str(out), ENV_RATE: str(rate)}
    env |= {ENV_RECORDS: str(records), ENV_KEYS: str(keys)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    spillway = str(Path(sys.executable).parent / "spillway")
    run = [spillway, "run", "bench.rescale:pipeline", "--job-id", job, "--bootstrap", bootstrap]
    run += ["--checkpoint-interval", "1", "--master", "local[10,4]"]
    sampler = LineSampler(out / "side")
    loads: dict[str, float] = {}
    with (work / f"{job}.log").open("w") as log:
        driver = _Job(run, env, log)
        try:
            _wait_for(bootstrap, job, lambda ev: rs.all_started(ev, OP, FROM, 0.0), 300)
            _wait_lines(sampler, driver, keys)  # every key's state is in the count
            loads["stop"] = os.getloadavg()[0]
            stopped = time.time()
            driver.stop(120)
            exited = time.time()
            again = [*run, "--from-savepoint", "latest", "--parallelism", f"{OP}={TO}"]
            driver = _Job(again, env, log)
            events = _wait_for(bootstrap, job, lambda ev: rs.all_started(ev, OP, TO, exited), 300)
            firsts = rs.first_starts(events, OP, TO, exited)
            whole = {"stopped_s": exited - stopped, "pause_s": max(firsts.values()) - stopped}
            # Steady again (the restart's backlog read) before the window the dip compares with.
            time.sleep(max(0.0, max(firsts.values()) + SETTLE_S - time.time()))
            loads["rescale"] = os.getloadavg()[0]
            cli = ["rescale", "--operator", OP, "--parallelism", str(FROM)]
            answer = subprocess.run(_spillway(job, bootstrap, *cli), env=env, cwd=ROOT, check=False)
            events = _wait_for(bootstrap, job, lambda ev: _rescaled(ev, rs), 300)
            live = rs.live_pause(events, OP)
            time.sleep(max(0.0, live["requested"] + live["pause_s"] + AFTER_S - time.time()))
            driver.proc.wait(records / rate + 300)
        finally:
            driver.stop()
            sampler.close()
    result = {
        "job": job,
        "rescale_exit": answer.returncode,
        "final_exit": driver.proc.returncode,
        "live": live,
        "dip": rs.dip(
            sampler.samples, live["requested"], live["requested"] + live["pause_s"], BEFORE_S
        ),
        "whole_job": whole,
        "load_1min": loads,
        "output": check_output(out, records, keys),
    }
    shutil.rmtree(out, ignore_errors=True)
    return result


def records_for(keys: int, rate: float) -> int:
    """Input for one round: every key before the stop, then the restart and the windows
    of the live rescale at ``rate`` per source subtask."""
    return keys + int(2 * rate * (SETTLE_S + AFTER_S + 45))


def _wait_lines(sampler: LineSampler, driver: _Job, lines: int) -> None:
    """Until the side sink has published ``lines`` records; RuntimeError if the job ends."""
    while not sampler.samples or sampler.samples[-1][1] < lines:
        if driver.proc.poll() is not None:
            raise RuntimeError("the job ended before its rescale (see its log)")
        time.sleep(0.5)


def _rescaled(events: list[dict[str, Any]], rs: Any) -> bool:
    try:
        rs.live_pause(events, OP)
    except (StopIteration, KeyError):
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    """Start a broker, run the rounds, print and store the figures."""
    import argparse

    from bench import procstat
    from bench import rescalestats as rs
    from bench.channels import machine
    from spillway.devtools.localbroker import BrokerConfig, LocalBroker

    ap = argparse.ArgumentParser(prog="python -m bench.rescale", description=__doc__)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keys", type=int, default=KEYS, help="keys of count's state")
    ap.add_argument("--rate", type=float, default=RATE, help="records/s per source subtask")
    ap.add_argument("--bootstrap", default=None, help="use this broker instead of starting one")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR)
    a = ap.parse_args(argv)
    records = records_for(a.keys, a.rate)
    work = Path(tempfile.mkdtemp(prefix="spillway-bench-rescale-"))
    broker = None
    load_before = procstat.load_average()
    rounds: list[dict[str, Any]] = []
    try:
        bootstrap = a.bootstrap
        if bootstrap is None:
            broker = LocalBroker(BrokerConfig.with_free_ports(work / "broker"))
            broker.start()
            bootstrap = broker.bootstrap
        for k in range(a.rounds):
            r = one_round(bootstrap, records, a.keys, a.rate, work)
            rounds.append(r)
            print(
                f"round {k + 1}/{a.rounds}: live pause {r['live']['pause_s']:.2f} s, dip "
                f"{100 * r['dip']['dip']:.1f} %, whole job {r['whole_job']['pause_s']:.2f} s, "
                f"output exact: {r['output']['exact']} (load {r['load_1min']})",
                flush=True,
            )
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    result: dict[str, Any] = {
        "rounds": rounds,
        "summary": rs.summarise(rounds),
        "load_before": load_before,
        "load_after": procstat.load_average(),
        "machine": machine(),
        "settings": {"rounds": a.rounds, "keys": a.keys, "rate": a.rate, "records": records},
        "operator": OP,
        "widths": {"whole_job": [FROM, TO], "live": [TO, FROM]},
    }
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / f"rescale-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    lb, la = result["load_before"], result["load_after"]
    print()
    print(f"Rescale of a keyed count over {a.keys} keys, Spark local mode")
    print(
        f"load average (1/5/15 min) before {lb[0]:.2f}/{lb[1]:.2f}/{lb[2]:.2f}, "
        f"after {la[0]:.2f}/{la[1]:.2f}/{la[2]:.2f}"
    )
    for line in rs.render(result["summary"]):
        print(line)
    print(f"every round's output exact: {all(r['output']['exact'] for r in rounds)}")
    print(f"stored in {path}")
    return 0 if all(r["output"]["exact"] for r in rounds) else 1


if __name__ == "__main__":
    sys.exit(main())
