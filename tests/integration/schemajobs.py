"""The pipelines of test_schema_evolution.py: generate → key_by → count → files, in three
versions that differ in the schema of channel events -> count.

* :func:`v1`: events are ``{seq: int, key: string}``; count adds 1 per event as weight.
* :func:`v2`: ``seq`` promoted to long and a field ``weight: int`` with default 1 added;
  the generator writes weight 2, count adds the event's weight. Records v1 left unread in
  the channel must come out of it with weight 1 (the default).
* :func:`broken`: ``weight`` added without a default: refused before anything starts.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from spillway.channels.config import KafkaSettings
from spillway.channels.wire.envelope import Decoders, Kind, read_header, writer_of
from spillway.channels.wire.schemaid import schema_id, schema_id_of
from spillway.spark_jobs.api.pipeline import Pipeline
from tests.integration.gates import held_generate

KEYS = 37
GROUPS = 8  # key groups: partitions of channel events -> count


def _event(seq: str, *extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "record",
        "name": "Event",
        "fields": [{"name": "seq", "type": seq}, {"name": "key", "type": "string"}, *extra],
    }


V1 = _event("int")
V2 = _event("long", {"name": "weight", "type": "int", "default": 1})
BROKEN = _event("long", {"name": "weight", "type": "int"})
TOTAL = {
    "type": "record",
    "name": "KeyTotal",
    "fields": [
        {"name": "key", "type": "string"},
        {"name": "n", "type": "long"},
        {"name": "seqs", "type": "long"},
        {"name": "weights", "type": "long"},
    ],
}


def key_of(seq: int) -> str:
    """The key of event ``seq``."""
    return f"k{seq % KEYS}"


def _job(schema: dict[str, Any], weight: int | None, add: Callable[[Any, Any], Any]) -> Pipeline:
    def make(i: int) -> dict[str, Any]:
        r: dict[str, Any] = {"seq": i, "key": key_of(i)}
        if weight is not None:
            r["weight"] = weight
        return r

    p = Pipeline("schema-evolution")
    events = held_generate(  # held at the test's gates (tests/integration/gates.py)
        p,
        "events",
        make=make,
        schema=schema,
        count=int(os.environ["SPILLWAY_TEST_RECORDS"]),
        parallelism=2,
    )
    events.key_by(lambda r: r["key"], max_parallelism=GROUPS).aggregate(
        "count",
        init=lambda: [0, 0, 0],
        add=add,
        result=lambda k, acc: {"key": k, "n": acc[0], "seqs": acc[1], "weights": acc[2]},
        schema=TOTAL,
        parallelism=2,
    ).write_jsonl("out", os.environ["SPILLWAY_TEST_OUT"], parallelism=1)
    return p


def v1() -> Pipeline:
    """Events without weight (each counts 1)."""
    return _job(V1, None, lambda acc, r: [acc[0] + 1, acc[1] + r["seq"], acc[2] + 1])


def v2() -> Pipeline:
    """Events with weight 2 (an old event without one reads as weight 1)."""
    return _job(V2, 2, lambda acc, r: [acc[0] + 1, acc[1] + r["seq"], acc[2] + r["weight"]])


def broken() -> Pipeline:
    """Weight added without a default: old events cannot be read."""
    return _job(BROKEN, 2, lambda acc, r: [acc[0] + 1, acc[1] + r["seq"], acc[2] + r["weight"]])


def reference(records: int, v1_seqs: Iterable[int]) -> dict[str, tuple[int, int, int]]:
    """Per key, (count, sum of seq, sum of weight): weight 1 for the events v1 wrote, else 2."""
    old = set(v1_seqs)
    out: dict[str, tuple[int, int, int]] = {}
    for i in range(records):
        n, s, w = out.get(key_of(i), (0, 0, 0))
        out[key_of(i)] = (n + 1, s + i, w + (1 if i in old else 2))
    return out


Event = tuple[int, int, int, bytes | None, dict[str, Any]]


def channel_events(
    settings: KafkaSettings, topic: str, starts: Mapping[int, int] | None = None
) -> list[Event]:
    """Every committed event of channel ``topic`` (from offset ``starts[p]`` of partition p,
    else its start) as (partition, offset, writer index, writer schema id, event as V2
    reads it)."""
    consumer = Consumer({
        **settings.base(), "group.id": "schema-evolution-test", "enable.auto.commit": False,
        "isolation.level": "read_committed",
    })  # fmt: skip
    decoders = Decoders(V2, [V1])
    out: list[Event] = []
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
                for p in range(GROUPS)}  # fmt: skip
        begin = {p: (starts or {}).get(p, 0) for p in range(GROUPS)}
        consumer.assign([TopicPartition(topic, p, begin[p]) for p in range(GROUPS)])
        position = dict(begin)
        idle = 0
        # A transaction's commit marker may end a partition: never returned, so an idle
        # second also ends the reading (the job is stopped: nothing is still to come).
        while any(position[p] < ends[p] for p in range(GROUPS)) and idle < 2:
            msgs = consumer.consume(500, 0.5)
            idle = 0 if msgs else idle + 1
            for m in msgs:
                p, off = m.partition() or 0, m.offset() or 0
                position[p] = off + 1
                kind, version = read_header(m.headers())
                if kind is Kind.DATA:
                    sid = schema_id_of(m.headers())
                    for r in decoders.decode(version, m.value() or b"", sid):
                        out.append((p, off, writer_of(m.key()), sid, r))
    finally:
        consumer.close()
    return out


V1_ID = schema_id(V1)
