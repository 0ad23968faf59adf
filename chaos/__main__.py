"""``python -m chaos``: run chaos profiles and print their reports (``make chaos``)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from chaos.run import FAULTS, LONG, SHORT, ChaosRun


def main(argv: list[str] | None = None) -> int:
    """Run the profile for each seed; exit 1 unless every exactly-once run was exact."""
    ap = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    ap.add_argument("--profile", choices=("short", "long"), default="short")
    ap.add_argument("--seeds", default="1", help="comma-separated seeds, e.g. 1,2,3,4,5")
    ap.add_argument("--records", type=int, default=None, help="override the profile's records")
    ap.add_argument(
        "--emit-s", type=float, default=None, help="override how long the sources are paced for"
    )
    ap.add_argument(
        "--guarantee", choices=("exactly-once", "at-least-once"), default="exactly-once"
    )
    ap.add_argument(
        "--faults",
        default=",".join(FAULTS),
        help=f"other faults besides the crash schedule (comma-separated of {', '.join(FAULTS)}; "
        "'none' for crashes only)",
    )
    ap.add_argument("--workdir", default=None, help="keep logs here (default: a temp dir)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    faults = () if args.faults == "none" else tuple(f for f in args.faults.split(",") if f)
    unknown = set(faults) - set(FAULTS)
    if unknown:
        ap.error(f"unknown faults {sorted(unknown)}; choose from {', '.join(FAULTS)}")
    profile = replace(SHORT if args.profile == "short" else LONG, faults=faults)
    if args.records:
        profile = replace(profile, records=args.records)
    if args.emit_s:
        profile = replace(profile, emit_s=args.emit_s)
    base = Path(args.workdir or tempfile.mkdtemp(prefix="spillway-chaos-"))
    ok = True
    for seed in [int(s) for s in args.seeds.split(",")]:
        report = ChaosRun(profile, seed, base / f"seed-{seed}", args.guarantee).run()
        print(json.dumps(report.to_json(), indent=2), flush=True)
        ok = ok and report.exact
    print(f"logs: {base}", file=sys.stderr)
    return 0 if ok or args.guarantee != "exactly-once" else 1


if __name__ == "__main__":
    sys.exit(main())
