"""The pipeline of test_slot_rescale.py: a stateless map behind a round-robin edge, so its
input channel has slots (docs/architecture.md, Slots), then a keyed count."""

from __future__ import annotations

import os
from typing import Any

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, OperatorName
from spillway.offsets.checkpoint import Checkpoint
from spillway.offsets.store import CheckpointStore
from spillway.spark_jobs.api.pipeline import Pipeline
from tests.integration.gates import held_generate
from tests.integration.keygroupjobs import COUNT, EVENT, add, make_event, reference


def tag(r: dict[str, Any]) -> dict[str, Any]:
    """The map: the key prefixed, so the output shows every record went through it."""
    return {**r, "key": "m:" + r["key"]}


def rebalanced_tag() -> Pipeline:
    """generate (p=2; held at the test's gates, or paced when the test sets a rate)
    -[round-robin, 32 slots]-> tag (map, p=2) -[keyed, 8 groups]-> count (p=2) -> out
    (p=1)."""
    p = Pipeline("slots")
    events = held_generate(
        p,
        "events",
        make=make_event,
        schema=EVENT,
        count=int(os.environ["SPILLWAY_TEST_RECORDS"]),
        parallelism=2,
        rate=float(os.environ.get("SPILLWAY_TEST_RATE", "0")) or None,
    )
    tagged = events.rebalance().map("tag", tag, schema=EVENT, parallelism=2)
    tagged.key_by(lambda r: r["key"], max_parallelism=8).aggregate(
        "count",
        init=lambda: [0, 0],
        add=add,
        result=lambda k, acc: {"key": k, "n": acc[0], "seqs": acc[1]},
        schema=COUNT,
        parallelism=2,
    ).write_jsonl("out", os.environ["SPILLWAY_TEST_OUT"], parallelism=1)
    return p


def tagged_reference(records: int) -> dict[str, tuple[int, int]]:
    """What :func:`rebalanced_tag` must output: per tagged key, (count, sum of seq)."""
    return {"m:" + k: v for k, v in reference(records).items()}


def checkpoint_ids(settings: KafkaSettings, job: JobId, op: str, p: int) -> list[int | None]:
    """The latest checkpoint id of each of ``op``'s subtasks 0..p-1 (None: none yet)."""
    store = CheckpointStore(settings, job, OperatorName(op), p)
    try:
        latest: list[Checkpoint | None] = [store.latest(i) for i in range(p)]
    finally:
        store.close()
    return [None if c is None else int(c.checkpoint_id) for c in latest]
