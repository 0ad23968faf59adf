"""Every operator of a job as its own concurrent Spark job; stop and start one of them.

One driver thread per operator job (a pinned :class:`pyspark.InheritableThread`), each
with its own job group (``sc.setJobGroup(..., interruptOnCancel=True)``), so one
operator's job can be stopped, cancelled and submitted again while the others run. Tasks
stay ordinary tasks, retried alone (not barrier mode). The bookkeeping is
:class:`spillway.spark_jobs.spark.opjobs.OperatorJobs`; this module is the Spark and thread shell.

``stop_operator(op)`` asks ``op``'s subtasks to take a last checkpoint and stop (the path
SIGTERM takes for the whole job, scoped to one operator's current generation);
``start_operator(op)`` submits a new job for them, which restores each subtask from its
checkpoint. The rescale and upgrade commands are built on these two.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from spillway.channels.errors import JobAbortedError
from spillway.channels.ids import OperatorName, SubtaskId
from spillway.spark_jobs.spark.opjobs import Action, OperatorJobs, OpState, operator_groups

log = logging.getLogger("spillway.spark_jobs.spark.opruns")

# Runs one Spark job over the given subtasks (indices into the plan's subtask list) of
# one generation and returns its rows; the driver's part (it builds the RDD).
RunJob = Callable[[Sequence[int], int], list[dict[str, Any]]]
# Appends the stop request of one operator's generation to the job's events.
AnnounceStop = Callable[[OperatorName, int], None]


class OperatorRuns:
    """The operator jobs of one run on one SparkContext (see the module docstring)."""

    def __init__(
        self,
        sc: Any,
        book: OperatorJobs,
        subtasks: Sequence[SubtaskId],
        run_job: RunJob,
        announce_stop: AnnounceStop,
    ) -> None:
        self._sc = sc
        self._book = book
        self._subtasks = list(subtasks)
        self._run_job = run_job
        self._announce_stop = announce_stop
        self._cond = threading.Condition()  # an RLock: the SIGTERM handler may take it too
        self._threads: list[threading.Thread] = []

    def start_all(self) -> None:
        """Submit every operator's job, in the plan's order."""
        for op in self._book.operators():
            self._launch(op)

    def wait(self) -> list[dict[str, Any]]:
        """Block until the run is over; every operator's last rows, or the first failure."""
        with self._cond:
            while not self._book.done():
                self._cond.wait(0.5)
        for t in self._threads:
            t.join()
        if self._book.failure is not None:
            raise self._book.failure[1]
        return self._book.rows()

    def stop_operator(self, operator: str, timeout_s: float | None = None) -> list[dict[str, Any]]:
        """Ask ``operator``'s subtasks to take a last checkpoint and stop; return their rows
        once its Spark job has ended. The other operators keep running. ``timeout_s``: then
        cancel its job instead (its subtasks restart from their last checkpoints)."""
        with self._cond:
            generation = self._book.request_stop(operator)
            name = self._book.get(operator).operator
        log.info("asking %s (generation %d) to checkpoint and stop", name, generation)
        self._announce_stop(name, generation)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while self._book.get(name).state is OpState.STOPPING:
                if deadline is not None and time.monotonic() > deadline:
                    deadline = None
                    group = self._book.force_stop(name)
                    log.warning("%s did not stop in %.0f s: cancelling %s", name, timeout_s, group)
                    self._sc.cancelJobGroup(group)
                self._cond.wait(0.2)
            job = self._book.get(name)
            if job.state is not OpState.HELD:
                raise JobAbortedError(f"operator {name} ended {job.state.value} while stopping")
            return list(job.rows)

    def start_operator(self, operator: str) -> None:
        """Submit a new job for a stopped ``operator``; each subtask restores from its
        checkpoint."""
        with self._cond:
            generation = self._book.start(operator)
            name = self._book.get(operator).operator
        log.info("starting %s again (generation %d)", name, generation)
        self._launch(name)

    def reshape(self, subtasks: Sequence[SubtaskId], widths: Sequence[tuple[str, int]]) -> None:
        """The plan's subtask list after a live rescale (``widths``: each operator's
        parallelism, in plan order); operators started from now on run with it."""
        with self._cond:
            self._subtasks = list(subtasks)
            self._book.reshape(operator_groups([(OperatorName(n), p) for n, p in widths]))

    def stop_all(self) -> None:
        """The whole job stops (SIGTERM): stopped operators are not waited for any more."""
        with self._cond:
            self._book.stop_all()
            self._cond.notify_all()

    def cancel_all(self) -> None:
        """Cancel every operator's job (a deterministic failure:
        spillway.spark_jobs.spark.failfast)."""
        with self._cond:
            self._book.cancel_all()
            self._cond.notify_all()
        self._sc.cancelAllJobs()

    def groups(self) -> dict[str, list[SubtaskId]]:
        """Each operator's current job group with its subtasks (for
        spillway.spark_jobs.spark.attempts)."""
        with self._cond:
            return {
                self._book.group(op): [self._subtasks[i] for i in self._book.get(op).subtasks]
                for op in self._book.operators()
            }

    def _launch(self, op: OperatorName) -> None:
        from pyspark import InheritableThread

        with self._cond:
            job = self._book.get(op)
            group, generation, indices = self._book.group(op), job.generation, job.subtasks
        # A context kept across runs (spillway.spark_jobs.spark.sharedctx) still lists an
        # earlier run's jobs under the same group name (same job, operator, generation):
        # only a job that was not there before is this launch's.
        tracker = self._sc.statusTracker()
        earlier = set(tracker.getJobIdsForGroup(group))
        thread = InheritableThread(
            target=self._body, args=(op, group, generation, indices), name=f"job-{group}"
        )
        self._threads.append(thread)
        thread.start()
        # One job after another, in the plan's order: Spark's FIFO scheduler gives free
        # slots to the tasks of the earliest job first, so with fewer slots than subtasks
        # (a bounded job) upstream operators run first, as in the single job before.
        while thread.is_alive() and set(tracker.getJobIdsForGroup(group)) <= earlier:
            time.sleep(0.01)

    def _body(self, op: OperatorName, group: str, generation: int, indices: Sequence[int]) -> None:
        self._sc.setJobGroup(group, f"spillway operator {op}", interruptOnCancel=True)
        try:
            rows = self._run_job(indices, generation)
        except BaseException as e:  # handed to wait(), which raises the first cause
            with self._cond:
                action = self._book.failed(op, generation, e)
                self._cond.notify_all()
            if action is Action.CANCEL_ALL:
                log.warning("the Spark job of %s failed: cancelling the other operators", op)
                self._sc.cancelAllJobs()
            return
        with self._cond:
            self._book.ended(op, generation, rows)
            self._cond.notify_all()
