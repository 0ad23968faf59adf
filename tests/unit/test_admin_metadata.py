"""Admin.ensure_topics against a cluster whose brokers' metadata lags (no broker needed)."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

from spillway.channels.config import KafkaSettings
from spillway.channels.kafka.admin import Admin, TopicSpec


class _LaggingCluster:
    """Three brokers: the one that answered CreateTopics knows the new topic at once, the
    others only later, and librdkafka asks whichever it likes."""

    def __init__(self) -> None:
        self.created: dict[str, int] = {}
        self.calls = 0

    def list_topics(self, timeout: float = 0.0) -> Any:
        self.calls += 1
        # Every other metadata request reaches a broker that has not caught up.
        known = self.created if self.calls % 2 == 0 else {}
        topics = {
            name: SimpleNamespace(
                error=None, partitions={i: SimpleNamespace(leader=1) for i in range(n)}
            )
            for name, n in known.items()
        }
        return SimpleNamespace(topics=topics)

    def create_topics(self, topics: list[Any], request_timeout: float = 0.0) -> dict[str, Any]:
        futures = {}
        for t in topics:
            self.created[t.topic] = t.num_partitions
            done: Future[None] = Future()
            done.set_result(None)
            futures[t.topic] = done
        return futures


def test_new_topics_are_checked_with_the_metadata_that_showed_their_leaders() -> None:
    admin = Admin(KafkaSettings("127.0.0.1:1"))
    cluster = _LaggingCluster()
    admin._client = cluster  # type: ignore[assignment]
    admin.ensure_topics([TopicSpec("spillway.j.checkpoints", 1), TopicSpec("spillway.j.ch", 2)])
    assert cluster.created == {"spillway.j.checkpoints": 1, "spillway.j.ch": 2}
