"""Kafka topics a pipeline reads or writes that are not the job's own: they must exist.

The job creates its channel, changelog and checkpoint topics itself; the topics of
``read_kafka`` and ``write_kafka`` belong to the user. A missing one is found in the
driver before any subtask starts and named with the fix — a producer writing to a topic
that does not exist would otherwise only time out at its commit, minutes later, without
naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import Any

from spillway.channels.errors import ConfigError
from spillway.recovery.job.plan import JobPlan
from spillway.spark_jobs.connectors.sinks import KafkaTopicSink
from spillway.spark_jobs.connectors.sources import KafkaTopicSource


def _topic_of(factory: Callable[[], Any] | None, kind: type) -> str | None:
    # Only the built-in Kafka source and sink name a topic; their factories are partials
    # of the class (spillway.spark_jobs.api.pipeline), and constructing them does no I/O.
    if isinstance(factory, partial) and factory.func is kind:
        topic: str = factory().topic
        return topic
    return None


def user_topics(plan: JobPlan) -> Iterator[tuple[str, str, str]]:
    """``(operator, "read_kafka" | "write_kafka", topic)`` for every user topic of ``plan``."""
    for op in plan.operators:
        source = _topic_of(op.make_source, KafkaTopicSource)
        if source is not None:
            yield op.name, "read_kafka", source
        sink = _topic_of(op.make_sink, KafkaTopicSink)
        if sink is not None:
            yield op.name, "write_kafka", sink


def check_user_topics(plan: JobPlan, existing: Mapping[str, int]) -> None:
    """:class:`ConfigError` naming every user topic of ``plan`` not in ``existing``."""
    missing = [
        f"{role} operator {op!r} uses topic {topic!r}, which does not exist (or this "
        "client may not describe it)"
        for op, role, topic in user_topics(plan)
        if topic not in existing
    ]
    if missing:
        raise ConfigError(
            f"job {plan.job}: "
            + "; ".join(missing)
            + ". Create the topic first (e.g. kafka-topics.sh --create --topic NAME "
            "--partitions N), or fix the name in the pipeline"
        )
