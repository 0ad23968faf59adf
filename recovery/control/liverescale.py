"""Live rescale of one operator of a running job: the parts outside the driver
(docs/architecture.md, Changing a running job).

``spillway rescale --job ID --operator OP --parallelism N`` appends a
``rescale-requested`` event (with a request id) to the job's events topic, the control
channel the running driver already reads (:mod:`spillway.spark_jobs.spark.liverescale` serves it),
and
waits for the driver's answer: ``rescaled`` (with the new plan and rescale record, which
``spillway status`` and the next ``spillway run`` read) or ``rescale-failed`` (with the
reason).

The downstream side: once the operator's old subtasks have stopped and been fenced and
before its new ones start, :func:`announce_width` writes one ``WIDTH`` control message
(``spillway.channels.wire.envelope.Kind.WIDTH``) to every partition of each of its output channels.
In each partition every message of a retired writer lies before it and every message of
a new writer after it, so a reader that takes the writer count from there on
(end-of-stream, watermarks, idleness) never waits for a retired writer nor misses a new one.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import ConfigError
from spillway.channels.ids import JobId
from spillway.channels.kafka.producer import TransactionalProducer
from spillway.channels.wire.envelope import Kind, encode_i64, headers, writer_key
from spillway.recovery.job.plan import JobPlan
from spillway.recovery.observe.events import read_events, record_job_event

SHAPE_EVENTS = ("submitted", "rescaled")
ANSWERS = ("rescaled", "rescale-failed", "upgraded", "upgrade-failed")


def latest_shape(events: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The newest event that fixed the job's shape (its plan and rescale record): a
    ``submitted`` event, or a ``rescaled`` one after it."""
    found = None
    for e in events:
        if e.get("event") in SHAPE_EVENTS:
            found = e
    return found


def request_rescale(settings: KafkaSettings, job: JobId, operator: str, parallelism: int) -> str:
    """Ask the running driver of ``job`` to rescale ``operator``; returns the request id.

    :class:`ConfigError` if the job was never submitted.
    """
    return _request(settings, job, "rescale-requested", operator, parallelism=parallelism)


def request_upgrade(settings: KafkaSettings, job: JobId, operator: str) -> str:
    """Ask the running driver of ``job`` to restart ``operator`` with the code now
    deployed (:mod:`spillway.recovery.control.upgrade`); returns the request id.

    :class:`ConfigError` if the job was never submitted.
    """
    return _request(settings, job, "upgrade-requested", operator)


def _request(settings: KafkaSettings, job: JobId, event: str, operator: str, **fields: Any) -> str:
    events = read_events(settings, job)
    submitted = [e for e in events if e.get("event") == "submitted"]
    if not submitted:
        raise ConfigError(f"job {job} was never submitted to {settings.bootstrap_servers}")
    request = uuid.uuid4().hex[:12]
    record_job_event(
        settings,
        job,
        event,
        run=submitted[-1]["run"],
        request=request,
        target=operator,  # not "operator": readers take events with that key for a subtask's
        **fields,
    )
    return request


def await_answer(
    settings: KafkaSettings, job: JobId, request: str, timeout_s: float
) -> Mapping[str, Any] | None:
    """The driver's answer to ``request``: ``rescaled``, ``upgraded`` or their ``-failed``
    event (None: no answer within ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        for e in read_events(settings, job):
            if e.get("request") == request and e.get("event") in ANSWERS:
                return e
        if time.monotonic() > deadline:
            return None
        time.sleep(0.5)


def announce_width(
    settings: KafkaSettings,
    plan: JobPlan,
    operator: str,
    existing: Mapping[str, int] | None = None,
) -> int:
    """Write ``operator``'s new writer count (its parallelism in ``plan``) to every
    partition of its output channels, in one transaction; returns the messages written.
    ``existing`` (topic → partition count): write only to partitions that exist there —
    a channel or partition made for this run has no reader that counted other writers.

    Call it after the operator's old subtasks are fenced and before new ones start.
    """
    op = plan.operator(operator)
    producer = TransactionalProducer(settings, f"spillway.{plan.job}.rescale")
    written = 0
    try:
        producer.start()
        producer.begin()
        for e in plan.outputs_of(op.name):
            n = plan.partitions_of(e)
            if existing is not None:
                n = min(n, existing.get(plan.topic_of(e), 0))
            for p in range(n):
                producer.produce(
                    plan.topic_of(e),
                    p,
                    writer_key(0),
                    encode_i64(op.parallelism),
                    headers(Kind.WIDTH),
                )
                written += 1
        producer.commit()
    finally:
        producer.close()
    return written
