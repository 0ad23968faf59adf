"""What the fault run reads from Kafka: the job's events, checkpoints and partition state.

Runs inside the engine's network namespace, where the brokers' EXTERNAL listeners are
published on 127.0.0.1:9092, :9192 and :9292.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from confluent_kafka.admin import AdminClient

from composetest.checks import CLICKS_UPSTREAM
from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, OperatorName
from spillway.offsets.store import CheckpointStore
from spillway.recovery.observe.events import events_topic, read_events

log = logging.getLogger(__name__)

EXTERNAL_BOOTSTRAP = "127.0.0.1:9092,127.0.0.1:9192,127.0.0.1:9292"
# librdkafka logs every refused connection to the killed broker at level 3 (error); what
# the run concludes is printed by the run itself.
_CLIENT = {"log_level": 2}
# Internal topics whose replicas must come back too when a broker rejoins.
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")


@dataclass(frozen=True)
class PartitionState:
    """Leader and in-sync replicas of one partition (broker node ids)."""

    topic: str
    partition: int
    leader: int
    isr: tuple[int, ...]


def settings() -> KafkaSettings:
    """Client settings for the deployment's brokers, as seen from the namespace."""
    return KafkaSettings(EXTERNAL_BOOTSTRAP, client=_CLIENT)


def events(job: str) -> list[dict[str, Any]]:
    """Every event of ``job`` so far ([] before the driver created the topic)."""
    if events_topic(JobId(job)) not in _admin().list_topics(timeout=10).topics:
        return []
    return list(read_events(settings(), JobId(job)))


def _admin() -> AdminClient:
    return AdminClient({"bootstrap.servers": EXTERNAL_BOOTSTRAP, **_CLIENT})


@contextlib.contextmanager
def checkpoint_stores(job: str, parallelism: int) -> Iterator[dict[str, CheckpointStore]]:
    """One checkpoint store per operator of the example job, closed at the end."""
    stores = {
        op: CheckpointStore(settings(), JobId(job), OperatorName(op), parallelism)
        for op in CLICKS_UPSTREAM
    }
    try:
        yield stores
    finally:
        for store in stores.values():
            store.close()


def latest_checkpoints(job: str, parallelism: int) -> dict[str, tuple[int, float] | None]:
    """``op[i]`` -> (id, wall time) of its latest committed checkpoint, or None.

    Fresh clients on every call: a client that lived through a broker's death can keep
    failing on the handle of that broker.
    """
    found: dict[str, tuple[int, float] | None] = {}
    with checkpoint_stores(job, parallelism) as stores:
        for op, store in stores.items():
            for i in range(store.parallelism):
                ckpt = store.latest(i)
                found[f"{op}[{i}]"] = (
                    None if ckpt is None else (int(ckpt.checkpoint_id), ckpt.meta.wall_time)
                )
    return found


def brokers() -> set[int]:
    """Node ids of the brokers the cluster metadata lists (the live ones)."""
    metadata = _admin().list_topics(timeout=10)
    return set(metadata.brokers)


def partitions(job: str) -> list[PartitionState]:
    """Leader and ISR of every partition of the job's topics and of the internal topics."""
    metadata = _admin().list_topics(timeout=10)
    found = []
    for name, topic in metadata.topics.items():
        if not (name.startswith(f"spillway.{job}.") or name in INTERNAL_TOPICS):
            continue
        for p in topic.partitions.values():
            found.append(PartitionState(name, p.id, p.leader, tuple(sorted(p.isrs))))
    return sorted(found, key=lambda s: (s.topic, s.partition))
