"""The ``spillway`` command line.

Every subcommand lives in its own module, which exposes::

    def add_parser(subparsers: Subparsers) -> None

That function adds the command's parser and sets ``run`` as a default: a function
``(argparse.Namespace) -> int`` returning the exit code. To add a command, import its
module here and list it in :data:`COMMANDS`.

Exit codes: 0 success, 2 a :class:`~channels.errors.SpillwayError` or a usage error
(message on stderr, no traceback), 130 interrupted; commands may define others.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Protocol, TypeAlias

from channels.config import scrub_logging, scrub_secrets
from channels.errors import SpillwayError
from devtools import clustercli, demo
from devtools.localbroker import cli as broker_cli
from recovery import cli as recovery_cli
from spark_jobs import run_cli
from spark_jobs.ui import cli as ui_cli

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

EXIT_ERROR = 2
EXIT_INTERRUPTED = 130


class Command(Protocol):
    """A subcommand module."""

    def add_parser(self, subparsers: Subparsers) -> None: ...


COMMANDS: tuple[Command, ...] = (broker_cli, run_cli, recovery_cli, demo, clustercli, ui_cli)

# Our own packages log at INFO (progress such as "resolving jars" or "broker ready");
# third-party libraries only at WARNING, so the terminal stays readable.
_OWN_LOGGERS = ("channels", "offsets", "recovery", "spark_jobs")


def build_parser() -> argparse.ArgumentParser:
    """The full ``spillway`` argument parser with every command in :data:`COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="spillway",
        description="Kafka-backed persistent channels for PySpark streaming pipelines.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    subparsers = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    subparsers.required = True
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``spillway`` with ``argv`` (default: ``sys.argv[1:]``) and return the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help and on usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    _configure_logging(verbose=args.verbose)
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except SpillwayError as exc:
        # Scrubbed: a secret must not reach the terminal even if it slipped into a message.
        print(f"spillway: error: {scrub_secrets(str(exc))}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("spillway: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _configure_logging(*, verbose: bool) -> None:
    # basicConfig does nothing if the root logger is already configured (e.g. when
    # main() is called from a test or an application), which is what we want.
    logging.basicConfig(
        level=logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    for name in _OWN_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if verbose else logging.INFO)
    scrub_logging()


if __name__ == "__main__":
    sys.exit(main())
