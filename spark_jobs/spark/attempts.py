"""The Spark side of a restart: when Spark noticed a task attempt failed, when it launched
the next one.

A thread of the driver watches the stage's failed-task count (one cheap status call per
poll) and, when it grows, reads the task records of Spark's status store: the failed
attempt's finish time (the moment the scheduler handled the failure) and the launch time
of the next attempt. It appends one ``task-retried`` event per retry to the job's event
log (subtask and attempt under ``retried``); the new attempt picks it up there
(``JobSignals.spark_phases``) for its recovery record. The times are Spark's own, so the
poll interval only delays the event.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Producer

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, SubtaskId
from spillway.channels.kafka.clients import ordered_producer
from spillway.recovery.observe.events import record_job_event

log = logging.getLogger("spillway.spark_jobs.spark.attempts")


@dataclass(frozen=True)
class TaskAttempt:
    """One attempt of one Spark task, as the status store has it (wall seconds)."""

    index: int
    attempt: int
    launched: float
    finished: float | None
    status: str
    error: str | None = None


def retries(tasks: Sequence[TaskAttempt]) -> list[tuple[TaskAttempt, TaskAttempt]]:
    """``(failed attempt, next attempt)`` pairs: every attempt that failed and was retried."""
    by_key = {(t.index, t.attempt): t for t in tasks}
    return [
        (t, by_key[(t.index, t.attempt + 1)])
        for t in tasks
        if t.status == "FAILED" and t.finished is not None and (t.index, t.attempt + 1) in by_key
    ]


class AttemptWatcher:
    """Appends a ``task-retried`` event for every task Spark retries (a thread of the driver)."""

    def __init__(
        self,
        sc: Any,
        settings: KafkaSettings,
        job: JobId,
        run_id: str,
        groups: Callable[[], Mapping[str, Sequence[SubtaskId]]],
        every_s: float = 0.1,
    ) -> None:
        """``groups``: the Spark job groups running now, each with its subtasks (task
        ``i`` of a group's job runs its subtask ``i``)."""
        self._sc, self._settings, self._job, self._run_id = sc, settings, job, run_id
        self._groups = groups
        self._every_s = every_s
        self._failed_seen: dict[int, int] = {}  # stage -> failed tasks already handled
        # (stage, index, attempt) of next attempts already reported
        self._reported: set[tuple[int, int, int]] = set()
        self._waits = 0  # polls so far with a failed attempt not retried yet
        self._producer: Producer | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="attempt-watcher", daemon=True)

    def start(self) -> None:
        """Start watching."""
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (waits for the thread)."""
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            try:
                self._poll()
            except Exception:  # diagnosis only: a failed poll must not disturb the job
                log.debug("attempt watcher poll failed", exc_info=True)

    def _stage_subtasks(self, tracker: Any) -> dict[int, Sequence[SubtaskId]]:
        """Stage id -> the subtasks its tasks run (one job group per operator)."""
        out: dict[int, Sequence[SubtaskId]] = {}
        for group, subtasks in self._groups().items():
            for job in tracker.getJobIdsForGroup(group):
                info = tracker.getJobInfo(job)
                for stage in info.stageIds if info is not None else ():
                    out[stage] = subtasks
        return out

    def _poll(self) -> None:
        tracker = self._sc.statusTracker()
        stage_subtasks: dict[int, Sequence[SubtaskId]] | None = None
        for stage in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage)
            if info is None or info.numFailedTasks <= self._failed_seen.get(stage, 0):
                continue
            if stage_subtasks is None:  # only when a task failed: one call per job group
                stage_subtasks = self._stage_subtasks(tracker)
            tasks = self._tasks(stage, info.currentAttemptId)
            pairs = retries(tasks)
            for failed, nxt in pairs:
                if (stage, nxt.index, nxt.attempt) not in self._reported:
                    self._reported.add((stage, nxt.index, nxt.attempt))
                    self._report(failed, nxt, stage_subtasks.get(stage, ()))
            # Settled once every failed attempt has its retry reported; until then (the
            # retry not launched yet) look again at the next poll — for a few seconds at
            # most: a task that used up its attempts is never retried.
            waiting = sum(t.status == "FAILED" for t in tasks) - len(pairs)
            self._waits = self._waits + 1 if waiting else 0
            if not waiting or self._waits * self._every_s > 5:
                self._failed_seen[stage] = info.numFailedTasks
                self._waits = 0

    def _tasks(self, stage: int, stage_attempt: int) -> list[TaskAttempt]:
        jvm = self._sc._jvm
        store = self._sc._jsc.sc().statusStore()
        statuses = jvm.java.util.ArrayList()
        by_id = jvm.org.apache.spark.status.api.v1.TaskSorting.ID
        seq = store.taskList(stage, stage_attempt, 0, 1 << 30, by_id, statuses)  # every status
        out = []
        for i in range(seq.size()):
            t = seq.apply(i)
            launched = t.launchTime().getTime() / 1000
            duration = t.duration()
            error = t.errorMessage()
            out.append(
                TaskAttempt(
                    index=t.index(),
                    attempt=t.attempt(),
                    launched=launched,
                    finished=launched + duration.get() / 1000 if duration.isDefined() else None,
                    status=str(t.status()),
                    error=str(error.get()).strip().splitlines()[0][:300]
                    if error.isDefined()
                    else None,
                )
            )
        return out

    def _report(self, failed: TaskAttempt, nxt: TaskAttempt, subtasks: Sequence[SubtaskId]) -> None:
        if not 0 <= nxt.index < len(subtasks):
            return
        s = subtasks[nxt.index]
        if self._producer is None:  # kept: a new client would delay every later event
            self._producer = ordered_producer(self._settings)
        record_job_event(
            self._settings,
            self._job,
            "task-retried",
            producer=self._producer,
            run=self._run_id,
            # Not "operator"/"index" at the top: readers take events with those keys for
            # the subtask's own (newer_incarnation, status, chaos checks); this is the
            # driver's, about it.
            retried={"operator": s.operator, "index": s.index, "attempt": nxt.attempt},
            spark_noticed=failed.finished,
            scheduled=nxt.launched,
            failed_launched=failed.launched,
            error=failed.error,
        )
