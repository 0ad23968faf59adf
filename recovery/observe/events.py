"""The job's event log: subtask starts, recoveries, finishes and failures.

A one-partition topic per job, written outside transactions (an event must survive the
failure it reports). ``spillway status`` and the demo read it; so can any Kafka tool.
Heartbeats of running subtasks go to a topic of their own
(:mod:`spillway.recovery.observe.heartbeat`).
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from confluent_kafka import KafkaError, Producer

from spillway.channels.config import KafkaSettings, scrub_secrets
from spillway.channels.ids import JobId, Offset, SubtaskId, TopicPartition
from spillway.channels.kafka.admin import TopicSpec
from spillway.channels.kafka.clients import idempotent_producer, ordered_producer
from spillway.channels.kafka.consumer import AssignedConsumer, read_partition
from spillway.channels.naming import PREFIX
from spillway.recovery.observe.heartbeat import Heartbeat, heartbeats_topic


def events_topic(job: JobId) -> str:
    """The event topic of ``job``."""
    return f"{PREFIX}.{job}.events"


def events_topic_spec(job: JobId) -> TopicSpec:
    """One partition keeps events in order; a week of retention is plenty for diagnosis."""
    return TopicSpec(events_topic(job), 1, {"retention.ms": str(7 * 24 * 3600 * 1000)})


class EventLog:
    """Appends JSON events for one subtask, and heartbeats from its first event until close."""

    def __init__(
        self,
        settings: KafkaSettings,
        subtask: SubtaskId,
        attempt: int,
        run_id: str | None = None,
        extra: Callable[[], Mapping[str, Any]] = dict,
    ) -> None:
        """``extra``: more heartbeat fields (spillway.recovery.runtime.livestats), called
        from the heartbeat thread."""
        self.subtask = subtask
        self.attempt = attempt
        self.run_id = run_id
        self._topic = events_topic(subtask.job)
        # Not idempotent: an idempotent producer asks for its producer id only 500 ms after
        # it is made (librdkafka), which delayed a restart's first event ("fencing") by up
        # to that much. Ordering holds with one request in flight; a duplicate needs a
        # produce whose answer was lost, and an event seen twice only repeats a fact.
        self._producer = ordered_producer(settings)
        self._heartbeat = Heartbeat(
            self._producer, heartbeats_topic(subtask.job), str(subtask).encode(), self._beat
        )
        self._beating = False
        self._extra = extra

    def _beat(self) -> dict[str, Any]:
        try:
            extra = dict(self._extra())
        except Exception:  # a beat without figures still says the subtask is alive
            extra = {}
        return {**extra, **self._identity()}

    def _identity(self) -> dict[str, Any]:
        # Heartbeats and events of one incarnation match on these
        # (spillway.recovery.observe.status).
        return {
            "operator": self.subtask.operator,
            "index": self.subtask.index,
            "attempt": self.attempt,
            "run": self.run_id,
            "pid": os.getpid(),
            "host": socket.gethostname(),
        }

    def emit(self, kind: str, **fields: Any) -> None:
        """Append an event and wait (briefly, at most 10 s) until it is stored."""
        doc = {"event": kind, **self._identity(), "time": time.time(), **fields}
        # Scrubbed: an error message recorded here must not carry a secret to every reader.
        text = scrub_secrets(json.dumps(doc))
        done: list[KafkaError | None] = []
        self._producer.produce(
            self._topic,
            text.encode(),
            str(self.subtask).encode(),
            on_delivery=lambda err, _msg: done.append(err),
        )
        # Waits for this event only, not for heartbeats queued beside it (flush would).
        deadline = time.monotonic() + 10
        while not done and time.monotonic() < deadline:
            self._producer.poll(0.05)
        if not self._beating:
            self._beating = True
            self._heartbeat.start()

    def close(self) -> None:
        """Stop the heartbeats (queued ones are dropped: only live subtasks need them)."""
        self._heartbeat.stop()


def read_events(
    settings: KafkaSettings, job: JobId, timeout_s: float = 5.0
) -> Iterator[dict[str, Any]]:
    """Every event of ``job`` so far, oldest first."""
    tp = TopicPartition(events_topic(job), 0)
    for m in read_partition(settings, tp, f"spillway.{job}.events-reader", timeout_s):
        yield json.loads(m.value() or b"{}")


def await_event(
    settings: KafkaSettings,
    job: JobId,
    match: Callable[[dict[str, Any]], bool],
    timeout_s: float,
    poll_s: float = 0.02,
) -> dict[str, Any] | None:
    """The first event of ``job`` (from the oldest on) for which ``match`` is true,
    waiting up to ``timeout_s`` for it to be appended (None: not within that time).

    One consumer reads on from where it is, so waiting costs one short poll per
    ``poll_s``, not a read of the whole log each time.
    """
    tp = TopicPartition(events_topic(job), 0)
    consumer = AssignedConsumer(settings, f"spillway.{job}.events-waiter")
    try:
        consumer.assign({tp: Offset(0)})
        deadline = time.monotonic() + timeout_s
        while True:
            for m in consumer.consume(500, poll_s):
                e = json.loads(m.value() or b"{}")
                if match(e):
                    return dict(e)
            if time.monotonic() > deadline:
                return None
    finally:
        consumer.close()


def newer_incarnation(
    settings: KafkaSettings,
    subtask: SubtaskId,
    pid: int,
    since: float,
    wait_s: float = 5.0,
) -> bool:
    """True if another process announced itself as ``subtask`` after ``since`` (wall time).

    A fenced producer cannot tell a newer incarnation (which fenced it on purpose) from
    the broker aborting its timed-out transaction (which bumps the epoch the same way).
    A newer incarnation emits ``fencing`` right after taking over; this waits up to
    ``wait_s`` for it.
    """
    deadline = time.monotonic() + wait_s
    while True:
        if any(announces_newer(e, subtask, pid, since) for e in read_events(settings, subtask.job)):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)


def announces_newer(event: Mapping[str, Any], subtask: SubtaskId, pid: int, since: float) -> bool:
    """True if ``event`` is the ``fencing`` of an incarnation of ``subtask`` other than
    process ``pid``, after ``since``.

    Only ``fencing`` counts: other events of other processes name the subtask too
    without being a new copy of it (an older, fenced zombie's late ``failed``, for one,
    must not make the current attempt think it was replaced).
    """
    return (
        event.get("event") == "fencing"
        and event.get("operator") == subtask.operator
        and event.get("index") == subtask.index
        and event.get("pid") != pid
        and float(event.get("time", 0)) > since
    )


def record_job_event(
    settings: KafkaSettings,
    job: JobId,
    kind: str,
    *,
    producer: Producer | None = None,
    **fields: Any,
) -> None:
    """Append a job-level event (e.g. ``submitted``, with the pipeline reference).

    ``producer``: reuse one (a coordinator's triggers should not wait for a new client
    to connect and get a producer id); by default a short-lived one is made.
    """
    if producer is None:
        producer = idempotent_producer(settings)
    doc = {"event": kind, "time": time.time(), "pid": os.getpid(), **fields}
    producer.produce(events_topic(job), scrub_secrets(json.dumps(doc)).encode(), b"job")
    producer.flush(10)


def last_submission(settings: KafkaSettings, job: JobId) -> dict[str, Any] | None:
    """The newest ``submitted`` event of ``job`` (it names the pipeline), if any."""
    found = None
    for e in read_events(settings, job):
        if e.get("event") == "submitted":
            found = e
    return found


def operator_stop(event: dict[str, Any], operator: tuple[str, int] | None) -> bool:
    """True for a driver's stop request for ``operator`` = (name, generation) alone."""
    return (
        operator is not None
        and event.get("event") == "operator-stop-requested"
        and event.get("target") == operator[0]
        and event.get("generation") == operator[1]
    )


class JobSignals:
    """Watches the event log for what the driver asks of one run: stop, or checkpoint n.

    The driver appends ``stop-requested`` when it receives SIGTERM (and
    ``operator-stop-requested`` to stop one operator's subtasks), and the checkpoint
    coordinator appends ``checkpoint-trigger`` events; subtasks poll this between steps
    (one non-blocking poll, at most every ``every_s`` seconds). The poll only takes what
    the consumer already fetched (0.6 µs when nothing is new, measured), so 5 ms costs
    nothing and keeps the wait it adds to every global checkpoint small (20 ms was up to
    a third of a typical unaligned checkpoint in bench.checkpoints).
    """

    def __init__(
        self,
        settings: KafkaSettings,
        job: JobId,
        run_id: str,
        operator: tuple[str, int] | None = None,
        every_s: float = 0.005,
    ) -> None:
        self.run_id = run_id
        # (operator, generation of its Spark job): also honour the driver's stop requests
        # for that operator alone (spillway.spark_jobs.spark.opruns.stop_operator) of that
        # generation.
        self._operator = operator
        self._tp = TopicPartition(events_topic(job), 0)
        self._consumer = AssignedConsumer(settings, f"spillway.{job}.signals")
        self._consumer.assign({self._tp: Offset(0)})
        self._stop = False
        self._handover = False  # the stop is of this operator alone: a rescale or upgrade
        self._trigger = -1
        self._every_s = every_s
        self._last = 0.0
        # Wall time this subtask's poll first delivered the highest trigger (for timing).
        self._seen_at: tuple[int, float] | None = None
        # The driver's task-retried events: (operator, index, attempt) -> event.
        self._retried: dict[tuple[str, int, int], dict[str, Any]] = {}

    def _poll(self) -> None:
        now = time.monotonic()
        if now - self._last < self._every_s:
            return
        self._last = now
        for m in self._consumer.consume(500, 0):
            e = json.loads(m.value() or b"{}")
            if e.get("run") != self.run_id:
                continue
            if e.get("event") == "stop-requested":
                self._stop = True
            elif operator_stop(e, self._operator):
                self._stop = self._handover = True
            elif e.get("event") == "checkpoint-trigger" and int(e["n"]) > self._trigger:
                self._trigger = int(e["n"])
                self._seen_at = (self._trigger, time.time())
            elif e.get("event") == "task-retried" and isinstance(e.get("retried"), dict):
                r = e["retried"]
                self._retried[(str(r["operator"]), int(r["index"]), int(r["attempt"]))] = e

    def requested(self) -> bool:
        """True once the driver asked this run to stop."""
        self._poll()
        return self._stop

    def handing_over(self) -> bool:
        """True once the driver asked this operator alone to stop (a live rescale or
        upgrade, spillway.spark_jobs.spark.opruns.stop_operator): its last checkpoint hands it
        over."""
        self._poll()
        return self._handover

    def trigger(self) -> int:
        """The highest global checkpoint id triggered for this run so far (-1: none)."""
        self._poll()
        return self._trigger

    def seen_at(self, n: int) -> float | None:
        """Wall time a poll first delivered trigger ``n`` (None: not seen, or superseded)."""
        return self._seen_at[1] if self._seen_at and self._seen_at[0] == n else None

    def spark_phases(self, subtask: SubtaskId, attempt: int) -> dict[str, float] | None:
        """When Spark noticed the previous attempt of ``subtask`` failed and launched
        ``attempt`` (wall times, from the driver's ``task-retried`` event), if seen yet."""
        self._last = 0.0  # poll now: this is asked once or twice per attempt
        self._poll()
        e = self._retried.get((subtask.operator, subtask.index, attempt))
        if e is None:
            return None
        return {k: float(e[k]) for k in ("spark_noticed", "scheduled") if e.get(k) is not None}

    def close(self) -> None:
        """Release the consumer."""
        self._consumer.close()
