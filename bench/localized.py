"""B3: localized recovery of one SIGKILLed subtask vs restarting the whole job.

One job per round: the traced B2 pipeline (:func:`bench.peers.spillway_pipeline`, every
record carries its ``seq`` and send time) with :data:`PARALLELISM` subtasks per operator,
run by ``spillway run`` on Spark local mode (one long-running task per subtask), fed at a
fixed rate by the benchmark, every hop followed by a read_committed observer
(:mod:`bench.latency`). Twice in the same run:

* **L (localized)** — SIGKILL the Python process of ``count[0]``; Spark retries that task
  alone, it restores from its own latest checkpoint;
* **W (whole job)** — SIGKILL the driver's process group (driver JVM, and then every
  subtask process it leaves behind), then start ``spillway run`` again with the same job
  id: every subtask restores from its own latest checkpoint.

Measured (:mod:`bench.recoverystats`): records replayed (readable in a killed subtask's
input before the kill, their result not committed by then); seconds from the kill until
the end-to-end latency is back within 10 % of its 0.9-quantile over the
:attr:`Settings.base_s` seconds before the kill, for good (0.9-quantiles of 2-second
windows by arrival time; in L over
the records through ``count[0]``); in L, the output rate of the records that do not pass
through ``count[0]`` (the unaffected subtasks), per record offered in the same window, in
the :attr:`Settings.base_s` seconds after the kill vs before.
The output is checked against the batch reference at the end.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from bench import latency, peers, procstat, workload
from bench.checkpoints import percentile
from bench.recoverystats import back_within, count_between, dip, replayed
from bench.stats import ratios, spread

ENV_INPUT, ENV_OUTPUT = "SPILLWAY_B3_INPUT", "SPILLWAY_B3_OUTPUT"
PARALLELISM = 2
KILLED = ("count", 0)
HOP_OPERATORS = ("source", "parse", "count", "sink")
ROOT = Path(__file__).resolve().parent.parent
TOLERANCE = 0.1
# "Latency back" compares the 0.9-quantile: a window's median can hide the backlog of one
# restarted subtask behind its fresh records (and the others'); the tail cannot.
QUANTILE = 0.9


@dataclass(frozen=True)
class Settings:
    """Pace and timeline of one B3 round (seconds from the first record sent)."""

    rate: float = 300.0  # records/s into the input topic
    warmup_s: float = 10.0
    base_s: float = 10.0  # baseline before each kill, and the unaffected-rate window after
    after_local_s: float = 20.0  # from the localized kill to the baseline before the next
    after_whole_s: float = 70.0  # from the whole-job kill to the end of the input
    window_s: float = 2.0
    drain_s: float = 60.0  # after the last record is sent, for it to reach the output

    def kills(self) -> tuple[float, float, float]:
        """(localized kill, whole-job kill, end of input), seconds from the start."""
        local = self.warmup_s + self.base_s
        whole = local + self.after_local_s + self.base_s
        return local, whole, whole + self.after_whole_s


def pipeline() -> Any:
    """The traced pipeline over the topics named in the environment (``spillway run``)."""
    return peers.spillway_pipeline(
        os.environ[ENV_INPUT], os.environ[ENV_OUTPUT], traced=True, parallelism=PARALLELISM
    )


class _Job:
    """``spillway run bench.localized:pipeline`` in its own process group."""

    def __init__(self, bootstrap: str, job: str, env: dict[str, str], log: IO[str]) -> None:
        self.bootstrap, self.job, self.env, self.log = bootstrap, job, env, log
        self.proc: subprocess.Popen[bytes] | None = None
        self.launched = 0.0

    def start(self) -> None:
        spillway = str(Path(sys.executable).parent / "spillway")
        args = [spillway, "run", "bench.localized:pipeline", "--job-id", self.job]
        args += ["--bootstrap", self.bootstrap, "--checkpoint-interval", "1"]
        self.launched = time.time()
        self.proc = subprocess.Popen(
            args, env=self.env, stdout=self.log, stderr=self.log, start_new_session=True, cwd=ROOT
        )

    def tree(self) -> list[int]:
        """PIDs of the driver and every process below it (JVM, PySpark daemon, workers)."""
        assert self.proc is not None
        return [s.pid for s in procstat.read_tree(self.proc.pid)]

    def kill(self) -> None:
        """SIGKILL the driver's process group, then any process of its tree still alive
        (the PySpark daemon puts itself and its workers in a group of their own)."""
        assert self.proc is not None
        pids = self.tree()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self, timeout_s: float = 90.0) -> int:
        """SIGTERM (every subtask checkpoints and stops); SIGKILL if it does not exit."""
        assert self.proc is not None
        if self.proc.poll() is None:
            pids = self.tree()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
            for pid in pids:  # leftovers of the tree, by PID
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        return int(self.proc.returncode)


def _events(bootstrap: str, job: str) -> list[dict[str, Any]]:
    from channels.config import KafkaSettings
    from channels.ids import JobId
    from recovery.events import read_events

    return list(read_events(KafkaSettings(bootstrap), JobId(job)))


def _started(
    bootstrap: str, job: str, since: float, n: int, timeout_s: float
) -> list[dict[str, Any]]:
    """The ``started`` events after ``since``, once there are ``n`` (else RuntimeError)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [
            e
            for e in _events(bootstrap, job)
            if e.get("event") == "started" and float(e["time"]) > since
        ]
        if len(found) >= n:
            return found
        time.sleep(0.5)
    raise RuntimeError(f"job {job}: fewer than {n} subtasks started within {timeout_s:.0f} s")


def b3_round(bootstrap: str, admin: Any, s: Settings, log: IO[str]) -> dict[str, Any]:
    """One job, one localized kill, one whole-job kill; the figures of both."""
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    job = f"bench-b3-{uuid.uuid4().hex[:8]}"
    source_topic, output = job + "-in", job + "-out"
    for t in (source_topic, output):
        admin.create_topics([NewTopic(t, PARALLELISM, 1)])[t].result(30)
    env = {**os.environ, ENV_INPUT: source_topic, ENV_OUTPUT: output}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    os.environ.update({ENV_INPUT: source_topic, ENV_OUTPUT: output})
    plan = pipeline().plan(job)
    n = len(plan.subtasks())
    t_local, t_whole, t_end = s.kills()
    driver = _Job(bootstrap, job, env, log)
    observers: list[latency.Observer] = []
    sent: dict[int, float] = {}
    out: dict[str, Any] = {"job": job, "subtasks": n, "settings": asdict(s)}
    try:
        driver.start()
        first = _started(bootstrap, job, driver.launched - 1, n, 180)
        out["startup_s"] = max(float(e["time"]) for e in first) - driver.launched
        pid = next(int(e["pid"]) for e in first if (e["operator"], e["index"]) == KILLED)
        observers = latency.observe_hops(bootstrap, plan, output, job + "-o")
        producer = threading.Thread(
            target=lambda: sent.update(
                latency.produce_paced(bootstrap, source_topic, s.rate, t_end)
            ),
            daemon=True,
        )
        t0 = time.time()
        producer.start()
        time.sleep(max(0.0, t0 + t_local - time.time()))
        os.kill(pid, signal.SIGKILL)
        kill_local = time.time()
        time.sleep(max(0.0, t0 + t_whole - time.time()))
        driver.kill()
        kill_whole = time.time()
        driver.start()
        restarted = _started(bootstrap, job, kill_whole, n, 180)
        out["whole_restart_s"] = max(float(e["time"]) for e in restarted) - kill_whole
        producer.join()
        deadline = time.monotonic() + s.drain_s
        while len(observers[-1].seen) < len(sent) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        for o in observers:
            o.stop()
        out["exit_code"] = driver.stop()
    events = _events(bootstrap, job)
    check = workload.judge(
        workload.read_output(bootstrap, output, job + "-check"), workload.reference(len(sent))
    )
    with contextlib.suppress(Exception):  # tidying up, not a result
        for f in admin.delete_topics([source_topic, output]).values():
            f.result(30)
    seen = [o.seen for o in observers]
    out["output"] = asdict(check)
    out["sent"], out["arrived"] = len(sent), len(seen[-1])
    # L's recovery is judged up to the baseline of W (records sent before W's kill).
    end_local = t0 + t_whole - s.base_s
    out["local"] = _localized(sent, seen, observers[1].partition, kill_local, end_local, s)
    out["local"]["runner"] = _runner_view(events, kill_local, kill_whole)
    out["whole"] = _whole(sent, seen, kill_whole, t0 + t_end, s)
    out["whole"]["runner"] = _runner_view(events, kill_whole, float("inf"))
    return out


def _e2e(
    sent: dict[int, float], arrived: dict[int, float], only: Any = lambda seq: True
) -> list[tuple[float, float]]:
    """(arrival time, end-to-end latency) of every record that arrived (of those selected).

    By arrival, not send time: the records a kill delays most were sent before it.
    """
    return [
        (arrived[seq], arrived[seq] - t) for seq, t in sent.items() if seq in arrived and only(seq)
    ]


def _baseline(points: list[tuple[float, float]], kill: float, s: Settings, q: float = 0.5) -> float:
    """The ``q``-quantile of the latency of the records that arrived in the ``s.base_s``
    seconds before ``kill``."""
    return percentile([v for t, v in points if kill - s.base_s <= t < kill], q)


def _hop_replays(
    sent: dict[int, float], seen: list[dict[int, float]], kill: float
) -> dict[str, int]:
    inputs = [sent, *seen[:-1]]
    return {op: replayed(i, o, kill) for op, i, o in zip(HOP_OPERATORS, inputs, seen, strict=True)}


def _localized(
    sent: dict[int, float],
    seen: list[dict[int, float]],
    partition: dict[int, int],
    kill: float,
    end: float,
    s: Settings,
) -> dict[str, Any]:
    # count[i] reads partition i of the parse→count channel: those records pass through it.
    def unaffected(seq: int) -> bool:
        return partition.get(seq, KILLED[1]) != KILLED[1]

    # The records through the restarted subtask are the ones it delays: their latency
    # (a median over all records would hide them behind the others).
    points = _e2e(sent, seen[-1], lambda seq: not unaffected(seq))
    base = _baseline(points, kill, s, QUANTILE)
    before = count_between(seen[-1], kill - s.base_s, kill, unaffected) / s.base_s
    during = count_between(seen[-1], kill, kill + s.base_s, unaffected) / s.base_s
    # Delivered per offered: the records sent in the same window (the producer's pace
    # wavers on a loaded machine, and a subtask cannot deliver what it was not given).
    offered_before = count_between(sent, kill - s.base_s, kill, unaffected) / s.base_s
    offered_during = count_between(sent, kill, kill + s.base_s, unaffected) / s.base_s
    mine = _e2e(sent, seen[-1], unaffected)
    return {
        "kill": kill,
        "replayed": replayed(seen[1], seen[2], kill, lambda seq: not unaffected(seq)),
        "baseline_p50_s": _baseline(points, kill, s),
        "baseline_p90_s": base,
        "recovery_s": back_within(points, kill, end, base, TOLERANCE, s.window_s, QUANTILE),
        "unaffected_rate_before": before,
        "unaffected_rate_during": during,
        "unaffected_offered_before": offered_before,
        "unaffected_offered_during": offered_during,
        "unaffected_raw_dip": dip(before, during),
        "unaffected_dip": dip(before / offered_before, during / offered_during),
        "unaffected_p50_before_s": _baseline(mine, kill, s),
        "unaffected_p50_during_s": _baseline(mine, kill + s.base_s, s),
    }


def _whole(
    sent: dict[int, float], seen: list[dict[int, float]], kill: float, end: float, s: Settings
) -> dict[str, Any]:
    points = _e2e(sent, seen[-1])
    base = _baseline(points, kill, s, QUANTILE)
    hops = _hop_replays(sent, seen, kill)
    return {
        "kill": kill,
        "replayed": sum(hops.values()),
        "replayed_per_operator": hops,
        "baseline_p50_s": _baseline(points, kill, s),
        "baseline_p90_s": base,
        "recovery_s": back_within(points, kill, end, base, TOLERANCE, s.window_s, QUANTILE),
    }


def _runner_view(events: list[dict[str, Any]], after: float, before: float) -> dict[str, Any]:
    """Which subtasks restarted after ``after`` (and before ``before``), how long after,
    and their longest state restore, as their ``started`` events report."""
    starts = [
        e
        for e in events
        if e.get("event") == "started"
        and after < float(e["time"]) < before
        and e.get("restored_from") is not None
    ]
    return {
        "restarted": sorted(f"{e['operator']}[{e['index']}]" for e in starts),
        "restart_after_kill_s": max((float(e["time"]) - after for e in starts), default=None),
        "restore_s": max((float(e["restore_s"]) for e in starts), default=None),
    }


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians (min–max) over rounds; replayed L/W ratio round by round vs 1/N."""

    def sp(values: list[float]) -> dict[str, Any]:
        return asdict(spread(values))

    out: dict[str, Any] = {"subtasks": rounds[0]["subtasks"]}
    for side in ("local", "whole"):
        out[side] = {"replayed": sp([r[side]["replayed"] for r in rounds])}
        rec = [r[side]["recovery_s"] for r in rounds]
        out[side]["recovery_s"] = (
            sp([x for x in rec if x is not None]) if any(x is not None for x in rec) else None
        )
        out[side]["not_recovered"] = sum(x is None for x in rec)
        for k in ("baseline_p50_s", "baseline_p90_s"):
            out[side][k] = sp([r[side][k] for r in rounds])
    for k in ("unaffected_dip", "unaffected_raw_dip"):
        out["local"][k] = sp([r["local"][k] for r in rounds])
    for side in ("local", "whole"):  # kill → every killed subtask started again
        out[side]["restart_s"] = sp([r[side]["runner"]["restart_after_kill_s"] for r in rounds])
    # Pooled over rounds: where a kill lands in a subtask's checkpoint cycle makes one
    # round's L anything from 0 to a full interval of its input, while W sums N such
    # draws; ΣL/ΣW weighs every kill alike (a median of per-round ratios does not).
    local_sum = sum(r["local"]["replayed"] for r in rounds)
    whole_sum = sum(r["whole"]["replayed"] for r in rounds)
    if whole_sum:
        out["replayed_pooled_ratio"] = local_sum / whole_sum
        # L against W's average per subtask: 1.0 when a lone restart replays what each
        # subtask of a whole-job restart replays, i.e. only its own share.
        out["replayed_vs_per_subtask"] = local_sum / (whole_sum / out["subtasks"])
    with contextlib.suppress(ValueError):  # a round with no whole-job replay has no ratio
        out["replayed_ratio"] = sp(
            ratios(
                [r["local"]["replayed"] for r in rounds], [r["whole"]["replayed"] for r in rounds]
            )
        )
    out["output_ok"] = all(r["output"]["every_update_once"] for r in rounds)
    return out
