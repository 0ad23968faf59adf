"""Heartbeats: a running subtask says it is alive about once a second.

The event log records what a subtask did, not whether its process still exists: a
SIGKILLed subtask's last event stays ``started`` forever. So every incarnation also
appends a small heartbeat (its identity and the time) to ``spillway.<job>.heartbeats``
from a background thread, through the event log's producer and without waiting for
delivery, so the subtask's loop never waits for it. ``spillway status`` reads only the
tail of that topic and calls a subtask lost when the newest sign of life of its current
incarnation is older than a few intervals.

Why a topic of its own: readers of the event log (the subtasks' stop and trigger
signals, ``status``, ``newer_incarnation``) read it from the start; one heartbeat per
second per subtask there would grow every such read with the job's age. Heartbeats are
short-lived (an hour of retention), and only the newest few matter.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaError, Producer

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, Offset, TopicPartition
from spillway.channels.kafka.admin import TopicSpec
from spillway.channels.kafka.consumer import AssignedConsumer
from spillway.channels.naming import PREFIX

log = logging.getLogger("spillway.recovery.observe.heartbeat")

INTERVAL_S = 1.0
# A subtask is lost when its newest sign of life is older than this: a few missed
# heartbeats, so a busy machine (a GC pause, a slow broker round trip) is not "lost".
LOST_AFTER_S = 5 * INTERVAL_S
# Heartbeats status reads back, per subtask of the job: at one per second each, this
# covers the last ~100 s of a healthy job, far more than LOST_AFTER_S.
TAIL_PER_SUBTASK = 100


def heartbeats_topic(job: JobId) -> str:
    """The heartbeat topic of ``job``."""
    return f"{PREFIX}.{job}.heartbeats"


def heartbeats_topic_spec(job: JobId) -> TopicSpec:
    """One partition; an hour of retention in 10-minute segments keeps it small."""
    return TopicSpec(
        heartbeats_topic(job),
        1,
        {
            "cleanup.policy": "delete",
            "retention.ms": str(3600 * 1000),
            "segment.ms": str(600 * 1000),
        },
    )


class Heartbeat:
    """Appends ``doc()`` (plus the time) to the heartbeat topic every ``every_s`` seconds.

    Best-effort: a heartbeat that cannot be delivered is dropped. If the topic does not
    exist (a job submitted by a version without heartbeats), the first failed delivery
    stops the thread; ``status`` then reports no liveness for that job.
    """

    def __init__(
        self,
        producer: Producer,
        topic: str,
        key: bytes,
        doc: Callable[[], Mapping[str, Any]],
        every_s: float = INTERVAL_S,
    ) -> None:
        self._producer = producer
        self._topic = topic
        self._key = key
        self._doc = doc
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat {key!r}", daemon=True)

    def start(self) -> None:
        """Send the first heartbeat now and then one every interval, until :meth:`stop`."""
        self._thread.start()

    def stop(self) -> None:
        """Stop sending (returns at once if never started)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self._every_s + 1)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                value = json.dumps({**self._doc(), "time": time.time()}).encode()
                self._producer.produce(self._topic, value, self._key, on_delivery=self._delivered)
                self._producer.poll(0)  # serves delivery reports; never blocks
            except BufferError:
                pass  # the queue is full: this one is skipped, the next may get through
            except Exception:  # a heartbeat must never take the subtask down
                log.warning("heartbeat to %s failed", self._topic, exc_info=True)
            self._stop.wait(self._every_s)

    def _delivered(self, err: KafkaError | None, _msg: object) -> None:
        if err is not None and err.code() in (
            KafkaError.UNKNOWN_TOPIC_OR_PART,
            KafkaError._UNKNOWN_TOPIC,
        ):
            log.warning("no heartbeat topic %s (job submitted by an older version?)", self._topic)
            self._stop.set()


def read_heartbeats(
    settings: KafkaSettings, job: JobId, subtasks: int, timeout_s: float = 5.0
) -> list[dict[str, Any]]:
    """The newest heartbeats of ``job`` (about the last 100 s of a healthy job), oldest first."""
    tp = TopicPartition(heartbeats_topic(job), 0)
    consumer = AssignedConsumer(settings, f"spillway.{job}.heartbeats-reader")
    out: list[dict[str, Any]] = []
    try:
        low, high = consumer.watermarks(tp)
        start = max(low, high - TAIL_PER_SUBTASK * max(1, subtasks))
        if start >= high:
            return out
        consumer.assign({tp: Offset(start)})
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            out.extend(_docs(m.value() for m in consumer.consume(1000, 0.2)))
            pos = consumer.position(tp)
            if pos is not None and pos >= high:
                break
    finally:
        consumer.close()
    return out


def _docs(values: Iterable[bytes | None]) -> Iterable[dict[str, Any]]:
    for v in values:
        try:
            doc = json.loads(v or b"{}")
        except ValueError:
            continue  # not ours; heartbeats are advisory
        if isinstance(doc, dict):
            yield doc
