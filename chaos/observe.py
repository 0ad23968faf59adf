"""Reading what a chaos run left in Kafka: output (both isolation levels), open
transactions (last stable offset vs high watermark) and the job's events."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

from confluent_kafka import IsolationLevel, Message
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    OffsetSpec,
)

from chaos.check import Row
from spillway.channels.config import KafkaSettings
from spillway.channels.errors import SpillwayError
from spillway.channels.ids import JobId, Offset, TopicPartition
from spillway.channels.kafka.consumer import AssignedConsumer
from spillway.channels.kafka.retry import retrying
from spillway.channels.naming import job_topic_prefix
from spillway.recovery.job.loader import load_plan
from spillway.recovery.job.plan import JobPlan
from spillway.recovery.observe.events import read_events
from spillway.recovery.restore.ownership import owned_partitions


@retrying(attempts=8)  # the broker faults make leaders and epochs move under the checker
def end_offsets(
    settings: KafkaSettings, topics: list[str], isolation: IsolationLevel
) -> dict[TopicPartition, int]:
    """Per partition of ``topics``: the LSO (read_committed) or high watermark (uncommitted)."""
    admin = AdminClient(settings.base())
    meta = admin.list_topics(timeout=30).topics
    req = {
        CkTopicPartition(t, p): OffsetSpec.latest()  # type: ignore[no-untyped-call]
        for t in topics
        for p in meta[t].partitions
    }
    futs = admin.list_offsets(req, isolation_level=isolation, request_timeout=30)
    return {TopicPartition(k.topic, k.partition): int(f.result().offset) for k, f in futs.items()}


def job_topics(settings: KafkaSettings, job: JobId, extra: list[str]) -> list[str]:
    """Every topic of ``job`` (channels, changelogs, checkpoints, events) plus ``extra``."""
    prefix = job_topic_prefix(job)
    names = AdminClient(settings.base()).list_topics(timeout=30).topics
    return sorted([t for t in names if t.startswith(prefix)] + extra)


def open_transactions(settings: KafkaSettings, topics: list[str]) -> list[str]:
    """Partitions whose last stable offset is behind the high watermark: a transaction is
    still open there (read_committed readers cannot pass it). Empty when none is."""
    lso = end_offsets(settings, topics, IsolationLevel.READ_COMMITTED)
    hw = end_offsets(settings, topics, IsolationLevel.READ_UNCOMMITTED)
    return [
        f"{tp}: LSO {lso[tp]} < high watermark {hw[tp]}"
        for tp in sorted(hw, key=str)
        if lso[tp] != hw[tp]
    ]


def read_output(settings: KafkaSettings, topic: str, committed: bool = True) -> list[Row]:
    """Every record of the output topic, partition by partition in offset order."""
    rows: dict[int, list[Row]] = {}
    for m in scan(settings, [topic], committed):
        r = json.loads(m.value() or b"{}")
        rows.setdefault(m.partition() or 0, []).append((r["key"], r["seq"], r["n"], r["total"]))
    return [r for p in sorted(rows) for r in rows[p]]


def count_messages(settings: KafkaSettings, topics: list[str], committed: bool) -> int:
    """Messages of ``topics`` a consumer sees at that isolation level (markers excluded)."""
    return sum(1 for _ in scan(settings, topics, committed))


def scan(
    settings: KafkaSettings, topics: list[str], committed: bool, timeout_s: float = 120.0
) -> Iterator[Message]:
    """Every message of ``topics`` from the start to the end offset at that isolation level."""
    iso = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    ends = {tp: end for tp, end in end_offsets(settings, topics, iso).items() if end > 0}
    level = "read_committed" if committed else "read_uncommitted"
    consumer = AssignedConsumer(settings, f"chaos-check-{level}", extra={"isolation.level": level})
    try:
        consumer.assign({tp: Offset(0) for tp in ends})
        deadline = time.monotonic() + timeout_s
        while any((consumer.position(tp) or 0) < end for tp, end in ends.items()):
            if time.monotonic() > deadline:
                raise SpillwayError(f"could not read {topics} to their end in {timeout_s:.0f}s")
            yield from consumer.consume(5000, 0.2)
    finally:
        consumer.close()


def events(settings: KafkaSettings, job: JobId) -> list[dict[str, Any]]:
    """Every event of the job so far."""
    return list(read_events(settings, job, timeout_s=30))


def input_partitions(plan: JobPlan) -> dict[str, set[str]]:
    """Per subtask ``op[i]``, its own input partitions as ``topic[partition]``."""
    return {
        f"{s.operator}[{s.index}]": {
            str(tp)
            for e in plan.inputs_of(s.operator)
            for tp in owned_partitions(plan, s).topic_partitions(plan.topic_of(e))
        }
        for s in plan.subtasks()
    }


def plan_in(ref: str, env: dict[str, str], job: str) -> JobPlan:
    """The plan of pipeline ``ref`` for ``job``, built with the ``SPILLWAY_CHAOS_*``
    settings of ``env`` (the run's)."""
    saved = dict(os.environ)
    os.environ.update({k: v for k, v in env.items() if k.startswith("SPILLWAY_CHAOS_")})
    try:
        return load_plan(ref, job)
    finally:
        os.environ.clear()
        os.environ.update(saved)
