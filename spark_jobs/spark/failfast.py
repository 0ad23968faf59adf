"""Stopping a job at its first deterministic failure instead of retrying it.

A bad record (without ``--dead-letter``), a wrong setting, a missing topic: such an
error fails every attempt of the task the same way, so retrying it ``--task-attempts``
times only delays the failure and buries the reason under Spark's tracebacks. The
subtask records a ``failed`` event with ``deterministic: true`` and its one-line
``message`` (:func:`spillway.recovery.runtime.failures.failure_fields`), and its Spark task ends
*without*
an error, so Spark does not retry it. The driver watches the run's events
(:class:`FailureWatch`) and cancels the Spark jobs at the first such event; the other
subtasks are killed (their open transactions are aborted, as after any kill), and
``spillway run`` ends with that message. Transient errors still fail their task, which
Spark retries as before.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, Offset, TopicPartition
from spillway.channels.kafka.consumer import AssignedConsumer
from spillway.recovery.observe.events import events_topic

log = logging.getLogger("spillway.spark_jobs.spark.failfast")


def deterministic_failure(event: Mapping[str, Any], run_id: str) -> bool:
    """True for a ``failed`` event of run ``run_id`` that a retry would only repeat."""
    return (
        event.get("event") == "failed"
        and event.get("run") == run_id
        and event.get("deterministic") is True
    )


class FailureWatch:
    """Reads the events of one run from now on; calls ``on_failure`` once, at the first
    deterministic failure, which it keeps in :attr:`failure`."""

    def __init__(
        self,
        settings: KafkaSettings,
        job: JobId,
        run_id: str,
        on_failure: Callable[[], None],
        on_event: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        """``on_event``: also called with every event of the job (it must not block)."""
        self.run_id = run_id
        self._on_event = on_event
        self.failure: dict[str, Any] | None = None
        self._on_failure = on_failure
        self._stop = threading.Event()
        self._consumer = AssignedConsumer(settings, f"spillway.{job}.failure-watch")
        self._tp = TopicPartition(events_topic(job), 0)
        self._thread = threading.Thread(target=self._run, name="failure-watch", daemon=True)

    def start(self) -> None:
        """Start watching the events recorded from now on (earlier ones are not this run's)."""
        self._consumer.assign({self._tp: Offset(self._consumer.watermarks(self._tp)[1])})
        self._thread.start()

    def stop(self) -> None:
        """Stop watching and release the consumer."""
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()

    def message(self) -> str:
        """The one line the job stops with (after a failure was seen)."""
        assert self.failure is not None
        return str(self.failure.get("message") or self.failure.get("error"))

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for m in self._consumer.consume(100, 0.1):
                    event = json.loads(m.value() or b"{}")
                    if self._on_event is not None:
                        self._on_event(event)
                    if deterministic_failure(event, self.run_id):
                        self.failure = event
                        log.warning(
                            "%s[%s] failed with an error a retry would repeat; stopping the job",
                            event.get("operator"),
                            event.get("index"),
                        )
                        self._on_failure()
                        return
        except Exception:  # without it, the job ends only when its other subtasks do
            log.warning("watching job events for failures stopped", exc_info=True)
