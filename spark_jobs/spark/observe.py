"""What the driver shows while a job runs: the metrics endpoint and the progress line.

Both read one :class:`~spillway.spark_jobs.spark.metrics_http.MetricsFeed`, started only if one of
them
is asked for (``spillway run --metrics-port N``, ``--progress``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId
from spillway.recovery.job.plandoc import PlanDoc

if TYPE_CHECKING:
    from spillway.spark_jobs.spark.metrics_http import MetricsFeed


@contextlib.contextmanager
def observed(
    settings: KafkaSettings,
    job: JobId,
    plan: PlanDoc,
    run_id: str,
    metrics_port: int | None,
    metrics_host: str,
    progress: bool,
) -> Iterator[MetricsFeed | None]:
    """Serve metrics on ``metrics_host:metrics_port`` and/or draw the progress line meanwhile.

    Yields the metrics feed (None if neither is asked for); once the block is left, its
    :meth:`~spillway.spark_jobs.spark.metrics_http.MetricsFeed.snapshot` is the run's last.
    """
    if metrics_port is None and not progress:
        yield None
        return
    from spillway.spark_jobs.spark.metrics_http import MetricsFeed, serve
    from spillway.spark_jobs.spark.progress import ProgressLine

    feed = MetricsFeed(settings, job, plan, run_id)
    try:
        stop_serving = (
            serve(feed.snapshot, job, metrics_host, metrics_port)
            if metrics_port is not None
            else None
        )
    except BaseException:
        feed.stop()
        raise
    feed.start()
    line = ProgressLine(job, feed.snapshot) if progress else None
    if line is not None:
        line.start()
    try:
        yield feed
    finally:
        feed.stop()
        if line is not None:
            line.stop()
        if stop_serving is not None:
            stop_serving()
