"""``make bench-suite``: how long the test tiers take, as a benchmark (no assertion).

``python -m bench.suitetime test soak compose-test`` runs ``make test``, ``make soak`` and
``make compose-test`` one after another, in the order given, and records for each its wall
seconds, its exit code and the load average (1, 5 and 15 minutes) before it started and
after it ended, with the commit measured and whether the tree had uncommitted changes.
A tier that fails is recorded and the next one still runs; the exit code is 1 if any
failed. The results go to ``bench/results/suitetime-<UTC time>.json`` (``--out`` to
choose) and are printed as a table.

The targets the tiers are held to (on 2 cores at a load under 2: ``make test`` 900 s,
``make soak`` 25 min, the three together 60 min) are shown beside the figures. Because
they are stated at a load under 2, each tier starts only once the 1-minute load average
is below ``--settle`` (2.0), or after ``--settle-max`` seconds (300) if it never is: a
tier run straight after another starts at the load that one left (about 4 after
``make test``), which is not the condition the targets name. The wait is recorded and is
not part of a tier's time; whether a run met the targets is still for the reader to
judge against the loads it recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"

Tier = Literal["test", "soak", "compose-test"]
TIERS: tuple[Tier, ...] = ("test", "soak", "compose-test")
TARGET_S: dict[Tier, float] = {"test": 900.0, "soak": 25 * 60.0}
TOTAL_TARGET_S = 60 * 60.0  # the three tiers in CI

Runner = Callable[[Sequence[str], Path], int]
"""Runs a command in a directory and returns its exit code."""
Clock = Callable[[], float]
Load = Callable[[], tuple[float, float, float]]
Sleep = Callable[[float], None]

SETTLE_LOAD = 2.0  # the targets' condition: a load under 2
SETTLE_MAX_S = 300.0
SETTLE_POLL_S = 5.0


@dataclass(frozen=True)
class TierTime:
    """One tier's run: wall seconds, exit code, load average before and after, and how
    long it waited for the load to settle before it started (not in ``seconds``)."""

    tier: Tier
    command: list[str]
    seconds: float
    exit_code: int
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    settled_s: float = 0.0


def run_command(command: Sequence[str], cwd: Path) -> int:
    """Run ``command`` in ``cwd`` with its output on this terminal; its exit code."""
    return subprocess.run(list(command), cwd=cwd, check=False).returncode


def commit_of(root: Path) -> dict[str, str | bool | None]:
    """The commit checked out in ``root`` and whether the tree differs from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}
    return {"commit": head, "dirty": bool(status.strip())}


def settle(
    below: float, max_s: float, clock: Clock, load: Load, sleep: Sleep = time.sleep
) -> float:
    """Wait until the 1-minute load average is under ``below``, polling every
    :data:`SETTLE_POLL_S` s, for at most ``max_s`` s; the seconds waited."""
    t0 = clock()
    while load()[0] >= below and clock() - t0 < max_s:
        sleep(SETTLE_POLL_S)
    return round(clock() - t0, 1)


def time_tiers(
    tiers: Sequence[Tier],
    root: Path = ROOT,
    run: Runner = run_command,
    clock: Clock = time.monotonic,
    load: Load = os.getloadavg,
    make: str = "make",
    settle_load: float = SETTLE_LOAD,
    settle_max_s: float = SETTLE_MAX_S,
    sleep: Sleep = time.sleep,
) -> list[TierTime]:
    """Run ``make TIER`` for each of ``tiers`` in order, in ``root``; every one runs, each
    after waiting for the load to settle (:func:`settle`; ``settle_max_s`` 0: no wait)."""
    times = []
    for tier in tiers:
        command = [make, tier]
        waited = settle(settle_load, settle_max_s, clock, load, sleep)
        before = load()
        t0 = clock()
        code = run(command, root)
        seconds = clock() - t0
        times.append(TierTime(tier, command, round(seconds, 1), code, before, load(), waited))
    return times


def report(times: Sequence[TierTime]) -> str:
    """A table of the tiers' times beside their targets."""
    lines = [
        f"{'tier':<14}{'seconds':>10}{'target':>10}{'exit':>6}  load before -> after  (settled)"
    ]
    for t in times:
        target = TARGET_S.get(t.tier)
        lines.append(
            f"{t.tier:<14}{t.seconds:>10.1f}{'' if target is None else f'{target:.0f}':>10}"
            f"{t.exit_code:>6}  {t.load_before[0]:.2f} -> {t.load_after[0]:.2f}"
            f"  ({t.settled_s:.0f} s)"
        )
    total = sum(t.seconds for t in times)
    lines.append(f"{'total':<14}{total:>10.1f}{TOTAL_TARGET_S:>10.0f}")
    return "\n".join(lines)


def document(
    times: Sequence[TierTime],
    root: Path,
    started: datetime,
    settle_load: float = SETTLE_LOAD,
    settle_max_s: float = SETTLE_MAX_S,
) -> dict[str, object]:
    """The JSON document stored for one run (with the settle rule it used)."""
    targets: dict[str, float] = {str(tier): s for tier, s in TARGET_S.items()}
    targets["total"] = TOTAL_TARGET_S
    return {
        "benchmark": "suitetime",
        "started": started.isoformat(),
        **commit_of(root),
        "cpus": os.cpu_count(),
        "targets_s": targets,
        "settle": {"load_below": settle_load, "max_s": settle_max_s},
        "tiers": [asdict(t) for t in times],
        "total_s": round(sum(t.seconds for t in times), 1),
    }


def main(argv: Sequence[str] | None = None, run: Runner = run_command) -> int:
    """Time the tiers named on the command line; 1 if any of them failed."""
    parser = argparse.ArgumentParser(prog="python -m bench.suitetime", description=__doc__)
    parser.add_argument("tiers", nargs="+", choices=TIERS, help="make targets, in order")
    parser.add_argument("--out", type=Path, help="the JSON file (default: bench/results/)")
    parser.add_argument(
        "--settle", type=float, default=SETTLE_LOAD, metavar="LOAD",
        help="start each tier once the 1-minute load is under LOAD (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--settle-max", type=float, default=SETTLE_MAX_S, metavar="S",
        help="wait at most S seconds for that, then start anyway (default: %(default)s)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    started = datetime.now(UTC)
    times = time_tiers(args.tiers, run=run, settle_load=args.settle, settle_max_s=args.settle_max)
    out = args.out or RESULTS_DIR / f"suitetime-{started:%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = document(times, ROOT, started, args.settle, args.settle_max)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(report(times))
    print(f"written to {out}")
    return 1 if any(t.exit_code != 0 for t in times) else 0


if __name__ == "__main__":
    sys.exit(main())
