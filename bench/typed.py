"""``python -m bench.typed``: what typed records cost per record, on the clicks example.

Times, per record, on blocks of ``--block`` clicks: the compiled dataclass → dict
converter (:func:`spillway.spark_jobs.records.records.to_dict`) against ``dataclasses.asdict``; dict
→
dataclass (:func:`spillway.spark_jobs.records.records.from_dict`) against ``cls(**d)``; and the
example's
two typed functions as the runtime calls them (``make_click`` with its output converted,
``enrich`` with input and output converted) against the same functions written on dicts.
Each cell is the median of ``--runs`` timings (min–max beside it). No broker, no I/O.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from spillway.examples import clicks
from spillway.spark_jobs.records.records import adapt, from_dict, output_schema, to_dict


def _per_record(fn: Callable[[], Any], records: int, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) / records * 1e6)
    return out


def make_click_dict(i: int) -> dict[str, Any]:
    """The example's click written on dicts (what it was before types)."""
    return dataclasses.asdict(clicks.make_click(i))


def enrich_dict(click: dict[str, Any]) -> dict[str, Any]:
    """The example's ``enrich`` written on dicts."""
    path = click["url"].split("://", 1)[1].split("?", 1)[0]
    _, section, page = path.split("/", 2)
    return {"page": f"/{section}/{page}", "section": section, "user": click["user"]}


def measure(block: int, runs: int) -> dict[str, list[float]]:
    """µs per record for each case."""
    typed = [clicks.make_click(i) for i in range(block)]
    dicts = [dataclasses.asdict(c) for c in typed]
    w, r = to_dict(clicks.Click), from_dict(clicks.Click)
    _, out = output_schema(None, clicks.make_click, "bench", "clicks")
    make = adapt(clicks.make_click, (), out)
    _, out = output_schema(None, clicks.enrich, "bench", "enrich")
    enrich = adapt(clicks.enrich, (0,), out)
    assert [make(i) for i in range(10)] == dicts[:10]
    assert [enrich(d) for d in dicts] == [enrich_dict(d) for d in dicts]
    # The plain dict-returning generator, for the baseline of "make": same work minus types.
    plain = {i: d for i, d in enumerate(dicts)}
    cases: dict[str, Callable[[], Any]] = {
        "to_dict (compiled)": lambda: [w(c) for c in typed],
        "dataclasses.asdict": lambda: [dataclasses.asdict(c) for c in typed],
        "from_dict (compiled)": lambda: [r(d) for d in dicts],
        "Click(**d)": lambda: [clicks.Click(**d) for d in dicts],
        "make_click typed, as run": lambda: [make(i) for i in range(block)],
        "make_click -> Click only": lambda: [clicks.make_click(i) for i in range(block)],
        "dict lookup baseline": lambda: [plain[i] for i in range(block)],
        "enrich typed, as run": lambda: [enrich(d) for d in dicts],
        "enrich on dicts": lambda: [enrich_dict(d) for d in dicts],
    }
    return {name: _per_record(fn, block, runs) for name, fn in cases.items()}


def main(argv: list[str] | None = None) -> None:
    """Print a table (and ``--json``) of the timings."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--block", type=int, default=20_000)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    result = measure(args.block, args.runs)
    load = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"loadavg_1m": load, "us_per_record": result}))
        return
    print(f"µs per record, median of {args.runs} runs of {args.block} (load average {load:.2f})")
    for name, times in result.items():
        print(f"  {name:28} {statistics.median(times):6.3f}  ({min(times):.3f}–{max(times):.3f})")


if __name__ == "__main__":
    main()
