"""One run of one engine, as a child process: what it is asked to do and how it reports.

:class:`Job` is the run (broker, topics, size, commit interval, working directory, the
variant); :func:`say` and :func:`wait_for_release` are the child's side of the protocol
the benchmark measures by: a ``READY`` line when the engine starts to process, a ``DONE``
line once every record is processed and committed, then a wait until the benchmark
closes the child's stdin. Shared by :mod:`bench.peers` and the engines in modules of their
own (:mod:`bench.sssengine`, :mod:`bench.sssb3job`).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Job:
    """One run of one engine."""

    bootstrap: str
    input: str
    output: str
    records: int
    commit_interval_s: float
    workdir: str
    name: str  # unique per run: consumer group, transactional id, job id
    guarantee: str = "exactly-once"
    connector: str = ""  # spark-sql-kafka-0-10 version; "" = the pyspark version
    traced: bool = False  # spillway only: the B2 variant (bench.peers.spillway_pipeline)
    chaining: bool = False  # spillway only: Pipeline(chaining=True)
    orjson: bool = False  # handwritten only: orjson instead of the stdlib's json
    pandas_state: bool = False  # sss only: the count in Python (applyInPandasWithState)


def say(word: str, records_before: int | None = None) -> None:
    """Print ``<word> <unix time>`` (with `` <records_before>`` when given) to stdout, flushed.

    ``records_before``: records processed before the measured window starts (READY of the
    Structured Streaming engines: their first micro-batch), left out of the figures.
    """
    extra = "" if records_before is None else f" {records_before}"
    print(f"{word} {time.time():.6f}{extra}", flush=True)


def wait_for_release() -> None:
    """Block until stdin is closed: the benchmark closes it once it has sampled this process."""
    sys.stdin.read()
