"""Creating, checking and deleting a job's topics."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import IsolationLevel, KafkaError, KafkaException
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # not re-exported in stubs
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import (
    AuthenticationError,
    AuthorizationError,
    BrokerUnavailableError,
    TopologyMismatchError,
)
from spillway.channels.ids import JobId, TopicPartition
from spillway.channels.kafka.retry import retrying
from spillway.channels.naming import job_topic_prefix

log = logging.getLogger("spillway.admin")

# librdkafka reports rejected credentials only through the error callback and keeps
# reconnecting; a metadata request then just times out as "transport failure".
_CREDENTIAL_ERRORS = frozenset({KafkaError._AUTHENTICATION, KafkaError._SSL})
_DENIED = frozenset(
    {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED}
)


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
        self._credential_errors: list[KafkaError] = []
        config: dict[str, Any] = {**settings.base(), "error_cb": self._on_error}
        self._client = AdminClient(config)

    def _on_error(self, error: KafkaError) -> None:
        if error.code() in _CREDENTIAL_ERRORS:
            self._credential_errors.append(error)

    def check_reachable(self, timeout_s: float = 10.0) -> None:
        """Raise unless a metadata request answers within ``timeout_s``.

        :class:`AuthenticationError` as soon as the broker rejects the credentials (SASL
        or TLS), without waiting out the timeout; :class:`BrokerUnavailableError` if no
        broker answers in time.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self._client.list_topics(timeout=min(0.5, max(0.01, deadline - time.monotonic())))
                return
            except KafkaException as e:
                self._client.poll(0)  # serves the error callback
                if self._credential_errors:
                    raise AuthenticationError(
                        f"the Kafka broker at {self.settings.bootstrap_servers} rejected this "
                        f"client's credentials ({self._credential_errors[0].str()}); check "
                        "security.protocol, sasl.mechanism, sasl.username and sasl.password "
                        "(or the ssl.* settings) given with --kafka-config / --kafka-config-file"
                    ) from None
                if time.monotonic() >= deadline:
                    raise BrokerUnavailableError(
                        f"no Kafka broker answered at {self.settings.bootstrap_servers} within "
                        f"{timeout_s:.0f}s ({e}); start one with `spillway broker start` or pass "
                        "the right --bootstrap"
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
            self._create(
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
            )
            # The counts the leaders were seen with: another metadata request may be
            # answered by a broker that has not heard of the new topics yet (seen with
            # three brokers in make compose-test: "has None partitions").
            existing.update(self._wait_for_leaders([s.name for s in missing]))
        for s in specs:
            actual = existing.get(s.name)
            if actual != s.partitions:
                raise TopologyMismatchError(
                    f"topic {s.name} has {actual} partitions but this job needs {s.partitions}: "
                    "it was created for another parallelism. Use a new job id, or delete the "
                    "job's topics (`spillway reset --job ...`) to start over"
                )

    def create_topics(
        self, specs: Iterable[TopicSpec], replication_factor: int | None = None
    ) -> dict[str, int]:
        """Create ``specs``, topics not there yet, with exactly their own configs; return their
        partition counts once every partition has a leader.

        For topics that are not a job's: unlike :meth:`ensure_topics`, no
        ``min.insync.replicas`` is imposed, and ``replication_factor`` ``None`` takes the
        broker's default. A topic another client created meanwhile is no error; its count is
        returned as found, for the caller to check.
        """
        specs = list(specs)
        if not specs:
            return {}
        self._create(
            NewTopic(
                s.name,
                num_partitions=s.partitions,
                replication_factor=-1 if replication_factor is None else replication_factor,
                config=dict(s.config),
            )
            for s in specs
        )
        return self._wait_for_leaders([s.name for s in specs])

    def _create(self, topics: Iterable[NewTopic]) -> None:
        """Create ``topics``; one that already exists is no error."""
        futures = self._client.create_topics(
            list(topics), request_timeout=self.settings.request_timeout_s
        )
        for name, fut in futures.items():
            try:
                fut.result()
                log.info("created topic %s", name)
            except KafkaException as e:
                code = e.args[0].code()
                if code in _DENIED:
                    raise AuthorizationError(
                        f"the broker at {self.settings.bootstrap_servers} does not allow this "
                        f"client to create topic {name} ({e.args[0].str()}); grant the job's "
                        "principal the ACLs in docs/security.md (`spillway acls --job ...` "
                        "prints them)"
                    ) from None
                if code != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise

    def _wait_for_leaders(self, names: list[str], timeout_s: float = 30.0) -> dict[str, int]:
        """Wait until every partition of ``names`` has a leader; return their partition counts."""
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
                return {n: len(md.topics[n].partitions) for n in names}
            if time.monotonic() > deadline:
                raise BrokerUnavailableError(
                    f"topics {pending} have no partition leader {timeout_s:.0f}s after creation"
                )
            time.sleep(0.1)

    def grow_partitions(self, counts: Mapping[str, int]) -> None:
        """Add partitions so that each topic of ``counts`` has at least that many (a rescale
        adds them for new subtasks; Kafka never moves records between partitions)."""
        existing = self.partition_counts()
        grow = {t: n for t, n in counts.items() if t in existing and existing[t] < n}
        if not grow:
            return
        futs = self._client.create_partitions(
            [NewPartitions(t, n) for t, n in sorted(grow.items())],
            request_timeout=self.settings.request_timeout_s,
        )
        for fut in futs.values():
            fut.result()
        deadline = time.monotonic() + 30.0
        while any(c < grow[t] for t, c in self._wait_for_leaders(sorted(grow)).items()):
            if time.monotonic() > deadline:  # metadata lags the change for a moment
                raise BrokerUnavailableError(f"topics {sorted(grow)} did not grow within 30 s")
            time.sleep(0.1)
        log.info("added partitions: %s", grow)

    def delete_job_topics(self, job: JobId) -> list[str]:
        """Delete every topic of ``job``; return their names."""
        prefix = job_topic_prefix(job)
        names = sorted(n for n in self.partition_counts() if n.startswith(prefix))
        self.delete_topics(names)
        return names

    def delete_topics(self, names: Iterable[str], timeout_s: float = 30.0) -> None:
        """Delete ``names`` and wait until the cluster's metadata no longer lists them (so a
        listing right after does not show them). A topic already gone is no error."""
        names = sorted(names)
        if not names:
            return
        futures = self._client.delete_topics(names, request_timeout=timeout_s)
        for fut in futures.values():
            try:
                fut.result()
            except KafkaException as e:
                if e.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise
        deadline = time.monotonic() + timeout_s
        while left := sorted(set(names) & set(self.partition_counts())):
            if time.monotonic() > deadline:
                raise BrokerUnavailableError(
                    f"topics {left} still listed {timeout_s:.0f}s after their deletion"
                )
            time.sleep(0.1)

    def consumer_groups(self) -> list[str]:
        """The id of every consumer group the cluster stores, sorted."""
        found = self._client.list_consumer_groups(
            request_timeout=self.settings.request_timeout_s
        ).result()
        return sorted(g.group_id for g in found.valid)

    def delete_consumer_groups(self, groups: Iterable[str]) -> None:
        """Delete ``groups`` (their committed offsets); one already gone is no error. A group
        with active members cannot be deleted: the broker's error is raised."""
        groups = sorted(groups)
        if not groups:
            return
        futures = self._client.delete_consumer_groups(
            groups, request_timeout=self.settings.request_timeout_s
        )
        for fut in futures.values():
            try:
                fut.result()
            except KafkaException as e:
                if e.args[0].code() != KafkaError.GROUP_ID_NOT_FOUND:
                    raise

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

    def raise_topic_config(self, topic: str, key: str, at_least: int) -> None:
        """Set the integer config ``key`` of ``topic`` to ``at_least`` if it is lower
        (for topics created before a job needed more, e.g. a bigger max.message.bytes)."""
        current = self.topic_config(topic).get(key)
        if current is not None and int(current) >= at_least:
            return
        entry = ConfigEntry(key, str(at_least), incremental_operation=AlterConfigOpType.SET)
        res = ConfigResource("topic", topic, incremental_configs=[entry])
        self._client.incremental_alter_configs([res])[res].result()
        log.info("set %s=%d on topic %s (was %s)", key, at_least, topic, current)

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
