"""Global checkpoints: numbered, consistent cuts over every subtask (unaligned mode).

A coordinator appends ``checkpoint-trigger n`` to the job's event log. Each subtask takes
checkpoint n at the first of (seeing the trigger, reading barrier n on any input), writes
barrier n to all its outputs inside that checkpoint's transaction, and reports
``checkpointed n``. In-flight data is not copied: it stays in the channels.

Why the cut is consistent: a subtask reads its inputs in offset order and checkpoints
*at* the first barrier n it reads (the reader stops there), so it has consumed nothing
that an upstream subtask wrote after that upstream's checkpoint n (such records follow
barrier n in the same partition). If the trigger comes first, everything it consumed was
committed by upstream transactions before upstream's checkpoint n, which therefore
includes it. Either way: no subtask's checkpoint n has consumed an output its upstream
had not produced at its own checkpoint n.

A global checkpoint completes when every subtask has committed it; subtasks that already
finished count with their final checkpoint (FLIP-147). Completed checkpoints are
recorded in ``spillway.<job>.checkpoints``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tenacity import retry, retry_if_exception_type, stop_after_attempt

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import RetentionGapError
from spillway.channels.ids import JobId, Offset, TopicPartition
from spillway.channels.kafka.admin import Admin, TopicSpec
from spillway.channels.kafka.clients import idempotent_producer
from spillway.channels.kafka.consumer import AssignedConsumer
from spillway.channels.naming import PREFIX
from spillway.recovery.observe.events import events_topic, record_job_event

log = logging.getLogger("spillway.recovery.control.globalckpt")


def checkpoints_topic(job: JobId) -> str:
    """Where completed global checkpoints of ``job`` are recorded."""
    return f"{PREFIX}.{job}.checkpoints"


def checkpoints_topic_spec(job: JobId) -> TopicSpec:
    """One partition, in completion order."""
    return TopicSpec(checkpoints_topic(job), 1, {"retention.ms": "-1"})


@dataclass
class GlobalProgress:
    """Pure bookkeeping of which subtasks have committed which global checkpoint."""

    subtasks: frozenset[str]
    finished: dict[str, int] = field(default_factory=dict)  # subtask -> final checkpoint id
    max_trigger: int = -1  # highest id any coordinator or savepoint triggered in this run
    done: dict[int, dict[str, tuple[int, float]]] = field(default_factory=dict)
    # n -> subtask -> (bytes the checkpoint wrote itself, channel bytes spilled before it)
    written: dict[int, dict[str, tuple[int, int]]] = field(default_factory=dict)
    # n -> subtask -> wall times of its phases (the ``timing`` of its checkpointed event)
    timing: dict[int, dict[str, dict[str, Any]]] = field(default_factory=dict)

    def observe(self, event: dict[str, Any]) -> None:
        """Feed one event of the job's log."""
        if event.get("event") == "checkpoint-trigger":
            self.max_trigger = max(self.max_trigger, int(event["n"]))
        if "operator" not in event:
            return
        sub = f"{event['operator']}[{event['index']}]"
        if event.get("event") == "checkpointed" and event.get("global") is not None:
            self.done.setdefault(int(event["global"]), {})[sub] = (
                int(event["checkpoint"]),
                float(event["time"]),
            )
            if "bytes" in event:  # absent when a restarted subtask re-announces
                self.written.setdefault(int(event["global"]), {})[sub] = (
                    int(event["bytes"]),
                    int(event.get("spilled_bytes", 0)),
                )
            if "timing" in event:  # absent in re-announcements and older subtasks' events
                self.timing.setdefault(int(event["global"]), {})[sub] = {
                    **event["timing"],
                    "reported": float(event["time"]),
                }
        elif event.get("event") in ("finished", "skipped"):
            self.finished[sub] = int(event.get("checkpoint") or 0)

    def complete(self, n: int) -> bool:
        """True when every subtask has committed n or has finished."""
        got = self.done.get(n, {})
        return all(s in got or s in self.finished for s in self.subtasks)

    def phases(self, n: int, started: float) -> dict[str, dict[str, Any]]:
        """Per subtask, seconds from the trigger (``started``) to each phase of checkpoint n.

        ``seen``: its signal poll delivered the trigger (or it read barrier n first:
        ``via`` says which); ``start``: it began the checkpoint; ``committed``: the
        transaction commit returned; ``reported``: its ``checkpointed`` event was stamped.
        """
        out: dict[str, dict[str, Any]] = {}
        for sub, t in sorted(self.timing.get(n, {}).items()):
            row: dict[str, Any] = {"via": t.get("via")}
            for key in ("seen", "start", "committed", "reported"):
                if key in t:
                    row[f"{key}_s"] = round(float(t[key]) - started, 4)
            out[sub] = row
        return out

    def summary(self, n: int, started: float) -> dict[str, Any]:
        """The record of completed checkpoint ``n``."""
        got = self.done.get(n, {})
        written = self.written.get(n, {})
        per = {s: got[s][0] for s in got}
        per.update({s: c for s, c in self.finished.items() if s not in got})
        end = max((t for _, t in got.values()), default=started)
        return {
            "id": n,
            "subtasks": dict(sorted(per.items())),
            "finished": sorted(s for s in self.finished if s not in got),
            "start": started,
            "end": end,
            "duration_s": round(end - started, 4),
            "subtask_durations_s": {s: round(t - started, 4) for s, (_, t) in sorted(got.items())},
            # What the checkpoint itself wrote (changelog deltas, checkpoint records): no
            # in-flight data is copied. The channel data spilled continuously since the
            # previous checkpoint committed in the same transactions; shown for scale.
            "bytes": sum(b for b, _ in written.values()),
            "spilled_bytes": sum(s for _, s in written.values()),
            "subtask_bytes": {s: b for s, (b, _) in sorted(written.items())},
        }


def read_completed(
    settings: KafkaSettings, job: JobId, timeout_s: float = 5.0
) -> list[dict[str, Any]]:
    """Every completed global checkpoint of ``job`` (the retained ones), oldest first."""
    return _read_completed(settings, job, timeout_s)


@retry(
    retry=retry_if_exception_type(RetentionGapError),
    stop=stop_after_attempt(3),
    before_sleep=lambda state: log.info(
        "completed checkpoints were pruned while being read; reading again (%s)",
        state.outcome.exception() if state.outcome else None,
    ),
    reraise=True,
)
def _read_completed(settings: KafkaSettings, job: JobId, timeout_s: float) -> list[dict[str, Any]]:
    # A running coordinator prunes the oldest records after each completed checkpoint:
    # the low watermark read here can be gone by the time it is fetched. Read again.
    tp = TopicPartition(checkpoints_topic(job), 0)
    consumer = AssignedConsumer(settings, f"spillway.{job}.checkpoints-reader")
    out: list[dict[str, Any]] = []
    try:
        try:
            low, high = consumer.watermarks(tp)
        except Exception:  # the job never ran in a global mode
            return out
        if high <= low:
            return out
        consumer.assign({tp: Offset(low)})  # older records are pruned (keep the last K)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            out.extend(json.loads(m.value() or b"{}") for m in consumer.consume(500, 0.2))
            pos = consumer.position(tp)
            if pos is not None and pos >= high:
                break
    finally:
        consumer.close()
    return out


class Coordinator:
    """Triggers global checkpoints every ``interval_s`` and records completed ones.

    Runs in a thread of the driver. If it dies, subtasks keep checkpointing on their own
    clocks; a new coordinator continues the numbering after the highest id it finds.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        job: JobId,
        run_id: str,
        subtasks: Iterable[str],
        interval_s: float = 2.0,
        timeout_s: float = 60.0,
        keep: int = 10,
    ) -> None:
        self.settings, self.job, self.run_id = settings, job, run_id
        self.keep = keep  # completed records kept (the checkpoints a job can rewind to)
        self.progress = GlobalProgress(frozenset(subtasks))
        self.interval_s, self.timeout_s = interval_s, timeout_s
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="checkpoint-coordinator", daemon=True
        )
        self.completed: list[int] = []
        # Kept for the coordinator's life: triggers go out without a client set-up first,
        # and a new admin client's first request now and then stalls for 1-3 s (it prunes
        # after every completed checkpoint, so such a stall delayed the next trigger).
        self.producer = idempotent_producer(settings, linger_ms=0)
        self.admin = Admin(settings)

    def start(self) -> None:
        """Start triggering."""
        self._thread.start()

    def stop(self) -> None:
        """Stop triggering (what is in flight is abandoned, not recorded)."""
        self._stop.set()
        self._thread.join(10)

    def next_id(self) -> int:
        """One more than any id triggered or completed for this job, in any run."""
        ids = [int(c["id"]) for c in read_completed(self.settings, self.job)]
        return max(ids, default=-1) + 1

    def _run(self) -> None:
        try:
            self._loop()
        except Exception:  # the job goes on without global checkpoints
            log.exception("checkpoint coordinator of %s died", self.job)

    def _loop(self) -> None:
        n = self.next_id()
        events = AssignedConsumer(self.settings, f"spillway.{self.job}.coordinator")
        events.assign({TopicPartition(events_topic(self.job), 0): Offset(0)})
        try:
            while not self._stop.wait(self.interval_s):
                self._drain(events)
                # Never reuse an id: a savepoint or an earlier coordinator may have taken it.
                n = max(n, self.progress.max_trigger + 1)
                if trigger_and_wait(self, events, n, self._stop):
                    n += 1
                if self.progress.subtasks <= set(self.progress.finished):
                    return  # every subtask finished: nothing left to checkpoint
                n = max(n, self.progress.max_trigger + 1)
        finally:
            events.close()

    def _drain(self, events: AssignedConsumer) -> None:
        feed(events, self.run_id, self.progress, 0)

    def _record(self, summary: dict[str, Any]) -> None:
        t0 = time.monotonic()
        self.producer.produce(
            checkpoints_topic(self.job), json.dumps(summary).encode(), str(summary["id"]).encode()
        )
        self.producer.flush(10)
        t1 = time.monotonic()
        self.completed.append(int(summary["id"]))
        try:
            # One plain (non-transactional) record per checkpoint: offsets are dense, so the
            # last `keep` records start at high - keep.
            tp = TopicPartition(checkpoints_topic(self.job), 0)
            _, high = self.admin.watermarks([tp])[tp]
            if high > self.keep:
                self.admin.delete_records_before({tp: high - self.keep})
        except Exception:  # housekeeping: the next completed checkpoint tries again
            log.warning("could not prune completed checkpoints of %s", self.job, exc_info=True)
        if time.monotonic() - t0 > 0.5:  # delays the next trigger by as much
            log.warning(
                "recording global checkpoint %d took %.2fs (%.2fs of it pruning)",
                summary["id"],
                time.monotonic() - t0,
                time.monotonic() - t1,
            )
        log.info(
            "global checkpoint %d of %s complete in %.3fs",
            summary["id"],
            self.job,
            summary["duration_s"],
        )


def feed(events: AssignedConsumer, run_id: str, progress: GlobalProgress, wait_s: float) -> None:
    """Observe the events of run ``run_id`` that arrived, waiting up to ``wait_s`` for one.

    Returns as soon as one is there: a batch ``consume(500, wait_s)`` would wait out the
    whole ``wait_s`` unless 500 arrived, so every completion would be seen that late.
    """
    msgs = events.consume(1, wait_s) if wait_s > 0 else []
    for m in [*msgs, *events.consume(500, 0)]:
        e = json.loads(m.value() or b"{}")
        if e.get("run") == run_id:
            progress.observe(e)


def trigger_and_wait(
    coordinator: Coordinator,
    events: AssignedConsumer,
    n: int,
    stop: threading.Event | None = None,
    *,
    savepoint: bool = False,
) -> bool:
    """Trigger global checkpoint ``n``, wait for it, record it. False if it timed out."""
    started = time.time()
    record_job_event(
        coordinator.settings,
        coordinator.job,
        "checkpoint-trigger",
        producer=coordinator.producer,
        run=coordinator.run_id,
        n=n,
    )
    acked = time.time()
    deadline = time.monotonic() + coordinator.timeout_s
    while not (stop is not None and stop.is_set()) and time.monotonic() < deadline:
        feed(events, coordinator.run_id, coordinator.progress, 0.1)
        if coordinator.progress.complete(n):
            detected = time.time()
            summary = coordinator.progress.summary(n, started)
            summary["savepoint"] = savepoint
            # Where the time went: the trigger's produce acknowledged, each subtask's
            # phases, the coordinator read the last report (seconds from the trigger).
            summary["phases"] = {
                "trigger_acked_s": round(acked - started, 4),
                "detected_s": round(detected - started, 4),
                "subtasks": coordinator.progress.phases(n, started),
            }
            coordinator._record(summary)
            return True
    if not (stop is not None and stop.is_set()):
        log.warning("global checkpoint %d of %s did not complete in time", n, coordinator.job)
    return False


def savepoint(
    settings: KafkaSettings,
    job: JobId,
    run_id: str,
    subtasks: Iterable[str],
    timeout_s: float = 120.0,
) -> dict[str, Any]:
    """Trigger a global checkpoint of the running job now and wait until it completes."""
    from spillway.channels.errors import SpillwayError

    c = Coordinator(settings, job, run_id, subtasks, timeout_s=timeout_s)
    events = AssignedConsumer(settings, f"spillway.{job}.savepoint")
    events.assign({TopicPartition(events_topic(job), 0): Offset(0)})
    try:
        # Read what happened so far (finished subtasks, ids already taken).
        deadline = time.monotonic() + 10
        tp = TopicPartition(events_topic(job), 0)
        _, high = events.watermarks(tp)
        while (events.position(tp) or 0) < high and time.monotonic() < deadline:
            for m in events.consume(500, 0.2):
                e = json.loads(m.value() or b"{}")
                if e.get("run") == run_id:
                    c.progress.observe(e)
        if c.progress.subtasks <= set(c.progress.finished):
            raise SpillwayError(f"job {job} has finished: its final checkpoints are its savepoint")
        n = max(c.next_id(), c.progress.max_trigger + 1)
        if not trigger_and_wait(c, events, n, savepoint=True):
            raise SpillwayError(f"savepoint {n} of {job} did not complete within {timeout_s:.0f}s")
        return c.progress.summary(n, time.time()) | {"id": n}
    finally:
        events.close()
