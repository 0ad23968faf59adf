"""Keeping one Spark context across the runs of one process, where the caller asks for it.

By default :func:`spillway.spark_jobs.spark.driver.run_on_spark` creates a Spark context for
its run and stops it at the end, which is what ``spillway run`` does and must keep doing.
A process that runs many jobs one after the other (the test suite) pays for that each
time: pyspark keeps the JVM gateway after ``stop()``, but stopping a context costs about
1 s, and the first job of a new one about 1.35 s (its Python worker daemon starts).

Inside :func:`shared_spark`, a run that ends normally leaves its context running, and the
next run reuses it if it wants the same static configuration (:func:`reusable`);
otherwise that context is stopped and the run creates its own. Leaving the scope stops
the kept context. A context is never reused after a run that raised: its jobs may still
be being cancelled.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("spillway.spark_jobs.spark.sharedctx")

# A label only (the UI is off; Spark logs it once): a context created for one job can
# run another job's tasks.
APP_NAME_KEY = "spark.app.name"


def reusable(kept: Mapping[str, str] | None, wanted: Mapping[str, str]) -> bool:
    """Whether a context created with the static configuration ``kept`` (None: no context)
    may run a job that wants ``wanted``: exactly the same settings — master (which carries
    local mode's task attempts), ``spark.task.maxFailures``, ``spark.cores.max``, Java
    options, executor environment, daemon module, ... — apart from the application name.

    A setting present in one and absent from the other counts as different: Spark's
    default for an unset key need not equal the value set before.
    """
    if kept is None:
        return False
    return _without_name(kept) == _without_name(wanted)


def _without_name(conf: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in conf.items() if k != APP_NAME_KEY}


@dataclass
class _Scope:
    """The state of an open :func:`shared_spark`: the kept session and the configuration
    it was created with (both None while none is kept)."""

    session: Any = None
    conf: dict[str, str] | None = None


_scope: _Scope | None = None


@contextlib.contextmanager
def shared_spark() -> Iterator[None]:
    """Within this scope, runs of this process share one Spark context where they can.

    Contract: a run that ends without raising keeps its context; the next run reuses it
    if :func:`reusable` says so and the context is still the active one, else stops it
    and creates its own. A run that raises stops its context as outside the scope. On
    leaving the scope the kept context is stopped, so nothing it started (its Python
    worker daemon) outlives the scope. Runs must be sequential, as they must be without
    the scope (a run's end would stop a context another run is using). Scopes do not nest.
    Not used by ``spillway run``: each of its processes runs one job.
    """
    global _scope
    if _scope is not None:
        raise RuntimeError("shared_spark() scopes do not nest")
    _scope = _Scope()
    try:
        yield
    finally:
        kept, _scope = _scope, None
        if kept.session is not None:
            kept.session.stop()


def session_for(
    wanted: Callable[[], Mapping[str, str]], create: Callable[[Mapping[str, str]], Any]
) -> Any:
    """The Spark session for a run: the kept one if the scope is open and it is reusable
    for the configuration ``wanted()`` returns, else ``create(conf)`` (after stopping a kept
    one that is not).

    ``wanted`` is asked again once a kept context is stopped: the configuration may depend
    on the running context (``sys.path`` holds its SparkFiles directory), and the new
    context is recorded with the configuration it is created with.
    """
    if _scope is None:
        return create(wanted())
    kept = _scope.session
    if kept is not None:
        if reusable(_scope.conf, wanted()) and _is_active(kept):
            log.debug("reusing the kept Spark context")
            return kept
        _scope.session, _scope.conf = None, None
        kept.stop()
    conf = wanted()
    session = create(conf)
    _scope.session, _scope.conf = session, dict(conf)
    return session


def release(session: Any, ended_normally: bool) -> None:
    """After a run on ``session``: stop it unless the scope is open, keeps this session,
    and the run ended normally."""
    if _scope is not None and _scope.session is session:
        if ended_normally:
            return
        _scope.session, _scope.conf = None, None
    session.stop()


def _is_active(session: Any) -> bool:
    """Whether ``session``'s context is still pyspark's active one (nobody stopped it)."""
    from pyspark import SparkContext

    return SparkContext._active_spark_context is session.sparkContext
