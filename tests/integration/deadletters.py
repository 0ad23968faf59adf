"""Reading a job's dead-letter topic back in tests (read_committed, to its end)."""

from __future__ import annotations

import json
import time
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition

from spillway.channels.ids import JobId
from spillway.recovery.runtime.deadletter import dead_letter_topic


def read_dlq(bootstrap: str, job: str, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """Every committed dead letter of ``job``, in order; fails if the end is not reached."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{job}-dlq-check",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    tp = CkTopicPartition(dead_letter_topic(JobId(job)), 0, 0)
    consumer.assign([tp])
    low, end = consumer.get_watermark_offsets(tp)
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    # Before the first fetch the position is unset (a negative logical offset), which is
    # not "read up to the start": an empty topic (end == low) is done at once.
    while _position(consumer, tp, low) < end:
        assert time.monotonic() < deadline, f"dead letters of {job} not read to {end}"
        out.extend(json.loads(m.value()) for m in consumer.consume(500, 0.2) if not m.error())
    consumer.close()
    return out


def _position(consumer: Consumer, tp: CkTopicPartition, low: int) -> int:
    offset = int(consumer.position([tp])[0].offset)
    return offset if offset >= 0 else low
