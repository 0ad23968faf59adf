"""Global checkpoint duration under backlog: aligned vs unaligned, in one run.

``python -m bench.checkpoints`` (``make bench-checkpoints``) runs the pipeline
:func:`bench.pipelines.backlog` — ``generate`` (parallelism 1) → ``slow`` (map,
parallelism 1, throttled to S = R/10 records/s) → ``write_jsonl`` — on Spark
(``local[3,1]``, one task per subtask) with global checkpoints every second, once per
checkpoint mode (unaligned, aligned) and target backlog B (default 0, 100k, 300k).

The generator runs at R until the generate→slow channel holds about B records that
``slow`` has not processed, then continues at S, so the backlog stays near B while the
benchmark watches the checkpoints. After the backlog is reached, it waits until at least
``--min-checkpoints`` global checkpoints triggered from then on have completed and at
least ``--min-window`` seconds have passed (at most ``--max-window`` seconds), then asks
the job to stop (the ``stop-requested`` event that SIGTERM would append) and waits for it.

Per completed global checkpoint (``spillway.recovery.control.globalckpt.read_completed``, read while
the
job runs: the coordinator keeps only the newest 10 records) it records:

* ``duration_s`` — the coordinator's figure: trigger → the last subtask reported it
  committed;
* ``phases`` — where that time went, in seconds from the trigger: the trigger's produce
  acknowledged, the coordinator saw the last report, and per subtask when its signal
  poll delivered the trigger (or it read barrier n first), began, committed and reported;
  the slowest checkpoints are listed under the table;
* ``backlog`` — records the generator had emitted minus records ``slow`` had processed
  (passed through its map function), both at the trigger time, from the progress logs
  both operators write (see :mod:`bench.pipelines`; accurate to a few hundred records).
  Every one of these records lies before barrier n in the channel, so it is what an
  aligned checkpoint has to wait behind, and what an unaligned one leaves in flight;
* ``in_flight`` — from the checkpoint records themselves: the generator's position in
  its checkpoint n minus the records ``slow`` had output at its checkpoint n, i.e. the
  channel records the cut leaves in flight (unaligned: ≈ the backlog; aligned: 0).

Per (mode, target) it reports the count, p50 and p99 (linear interpolation; with fewer
than 100 checkpoints p99 lies between the two largest) of the durations of the
checkpoints triggered once the backlog was reached, and the aligned/unaligned ratio of
p50 and of p99 — both modes measured in the same run of the benchmark. Global
checkpoints the coordinator gave up on (its 60 s timeout) are never recorded as
completed; they are counted separately. Table on stdout; raw figures as JSON and a plot
under ``bench/results/``.

The broker is ``--bootstrap``, else ``$SPILLWAY_BOOTSTRAP``, else a throw-away local
broker in a temporary directory, stopped at the end.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import gc
import importlib
import importlib.metadata
import inspect
import json
import math
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.channels import BenchError, machine, start_local_broker
from bench.pipelines import BacklogConfig, read_progress
from spillway.channels.config import KafkaSettings
from spillway.channels.errors import ConfigError, SpillwayError
from spillway.channels.ids import JobId, OperatorName
from spillway.channels.kafka.admin import Admin
from spillway.channels.modes import CheckpointMode, choose
from spillway.channels.naming import channel_topic
from spillway.offsets.store import CheckpointStore
from spillway.recovery.control.globalckpt import Coordinator, GlobalProgress, read_completed
from spillway.recovery.observe.events import (
    events_topic,
    last_submission,
    read_events,
    record_job_event,
)

REF = "bench.pipelines:backlog"
MODES: tuple[CheckpointMode, ...] = ("unaligned", "aligned")
RESULTS_DIR = Path(__file__).resolve().parent / "results"
BOOTSTRAP_ENV = "SPILLWAY_BOOTSTRAP"
MASTER = "local[3,1]"  # a task slot per subtask (the job is unbounded), no task retries
SUBTASKS = ("generate[0]", "slow[0]", "out[0]")
# How long the driver's coordinator waits for one global checkpoint before it moves on.
COORDINATOR_TIMEOUT_S = float(inspect.signature(Coordinator).parameters["timeout_s"].default)


@dataclass(frozen=True)
class Settings:
    """The command line, validated."""

    bootstrap: str
    backlogs: tuple[int, ...]
    modes: tuple[CheckpointMode, ...]
    rate: float
    slow_rate: float
    global_interval_s: float
    min_window_s: float
    max_window_s: float
    min_checkpoints: int
    payload: int
    start_timeout_s: float
    replot: Path | None = None


@dataclass
class Sample:
    """One completed global checkpoint of one run."""

    id: int
    start: float  # unix time of the trigger
    duration_s: float
    # "startup": triggered before the generator opened (measures task start-up);
    # "fill": while the backlog was building; "hold": once it was reached.
    phase: str
    backlog: float  # emitted − processed by slow, at the trigger
    in_flight: int | None  # from the checkpoint records (None: pruned before it was read)
    subtask_durations_s: dict[str, float] = field(default_factory=dict)
    # Seconds from the trigger: its produce acknowledged, the coordinator saw the last
    # report, and per subtask seen / start / committed / reported
    # (spillway.recovery.control.globalckpt).
    phases: dict[str, Any] = field(default_factory=dict)


# -- statistics --------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) by linear interpolation between closest ranks (numpy's
    default); ``ValueError`` for no values."""
    if not values:
        raise ValueError("no values")
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def count_at(samples: Sequence[tuple[float, int, bool]], t: float) -> float:
    """A progress log's count at unix time ``t``, interpolated linearly between lines.

    Before the first line the count is 0 (nothing happened yet); after the last one it
    stays at the last count.
    """
    if not samples or t < samples[0][0]:
        return 0.0
    times = [s[0] for s in samples]
    i = bisect.bisect_right(times, t)
    if i >= len(samples):
        return float(samples[-1][1])
    (t0, c0, _), (t1, c1, _) = samples[i - 1], samples[i]
    return c0 + (c1 - c0) * ((t - t0) / (t1 - t0) if t1 > t0 else 1.0)


# -- one run -----------------------------------------------------------------------------


class Run:
    """One job: one checkpoint mode, one target backlog."""

    def __init__(
        self, s: Settings, mode: CheckpointMode, target: int, job: str, workdir: Path
    ) -> None:
        self.s, self.mode, self.target, self.job = s, mode, target, job
        self.jid = JobId(job)
        self.workdir = workdir
        self.kafka = KafkaSettings(s.bootstrap)
        self.config = BacklogConfig(workdir, s.rate, s.slow_rate, target, s.payload)
        self.stores = {
            name: CheckpointStore(self.kafka, self.jid, OperatorName(name), 1)
            for name in ("generate", "slow")
        }
        self.slow_out = channel_topic(self.jid, OperatorName("slow"), OperatorName("out"))
        # Per subtask, what its checkpoint of each global id recorded: the generator's
        # position, the records slow had output. Cached as soon as they appear: each
        # subtask retains only its last few checkpoint records.
        self._cuts: dict[str, dict[int, int]] = {name: {} for name in self.stores}
        # Completed global checkpoints by id, cached likewise: the coordinator keeps only
        # the last ``keep_global`` (10) records, and the window can hold more.
        self._completed: dict[int, dict[str, Any]] = {}
        self._outcome: dict[str, Any] = {}

    def _say(self, msg: str) -> None:
        print(
            f"[{time.strftime('%H:%M:%S')} {self.mode} {self.target:,}] {msg}",
            file=sys.stderr,
            flush=True,
        )

    def _drive(self) -> None:
        from spillway.spark_jobs.spark.driver import run_on_spark
        from spillway.spark_jobs.spark.jobconfig import JobConfig

        try:
            self._outcome["results"] = run_on_spark(
                JobConfig(
                    REF,
                    self.job,
                    self.s.bootstrap,
                    master=MASTER,
                    checkpoint_mode=self.mode,
                    global_interval_s=self.s.global_interval_s,
                )
            )
        except BaseException as e:  # reported by the measuring thread
            self._outcome["error"] = e

    def _check_alive(self, thread: threading.Thread) -> None:
        if "error" in self._outcome:
            e = self._outcome["error"]
            raise BenchError(f"job {self.job} failed: {type(e).__name__}: {e}")
        if not thread.is_alive():
            raise BenchError(f"job {self.job} ended before it was asked to stop")

    def _progress(self, name: str) -> list[tuple[float, int, bool]]:
        return read_progress(self.workdir / f"progress-{name}.log")

    def _poll_cuts(self) -> None:
        for name, store in self.stores.items():
            try:
                history = store.history(0, 8)
            except SpillwayError:
                continue
            for c in history:
                if c.meta.global_id is None:
                    continue
                if name == "generate":
                    value = int((c.source or {}).get("next", 0))
                else:
                    value = sum(c.writers.outputs.get(self.slow_out, ()))
                self._cuts[name].setdefault(int(c.meta.global_id), value)

    def _in_flight(self, n: int) -> int | None:
        """Generator position minus records ``slow`` output, both at checkpoint ``n``."""
        gen, slow = self._cuts["generate"].get(n), self._cuts["slow"].get(n)
        return None if gen is None or slow is None else gen - slow

    def _poll_completed(self) -> list[dict[str, Any]]:
        self._poll_cuts()
        for c in read_completed(self.kafka, self.jid):
            self._completed.setdefault(int(c["id"]), c)
        return [self._completed[n] for n in sorted(self._completed)]

    def measure(self) -> dict[str, Any]:
        """Run the job, watch it, stop it; return everything measured."""
        try:
            return self._measure()
        finally:
            for store in self.stores.values():
                store.close()

    def _measure(self) -> dict[str, Any]:
        os.environ.update(self.config.env())
        t_submit = time.time()
        thread = threading.Thread(target=self._drive, name=f"job-{self.job}", daemon=True)
        thread.start()
        run_id: str | None = None
        try:
            run_id = self._wait_for_submission(thread)
            hold_start = self._wait_for_hold(thread, t_submit)
            stop_at = self._watch(thread, hold_start)
        finally:
            if run_id is not None:
                record_job_event(self.kafka, self.jid, "stop-requested", run=run_id)
            thread.join(180)
            for key in self.config.env():
                os.environ.pop(key, None)
        if thread.is_alive():
            raise BenchError(f"job {self.job} did not stop within 180 s of the stop request")
        if "error" in self._outcome:
            e = self._outcome["error"]
            raise BenchError(f"job {self.job} failed: {type(e).__name__}: {e}")
        return self._collect(run_id, t_submit, hold_start, stop_at, time.time())

    def _wait_for_submission(self, thread: threading.Thread) -> str:
        deadline = time.monotonic() + self.s.start_timeout_s
        admin = Admin(self.kafka)
        while time.monotonic() < deadline:
            self._check_alive(thread)
            if events_topic(self.jid) in admin.partition_counts():
                sub = last_submission(self.kafka, self.jid)
                if sub is not None:
                    return str(sub["run"])
            time.sleep(0.5)
        raise BenchError(f"job {self.job} was not submitted within {self.s.start_timeout_s:.0f} s")

    def _wait_for_hold(self, thread: threading.Thread, t_submit: float) -> float:
        deadline = time.monotonic() + self.s.start_timeout_s
        while time.monotonic() < deadline:
            self._check_alive(thread)
            held = [t for t, _, hold in self._progress("generate") if hold]
            if held:
                self._say(f"backlog reached {held[0] - t_submit:.1f} s after submission")
                return held[0]
            self._poll_completed()
            time.sleep(0.5)
        gen = self._progress("generate")
        raise BenchError(
            f"job {self.job}: the generator did not reach a backlog of {self.target:,} within "
            f"{self.s.start_timeout_s:.0f} s (it emitted {gen[-1][1] if gen else 0:,} records); "
            "lower --backlogs or --rate"
        )

    def _watch(self, thread: threading.Thread, hold_start: float) -> float:
        """Wait out the measurement window; return the unix time it ended."""
        while True:
            self._check_alive(thread)
            completed = self._poll_completed()
            in_hold = [c for c in completed if float(c["start"]) >= hold_start]
            waited = time.time() - hold_start
            if waited >= self.s.max_window_s or (
                waited >= self.s.min_window_s and len(in_hold) >= self.s.min_checkpoints
            ):
                self._say(
                    f"{len(in_hold)} global checkpoints completed in {waited:.0f} s at the "
                    "target backlog; stopping the job"
                )
                return time.time()
            time.sleep(0.5)

    def _collect(
        self, run_id: str, t_submit: float, hold_start: float, stop_at: float, t_end: float
    ) -> dict[str, Any]:
        completed = self._poll_completed()
        gen, slow = self._progress("generate"), self._progress("slow")
        gen_open = gen[0][0] if gen else hold_start

        def phase(t: float) -> str:
            return "hold" if t >= hold_start else ("fill" if t >= gen_open else "startup")

        samples = [
            Sample(
                id=int(c["id"]),
                start=float(c["start"]),
                duration_s=float(c["duration_s"]),
                phase=phase(float(c["start"])),
                backlog=round(
                    count_at(gen, float(c["start"])) - count_at(slow, float(c["start"])), 1
                ),
                in_flight=self._in_flight(int(c["id"])),
                subtask_durations_s=dict(c.get("subtask_durations_s", {})),
                phases=dict(c.get("phases", {})),
            )
            for c in completed
            if not c.get("savepoint")
        ]
        # Triggers the coordinator never recorded as completed: gave up (timeout) or
        # still in flight when the job stopped. The event log says whether every subtask
        # committed them anyway, and when.
        progress = GlobalProgress(frozenset(SUBTASKS))
        triggers: dict[int, float] = {}
        for e in read_events(self.kafka, self.jid, timeout_s=15.0):
            if e.get("run") != run_id:
                continue
            progress.observe(e)
            if e.get("event") == "checkpoint-trigger":
                triggers.setdefault(int(e["n"]), float(e["time"]))
        done = {smp.id for smp in samples}
        missing = []
        for n, t in sorted(triggers.items()):
            if n in done or t < hold_start:
                continue
            late = progress.summary(n, t) if progress.complete(n) else None
            missing.append(
                {
                    "id": n,
                    "start": t,
                    "timed_out": stop_at - t >= COORDINATOR_TIMEOUT_S,
                    "backlog": round(count_at(gen, t) - count_at(slow, t), 1),
                    "completed_per_event_log_s": late["duration_s"] if late else None,
                }
            )

        def rate(counts: list[tuple[float, int, bool]], a: float, b: float) -> float:
            return round((count_at(counts, b) - count_at(counts, a)) / (b - a), 1) if b > a else 0.0

        results = [asdict(r) for r in self._outcome.get("results", [])]
        bad = [r for r in results if r["status"] not in ("stopped", "finished")]
        if bad:
            raise BenchError(f"job {self.job}: subtasks ended badly: {bad}")
        return {
            "mode": self.mode,
            "target": self.target,
            "job": self.job,
            "run_id": run_id,
            "submitted": t_submit,
            "hold_start": hold_start,
            "stop_requested": stop_at,
            "ended": t_end,
            "generator_opened": gen_open,
            "generated": gen[-1][1] if gen else 0,
            "processed_by_slow": slow[-1][1] if slow else 0,
            # Achieved rates (records/s): the generator while it built the backlog, both
            # operators during the measurement window.
            "fill_rate": rate(gen, gen_open, hold_start),
            "hold_rate_generate": rate(gen, hold_start, stop_at),
            "hold_rate_slow": rate(slow, hold_start, stop_at),
            "checkpoints": [asdict(smp) for smp in samples],
            "not_completed": missing,
            "subtasks": results,
        }


# -- summary -----------------------------------------------------------------------------


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (target, mode): durations and backlogs of the checkpoints at the target backlog."""
    rows: list[dict[str, Any]] = []
    for run in runs:
        hold = [c for c in run["checkpoints"] if c["phase"] == "hold"]
        durations = [float(c["duration_s"]) for c in hold]
        backlogs = [float(c["backlog"]) for c in hold]
        flights = [int(c["in_flight"]) for c in hold if c["in_flight"] is not None]
        missing = run["not_completed"]
        row: dict[str, Any] = {
            "target": run["target"],
            "mode": run["mode"],
            "n": len(hold),
            "timed_out": sum(1 for m in missing if m["timed_out"]),
            "in_flight_at_stop": sum(1 for m in missing if not m["timed_out"]),
            "window_s": round(run["stop_requested"] - run["hold_start"], 1),
        }
        if durations:
            row.update(
                p50_s=statistics.median(durations),
                p99_s=percentile(durations, 0.99),
                min_s=min(durations),
                max_s=max(durations),
                backlog_median=statistics.median(backlogs),
                backlog_min=min(backlogs),
                backlog_max=max(backlogs),
                in_flight_median=statistics.median(flights) if flights else None,
            )
        rows.append(row)
    by = {(r["target"], r["mode"]): r for r in rows}
    for r in rows:
        base = by.get((r["target"], "unaligned"))
        if r["mode"] == "aligned" and base and "p50_s" in r and "p50_s" in base:
            r["ratio_p50"] = r["p50_s"] / base["p50_s"]
            r["ratio_p99"] = r["p99_s"] / base["p99_s"]
    rows.sort(key=lambda r: (r["target"], MODES.index(r["mode"])))
    return rows


def slowest(runs: list[dict[str, Any]], k: int = 3) -> str:
    """Where the time of each run's ``k`` slowest checkpoints (at the target) went."""
    lines = []
    for run in runs:
        hold = [c for c in run["checkpoints"] if c["phase"] == "hold"]
        for c in sorted(hold, key=lambda c: -float(c["duration_s"]))[:k]:
            ph = c.get("phases") or {}
            head = f"  {run['mode']} {run['target']:,} #{c['id']}: {c['duration_s']:.3f} s"
            if not ph:
                lines.append(head + " (no phase timings recorded)")
                continue
            lines.append(
                f"{head}; trigger acked {ph['trigger_acked_s']:.3f}, "
                f"completion detected {ph['detected_s']:.3f}"
            )
            for sub, t in ph.get("subtasks", {}).items():
                cells = " ".join(
                    f"{key} {t[key + '_s']:.3f}"
                    for key in ("seen", "start", "committed", "reported")
                    if key + "_s" in t
                )
                lines.append(f"      {sub:<12} {cells} (via {t.get('via')})")
    return "\n".join(lines)


def _k(x: float) -> str:
    return f"{x / 1000:,.0f}k" if abs(x) >= 1000 else f"{x:,.0f}"


def table(rows: list[dict[str, Any]]) -> str:
    """The summary as a fixed-width table."""
    head = [
        "target",
        "mode",
        "n",
        "backlog at trigger",
        "p50 s",
        "p99 s",
        "min–max s",
        "in flight at cut",
        "gave up",
        "aligned/unaligned p50",
        "p99",
    ]
    out = [head]
    for r in rows:
        has = "p50_s" in r
        out.append(
            [
                f"{r['target']:,}",
                r["mode"],
                str(r["n"]),
                (
                    f"{_k(r['backlog_median'])} [{_k(r['backlog_min'])}–{_k(r['backlog_max'])}]"
                    if has
                    else "-"
                ),
                f"{r['p50_s']:.2f}" if has else "-",
                f"{r['p99_s']:.2f}" if has else "-",
                f"{r['min_s']:.2f}–{r['max_s']:.2f}" if has else "-",
                _k(r["in_flight_median"]) if r.get("in_flight_median") is not None else "-",
                str(r["timed_out"]),
                f"{r['ratio_p50']:.1f}×" if "ratio_p50" in r else "",
                f"{r['ratio_p99']:.1f}×" if "ratio_p99" in r else "",
            ]
        )
    widths = [max(len(row[i]) for row in out) for i in range(len(head))]
    lines = []
    for n, row in enumerate(out):
        cells = [
            c.ljust(w) if i == 1 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


NOTES = """\
  target            backlog the generator builds and then holds (records)
  n                 completed global checkpoints triggered once the target was reached
  backlog at        records the generator had emitted minus records slow had processed,
  trigger           at the trigger: median [min–max] over those checkpoints
  p50 / p99 s       duration_s of spillway.recovery.control.globalckpt.read_completed: trigger →
  last
                    subtask committed (p99 by linear interpolation: with n < 100 it lies
                    between the two largest)
  in flight at cut  generator position minus records slow had output, both at checkpoint
                    n (from the checkpoint records): channel data the cut leaves in Kafka
  gave up           triggered at the target backlog, never completed within the
                    coordinator's timeout (so not in read_completed)
  aligned/unaligned ratio of the two modes' figures at the same target, same run"""


def plot(
    runs: list[dict[str, Any]], rows: list[dict[str, Any]], path: Path, timeout_s: float
) -> bool:
    """Durations against backlog, and p50/p99 per target; False without matplotlib."""
    try:
        matplotlib: Any = importlib.import_module("matplotlib")
    except ImportError:
        return False
    matplotlib.use("Agg")
    plt: Any = importlib.import_module("matplotlib.pyplot")
    colors = {"unaligned": "tab:blue", "aligned": "tab:red"}
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    for mode in MODES:
        mine = [run for run in runs if run["mode"] == mode]
        for phase, marker, alpha, note in (
            ("hold", "o", 0.85, ""),
            ("fill", "x", 0.5, " (while the backlog was building)"),
        ):
            pts = [
                (c["backlog"] / 1000, c["duration_s"])
                for run in mine
                for c in run["checkpoints"]
                if c["phase"] == phase
            ]
            if pts:
                left.scatter(
                    *zip(*pts, strict=True),
                    marker=marker,
                    alpha=alpha,
                    color=colors[mode],
                    label=mode + note,
                )
        late = [
            (m["backlog"] / 1000, m["completed_per_event_log_s"])
            for run in mine
            for m in run["not_completed"]
            if m["timed_out"] and m["completed_per_event_log_s"] is not None
        ]
        if late:
            left.scatter(
                *zip(*late, strict=True),
                marker="^",
                facecolors="none",
                color=colors[mode],
                label=f"{mode}: coordinator gave up; all subtasks committed it this late",
            )
    left.axhline(timeout_s, color="gray", linestyle="--", linewidth=1)
    left.annotate(
        f"coordinator timeout {timeout_s:g} s",
        (0.01, timeout_s),
        xycoords=("axes fraction", "data"),
        fontsize=8,
        color="gray",
        va="bottom",
    )
    left.set_xlabel("backlog at trigger (thousand records)")
    left.set_ylabel("global checkpoint duration (s)")
    left.set_yscale("log")
    left.set_title("every completed global checkpoint")
    left.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=7, loc="center right")
    targets = sorted({r["target"] for r in rows})
    width = 0.38
    for k, mode in enumerate(MODES):
        for i, t in enumerate(targets):
            r = next((r for r in rows if r["target"] == t and r["mode"] == mode), None)
            if r is None:
                continue
            x = i + (k - 0.5) * width
            if "p50_s" not in r:
                right.annotate(
                    f"{mode}:\nnone completed\n({r['timed_out']} gave up)",
                    (x, 0.02),
                    xycoords=("data", "axes fraction"),
                    ha="center",
                    fontsize=8,
                    color=colors[mode],
                )
                continue
            right.bar(x, r["p50_s"], width, color=colors[mode], alpha=0.8)
            right.plot([x - width / 2, x + width / 2], [r["p99_s"]] * 2, color="black")
    patch: Any = importlib.import_module("matplotlib.patches").Patch
    line: Any = importlib.import_module("matplotlib.lines").Line2D
    handles = [patch(color=colors[m], alpha=0.8, label=f"{m} p50") for m in MODES]
    handles.append(line([], [], color="black", label="p99"))
    right.axhline(timeout_s, color="gray", linestyle="--", linewidth=1)
    right.set_xlim(-0.6, len(targets) - 0.4)
    right.set_xticks(range(len(targets)), [f"{t:,}" for t in targets])
    right.set_xlabel("target backlog (records)")
    right.set_ylabel("duration (s)")
    right.set_yscale("log")
    right.set_ylim(0.3, timeout_s * 2)
    right.set_title("p50 (bar) and p99 (line) at each target backlog")
    right.grid(True, axis="y", which="both", alpha=0.3)
    right.legend(handles=handles, fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def replot(path: Path) -> int:
    """Draw the plot of a stored result again (next to it, same name, .png)."""
    doc = json.loads(path.read_text())
    png = path.with_suffix(".png")
    if not plot(doc["runs"], doc["summary"], png, float(doc["coordinator_timeout_s"])):
        print("bench.checkpoints: matplotlib is not installed", file=sys.stderr)
        return 1
    print(f"plot: {png}")
    return 0


# -- the whole benchmark -----------------------------------------------------------------


def _machine() -> dict[str, Any]:
    info = machine()
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        root = Path(__file__).resolve().parent.parent
        dirty = subprocess.run(
            [
                "git",
                "-C",
                str(root),
                "status",
                "--porcelain",
                "--",
                "channels",
                "offsets",
                "recovery",
                "spark_jobs",
                "bench/pipelines.py",
            ],
            capture_output=True,
            text=True,
        ).stdout.strip()
        info["git"] = info["git"].split(" ")[0] + (" (modified)" if dirty else "")
    info["pyspark"] = importlib.metadata.version("pyspark")
    return info


def header(s: Settings, info: dict[str, Any], broker_source: str) -> str:
    """What was measured, where, and how."""
    return "\n".join(
        [
            "Global checkpoint duration under backlog, aligned vs unaligned — "
            + datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
            f"machine : nproc {info['nproc']} ({info['cpu_model']}), {info['mem_gib']} GiB RAM, "
            f"Linux {info['kernel']}, load average {info['loadavg_1m_5m_15m']} at start",
            f"software: Python {info['python']}, PySpark {info['pyspark']}, confluent-kafka "
            f"{info['confluent_kafka']}, librdkafka {info['librdkafka']}, git {info['git']}",
            f"broker  : {s.bootstrap} ({broker_source})",
            f"job     : generate (p=1, {s.rate:,.0f} rec/s until the backlog is reached, then "
            f"{s.slow_rate:,.0f} rec/s) → slow (map, p=1, {s.slow_rate:,.0f} rec/s) → "
            f"write_jsonl; Spark {MASTER}; global checkpoints every {s.global_interval_s:g} s, "
            "interval checkpoints every 1 s",
            f"window  : from the backlog reached until >= {s.min_checkpoints} global checkpoints "
            f"completed and >= {s.min_window_s:g} s (at most {s.max_window_s:g} s); "
            f"targets {', '.join(f'{b:,}' for b in s.backlogs)}; modes alternate order",
        ]
    )


def run(s: Settings, broker_source: str) -> int:
    """Measure every (target, mode), print the table, write JSON and the plot."""
    t0 = time.monotonic()
    admin = Admin(KafkaSettings(s.bootstrap))
    admin.check_reachable()
    info = _machine()
    started = datetime.now(UTC)
    stamp = f"{started:%Y%m%dT%H%M%SZ}"
    prefix = f"ckb-{stamp}-{secrets.token_hex(2)}"
    print(header(s, info, broker_source), flush=True)
    runs: list[dict[str, Any]] = []
    for i, target in enumerate(s.backlogs):
        # Alternate the order so neither mode always runs right after the other.
        order = s.modes if i % 2 == 0 else s.modes[::-1]
        for mode in order:
            job = f"{prefix}-{mode[0]}{target}"
            workdir = Path(tempfile.mkdtemp(prefix=f"spillway-bench-{mode}-{target}-"))
            try:
                result = Run(s, mode, target, job, workdir).measure()
            finally:
                with contextlib.suppress(Exception):
                    admin.delete_job_topics(JobId(job))
                shutil.rmtree(workdir, ignore_errors=True)
            runs.append(result)
            print(
                f"  {mode} {target:,}: generator {result['fill_rate']:,.0f} rec/s while filling; "
                f"in the window generator {result['hold_rate_generate']:,.0f} and slow "
                f"{result['hold_rate_slow']:,.0f} rec/s",
                file=sys.stderr,
            )
    gc.collect()  # close Kafka clients the runs left behind before the broker stops
    rows = summarise(runs)
    elapsed = time.monotonic() - t0
    print()
    print(table(rows))
    print()
    print(NOTES)
    print()
    print("slowest checkpoints at the target, seconds from the trigger:")
    print(slowest(runs))
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    png = RESULTS_DIR / f"checkpoints-{stamp}.png"
    plotted = plot(runs, rows, png, COORDINATOR_TIMEOUT_S)
    info["loadavg_1m_5m_15m_at_end"] = [round(x, 2) for x in os.getloadavg()]
    doc = {
        "format": 1,
        "started_utc": started.isoformat(),
        "elapsed_s": round(elapsed, 1),
        "machine": info,
        "broker": {"bootstrap": s.bootstrap, "source": broker_source},
        "settings": asdict(s),
        "coordinator_timeout_s": COORDINATOR_TIMEOUT_S,
        "summary": rows,
        "runs": runs,
    }
    path = RESULTS_DIR / f"checkpoints-{stamp}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    tmp.replace(path)
    print(f"\nraw results: {path}")
    print(f"plot       : {png}" if plotted else "plot       : skipped (matplotlib not installed)")
    print(f"total run time: {elapsed:.0f} s (measurements, without broker start/stop)")
    return 0


def parse_args(argv: Sequence[str] | None) -> tuple[Settings, str | None]:
    """Validated settings, and where the broker address came from (None: start one)."""
    p = argparse.ArgumentParser(
        prog="python -m bench.checkpoints", description=(__doc__ or "").split("\n")[0]
    )
    p.add_argument(
        "--bootstrap",
        help=f"broker HOST:PORT (default: ${BOOTSTRAP_ENV}, else start a throw-away local broker)",
    )
    p.add_argument(
        "--backlogs",
        default="0,100000,300000",
        help="target backlogs in records, comma-separated (default 0,100000,300000)",
    )
    p.add_argument("--modes", default=",".join(MODES), help="default unaligned,aligned")
    p.add_argument("--rate", type=float, default=100_000, help="R: generator rec/s (100000)")
    p.add_argument("--slow-rate", type=float, default=None, help="S: slow rec/s (default R/10)")
    p.add_argument("--global-interval", type=float, default=1.0, help="seconds (1.0)")
    p.add_argument("--min-window", type=float, default=15.0, help="seconds (15)")
    p.add_argument("--max-window", type=float, default=150.0, help="seconds (150)")
    p.add_argument("--min-checkpoints", type=int, default=3, help="(3)")
    p.add_argument("--payload", type=int, default=180, help="filler characters/record (180)")
    p.add_argument("--start-timeout", type=float, default=180.0, help="seconds (180)")
    p.add_argument(
        "--replot",
        type=Path,
        metavar="JSON",
        help="only draw the plot of a stored result again, and exit",
    )
    a = p.parse_args(argv)
    try:
        backlogs = tuple(int(x) for x in a.backlogs.split(",") if x.strip())
    except ValueError:
        p.error(f"--backlogs must be comma-separated integers, got {a.backlogs!r}")
    try:
        modes = tuple(choose(m.strip(), MODES, "--modes") for m in a.modes.split(",") if m.strip())
    except ConfigError as e:
        p.error(str(e))
    if not backlogs or any(b < 0 for b in backlogs):
        p.error("--backlogs needs at least one value, none negative")
    if not modes:
        p.error(f"--modes must be among {', '.join(MODES)}")
    slow_rate = a.slow_rate if a.slow_rate is not None else a.rate / 10
    if not 0 < slow_rate < a.rate:
        p.error("need 0 < --slow-rate < --rate")
    if not 0 < a.min_window <= a.max_window or a.min_checkpoints < 1:
        p.error("need 0 < --min-window <= --max-window and --min-checkpoints >= 1")
    explicit = a.bootstrap or os.environ.get(BOOTSTRAP_ENV) or None
    settings = Settings(
        bootstrap=explicit or "",
        backlogs=backlogs,
        modes=modes,
        rate=a.rate,
        slow_rate=slow_rate,
        global_interval_s=a.global_interval,
        min_window_s=a.min_window,
        max_window_s=a.max_window,
        min_checkpoints=a.min_checkpoints,
        payload=a.payload,
        start_timeout_s=a.start_timeout,
        replot=a.replot,
    )
    source = "--bootstrap" if a.bootstrap else (f"${BOOTSTRAP_ENV}" if explicit else None)
    return settings, source


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m bench.checkpoints``."""
    settings, source = parse_args(argv)
    if settings.replot is not None:
        return replot(settings.replot)
    try:
        with contextlib.ExitStack() as stack:
            if source is None:
                settings = replace(settings, bootstrap=start_local_broker(stack))
                source = "local broker started by this benchmark, stopped at the end"
            return run(settings, source)
    except (BenchError, SpillwayError) as e:
        print(f"bench.checkpoints: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
