"""The pipeline of test_rescale.py: generate (p=2, paced) → key_by (8 key groups) →
keyed count (p=2 in the code; the runs override it) → one file sink."""

from __future__ import annotations

import os

from spark_jobs.pipeline import Pipeline
from tests.integration.keygroupjobs import COUNT, EVENT, add, make_event

MAX_PARALLELISM = 8


def keyed_count() -> Pipeline:
    """Per key: number of events and sum of their sequence numbers, emitted at the end."""
    p = Pipeline("rescale")
    events = p.generate(
        "events",
        make=make_event,
        schema=EVENT,
        count=int(os.environ["SPILLWAY_TEST_RECORDS"]),
        parallelism=2,
        rate=float(os.environ["SPILLWAY_TEST_RATE"]),
    )
    events.key_by(lambda r: r["key"], max_parallelism=MAX_PARALLELISM).aggregate(
        "count",
        init=lambda: [0, 0],
        add=add,
        result=lambda k, acc: {"key": k, "n": acc[0], "seqs": acc[1]},
        schema=COUNT,
        parallelism=2,
    ).write_jsonl("out", os.environ["SPILLWAY_TEST_OUT"], parallelism=1)
    return p
