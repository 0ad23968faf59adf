"""PySpark's worker daemon with Spillway's modules imported before it forks a worker.

PySpark starts one daemon per executor and forks it for every task; the daemon imports
nothing of ours, so every (re)started subtask imported pyspark.worker, confluent-kafka,
pyarrow, fastavro and the runtime afresh — 0.5-0.9 s of a restart on a loaded machine
(bench.restart). Imported here once, a forked worker finds them in ``sys.modules``.

PySpark itself imports the worker module only after the fork, because a module that
starts threads at import makes forking unsafe. Of what is imported here, only pyarrow
does: its jemalloc starts a background purging thread, which ``JE_ARROW_MALLOC_CONF``
turns off (pyarrow's default pool is mimalloc; jemalloc then purges inline). The
daemon checks that it is still single-threaded before serving, and falls back to
PySpark's plain behaviour otherwise.

Used through ``spark.python.daemon.module`` (see ``spillway.spark_jobs.spark.driver``).
"""

from __future__ import annotations

import gc
import os
import sys
import time
import warnings
import zipimport

from spillway.spark_jobs.spark.runlog import LOG_ENV, daemon_note

# Preloaded: the task body and what it reaches (runner, channels, Kafka clients, codecs)
# and the pipeline API that pipeline modules import (also as ``spillway``). Not the
# user's pipeline module: it may read its configuration from the environment at import,
# which a task sets only after the fork.
PRELOAD = (
    "pyspark.worker",
    "spillway.spark_jobs.spark.driver",
    "spillway.spark_jobs.api.pipeline",
    "spillway",
)

# Wall time this process was forked from the daemon (None: not a forked worker). The
# restart phase "python_started", to the microsecond (/proc gives 10 ms).
spillway_forked_at: float | None = None


def _forked() -> None:
    global spillway_forked_at
    spillway_forked_at = time.time()


def preload(modules: tuple[str, ...] = PRELOAD) -> list[str]:
    """Import ``modules``; returns the ones that failed (their import is left to the worker)."""
    import importlib

    os.environ.setdefault("JE_ARROW_MALLOC_CONF", "background_thread:false")
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # the worker imports it again and reports the real error
            failed.append(name)
    return failed


def forget_zip_finders() -> int:
    """Drop the zip importers from ``sys.path_importer_cache``; returns how many.

    Why: every PySpark worker calls ``importlib.invalidate_caches()`` (setup_spark_files)
    right after the fork, and each cached zip importer then re-reads its archive's whole
    directory. Spark puts pyspark.zip first on a worker's path, so the preload leaves one
    zip importer per pyspark package imported from it (18): 0.55 s of every worker start
    on a loaded machine, 0.03 s once they are dropped. The cache is only a cache: a later
    import makes the importer it needs again, and imported modules keep their loaders.
    """
    stale = [k for k, v in sys.path_importer_cache.items() if isinstance(v, zipimport.zipimporter)]
    for k in stale:
        del sys.path_importer_cache[k]
    return len(stale)


def threads() -> int | None:
    """Threads of this process (``None`` where /proc is not available)."""
    try:
        return len(os.listdir(f"/proc/{os.getpid()}/task"))
    except OSError:
        return None


def _warned(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: object = None,
    line: str | None = None,
) -> None:
    daemon_note(warnings.formatwarning(message, category, filename, lineno, line).rstrip())


def main() -> None:
    """Preload, then run PySpark's daemon (it reads the worker module from ``sys.argv``).

    With a run log (:data:`~spillway.spark_jobs.spark.runlog.LOG_ENV`), the daemon's notes
    and the warnings of its imports go there instead of stderr."""
    os.register_at_fork(after_in_child=_forked)
    if os.environ.get(LOG_ENV):
        warnings.showwarning = _warned
    failed = preload()
    forget_zip_finders()
    # What the preload made lives as long as the daemon: out of the collector's view, a
    # worker's collections neither walk it nor write to it (which copied every page of it
    # after the fork: 0.7 s stalls during restores in bench.restart). CPython's advice for
    # servers that fork without exec.
    gc.collect()
    gc.freeze()
    n = threads()
    if failed or (n is not None and n > 1):
        # The run's log file or stderr (the executor's log); the daemon still works, only
        # slower to fork.
        daemon_note(
            f"spillway daemon: preload incomplete (failed: {failed or 'none'}, threads: {n})"
        )
    if n is not None and n > 1:
        # Unsafe to fork with threads: serve as the plain PySpark daemon would, in a
        # fresh interpreter.
        os.execv(sys.executable, [sys.executable, "-m", "pyspark.daemon", *sys.argv[1:]])
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
