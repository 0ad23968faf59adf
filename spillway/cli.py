"""The ``spillway`` command line.

Every subcommand lives in its own module, which exposes::

    def add_parser(subparsers: Subparsers) -> None

That function adds the command's parser and sets ``run`` as a default: a function
``(argparse.Namespace) -> int`` returning the exit code. To add a command, import its
module here and list it in :data:`COMMANDS`.

Exit codes and error printing are :mod:`spillway.recovery.commands`'.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Protocol, TypeAlias

from spillway.devtools import clustercli, demo
from spillway.devtools.localbroker import cli as broker_cli
from spillway.devtools.localregistry import cli as registry_cli
from spillway.recovery import cli as recovery_cli
from spillway.recovery import housekeepcli
from spillway.recovery.commands import run_command
from spillway.spark_jobs import cli as run_cli
from spillway.spark_jobs.autoscale import cli as autoscale_cli
from spillway.spark_jobs.ui import cli as ui_cli

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

class Command(Protocol):
    """A subcommand module."""

    def add_parser(self, subparsers: Subparsers) -> None: ...


COMMANDS: tuple[Command, ...] = (
    broker_cli,
    registry_cli,
    run_cli,
    recovery_cli,
    autoscale_cli,
    housekeepcli,
    demo,
    clustercli,
    ui_cli,
)

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
    return run_command(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
