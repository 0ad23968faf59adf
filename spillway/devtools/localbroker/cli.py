"""``spillway broker start|stop|status|logs``: manage the local development broker.

Plugged into the ``spillway`` command by :mod:`spillway.cli` through
:func:`add_parser`. Results go to stdout (``start`` prints only the bootstrap address,
so ``BOOTSTRAP=$(spillway broker start)`` works); progress is logged to stderr.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from spillway.devtools.localbroker.broker import LocalBroker, StopResult
from spillway.devtools.localbroker.config import BROKER_DIR_ENV, DEFAULT_DATA_DIR, BrokerConfig

EXIT_NOT_RUNNING = 3
"""``status`` exit code when the broker is stopped (as in LSB init scripts)."""


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``broker`` command and its actions to the ``spillway`` command line."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--dir",
        type=Path,
        default=None,
        help=f"broker data directory (default: ${BROKER_DIR_ENV}, else ./{DEFAULT_DATA_DIR})",
    )
    common.add_argument(
        "--port",
        type=int,
        default=None,
        help="client port on 127.0.0.1 (default: the directory's last port, else 9092)",
    )
    common.add_argument(
        "--controller-port",
        type=int,
        default=None,
        help="KRaft controller port on 127.0.0.1 (default: the directory's last one, else 9093)",
    )

    broker = subparsers.add_parser(
        "broker",
        help="run a local single-node Kafka broker (no Docker)",
        description="Run a local single-node KRaft Kafka broker from Apache Kafka's jars. "
        "Needs Java 17+, and Maven on the first start to fetch the jars.",
    )
    actions = broker.add_subparsers(title="actions", dest="action", metavar="ACTION", required=True)

    start = actions.add_parser(
        "start",
        parents=[common],
        help="start the broker (no-op if running) and print its bootstrap address",
    )
    start.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds to wait for the broker to answer (default: 60)",
    )
    start.set_defaults(run=_start)

    stop = actions.add_parser(
        "stop",
        parents=[common],
        help="stop the broker (SIGTERM, then SIGKILL; exit code 1 if it had to be killed)",
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
        help=f"print running/stopped, bootstrap and pid (exit code {EXIT_NOT_RUNNING} if stopped)",
    )
    status.set_defaults(run=_status)

    logs = actions.add_parser("logs", parents=[common], help="print the end of the broker's log")
    logs.add_argument("-n", "--lines", type=int, default=50, help="number of lines (default: 50)")
    logs.set_defaults(run=_logs)


def _broker(
    args: argparse.Namespace, *, start_timeout: float = 60.0, stop_timeout: float = 30.0
) -> LocalBroker:
    config = BrokerConfig.resolve(args.dir, args.port, args.controller_port)
    return LocalBroker(config, start_timeout=start_timeout, stop_timeout=stop_timeout)


def _start(args: argparse.Namespace) -> int:
    broker = _broker(args, start_timeout=args.timeout)
    broker.start()
    print(broker.bootstrap)
    return 0


def _stop(args: argparse.Namespace) -> int:
    result = _broker(args, stop_timeout=args.timeout).stop()
    print(result.value)
    return 0 if result is not StopResult.KILLED else 1


def _status(args: argparse.Namespace) -> int:
    status = _broker(args).status()
    print(status.describe())
    return 0 if status.running else EXIT_NOT_RUNNING


def _logs(args: argparse.Namespace) -> int:
    for line in _broker(args).logs(args.lines):
        print(line)
    return 0
