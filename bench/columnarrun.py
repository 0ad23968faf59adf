"""B1c, the columnar path on Spark: ``spillway run`` of columnar pipelines beside
the record path and the peers, whole runs at two input sizes, everything counted.

Engines (each over topics of the B1 workload, :mod:`bench.workload`, pre-loaded once):

``spillway-columnar``          B1's keyed count written columnar
                               (:func:`bench.columnarjob.keyed`): batch source, map_batches,
                               ``aggregate_batches(emit="rows")``, Kafka sink from batches,
                               chained into two subtasks around one channel;
``spillway-run``, ``spillway-run-chained``
                               the same count with record operators (B1s's engines);
``handwritten-orjson``, ``quix``, ``kstreams``
                               B1s's peers, unchanged (:mod:`bench.steadyrun`);
``spillway-stateless``         parse, filter, project through one channel, columnar
                               (:func:`bench.columnarjob.stateless`);
``spillway-stateless-records`` the same with record operators.

Every keyed run writes one update per input record and is checked as B1s checks
(:func:`bench.workload.check_rows`); a stateless run's output values must equal
:func:`bench.columnarjob.stateless_reference` as a multiset. CPU is the engine's whole
process tree plus the broker's (:func:`bench.measure.run_whole`); per round and engine a
line through ``(records, CPU)`` splits fixed from per-record cost
(:func:`bench.steadyrun.fit_round`).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench import columnarjob, steadyrun, workload

KEYED = (
    "spillway-columnar",
    "spillway-run",
    "spillway-run-chained",
    "handwritten-orjson",
    "quix",
    "kstreams",
)
STATELESS = ("spillway-stateless", "spillway-stateless-records")
ENGINES = KEYED + STATELESS
# (numerator, denominator, target) of the ratios of records per CPU-second reported.
RATIOS = (
    ("spillway-columnar", "quix", 5.0),
    ("spillway-columnar", "handwritten-orjson", 3.0),
    ("spillway-columnar", "kstreams", 1.0),
    ("spillway-columnar", "spillway-run", None),
    ("spillway-columnar", "spillway-run-chained", None),
    ("spillway-stateless", "spillway-stateless-records", None),
)
STATELESS_TARGET = 1_000_000  # records per CPU-second
_JOBS = {
    "spillway-columnar": ("bench.columnarjob:keyed", []),
    "spillway-stateless": ("bench.columnarjob:stateless", []),
    "spillway-stateless-records": ("bench.columnarjob:stateless", ["path=records"]),
}


def command(
    engine: str,
    bootstrap: str,
    topic: str,
    output: str,
    records: int,
    name: str,
    interval_s: float,
    workdir: str,
) -> list[str]:
    """The command line of one run: ``spillway run`` of a columnar job, or B1s's."""
    if engine not in _JOBS:
        return steadyrun.command(
            engine, bootstrap, topic, output, records, name, interval_s, workdir
        )
    ref, confs = _JOBS[engine]
    cmd = [str(Path(sys.executable).parent / "spillway"), "run", ref, "--job-id", name]
    cmd += ["--bootstrap", bootstrap, "--checkpoint-interval", repr(interval_s)]
    cmd += ["--progress", "off", "--conf", f"input={topic}", "--conf", f"output={output}"]
    for c in confs:
        cmd += ["--conf", c]
    return cmd


def check_stateless(
    rows: Sequence[tuple[bytes | None, bytes | None]], records: int
) -> dict[str, Any]:
    """The stateless output's values against their reference, as an output check. Pure."""
    expected = Counter(columnarjob.stateless_reference(records))
    got = Counter(v or b"" for _, v in rows)
    exact = got == expected
    problem = (
        ""
        if exact
        else f"{sum((got - expected).values())} extra, {sum((expected - got).values())} missing"
    )
    return {
        "messages": len(rows),
        "final_counts_ok": exact,
        "every_update_once": exact,
        "fields_ok": exact,
        "problem": problem,
    }


def run_options(engine: str) -> dict[str, Any]:
    """What :func:`bench.steadyrun.run_once` takes besides B1s's for ``engine``: this
    part's command line and output check."""
    return {
        "make_command": command,
        "judge": check_stateless if engine in STATELESS else judge_keyed,
    }


def judge_keyed(rows: list[tuple[bytes | None, bytes | None]], records: int) -> dict[str, Any]:
    """B1's check of keyed output (every update once, fields, keys)."""
    return asdict(workload.check_rows(rows, workload.reference(records)))


def summarise(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Median (min–max) per engine and figure, and the ratios of :data:`RATIOS` with their
    targets. Pure."""
    out = steadyrun.summarise(rounds, ENGINES, [(a, b) for a, b, _ in RATIOS])
    targets = {f"{a}/{b}": t for a, b, t in RATIOS}
    for k, r in out["ratios"].items():
        r["target"] = targets[k]
    return out


def lines(doc: dict[str, Any]) -> list[str]:
    """The B1c tables (Markdown) of a suite document."""
    s = doc["summary"]["b1c"]
    sizes = steadyrun.sizes_text(doc["settings"], "b1c_sizes", s["engines"])
    out = [
        f"**B1c, the columnar path on Spark**: whole runs (start to exit) over {sizes} records, "
        f"{len(doc['b1c'])} round(s); CPU = the engine's process tree + the broker; per-record "
        "cost = slope of CPU over records. Targets are reported, not asserted.",
        "",
        "| engine | records per CPU-s | µs CPU per record | fixed CPU-s | records/s | output |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for e, f in s["engines"].items():
        cells = [_cell(f.get(k)) for k in ("per_cpu_s", "cpu_us_per_record", "fixed_cpu_s")]
        cells.append(_cell(f.get("records_per_s")))
        out.append(f"| {e} | {' | '.join(cells)} | {'exact' if f['output_ok'] else 'WRONG'} |")
    out += ["", "| ratio (records per CPU-s) | median (min–max) | target |", "|---|---:|---:|"]
    for k, r in s["ratios"].items():
        target = f"≥ {r['target']:g}×" if r["target"] else "—"
        out.append(f"| {k} | {r['median']:.2f} ({r['low']:.2f}–{r['high']:.2f}) | {target} |")
    return out


def _cell(spread_: dict[str, float] | None) -> str:
    if spread_ is None:
        return "—"
    m, lo, hi = spread_["median"], spread_["low"], spread_["high"]
    fmt = "{:,.0f}" if m >= 100 else "{:.2f}"
    return f"{fmt.format(m)} ({fmt.format(lo)}–{fmt.format(hi)})"
