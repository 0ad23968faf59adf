"""The dead-letter channel: records a job cannot process, with their origin and the error.

Off by default — then a bad record stops the job with an error naming operator,
subtask and the record's origin (partition and offset, or file and line), and nothing
past it is committed. When enabled (``--dead-letter``), bad records go to
``spillway.<job>.dlq`` *inside the subtask's transaction*, so a record is dead-lettered
exactly once, together with the checkpoint that moves past it, and the job keeps going.

A dead letter must never be what fails a job, so its size is bounded on both ends: the
topic accepts messages of up to :data:`MAX_MESSAGE_BYTES` (8 MiB, above the broker's
1 MB default, so a record too big for a channel still fits whole), the subtask's
producer is configured to send them (:data:`PRODUCER_CONFIG`), and a dead letter that
would still be bigger keeps only the first :data:`TRUNCATED_BYTES` of its record or raw
value, marked ``"truncated": true`` beside the full ``size``.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import ProducerFencedError, SpillwayError, TransactionAbortedError
from spillway.channels.ids import JobId, SubtaskId, TopicPartition
from spillway.channels.kafka.admin import TopicSpec
from spillway.channels.kafka.consumer import read_partition
from spillway.channels.kafka.producer import TransactionalProducer
from spillway.channels.naming import PREFIX
from spillway.recovery.job.origins import FileLine, Origin, TopicOffset

MAX_MESSAGE_BYTES = 8 * 1024 * 1024  # the dead-letter topic's max.message.bytes
# librdkafka checks message.max.bytes against a message's size before it sends it.
PRODUCER_CONFIG = {"message.max.bytes": MAX_MESSAGE_BYTES}
# A dead letter's JSON stays below this: room for the record batch's framing, key, headers.
DOC_LIMIT = MAX_MESSAGE_BYTES - 64 * 1024
TRUNCATED_BYTES = 64 * 1024  # what a truncated dead letter keeps of the record or value
_ERROR_CHARS = 4096  # an error message may quote the record; it is in "record" already


def dead_letter_topic(job: JobId) -> str:
    """The dead-letter topic of ``job``."""
    return f"{PREFIX}.{job}.dlq"


def dead_letter_counts(
    settings: KafkaSettings, job: JobId, timeout_s: float = 10.0
) -> dict[str, int]:
    """How many dead letters ``job`` has committed since it began, per stage (``decode``,
    ``late``, an operator's call, ...); empty if it has none or no dead-letter topic.

    Read from the topic, committed only, so what an aborted transaction wrote is not
    counted and a restart's re-processing never counts a record twice."""
    counts: dict[str, int] = {}
    tp = TopicPartition(dead_letter_topic(job), 0)
    for m in read_partition(settings, tp, f"{PREFIX}.{job}.dlq-reader", timeout_s):
        stage = str(json.loads(m.value() or b"{}").get("stage", "unknown"))
        counts[stage] = counts.get(stage, 0) + 1
    return counts


def dead_letter_spec(job: JobId) -> TopicSpec:
    """One partition; kept until someone has looked at it; messages up to 8 MiB."""
    return TopicSpec(
        dead_letter_topic(job),
        1,
        {"retention.ms": "-1", "max.message.bytes": str(MAX_MESSAGE_BYTES)},
    )


def dead_letter_doc(
    subtask: SubtaskId,
    *,
    stage: str,
    error: BaseException | str,
    origin: Origin | None,
    record: Any = None,
    raw: bytes | None = None,
    limit: int = DOC_LIMIT,
) -> bytes:
    """The JSON of one dead letter, at most ``limit`` bytes (truncated if need be).

    ``record`` (as JSON text) or ``raw`` (base64) is what failed; ``size`` is its full
    size in bytes. The origin is in ``topic``/``partition``/``offset`` or
    ``file``/``line``, and as text in ``origin``.
    """
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    payload = None if record is None else json.dumps(record, default=repr)
    size = len(raw) if raw is not None else len(payload.encode()) if payload is not None else 0
    doc = {
        "operator": subtask.operator,
        "index": subtask.index,
        "stage": stage,
        "origin": None if origin is None else str(origin),
        "topic": origin.topic if isinstance(origin, TopicOffset) else None,
        "partition": origin.partition if isinstance(origin, TopicOffset) else None,
        "offset": origin.offset if isinstance(origin, TopicOffset) else None,
        "file": origin.file if isinstance(origin, FileLine) else None,
        "line": origin.line if isinstance(origin, FileLine) else None,
        "error": text[:_ERROR_CHARS],
        "record": payload,
        "raw": None if raw is None else base64.b64encode(raw).decode(),
        "size": size,
        "truncated": False,
        "time": time.time(),
    }
    encoded = json.dumps(doc).encode()
    if len(encoded) <= limit:
        return encoded
    # Too big for the topic: keep the head, clearly marked, rather than fail the job.
    keep = min(TRUNCATED_BYTES, limit // 4)
    doc["truncated"] = True
    if raw is not None:
        doc["raw"] = base64.b64encode(raw[:keep]).decode()
    if payload is not None:
        doc["record"] = payload[:keep]
    return json.dumps(doc).encode()


class DeadLetters:
    """Writes dead letters of one subtask into its open transaction."""

    def __init__(self, producer: TransactionalProducer, subtask: SubtaskId) -> None:
        self._producer = producer
        self._subtask = subtask
        self._topic = dead_letter_topic(subtask.job)
        self._key = str(subtask).encode()
        self.count = 0

    def send(
        self,
        *,
        stage: str,
        error: BaseException | str,
        origin: Origin | None,
        record: Any = None,
        raw: bytes | None = None,
    ) -> None:
        """Dead-letter one record (``record``) or one undecodable message or line (``raw``).

        ``origin``: where it was read (``None`` if unknown). A write that fails raises an
        error naming the dead-letter topic and the origin.
        """
        doc = dead_letter_doc(
            self._subtask, stage=stage, error=error, origin=origin, record=record, raw=raw
        )
        where = None if origin is None else str(origin)  # named if the delivery fails
        try:
            self._producer.produce(self._topic, 0, self._key, doc, origin=where)
        except (ProducerFencedError, TransactionAbortedError):
            raise  # the subtask's own fate, not this record's
        except SpillwayError as e:
            raise SpillwayError(
                f"{self._subtask}: cannot write the dead letter of the record at "
                f"{origin or 'an unknown origin'} ({stage}) to {self._topic}: {e}",
                subtasks=[self._subtask],
            ) from e
        self.count += 1
