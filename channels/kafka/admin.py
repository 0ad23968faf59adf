"""Creating, checking and deleting a job's topics."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import IsolationLevel, KafkaError, KafkaException
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # not re-exported in stubs
    AdminClient,
    ConfigResource,
    NewTopic,
    OffsetSpec,
)

from channels.config import KafkaSettings
from channels.errors import BrokerUnavailableError, TopologyMismatchError
from channels.ids import JobId, TopicPartition
from channels.kafka.retry import retrying
from channels.naming import job_topic_prefix

log = logging.getLogger("spillway.admin")


@dataclass(frozen=True)
class TopicSpec:
    """A topic a job needs: its name, partition count and topic-level configs."""

    name: str
    partitions: int
    config: Mapping[str, str] = field(default_factory=dict)


class Admin:
    """Topic administration for one cluster. Construction does no network I/O."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self._client = AdminClient(settings.base())

    def check_reachable(self, timeout_s: float = 10.0) -> None:
        """Raise :class:`BrokerUnavailableError` unless a metadata request answers in time."""
        try:
            self._client.list_topics(timeout=timeout_s)
        except KafkaException as e:
            raise BrokerUnavailableError(
                f"no Kafka broker answered at {self.settings.bootstrap_servers} within "
                f"{timeout_s:.0f}s ({e}); start one with `spillway broker start` or pass the "
                "right --bootstrap"
            ) from e

    def partition_counts(self) -> dict[str, int]:
        """Every topic's partition count."""
        md = self._client.list_topics(timeout=self.settings.request_timeout_s)
        return {name: len(t.partitions) for name, t in md.topics.items()}

    def ensure_topics(self, specs: Iterable[TopicSpec]) -> None:
        """Create missing topics; verify existing ones. Idempotent.

        An existing topic with another partition count raises :class:`TopologyMismatchError`
        naming it: repartitioning silently would send keys to the wrong subtasks.
        """
        specs = list(specs)
        self.check_reachable()
        existing = self.partition_counts()
        missing = [s for s in specs if s.name not in existing]
        if missing:
            rf = self.settings.replication_factor
            futures = self._client.create_topics(
                [
                    NewTopic(
                        s.name,
                        num_partitions=s.partitions,
                        replication_factor=rf,
                        config={
                            "min.insync.replicas": str(self.settings.min_insync_replicas),
                            **s.config,
                        },
                    )
                    for s in missing
                ],
                request_timeout=self.settings.request_timeout_s,
            )
            for name, fut in futures.items():
                try:
                    fut.result()
                    log.info("created topic %s", name)
                except KafkaException as e:
                    if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                        raise
            self._wait_for_leaders([s.name for s in missing])
            existing = self.partition_counts()
        for s in specs:
            actual = existing.get(s.name)
            if actual != s.partitions:
                raise TopologyMismatchError(
                    f"topic {s.name} has {actual} partitions but this job needs {s.partitions}: "
                    "it was created for another parallelism. Use a new job id, or delete the "
                    "job's topics (`spillway delete --job ...`) to start over"
                )

    def _wait_for_leaders(self, names: list[str], timeout_s: float = 30.0) -> None:
        # CreateTopics returns before every partition has a leader; reads right after it
        # fail with NOT_LEADER. Wait here, once, instead of retrying everywhere else.
        deadline = time.monotonic() + timeout_s
        while True:
            md = self._client.list_topics(timeout=self.settings.request_timeout_s)
            pending = [
                n
                for n in names
                if n not in md.topics
                or md.topics[n].error is not None
                or not md.topics[n].partitions
                or any(p.leader < 0 for p in md.topics[n].partitions.values())
            ]
            if not pending:
                return
            if time.monotonic() > deadline:
                raise BrokerUnavailableError(
                    f"topics {pending} have no partition leader {timeout_s:.0f}s after creation"
                )
            time.sleep(0.1)

    def delete_job_topics(self, job: JobId) -> list[str]:
        """Delete every topic of ``job``; return their names."""
        prefix = job_topic_prefix(job)
        names = sorted(n for n in self.partition_counts() if n.startswith(prefix))
        if names:
            for fut in self._client.delete_topics(names, request_timeout=30).values():
                fut.result()
        return names

    @retrying()
    def watermarks(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, tuple[int, int]]:
        """(low, high) per partition; high is the last stable offset (read_committed view)."""
        parts = list(partitions)
        if not parts:
            return {}

        def fetch(spec: OffsetSpec) -> dict[TopicPartition, int]:
            req = {CkTopicPartition(tp.topic, tp.partition): spec for tp in parts}
            futs = self._client.list_offsets(
                req, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=30
            )
            return {
                TopicPartition(k.topic, k.partition): int(f.result().offset)
                for k, f in futs.items()
            }

        low = fetch(OffsetSpec.earliest())  # type: ignore[no-untyped-call]
        high = fetch(OffsetSpec.latest())  # type: ignore[no-untyped-call]
        return {tp: (low[tp], high[tp]) for tp in parts}

    @retrying()
    def topic_config(self, topic: str) -> dict[str, str]:
        """The effective configuration of ``topic`` (name -> value)."""
        res = ConfigResource("topic", topic)
        fut = self._client.describe_configs([res], request_timeout=30)[res]
        return {name: str(entry.value) for name, entry in fut.result().items()}

    def delete_records_before(self, before: Mapping[TopicPartition, int]) -> None:
        """Delete records below the given offsets (used to keep only the last N checkpoints)."""
        if not before:
            return
        futs = self._client.delete_records(
            [CkTopicPartition(tp.topic, tp.partition, off) for tp, off in before.items()],
            request_timeout=30,
        )
        for f in futs.values():
            f.result()
