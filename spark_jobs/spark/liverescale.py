"""Serving ``spillway rescale`` in the running driver
(docs/architecture.md, Changing a running job).

A request (``rescale-requested`` in the job's events, :mod:`spillway.recovery.control.liverescale`)
is
served in a thread of its own, one at a time:

1. check that the operator can change width while the job runs: what
   :func:`spillway.recovery.restore.rescale.check_rescalable` allows, every input keyed or
   round-robin
   into slots (an upstream writes by key group or slot, whatever the width; any
   other upstream would need a restart to write to other partitions), and checkpoints
   on each subtask's own clock (the global-checkpoint coordinator counts a fixed set of
   subtasks);
2. stop only that operator (:meth:`OperatorRuns.stop_operator`): each subtask commits a
   last checkpoint and stops; upstream keeps writing into the durable channels and
   downstream keeps reading what was committed;
3. launch the operator's new subtasks: Spark schedules them and their Python workers
   start and build the pipeline, then each waits for the handover
   (:mod:`spillway.spark_jobs.spark.handoverwait`);
4. meanwhile fence every old subtask, take the handover and announce the new writer
   count in-band downstream (:func:`spillway.recovery.control.savepoint.prepare_rescale`,
   :func:`spillway.recovery.control.liverescale.announce_width`), then record the new
   shape (``rescaled``: plan and rescale record, what a later ``spillway run`` and
   ``spillway status`` read, and what the waiting new subtasks restore from);
5. record the driver's phases of the rescale (``rescale-phases``,
   :mod:`spillway.recovery.observe.rescalephases`).

Nothing else restarts. A request refused at step 1 or failing before the ``rescaled``
record records ``rescale-failed``, stops the waiting new subtasks if they were launched
(they end without running), and, if the operator was stopped, starts it again as it was.

An upgrade request (``upgrade-requested``, ``spillway upgrade``) takes the same path at
the same width: read and run the pipeline module as now deployed
(:mod:`spillway.spark_jobs.spark.shipcode`), check the operator's new definition
(:func:`spillway.recovery.control.upgrade.check_upgrade`; refused: ``upgrade-failed``, nothing
stopped),
stop only that operator, record ``upgraded``, and start it again with the new source
shipped in its tasks; each subtask restores from its own last checkpoint.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Producer

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import RescaleError, UpgradeError
from spillway.channels.kafka.clients import idempotent_producer
from spillway.channels.modes import CheckpointMode
from spillway.recovery.control.savepoint import prepare_rescale
from spillway.recovery.control.upgrade import check_upgrade
from spillway.recovery.job.plan import JobPlan
from spillway.recovery.job.plandoc import PlanDoc
from spillway.recovery.observe.events import record_job_event
from spillway.recovery.observe.rescalephases import driver_phases
from spillway.recovery.restore.handover import live_handover
from spillway.recovery.restore.rescale import PlanShape, Rescale, check_rescalable, with_parallelism
from spillway.spark_jobs.spark.opruns import OperatorRuns
from spillway.spark_jobs.spark.shipcode import ModuleCode
from spillway.spark_jobs.spark.taskslots import Offer, no_room

# Reads and runs the pipeline module as now deployed; its source and plan.
Deployed = Callable[[], tuple[ModuleCode, JobPlan]]

log = logging.getLogger("spillway.spark_jobs.spark.liverescale")


def check_live(
    plan: JobPlan,
    operator: str,
    previous: int,
    checkpoint_mode: CheckpointMode,
    slots: Offer | None = None,
) -> None:
    """:class:`RescaleError` unless ``operator`` can go from ``previous`` subtasks to its
    width in ``plan`` while the rest of the job runs (the module's step 1). ``slots``: the
    task slots Spark offers (None: not checked); an unbounded job needs one per subtask, and
    a refusal says how many are free and how to start the job with room
    (:mod:`spillway.spark_jobs.spark.taskslots`)."""
    check_rescalable(plan, operator, previous)
    where = f"operator {operator!r} of job {plan.job}"
    needed = len(plan.subtasks())
    if slots is not None and not plan.bounded and slots.slots < needed:
        # Checked before anything stops: a new subtask without a slot would wait forever
        # (an unbounded job's subtasks never free theirs) while its key groups stand still.
        running = needed - plan.operator(operator).parallelism + previous
        raise RescaleError(f"{where}: {no_room(needed, running, slots)}")
    if checkpoint_mode != "interval":
        raise RescaleError(
            f"{where}: a running job with --checkpoint-mode {checkpoint_mode} cannot be "
            "rescaled live (its global checkpoints count a fixed set of subtasks); stop it "
            "and run it with --parallelism"
        )
    for e in plan.inputs_of(operator):
        if not plan.width_free(e):
            raise RescaleError(
                f"{where}: input {e.upstream} ({e.kind}) has one partition per subtask; its "
                "writers would have to restart to write to the new subtasks. Stop the job "
                "and run it with --parallelism"
            )


class LiveRescaler:
    """Serves the rescale requests of one run (see the module docstring)."""

    def __init__(
        self,
        settings: KafkaSettings,
        checkpoint_mode: CheckpointMode,
        plan: JobPlan,
        rescale: Rescale | None,
        run_id: str,
        runs: OperatorRuns,
        shape: list[PlanShape],
        slots: Callable[[], Offer] | None = None,
    ) -> None:
        """``shape``: a one-item box the driver launches operator jobs with; a rescale
        replaces its item. ``slots``: the task slots Spark offers now (local threads, or
        executor cores on a cluster), checked before a rescale stops anything."""
        self._settings = settings
        self._mode = checkpoint_mode
        self.plan = plan
        self.rescale = rescale
        self._run_id = run_id
        self._runs = runs
        self._shape = shape
        self._slots = slots
        self._requests: queue.Queue[Mapping[str, Any] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._serve, name="live-rescale", daemon=True)
        self._deployed: Deployed | None = None
        self._code: list[ModuleCode | None] = [None]
        # The answers' producer, made once: a new client per event (connect, producer id)
        # lay on the path of every rescale.
        self._events: Producer | None = None

    def _producer(self) -> Producer:
        if self._events is None:
            self._events = idempotent_producer(self._settings, linger_ms=0)
        return self._events

    def upgrades(self, deployed: Deployed, code: list[ModuleCode | None]) -> None:
        """Serve upgrade requests too: ``deployed`` loads the code now deployed; ``code``
        is the one-item box whose source the driver ships with the tasks it launches."""
        self._deployed, self._code = deployed, code

    def offer(self, event: Mapping[str, Any]) -> None:
        """Take ``event`` if it is a rescale or upgrade request of this run (never blocks)."""
        kind = event.get("event")
        if kind in ("rescale-requested", "upgrade-requested") and event.get("run") == self._run_id:
            self._requests.put(event)

    def start(self) -> None:
        """Serve requests from now on."""
        self._thread.start()

    def stop(self) -> None:
        """Stop serving (a rescale in progress finishes first)."""
        self._requests.put(None)
        self._thread.join(60)

    def _serve(self) -> None:
        self._producer()  # connected before the first request
        while (request := self._requests.get()) is not None:
            if request.get("event") == "upgrade-requested":
                self._upgrade(request)
            else:
                self._handle(request)

    def _refused(self, what: str, request: Mapping[str, Any], e: Exception, stopped: bool) -> None:
        """Answer ``{what}-failed``; start the operator again as it was if it was stopped."""
        op, rid = str(request.get("target")), request.get("request")
        log.warning("%s request %s for %s refused: %s", what, rid, op, e)
        record_job_event(
            self._settings, self.plan.job, f"{what}-failed", run=self._run_id, request=rid,
            target=op, error=f"{type(e).__name__}: {e}", producer=self._producer(),
        )  # fmt: skip
        if stopped:
            self._runs.start_operator(op)

    def _upgrade(self, request: Mapping[str, Any]) -> None:
        op, rid, job = str(request.get("target")), request.get("request"), self.plan.job
        stopped = False
        try:
            if self._deployed is None:
                raise UpgradeError(f"upgrade request {rid}: this driver cannot upgrade")
            code, deployed = self._deployed()
            check_upgrade(self.plan, deployed, op)
            new = self._shape[0].apply(deployed)  # the running widths and key groups
            t0 = time.monotonic()
            log.info("upgrading %s of %s to the code in %s", op, job, code.path)
            self._runs.stop_operator(op)
            stopped = True
        except Exception as e:  # refused, or failed before anything changed
            self._refused("upgrade", request, e, stopped)
            return
        previous = self._code[0]
        try:
            self._code[0], self.plan = code, new
            record_job_event(
                self._settings, job, "upgraded", run=self._run_id, request=rid, target=op,
                module=code.module, path=code.path, parallelism=new.operator(op).parallelism,
                stopped_s=round(time.monotonic() - t0, 3), producer=self._producer(),
            )  # fmt: skip
            self._runs.start_operator(op)
        except Exception:
            self._code[0] = previous
            log.exception("upgrade of %s not completed: stopping the job", op)
            self._runs.cancel_all()
            return
        log.info("%s of %s runs the upgraded code (%.1f s)", op, job, time.monotonic() - t0)

    def _handle(self, request: Mapping[str, Any]) -> None:
        op, n, rid = str(request.get("target")), request.get("parallelism"), request.get("request")
        job = self.plan.job
        stopped = launched = False
        before = self._shape[0]
        try:
            if not isinstance(n, int):
                raise RescaleError(f"rescale request {rid}: parallelism {n!r} is not a number")
            new = with_parallelism(self.plan, {op: n})
            previous = self.plan.operator(op).parallelism
            slots = self._slots() if self._slots is not None else None
            check_live(new, op, previous, self._mode, slots)
            t0 = time.monotonic()
            log.info("rescaling %s of %s: %d -> %d subtasks", op, job, previous, n)
            clock, stop_requested = _Clock(), time.time()
            self._runs.stop_operator(op)
            stopped = True
            last_checkpoint = time.time()
            clock.lap("stop")
            # The new subtasks are launched now, each waiting for the handover
            # (spillway.spark_jobs.spark.handoverwait): Spark schedules them and their
            # Python workers start while the handover below is taken.
            self._in_shape(new, PlanShape.of(new, None, awaiting=str(rid)))
            self._runs.start_operator(op)
            launched = True
            scheduled = time.time()
            clock.lap("schedule")
            rescale = prepare_rescale(self._settings, new, {op: previous}, self.rescale)
            assert rescale is not None
            rescale = live_handover(rescale, op)  # its new subtasks check the marks
            clock.lap("prepare")
        except Exception as e:  # refused, or failed before the new shape was recorded
            if stopped:
                try:
                    if launched:  # the waiting new subtasks end without running
                        self._runs.stop_operator(op)
                    self._in_shape(self.plan, before)
                except Exception:
                    log.exception("rescale of %s failed and not undone: stopping the job", op)
                    self._runs.cancel_all()
                    return
            self._refused("rescale", request, e, stopped)
            return
        try:
            # The new subtasks go on once this is recorded: it carries their rescale
            # record. A driver that dies after it leaves a job whose next run takes the
            # recorded shape. prepare_rescale announced the new writer count already.
            # Timed before the record: no new subtask can start before it exists.
            handover = time.time()
            record_job_event(
                self._settings, job, "rescaled", run=self._run_id, request=rid, target=op,
                previous=previous, parallelism=n, plan=PlanDoc.of(new).to_json(),
                rescale=rescale.to_json(), stopped_s=round(time.monotonic() - t0, 3),
                producer=self._producer(),
            )  # fmt: skip
            clock.lap("record")
            self._shape[0] = PlanShape.of(new, rescale)  # for operators launched later
            self.plan, self.rescale = new, rescale
        except Exception:
            # Not known whether the new shape was recorded: end the run; the next one
            # (spillway run, same job id) starts in the shape last recorded.
            log.exception("rescale of %s not completed: stopping the job", op)
            self._runs.cancel_all()
            return
        log.info("%s of %s runs with %d subtasks (%.1f s)", op, job, n, time.monotonic() - t0)
        phases = driver_phases(
            float(request.get("time", stop_requested)),
            stop_requested,
            last_checkpoint,
            handover,
            scheduled,
        )
        try:  # for the record only: the rescale is done whether or not this is written
            record_job_event(
                self._settings, job, "rescale-phases", run=self._run_id, request=rid,
                target=op, previous=previous, parallelism=n, phases=phases, steps=clock.steps,
                producer=self._producer(),
            )  # fmt: skip
        except Exception:
            log.exception("the phases of rescale %s were not recorded", rid)

    def _in_shape(self, plan: JobPlan, shape: PlanShape) -> None:
        """Launch operators from now on with ``plan``'s subtasks and ``shape``."""
        self._shape[0] = shape
        self._runs.reshape(plan.subtasks(), [(o.name, o.parallelism) for o in plan.operators])


class _Clock:
    """Seconds spent in each of the driver's steps of a rescale (where the time goes)."""

    def __init__(self) -> None:
        self.steps: dict[str, float] = {}
        self._lap = time.monotonic()

    def lap(self, name: str) -> None:
        """Record the time since the previous lap as step ``name``."""
        now = time.monotonic()
        self.steps[name] = round(now - self._lap, 3)
        self._lap = now
