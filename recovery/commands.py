"""Running a Spillway command line: one logging setup, one error policy, one set of exit codes.

Shared by ``spillway`` (the front door), ``python -m spillway.recovery`` and
``spark-submit spark_jobs/run.py``, so each prints errors and logs alike. A command module
adds its parser with ``add_parser(subparsers)`` and sets ``run``, a function
``(argparse.Namespace) -> int``, as a default.

Exit codes: 0 success, 2 a :class:`~spillway.channels.errors.SpillwayError` or a usage error
(message on stderr, no traceback), 130 interrupted; commands may define others.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from spillway.channels.config import scrub_logging, scrub_secrets
from spillway.channels.errors import SpillwayError

EXIT_ERROR = 2
EXIT_INTERRUPTED = 130

# Our own packages log at INFO (progress such as "resolving jars" or "broker ready");
# third-party libraries only at WARNING, so the terminal stays readable.
_OWN_LOGGERS = ("spillway",)


def run_command(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    """Parse ``argv`` with ``parser`` (which must define ``--verbose`` and set ``run``), set up
    logging and run the command; its exit code. A :class:`SpillwayError` is printed as one
    line on stderr, with secrets scrubbed, and gives :data:`EXIT_ERROR`."""
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help and on usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    configure_logging(verbose=args.verbose)
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except SpillwayError as exc:
        # Scrubbed: a secret must not reach the terminal even if it slipped into a message.
        print(f"{parser.prog}: error: {scrub_secrets(str(exc))}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def configure_logging(*, verbose: bool) -> None:
    """Spillway's loggers at INFO (DEBUG if ``verbose``), everything else at WARNING."""
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
