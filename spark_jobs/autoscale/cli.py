"""``spillway autoscale --job ID --bounds OP=MIN:MAX``: scale a running job's operators."""

from __future__ import annotations

import argparse
import signal
import threading
from typing import Any

from spillway.channels.errors import ConfigError
from spillway.channels.naming import job_id
from spillway.recovery.cli import add_bootstrap, kafka_settings
from spillway.recovery.control.autopolicy import AutoscalePolicy, Bounds, Decision, Settings
from spillway.recovery.observe.status import submission
from spillway.spark_jobs.autoscale.loop import Autoscaler

DEFAULTS = Settings()


def add_parser(subparsers: Any) -> None:
    """Add ``autoscale`` to a command line."""
    p = subparsers.add_parser(
        "autoscale",
        help="set operators' parallelism from their measured rates, by live rescale",
    )
    p.add_argument("--job", required=True)
    p.add_argument(
        "--bounds",
        action="append",
        required=True,
        metavar="OP=MIN:MAX",
        help="autoscale OP between MIN and MAX subtasks (never above its max_parallelism); "
        "repeatable; operators without bounds are left alone",
    )
    p.add_argument(
        "--target-utilisation",
        type=float,
        default=DEFAULTS.target_utilisation,
        metavar="F",
        help="busy fraction each subtask is sized for (default %(default)s)",
    )
    p.add_argument(
        "--cooldown",
        type=float,
        default=DEFAULTS.cooldown_s,
        metavar="S",
        help="no decision on an operator for S seconds after one (default %(default)s)",
    )
    p.add_argument(
        "--down-after",
        type=float,
        default=DEFAULTS.down_after_s,
        metavar="S",
        help="scale down only after S seconds of lower demand (default %(default)s)",
    )
    p.add_argument(
        "--lag-target",
        type=int,
        default=DEFAULTS.lag_target,
        metavar="N",
        help="no scale-down while an operator's lag exceeds N offsets (default %(default)s)",
    )
    p.add_argument(
        "--window",
        type=float,
        default=10.0,
        metavar="S",
        help="measure over S s (default %(default)s)",
    )
    add_bootstrap(p)
    p.set_defaults(run=_autoscale)


def parse_bounds(items: list[str]) -> dict[str, Bounds]:
    """``["OP=MIN:MAX", ...]`` as ``{OP: Bounds}``; :class:`ConfigError` naming a malformed one."""
    bounds: dict[str, Bounds] = {}
    for text in items:
        try:
            name, b = Bounds.parse(text)
        except ValueError as e:
            raise ConfigError(f"autoscale: {e}") from None
        if name in bounds:
            raise ConfigError(f"autoscale: bounds name operator {name!r} twice")
        bounds[name] = b
    return bounds


def policy_of(args: argparse.Namespace) -> AutoscalePolicy:
    """The policy the options describe; :class:`ConfigError` for malformed bounds."""
    bounds = parse_bounds(args.bounds)
    try:
        settings = Settings(args.target_utilisation, args.cooldown, args.down_after,
                            args.lag_target)  # fmt: skip
    except ValueError as e:
        raise ConfigError(f"autoscale: {e}") from None
    return AutoscalePolicy(bounds, settings)


def _autoscale(args: argparse.Namespace) -> int:
    policy = policy_of(args)
    settings = kafka_settings(args)
    job = job_id(args.job)
    submission(settings, job)  # `job X was never submitted` as status says it (exit 2)

    def show(d: Decision, request: str) -> None:
        m = d.inputs
        print(
            f"{d.operator}: {d.previous} -> {d.parallelism} ({d.reason}: input "
            f"{m.input_rate:.1f} rec/s, true rate {m.true_rate:.1f} rec/busy s per subtask, "
            f"backlog {m.backlog}, needed {d.needed}; request {request})",
            flush=True,
        )

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"job {job}: autoscaling {', '.join(sorted(policy.bounds))} (Ctrl-C stops)", flush=True)
    try:
        Autoscaler(settings, job, policy, window_s=args.window, on_decision=show).run(stop)
    except KeyboardInterrupt:
        stop.set()
    return 0
