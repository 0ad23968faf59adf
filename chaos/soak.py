"""The soak (``make soak-long``, ``python -m chaos.soak --minutes N``): the chaos suite's
keyed job at a steady rate for a long time, one subtask's Python worker SIGKILLed every
few minutes, memory, descriptors and topic sizes sampled throughout, output checked
exactly at the end.

A :class:`~chaos.run.ChaosRun` without its crash schedule or other faults does the rest:
its own :class:`LocalBroker` on free loopback ports, the ``spillway run`` driver in its own
session, paced sources (``RECORDS`` = rate × duration), the exact output check. The
soak adds the kills (by PID, from the subtask's ``started`` event, as ``subtask-stop``
finds its target), a sampler thread (:mod:`chaos.soakprobe`) and the summary
(:mod:`chaos.soakstats`), written to ``bench/results/soak-<UTC>.json``.
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from chaos import observe, soakprobe
from chaos.check import kill_mismatches
from chaos.pipeline import OPERATORS
from chaos.run import PARALLELISM, STEADY_S, ChaosRun, Profile
from chaos.schedule import CHAOS_POINTS, Schedule
from chaos.soakstats import Sample, Summary, render, summarize, unbounded_checkpoints
from spillway.channels.ids import JobId
from spillway.offsets.store import prune_point

log = logging.getLogger("chaos.soak")

KILL = "subtask-kill"
GROWTH_LIMIT = 0.10  # RSS growth after warm-up that fails a soak, per process kind
# A prune keeps at most this many checkpoint records of a partition (offsets.store);
# each record's transaction adds a commit marker, and pruning runs every tenth checkpoint.
PRUNE_LIMIT: int = inspect.signature(prune_point).parameters["limit"].default
CHECKPOINT_BOUND = 2 * (PRUNE_LIMIT + 10)  # offsets per checkpoint partition


@dataclass(frozen=True)
class SoakConfig:
    """How long and how hard a soak runs."""

    minutes: float = 60.0
    rate: float = 1000.0  # records/s over all sources
    kill_every_s: float = 180.0
    sample_every_s: float = 5.0
    keys: int = 100
    checkpoint_interval_s: float = 1.0
    seed: int = 1

    @property
    def duration_s(self) -> float:
        """How long the sources emit."""
        return self.minutes * 60

    @property
    def records(self) -> int:
        """Records the job emits in all: rate × duration."""
        return int(self.rate * self.duration_s)

    @property
    def warmup_s(self) -> float:
        """Samples before this are warm-up (JVM heaps, caches filling): a tenth of the run,
        at least a minute and at most five."""
        return min(max(self.duration_s / 10, 60.0), 300.0)

    @property
    def window_s(self) -> float:
        """RSS at the start and the end of the measured span: means over this long."""
        return min(max(self.duration_s / 10, 30.0), 300.0)

    def kill_times(self) -> list[float]:
        """Seconds into the run of each kill: every ``kill_every_s``, the last at least
        half an interval before the sources stop (so its recovery is under load too)."""
        n = int((self.duration_s - self.kill_every_s / 2) // self.kill_every_s)
        return [self.kill_every_s * (k + 1) for k in range(max(n, 0))]

    def kill_targets(self) -> list[tuple[str, int]]:
        """The subtask of each kill: round-robin over every operator's subtasks."""
        subtasks = [(op, i) for i in range(PARALLELISM) for op in OPERATORS]
        return [subtasks[k % len(subtasks)] for k in range(len(self.kill_times()))]

    def profile(self) -> Profile:
        """The chaos profile the soak's job runs under (no crash schedule, no other fault)."""
        per_subtask = math.ceil(len(self.kill_times()) / (len(OPERATORS) * PARALLELISM))
        # ChaosRun builds a crash schedule on construction: that one must be valid (every
        # crash point once), though the soak replaces it with none.
        fit = math.ceil(len(CHAOS_POINTS) / (len(OPERATORS) * PARALLELISM))
        return Profile(
            "soak",
            self.records,
            kills=len(CHAOS_POINTS),
            keys=self.keys,
            emit_s=self.duration_s,
            faults=(),
            checkpoint_interval_s=self.checkpoint_interval_s,
            max_kills_per_subtask=max(per_subtask, fit),
            timeout_s=self.duration_s + 1800,
        )


@dataclass
class Kill:
    """One SIGKILL of a subtask's Python worker and the job's recovery from it."""

    at_s: float  # seconds into the run
    subtask: str
    pid: int
    attempt: int  # the attempt killed
    recovered_s: float | None = None  # until the next attempt started; None: it did not


@dataclass
class SoakResult:
    """A soak's samples, kills, summary and the chaos checks of its output."""

    config: SoakConfig
    job: str
    samples: list[Sample] = field(default_factory=list)
    kills: list[Kill] = field(default_factory=list)
    summary: Summary | None = None
    checkpoint_problems: list[str] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)  # chaos.run.Report.to_json()

    @property
    def lost(self) -> int:
        """Reference records missing from the committed output."""
        return int(self.report["output"]["lost"])

    @property
    def duplicated(self) -> int:
        """Extra copies of reference records in the committed output."""
        return int(self.report["output"]["duplicated"])

    def problems(self, growth_limit: float | None) -> list[str]:
        """Why the soak failed (empty: it passed). ``growth_limit``: also fail a process
        kind whose RSS grew more than that after warm-up (``None``: report only)."""
        out = [] if self.report.get("exact") else ["output or run not exact (see report)"]
        planned = len(self.config.kill_times())
        if len(self.kills) != planned:
            out.append(f"{len(self.kills)} kills of {planned} planned")
        out += [f"{k.subtask} (pid {k.pid}) did not recover" for k in self.kills if
                k.recovered_s is None]  # fmt: skip
        out += self.checkpoint_problems
        if growth_limit is not None and self.summary is not None:
            out += [
                f"RSS of {k} grew {r:+.1%} after warm-up (limit {growth_limit:.0%})"
                for k, r in self.summary.growth_over(growth_limit).items()
            ]
        return out

    def lines(self) -> list[str]:
        """The printed summary."""
        head = [
            f"soak {self.job}: {self.config.records} records at {self.config.rate:g}/s, "
            f"{len(self.kills)} kills ("
            + ", ".join(f"{k.subtask}@{k.at_s:.0f}s→{k.recovered_s}s" for k in self.kills)
            + ")"
        ]
        if self.summary is None:
            return head
        restarts = int(self.report.get("restarts", 0))
        return head + render(self.summary, self.lost, self.duplicated, restarts)

    def to_json(self, commit: str) -> dict[str, Any]:
        """Everything, as plain JSON, with the commit and machine it ran on."""
        return {
            "commit": commit,
            "host": {"cores": os.cpu_count(), "platform": platform.platform()},
            "config": asdict(self.config),
            "job": self.job,
            "summary": asdict(self.summary) if self.summary else None,
            "kills": [asdict(k) for k in self.kills],
            "checkpoint_problems": self.checkpoint_problems,
            "problems": self.problems(GROWTH_LIMIT),
            "report": self.report,
            "samples": [asdict(s) for s in self.samples],
        }


class SoakRun(ChaosRun):
    """One soak; :meth:`soak` once."""

    def __init__(self, config: SoakConfig, workdir: Path) -> None:
        super().__init__(config.profile(), config.seed, workdir)
        self.schedule = Schedule(crashes=())  # the soak's kills are its own, by PID
        self.config = config
        self.result = SoakResult(config, self.job)
        self._t0 = 0.0
        self._sampling = threading.Event()

    def soak(self) -> SoakResult:
        """Run the job to its end under the kills, sample throughout, check, summarize."""
        self.result.report = self.run().to_json()
        c = self.config
        self.result.summary = summarize(self.result.samples, c.warmup_s, c.window_s)
        self.result.checkpoint_problems = unbounded_checkpoints(
            self.result.samples, CHECKPOINT_BOUND, c.warmup_s
        )
        return self.result

    def _inject(self) -> None:
        # Replaces ChaosRun's faults: the kills below, while a thread samples.
        self.report.kills_planned = len(self.config.kill_times())
        self._start_driver(crash_spec="")
        self._t0 = time.monotonic()
        run = self._wait_for_run(0)
        sampler = threading.Thread(target=self._sample_loop, name="soak sampler", daemon=True)
        self._sampling.set()
        sampler.start()
        try:
            for at, (op, index) in zip(
                self.config.kill_times(), self.config.kill_targets(), strict=True
            ):
                if self._until(self._past(at), f"{at:.0f}s", at + 600):
                    break  # the driver died (its exit is reported) or the run timed out
                self._kill(op, index)
            self._wait_driver()
        finally:
            self._sampling.clear()
            sampler.join(120)
        planned: dict[str, int] = {}
        for k in self.result.kills:
            planned[k.subtask] = planned.get(k.subtask, 0) + 1
        subtasks = [f"{op}[{i}]" for op in OPERATORS for i in range(PARALLELISM)]
        events = observe.events(self.settings, JobId(self.job))
        # Every attempt the event log shows is one the soak asked for: no other restart.
        self.report.kill_mismatches = kill_mismatches(events, run, planned, {}, subtasks)

    def _elapsed(self) -> float:
        return time.monotonic() - self._t0

    def _past(self, at: float) -> Callable[[], bool]:
        return lambda: self._elapsed() >= at

    def _kill(self, op: str, index: int) -> None:
        """SIGKILL ``op[index]``'s Python worker once it is past restoring; wait until its
        next attempt has started."""
        started = self._latest_start(op, index)
        time.sleep(max(0.0, float(started["time"]) + STEADY_S - time.time()))
        pid, attempt = int(started["pid"]), int(started["attempt"])
        kill = Kill(round(self._elapsed(), 1), f"{op}[{index}]", pid, attempt)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            self.report.problems.append(f"{kill.subtask} (pid {pid}) was gone before its kill")
            return
        self._count(KILL)
        self.result.kills.append(kill)
        t_kill = time.monotonic()

        def recovered() -> bool:
            return int(self._latest_start(op, index)["attempt"]) > attempt

        if not self._until(recovered, f"{kill.subtask} restarted", 600.0):
            kill.recovered_s = round(time.monotonic() - t_kill, 1)

    def _sample_loop(self) -> None:
        probe: soakprobe.TopicProbe | None = None
        next_t = 0.0
        while self._sampling.is_set():
            if self._elapsed() >= next_t:
                next_t += self.config.sample_every_s
                try:
                    dirs = self.broker.config.log_dirs
                    probe = probe or soakprobe.TopicProbe(self.settings, dirs)
                    assert self._driver is not None
                    s = soakprobe.sample(
                        round(self._elapsed(), 1),
                        self._driver.pid,
                        self.broker.status().pid,
                        probe,
                    )
                    self.result.samples.append(s)
                except Exception as e:  # a slow broker answer: this sample is skipped
                    log.warning("soak: sample skipped: %s", e)
            time.sleep(0.2)


def commit() -> str:
    """The checked-out commit (``+dirty`` with local changes), or ``unknown``."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True)
        return head + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_result(result: SoakResult, results_dir: Path) -> Path:
    """``results_dir/soak-<UTC>.json`` with everything the soak measured."""
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"soak-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(result.to_json(commit()), indent=1) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    """Run one soak, print its summary, write its JSON; exit 1 if it failed (output not
    exact, a kill not recovered, checkpoints unbounded, RSS grew past 10 % after warm-up)."""
    d = SoakConfig()
    ap = argparse.ArgumentParser(prog="python -m chaos.soak", description=__doc__)
    ap.add_argument("--minutes", type=float, default=d.minutes)
    ap.add_argument("--rate", type=float, default=d.rate, help="records/s over all sources")
    ap.add_argument("--kill-every", type=float, default=d.kill_every_s, help="seconds")
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--workdir", default=None, help="keep logs here (default: a temp dir)")
    ap.add_argument("--results", default="bench/results", help="where soak-<UTC>.json goes")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    config = SoakConfig(args.minutes, args.rate, args.kill_every, seed=args.seed)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="spillway-soak-"))
    result = SoakRun(config, workdir).soak()
    path = write_result(result, Path(args.results))
    for line in result.lines():
        print(line, flush=True)
    problems = result.problems(GROWTH_LIMIT)
    print("PASS" if not problems else "FAIL: " + "; ".join(problems), flush=True)
    print(f"results: {path}\nlogs: {workdir}", file=sys.stderr)
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
