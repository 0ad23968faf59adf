"""``make coverage``: line coverage of the product code by each test tier, in every process.

``python -m bench.suitecover test soak`` runs ``make test`` and then ``make soak`` exactly as
CI does, with ``COVERAGE_PROCESS_START`` pointing at a coverage.py config it writes (see
:func:`config_text`). coverage.py's start-up hook (the ``.pth`` file it installs) then
measures every Python process those commands start, not only pytest: the ``spillway``
CLIs the tests launch, the Spark driver, PySpark's daemon and the workers it forks (the
config's ``patch = fork, _exit`` restarts measurement in a forked worker and saves it when
the worker leaves through ``os._exit``).
Only the product code is measured: ``spillway/`` and the layer folders its symlinks
lead to (``channels/``, ``offsets/``, ``recovery/``, ``spark_jobs/``). A process killed by
SIGKILL, as the tests kill subtasks, loses its own data; the subtask that replaces it is
measured.

Each tier's data goes to ``<root>/.coverage-data/<tier>/`` and is combined; the result is
``bench/results/coverage-<UTC time>.json``: per module of ``spillway/``, its statements and
how many of them each tier ran, and the tiers together. ``--root DIR`` measures another
checkout (an older commit, for a before/after comparison; its venv needs ``coverage``
installed), and ``--against FILE`` prints the modules whose coverage by all tiers together
fell from an earlier result. A benchmark of the suite, like ``bench.suitetime``: it asserts
nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench.suitetime import RESULTS_DIR, ROOT, commit_of

PACKAGE = "spillway"
ALL = "all"  # the key of the tiers together in a result's per-module figures

EnvRunner = Callable[[Sequence[str], Path, Mapping[str, str]], int]
"""Runs a command in a directory with an environment and returns its exit code."""


@dataclass(frozen=True)
class ModuleCoverage:
    """One module: its statements, and the statements each tier (and ``all``) ran."""

    path: str  # relative to the checkout's root, so results of two checkouts compare
    statements: int
    covered: dict[str, int]

    def percent(self, tier: str = ALL) -> float:
        """The share of statements ``tier`` ran, in percent (100 for an empty module)."""
        if self.statements == 0:
            return 100.0
        return 100.0 * self.covered.get(tier, 0) / self.statements


def product_files(root: Path) -> dict[str, Path]:
    """Every ``.py`` file of ``root/spillway``, symlinked layer folders followed: its path as
    users import it (relative to ``root``, e.g. ``spillway/channels/reader.py``) → its real
    path, which is the name coverage.py records it under."""
    files = {}
    for folder, _dirs, names in os.walk(root / PACKAGE, followlinks=True):
        for name in names:
            if name.endswith(".py"):
                path = Path(folder) / name
                files[str(path.relative_to(root))] = path.resolve()
    return dict(sorted(files.items()))


def config_text(root: Path) -> str:
    """coverage.py's config for measuring the checkout at ``root`` in every process."""
    product = root / PACKAGE
    # The layer folders are symlinked into the package and coverage.py records real paths,
    # so each folder is a source of its own.
    dirs = [product, *(p.resolve() for p in sorted(product.iterdir()) if p.is_symlink())]
    return "\n".join(
        [
            "[tool.coverage.run]",
            f"source = {json.dumps([str(d) for d in dirs])}",
            # One data file per process: combined afterwards.
            "parallel = true",
            # PySpark's daemon forks its workers, which leave through os._exit: restart
            # measurement in a forked child, and save it before os._exit.
            'patch = ["fork", "_exit"]',
            # A process ended by SIGTERM (tests stop jobs and servers so) saves first.
            "sigterm = true",
            "",
        ]
    )


def run_tier(tier: str, root: Path, run: EnvRunner) -> tuple[int, float]:
    """Run ``make TIER`` in ``root`` with coverage measuring every process; exit code, seconds.

    The tier's data files land in ``<root>/.coverage-data/<tier>/`` (emptied first).
    """
    data_dir = root / ".coverage-data" / tier
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    config = data_dir / "coverage.toml"
    config.write_text(config_text(root))
    # make, and everything it starts, inherits these: coverage.py's .pth hook reads them.
    env = dict(os.environ, COVERAGE_PROCESS_START=str(config), COVERAGE_FILE=str(data_dir / "cov"))
    t0 = time.monotonic()
    code = run(["make", tier], root, env)
    return code, round(time.monotonic() - t0, 1)


def run_with_env(command: Sequence[str], cwd: Path, env: Mapping[str, str]) -> int:
    """Run ``command`` in ``cwd`` with environment ``env``, output on this terminal."""
    return subprocess.run(list(command), cwd=cwd, env=dict(env), check=False).returncode


def executed_lines(data_dir: Path) -> dict[Path, set[int]]:
    """The lines run, per real file path, over all the data files in ``data_dir``."""
    import coverage  # the bench's dependency only; imported here so --help works without it
    import coverage.exceptions

    lines: dict[Path, set[int]] = {}
    for f in sorted(data_dir.glob("cov.*")):
        part = coverage.CoverageData(basename=str(f))
        try:
            part.read()
        except coverage.exceptions.DataError as e:
            # A process SIGKILLed while it saved (the tests kill subtasks at any point)
            # leaves a partial file: its lines are lost, as a killed process's are.
            print(f"skipped, not readable: {f.name}: {e}", file=sys.stderr)
            continue
        for path in part.measured_files():
            lines.setdefault(Path(path), set()).update(part.lines(path) or ())
    return lines


def statements(path: Path) -> tuple[set[int], Callable[[set[int]], set[int]]]:
    """The statements of the Python file at ``path`` (coverage.py's default exclusions
    applied) and the function mapping executed lines to their statements' first lines.

    coverage.py's parser, not a ``Coverage`` object: constructing one in a process that
    coverage.py measures (the unit tests under ``make coverage``) loses that process's data.
    """
    from coverage.config import DEFAULT_EXCLUDE
    from coverage.misc import join_regex
    from coverage.parser import PythonParser

    parser = PythonParser(filename=str(path), exclude=join_regex(DEFAULT_EXCLUDE))
    parser.parse_source()
    return set(parser.statements), parser.translate_lines


def measure(root: Path, tiers: Sequence[str]) -> list[ModuleCoverage]:
    """Per product module of ``root``, the statements each tier ran and all tiers together,
    from the data under ``root/.coverage-data``. A module no process imported counts with 0.
    """
    executed = {t: executed_lines(root / ".coverage-data" / t) for t in tiers}
    modules = []
    for name, real in product_files(root).items():
        lines, first_lines = statements(real)
        ran = {t: lines & first_lines(executed[t].get(real, set())) for t in tiers}
        covered = {t: len(ls) for t, ls in ran.items()}
        covered[ALL] = len(set().union(*ran.values()))
        modules.append(ModuleCoverage(name, len(lines), covered))
    return modules


def totals(modules: Sequence[ModuleCoverage], tiers: Sequence[str]) -> ModuleCoverage:
    """The modules summed into one line, ``path`` ``"total"``."""
    keys = [*tiers, ALL]
    return ModuleCoverage(
        "total",
        sum(m.statements for m in modules),
        {k: sum(m.covered.get(k, 0) for m in modules) for k in keys},
    )


def load(path: Path) -> list[ModuleCoverage]:
    """The per-module figures of a result file written by :func:`main`."""
    modules = json.loads(path.read_text())["modules"]
    return [
        ModuleCoverage(name, int(m["statements"]), {k: int(v) for k, v in m["covered"].items()})
        for name, m in modules.items()
    ]


def fallen(
    before: Sequence[ModuleCoverage], after: Sequence[ModuleCoverage]
) -> list[tuple[str, float, float]]:
    """Modules in both whose coverage by all tiers together fell: (path, before %, after %)."""
    was = {m.path: m for m in before}
    return [
        (m.path, round(was[m.path].percent(), 1), round(m.percent(), 1))
        for m in after
        if m.path in was and m.percent() < was[m.path].percent()
    ]


def report(modules: Sequence[ModuleCoverage], tiers: Sequence[str]) -> str:
    """The totals per tier and together, as a short table."""
    total = totals(modules, tiers)
    lines = [f"{'tier':<8}{'covered':>10}{'of':>8}{'%':>8}"]
    for k in [*tiers, ALL]:
        lines.append(f"{k:<8}{total.covered[k]:>10}{total.statements:>8}{total.percent(k):>8.1f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, run: EnvRunner = run_with_env) -> int:
    """Measure the tiers named on the command line; 1 if any of them failed."""
    parser = argparse.ArgumentParser(prog="python -m bench.suitecover", description=__doc__)
    parser.add_argument("tiers", nargs="+", choices=("test", "soak"), help="make targets")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to measure")
    parser.add_argument("--out", type=Path, help="the JSON file (default: bench/results/)")
    parser.add_argument("--against", type=Path, help="an earlier result to compare with")
    parser.add_argument(
        "--no-run", action="store_true", help="combine data already under --root only"
    )
    args = parser.parse_args(argv)
    root = args.root.resolve()
    started = datetime.now(UTC)
    runs: dict[str, dict[str, float]] = {}
    for tier in args.tiers:
        if not args.no_run:
            code, seconds = run_tier(tier, root, run)
            runs[tier] = {"exit_code": code, "seconds": seconds}
    modules = measure(root, args.tiers)
    doc = {
        "benchmark": "suitecover",
        "started": started.isoformat(),
        **commit_of(root),
        "tiers": runs,
        "total": totals(modules, args.tiers).__dict__,
        "modules": {m.path: {"statements": m.statements, "covered": m.covered} for m in modules},
    }
    out = args.out or RESULTS_DIR / f"coverage-{started:%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(report(modules, args.tiers))
    if args.against:
        for path, was, now in fallen(load(args.against), modules):
            print(f"fell: {path} {was}% -> {now}%")
    print(f"written to {out}")
    return 1 if any(r["exit_code"] != 0 for r in runs.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
