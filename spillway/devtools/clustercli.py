"""``spillway cluster start|stop|status|logs`` (:class:`spillway.devtools.cluster.LocalCluster`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from spillway.devtools.cluster import LocalCluster
from spillway.devtools.clustertypes import (
    CLUSTER_DIR_ENV,
    DEFAULT_DIR,
    EXIT_NOT_RUNNING,
    StopResult,
)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``cluster start|stop|status|logs`` to the ``spillway`` command line."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--dir",
        type=Path,
        default=None,
        help=f"cluster directory (default: ${CLUSTER_DIR_ENV}, else ./{DEFAULT_DIR})",
    )

    cluster = subparsers.add_parser(
        "cluster",
        help="run a local Spark standalone cluster plus a Kafka broker (no Docker)",
        description="Run a Kafka broker, a Spark standalone master and workers as local "
        "processes on 127.0.0.1, from the pyspark installation and Kafka's jars.",
    )
    actions = cluster.add_subparsers(
        title="actions", dest="action", metavar="ACTION", required=True
    )

    start = actions.add_parser(
        "start",
        parents=[common],
        help="start the cluster (what is not running) and print master=, bootstrap=, ui=",
    )
    start.add_argument("--workers", type=int, default=2, help="number of workers (default: 2)")
    start.add_argument("--worker-cores", type=int, default=1, help="cores per worker (default: 1)")
    start.add_argument(
        "--worker-memory", default="1g", help="memory per worker for executors (default: 1g)"
    )
    start.add_argument(
        "--timeout", type=float, default=120.0, help="seconds to wait for readiness (default: 120)"
    )
    start.set_defaults(run=_start)

    stop = actions.add_parser(
        "stop",
        parents=[common],
        help="stop every component (exit code 1 if something had to be SIGKILLed)",
    )
    stop.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="seconds to wait after SIGTERM before SIGKILL (default: 30)",
    )
    stop.set_defaults(run=_stop)

    status = actions.add_parser(
        "status",
        parents=[common],
        help=f"show each component (exit code {EXIT_NOT_RUNNING} if any is stopped)",
    )
    status.set_defaults(run=_status)

    logs = actions.add_parser("logs", parents=[common], help="print the end of a component's log")
    logs.add_argument("component", help="broker, master, worker-1, ...")
    logs.add_argument("-n", "--lines", type=int, default=50, help="number of lines (default: 50)")
    logs.set_defaults(run=_logs)


def _start(args: argparse.Namespace) -> int:
    cluster = LocalCluster(
        args.dir,
        workers=args.workers,
        worker_cores=args.worker_cores,
        worker_memory=args.worker_memory,
        start_timeout=args.timeout,
    )
    cluster.start()
    print(f"master={cluster.master_url}")
    print(f"bootstrap={cluster.bootstrap}")
    print(f"ui={cluster.master_ui_url}")
    return 0


def _stop(args: argparse.Namespace) -> int:
    results = LocalCluster(args.dir, stop_timeout=args.timeout).stop()
    for name, result in results.items():
        print(f"{name:<10} {result.value}")
    return 1 if StopResult.KILLED in results.values() else 0


def _status(args: argparse.Namespace) -> int:
    status = LocalCluster(args.dir).status()
    for component in status.components:
        print(component.describe())
    if status.alive_workers is not None:
        print(f"master reports {status.alive_workers} alive worker(s)")
    return 0 if status.running else EXIT_NOT_RUNNING


def _logs(args: argparse.Namespace) -> int:
    for line in LocalCluster(args.dir).logs(args.component, args.lines):
        print(line)
    return 0
