"""The keyed pipeline the chaos suite runs, and its batch reference.

generate ``(key, seq, payload)`` (``seq`` dense per key) → ``weigh`` (map) → repartition
by key → ``fold`` (keyed aggregate, one update per record) → repartition by key →
``sink`` (a Kafka topic, keyed). Both keyed edges let ``fold`` (and ``sink``) change
width while the job runs (a forward edge ties two widths together); a key's updates
still come from one fold subtask at a time, through one sink subtask, in order.

Every output record is ``(key, seq, n, total)``: the update after the record ``seq`` of
``key``, with ``n`` records and ``total`` weight folded so far. So the output
shows a loss or a repeat both as a gap/repeat in ``seq`` and as a wrong ``n``.

Configured through ``SPILLWAY_CHAOS_*`` variables (the driver forwards ``SPILLWAY_*`` to
every task): ``RECORDS``, ``KEYS``, ``SEED``, ``RATE`` (records/s per source subtask,
unset: unpaced), ``OUT`` (the output topic), ``PARALLELISM`` (default 2).
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from typing import Any

from spillway.spark_jobs.api.pipeline import Pipeline

RECORD = {
    "type": "record",
    "name": "ChaosRecord",
    "fields": [
        {"name": "key", "type": "string"},
        {"name": "seq", "type": "long"},
        {"name": "payload", "type": "string"},
    ],
}
WEIGHED = {
    "type": "record",
    "name": "ChaosWeighed",
    "fields": [
        {"name": "key", "type": "string"},
        {"name": "seq", "type": "long"},
        {"name": "weight", "type": "long"},
    ],
}
UPDATE = {
    "type": "record",
    "name": "ChaosUpdate",
    "fields": [
        {"name": "key", "type": "string"},
        {"name": "seq", "type": "long"},
        {"name": "n", "type": "long"},
        {"name": "total", "type": "long"},
    ],
}
OPERATORS = ("gen", "weigh", "fold", "sink")
RESCALABLE = ("fold",)  # live: keyed input and keyed state; gen is a source, weigh forward-fed
UPGRADABLE = ("weigh", "fold", "sink")


def make_record(i: int, keys: int, seed: int) -> dict[str, Any]:
    """Record ``i``: key ``i % keys``, its ``seq`` within that key, a seeded payload.

    With ``keys`` a multiple of the source parallelism, every key comes from one source
    subtask (subtask k emits ``i ≡ k``), so per-key order survives the whole pipeline.
    """
    payload = f"{seed:x}-{zlib.crc32(f'{seed}:{i}'.encode()):08x}"
    return {"key": f"k{i % keys:04d}", "seq": i // keys, "payload": payload}


def weigh(r: dict[str, Any]) -> dict[str, Any]:
    """A deterministic weight from the payload."""
    return {"key": r["key"], "seq": r["seq"], "weight": zlib.crc32(r["payload"].encode()) % 1000}


def fold(acc: list[int], r: dict[str, Any]) -> list[int]:
    """``[last seq, records, total weight]`` of a key."""
    return [r["seq"], acc[1] + 1, acc[2] + r["weight"]]


def update(key: str, acc: list[int]) -> dict[str, Any]:
    """The output record of one update."""
    return {"key": key, "seq": acc[0], "n": acc[1], "total": acc[2]}


def _settings() -> tuple[int, int, int]:
    return (
        int(os.environ["SPILLWAY_CHAOS_RECORDS"]),
        int(os.environ.get("SPILLWAY_CHAOS_KEYS", "100")),
        int(os.environ.get("SPILLWAY_CHAOS_SEED", "0")),
    )


def pipeline() -> Pipeline:
    """The chaos job, from the ``SPILLWAY_CHAOS_*`` environment."""
    records, keys, seed = _settings()
    p = int(os.environ.get("SPILLWAY_CHAOS_PARALLELISM", "2"))
    if keys % p:
        raise ValueError(f"SPILLWAY_CHAOS_KEYS={keys} must be a multiple of the parallelism {p}")
    rate = os.environ.get("SPILLWAY_CHAOS_RATE")
    job = Pipeline("chaos")
    gen = job.generate(
        "gen",
        make=lambda i: make_record(i, keys, seed),
        schema=RECORD,
        count=records,
        parallelism=p,
        rate=float(rate) if rate else None,
    )
    weighed = gen.map("weigh", weigh, schema=WEIGHED, parallelism=p)
    weighed.key_by(lambda r: r["key"]).aggregate(
        "fold",
        init=lambda: [-1, 0, 0],
        add=fold,
        result=update,
        schema=UPDATE,
        emit="updates",
        parallelism=p,
    ).key_by(lambda r: r["key"]).write_kafka(
        "sink", os.environ["SPILLWAY_CHAOS_OUT"], key=lambda r: r["key"]
    )
    return job


def reference(records: int, keys: int, seed: int) -> Iterator[tuple[str, int, int, int]]:
    """Every output record ``(key, seq, n, total)`` the job must commit, once each."""
    acc: dict[str, list[int]] = {}
    for i in range(records):
        w = weigh(make_record(i, keys, seed))
        a = fold(acc.get(w["key"], [-1, 0, 0]), w)
        acc[w["key"]] = a
        yield (w["key"], a[0], a[1], a[2])
