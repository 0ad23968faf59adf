"""The dead-letter channel: records a job cannot process, with their origin and the error.

Off by default — then a bad record stops its subtask with an error naming operator,
subtask, partition and offset, and nothing past it is committed. When enabled
(``--dead-letter``), bad records go to ``spillway.<job>.dlq`` *inside the subtask's
transaction*, so a record is dead-lettered exactly once, together with the checkpoint
that moves past it, and the job keeps going.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from channels.ids import JobId, SubtaskId, TopicPartition
from channels.kafka.admin import TopicSpec
from channels.kafka.producer import TransactionalProducer
from channels.naming import PREFIX


def dead_letter_topic(job: JobId) -> str:
    """The dead-letter topic of ``job``."""
    return f"{PREFIX}.{job}.dlq"


def dead_letter_spec(job: JobId) -> TopicSpec:
    """One partition; kept until someone has looked at it."""
    return TopicSpec(dead_letter_topic(job), 1, {"retention.ms": "-1"})


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
        tp: TopicPartition | None = None,
        offset: int | None = None,
        record: Any = None,
        raw: bytes | None = None,
        file: str | None = None,
        line: int | None = None,
    ) -> None:
        """Dead-letter one record (``record``) or one undecodable message or line (``raw``).

        The origin is a channel (``tp``, ``offset``) or a source file (``file``, ``line``).
        """
        doc = {
            "operator": self._subtask.operator,
            "index": self._subtask.index,
            "stage": stage,
            "topic": tp.topic if tp else None,
            "partition": tp.partition if tp else None,
            "offset": offset,
            "file": file,
            "line": line,
            "error": error if isinstance(error, str) else f"{type(error).__name__}: {error}",
            "record": None if record is None else json.dumps(record, default=repr),
            "raw": None if raw is None else base64.b64encode(raw).decode(),
            "time": time.time(),
        }
        self._producer.produce(self._topic, 0, self._key, json.dumps(doc).encode())
        self.count += 1
