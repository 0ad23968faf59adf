"""Python's cyclic garbage collector while a subtask runs.

A subtask allocates a few container objects per record (decoded dicts, lists, tuples),
nearly all freed by reference counting. With the default thresholds (a young
collection every 700 net allocations, an old one every 100 young ones) the collector
ran several hundred times a second and each old collection walked every object alive
in the process: pyspark's and Kafka's modules, the plan, the state. In the B1 profile
that was 9 % of the stateful subtask's CPU. Flink's Java counterpart is a JVM tuned for
short-lived objects; here the same is reached by moving what exists at start-up out of
the collector's view (``gc.freeze``, as CPython documents for long-running servers) and
collecting young objects less often. Cycles are still found; they live a little longer.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

# Young collections every 20,000 net allocations (default 700): a batch of 1,000 records
# in flight no longer survives into the older generations one collection at a time.
YOUNG_THRESHOLD = 20_000


@contextmanager
def streaming_collector() -> Iterator[None]:
    """Freeze the objects alive now and raise the young threshold; restore both on exit
    (a Spark Python worker may run another task afterwards)."""
    before = gc.get_threshold()
    gc.collect()  # start-up garbage goes now, rather than frozen forever
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, before[1], before[2])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
