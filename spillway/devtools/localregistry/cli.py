"""``spillway registry start|stop|status|logs``: manage the local schema registry.

Plugged into the ``spillway`` command by :mod:`spillway.cli` through :func:`add_parser`.
``start`` prints only the registry's URL (``URL=$(spillway registry start)`` works);
progress is logged to stderr.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from spillway.devtools.localregistry.registry import (
    DEFAULT_DIR,
    REGISTRY_DIR_ENV,
    LocalRegistry,
    StopResult,
)

EXIT_NOT_RUNNING = 3
"""``status`` exit code when the registry is stopped (as in LSB init scripts)."""


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``registry`` command and its actions to the ``spillway`` command line."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--dir",
        type=Path,
        default=None,
        help=f"registry directory (default: ${REGISTRY_DIR_ENV}, else ./{DEFAULT_DIR})",
    )
    common.add_argument(
        "--port",
        type=int,
        default=None,
        help="HTTP port on 127.0.0.1 (default: the directory's last port, else 8081)",
    )
    registry = subparsers.add_parser(
        "registry",
        help="run a local schema registry (Apicurio Registry, in memory; no Docker)",
        description="Run a local schema registry with the Confluent Schema Registry API "
        "(Apicurio Registry, in-memory storage). Needs Java 17+, and Maven on the first "
        "start to build it from Maven Central.",
    )
    actions = registry.add_subparsers(
        title="actions", dest="action", metavar="ACTION", required=True
    )
    start = actions.add_parser(
        "start", parents=[common], help="start the registry (no-op if running), print its URL"
    )
    start.add_argument(
        "--timeout", type=float, default=120.0,
        help="seconds to wait for the registry to answer (default: 120)",
    )  # fmt: skip
    start.set_defaults(run=_start)
    stop = actions.add_parser(
        "stop",
        parents=[common],
        help="stop the registry (SIGTERM, then SIGKILL; exit code 1 if it had to be killed)",
    )
    stop.set_defaults(run=_stop)
    status = actions.add_parser(
        "status",
        parents=[common],
        help=f"print running/stopped and the URL (exit code {EXIT_NOT_RUNNING} if stopped)",
    )
    status.set_defaults(run=_status)
    logs = actions.add_parser("logs", parents=[common], help="print the end of its log")
    logs.add_argument("-n", "--lines", type=int, default=50, help="number of lines (default: 50)")
    logs.set_defaults(run=_logs)


def _start(args: argparse.Namespace) -> int:
    registry = LocalRegistry(args.dir, args.port, start_timeout=args.timeout)
    registry.start()
    print(registry.url)
    return 0


def _stop(args: argparse.Namespace) -> int:
    result = LocalRegistry(args.dir, args.port).stop()
    print(result.value)
    return 0 if result is not StopResult.KILLED else 1


def _status(args: argparse.Namespace) -> int:
    registry = LocalRegistry(args.dir, args.port)
    pid = registry.running_pid()
    print(f"running {registry.url} pid {pid}" if pid is not None else "stopped")
    return 0 if pid is not None else EXIT_NOT_RUNNING


def _logs(args: argparse.Namespace) -> int:
    for line in LocalRegistry(args.dir, args.port).logs(args.lines):
        print(line)
    return 0
