"""A run's log file: what the terminal of ``spillway run`` and ``spillway demo`` does not show.

The terminal shows the progress line, warnings and errors. Everything else — Spillway's
INFO lines, Spark's log4j output (the JVM's warnings, a killed task's Java stack frames),
the subtasks' logs and Python warnings — goes to one file, ``.spillway/logs/<job>-<UTC
time>.log``, named on the terminal when the run starts. ``--verbose`` keeps the terminal
as it was (everything there, at DEBUG for Spillway), the file getting a copy of the
driver's Python logs.

How each part gets there: the driver's Python logging gains a file handler and its
terminal handlers keep only warnings (:func:`run_log`); the driver JVM, started after
this, reads a log4j2 configuration that appends to the file (:func:`jvm_options`), and
its own stderr is appended there too (:func:`jvm_stderr`); subtasks and the Python
daemon of Spark local mode find the file in :data:`LOG_ENV`, inherited from the driver
(:func:`subtask_logging`). On a cluster the executors are elsewhere and keep their logs
in Spark's worker directories, as before.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

# The run's log file, for the processes the driver starts (Spark local mode's JVM, its
# Python daemon and workers); unset: log to stderr.
LOG_ENV = "SPILLWAY_LOG_FILE"
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_path(job: str, directory: Path, now: float) -> Path:
    """``<directory>/<job>-<UTC time, to the second>.log``."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    return directory / f"{job}-{stamp}.log"


@contextlib.contextmanager
def run_log(job: str, *, verbose: bool, directory: Path | None = None) -> Iterator[Path]:
    """The log file of run ``job`` (its absolute path) while the block runs.

    Adds a file handler (every level the loggers pass) to the root logger and captures
    Python warnings into logging. Unless ``verbose``: the root logger's handlers that write
    to the terminal (stderr or stdout) keep only warnings and errors, Python warnings go to
    the file only, and :data:`LOG_ENV` names the file for the processes started meanwhile.
    All of it is undone when the block ends; the file stays unless nothing was written to
    it (a run refused before it started leaves no empty file behind).
    """
    path = log_path(job, (directory or Path(".spillway/logs")).absolute(), time.time())
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(_FORMAT))
    root = logging.getLogger()
    warned = logging.getLogger("py.warnings")
    terminal = [
        h
        for h in root.handlers
        if isinstance(h, logging.StreamHandler)
        and getattr(h, "stream", None) in (sys.stderr, sys.stdout)
    ]
    levels = [h.level for h in terminal]
    propagate, env = warned.propagate, os.environ.get(LOG_ENV)
    root.addHandler(handler)
    logging.captureWarnings(True)
    if not verbose:
        for h in terminal:
            h.setLevel(max(h.level, logging.WARNING))
        # A library's FutureWarning (pandas 3 under PySpark) is nothing to act on here.
        warned.propagate = False
        warned.addHandler(handler)
        os.environ[LOG_ENV] = str(path)
        _write_log4j2(path)
    try:
        yield path
    finally:
        root.removeHandler(handler)
        warned.removeHandler(handler)
        warned.propagate = propagate
        logging.captureWarnings(False)
        for h, level in zip(terminal, levels, strict=True):
            h.setLevel(level)
        if env is None:
            os.environ.pop(LOG_ENV, None)
        else:
            os.environ[LOG_ENV] = env
        handler.close()
        if path.exists() and path.stat().st_size == 0:
            path.unlink()
            log4j2_properties(path).unlink(missing_ok=True)


def log4j2_properties(log_file: Path) -> Path:
    """Where the log4j2 configuration for ``log_file`` is written."""
    return log_file.with_suffix(".log4j2.properties")


def _write_log4j2(log_file: Path) -> None:
    """Spark's log4j at WARN (its default) into ``log_file`` instead of the console."""
    text = "\n".join(
        [
            "status = error",
            "appender.file.type = File",
            "appender.file.name = file",
            f"appender.file.fileName = {log_file}",
            "appender.file.append = true",
            "appender.file.layout.type = PatternLayout",
            "appender.file.layout.pattern = %d{yyyy-MM-dd HH:mm:ss,SSS} %p %c: %m%n%ex",
            "rootLogger.level = warn",
            "rootLogger.appenderRef.file.ref = file",
            "",
        ]
    )
    log4j2_properties(log_file).write_text(text, encoding="utf-8")


def jvm_options(master: str | None) -> str | None:
    """The driver JVM's extra options that send Spark's log4j output to the run's log file;
    None without one (no :data:`LOG_ENV`) or off local mode (a cluster's executors log
    where their workers keep logs). Effective only if the JVM is not running yet."""
    log_file = os.environ.get(LOG_ENV)
    if not log_file or not (master or "").startswith("local"):
        return None
    props = log4j2_properties(Path(log_file))
    return f"-Dlog4j2.configurationFile=file:{props}" if props.exists() else None


def jvm_stderr(master: str | None) -> Path | None:
    """Where the driver JVM's own stderr goes: the run's log file, under the same conditions
    as :func:`jvm_options` (None: the terminal, as Spark does).

    log4j2 covers what Spark logs, but the JVM itself writes to stderr before log4j starts,
    e.g. ``WARNING: Using incubator modules: jdk.incubator.vector`` (Spark 4 adds that
    module to every JVM it launches, and no JVM flag silences the line). Nothing there
    needs the user, so it belongs in the file with the rest of Spark's output."""
    if jvm_options(master) is None:
        return None
    return Path(os.environ[LOG_ENV])


def subtask_logging() -> None:
    """A subtask's logging: to the run's log file (:data:`LOG_ENV`), errors also to stderr;
    without that file (or if it cannot be opened), to stderr at INFO as before."""
    log_file = os.environ.get(LOG_ENV)
    handlers: list[logging.Handler] = []
    if log_file:
        try:
            handlers.append(logging.FileHandler(log_file, encoding="utf-8"))
        except OSError:
            handlers = []
    if handlers:
        errors = logging.StreamHandler(sys.stderr)
        errors.setLevel(logging.ERROR)
        handlers.append(errors)
        logging.captureWarnings(True)
    else:
        handlers.append(logging.StreamHandler(sys.stderr))
    logging.basicConfig(level=logging.INFO, format=_FORMAT, handlers=handlers)


def daemon_note(text: str) -> None:
    """A line of Spark's Python daemon: into the run's log file if there is one, else to
    stderr (the executor's log)."""
    log_file = os.environ.get(LOG_ENV)
    if log_file:
        try:
            with open(log_file, "a", encoding="utf-8") as f:
                f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} INFO spillway.daemon: {text}\n")
            return
        except OSError:
            pass
    print(text, file=sys.stderr)
