"""Launching a job on Spark: every subtask is one long-running Spark task, every operator
(or chain) one Spark job of its own (:mod:`spillway.spark_jobs.spark.opruns`), so one operator can
be
stopped and started while the others run.

Not barrier mode (a failed barrier task restarts every task); ordinary tasks are
retried *alone* — ``local[N,F]`` in local mode, ``spark.task.maxFailures`` on a cluster —
and a retried task restores its subtask from that subtask's own checkpoint. Speculation
stays off: two live copies of a subtask would only fence each other.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, replace
from typing import Any

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import (
    ConfigError,
    JobAbortedError,
    ProducerFencedError,
    SpillwayError,
)
from spillway.channels.kafka.clients import idempotent_producer
from spillway.recovery.control.globalckpt import Coordinator
from spillway.recovery.control.savepoint import last_run_shape, shape_for_run
from spillway.recovery.job import jobconf
from spillway.recovery.job.evolution import channel_history, with_earlier_schemas
from spillway.recovery.job.jobconf import forwarded_env
from spillway.recovery.job.loader import load_plan
from spillway.recovery.job.plan import JobPlan, NodeKind
from spillway.recovery.job.plandoc import PlanDoc
from spillway.recovery.observe.events import (
    newer_incarnation,
    record_job_event,
)
from spillway.recovery.observe.phases import PhaseClock, process_start_time
from spillway.recovery.restore.ownership import keep_recorded_max_parallelism
from spillway.recovery.restore.rescale import PlanShape, Rescale, with_parallelism
from spillway.recovery.runtime.deadletter import dead_letter_counts
from spillway.recovery.runtime.failures import abort_message
from spillway.recovery.runtime.redo import RedoBudget, Verdict
from spillway.recovery.runtime.runner import SubtaskResult, SubtaskRunner
from spillway.spark_jobs.spark.attempts import AttemptWatcher
from spillway.spark_jobs.spark.failfast import FailureWatch
from spillway.spark_jobs.spark.handoverwait import await_handover
from spillway.spark_jobs.spark.jobconfig import JobConfig
from spillway.spark_jobs.spark.liverescale import LiveRescaler
from spillway.spark_jobs.spark.observe import observed
from spillway.spark_jobs.spark.opjobs import OperatorJobs, operator_groups
from spillway.spark_jobs.spark.opruns import OperatorRuns
from spillway.spark_jobs.spark.runlog import jvm_options, jvm_stderr, subtask_logging
from spillway.spark_jobs.spark.sharedctx import release, session_for
from spillway.spark_jobs.spark.shipcode import ModuleCode, deployed, install
from spillway.spark_jobs.spark.submit import check_evolution, prepare_topics, record_submission
from spillway.spark_jobs.spark.summary import RunSummary
from spillway.spark_jobs.spark.taskslots import Offer, mode_of

log = logging.getLogger("spillway.spark_jobs.spark.driver")

# Tasks this Python worker has entered (a forked worker starts at 0: the daemon never runs one).
_TASKS_ENTERED = 0


def subtask_count(
    pipeline_ref: str,
    job_id: str,
    conf: Mapping[str, str] | None = None,
    parallelism: Mapping[str, int] | None = None,
) -> int:
    """How many subtasks (Spark tasks) the job has (with operator widths ``parallelism``)."""
    plan = load_plan(pipeline_ref, job_id, conf)
    return len(with_parallelism(plan, parallelism or {}).subtasks())


def job_extent(
    pipeline_ref: str,
    job_id: str,
    conf: Mapping[str, str] | None = None,
    parallelism: Mapping[str, int] | None = None,
) -> tuple[int, bool]:
    """How many subtasks the job has (as :func:`subtask_count`) and whether it is bounded:
    what decides the task slots it needs (:mod:`spillway.spark_jobs.spark.taskslots`)."""
    plan = with_parallelism(load_plan(pipeline_ref, job_id, conf), parallelism or {})
    return len(plan.subtasks()), plan.bounded


def run_on_spark(
    config: JobConfig,
    from_checkpoint: int | None = None,
    rewind_to: int | None = None,
    on_running: Callable[[OperatorRuns], None] | None = None,
    on_summary: Callable[[RunSummary], None] | None = None,
) -> list[SubtaskResult]:
    """Validate, create topics, run every subtask as a Spark task, each operator (or chain)
    as a Spark job of its own; return the subtasks' final results.

    ``rewind_to``: first rewind the whole job to that completed global checkpoint
    (:mod:`spillway.recovery.control.rewind`); the job must not be running. ``on_running``: called
    once
    every operator's job is submitted, with the handle that stops and starts operators
    (:class:`spillway.spark_jobs.spark.opruns.OperatorRuns`); it must not block. An operator whose
    parallelism (``config.parallelism`` or the pipeline's) differs from the last run's is
    rescaled from the stopped job's checkpoints (:mod:`spillway.recovery.control.savepoint`).
    ``on_summary``: called once the subtasks have ended (not if the job is aborted), with
    what the run did (:mod:`spillway.spark_jobs.spark.summary`).
    """
    began = time.monotonic()
    forwarded = forwarded_env(config.forward_env)
    settings = config.settings()
    options = config.options(from_checkpoint)
    plan, rescale, run_id = _prepare_run(config, settings, from_checkpoint, rewind_to)
    # The pipeline's own environment variables travel with the job too.
    prefixes = tuple(dict.fromkeys(config.env_prefixes + plan.env_prefixes))
    config = replace(config, env_prefixes=prefixes)
    subtasks = plan.subtasks()
    n = len(subtasks)

    spark = _spark_session(config)
    ended_normally = False
    try:
        sc = spark.sparkContext
        _check_slots(config, plan.bounded, n, sc.defaultParallelism)
        env = {k: v for k, v in os.environ.items() if k.startswith(config.env_prefixes)}
        env.update(forwarded)
        # a live rescale replaces it (spillway.spark_jobs.spark.liverescale)
        shape = [PlanShape.of(plan, rescale)]
        code: list[ModuleCode | None] = [None]  # set by a live upgrade, shipped with tasks
        runs = _operator_runs(sc, plan, (config, from_checkpoint, env, run_id, shape, code))
        mode = config.checkpoint_mode
        where = mode_of(str(sc.master))
        rescaler = LiveRescaler(
            settings,
            mode,
            plan,
            rescale,
            run_id,
            runs,
            shape,
            lambda: Offer(int(sc.defaultParallelism), where),
        )
        rescaler.upgrades(lambda: deployed(config.pipeline, config.job_id, config.conf), code)
        # Started first: a deterministic failure cancels the Spark jobs
        # (spillway.spark_jobs.spark.failfast).
        watch = FailureWatch(settings, plan.job, run_id, runs.cancel_all, rescaler.offer)
        watch.start()
        rescaler.start()
        watcher = AttemptWatcher(sc, settings, plan.job, run_id, runs.groups)
        watcher.start()
        coordinator = _coordinator(config, settings, plan, run_id)
        try:
            with (
                _stop_on_sigterm(settings, plan, run_id, runs.stop_all),
                observed(
                    settings,
                    plan.job,
                    PlanDoc.of(plan),
                    run_id,
                    config.metrics_port,
                    config.metrics_host,
                    config.progress,
                ) as feed,
            ):
                runs.start_all()
                if on_running is not None:
                    on_running(runs)
                rows = runs.wait()
            last = feed.snapshot() if feed is not None else None  # the feed's last words
            if watch.failure is not None:  # every job was cancelled: some rows are missing
                raise JobAbortedError(watch.message())
        except Exception:
            if watch.failure is None:
                raise
            # Spark's own report of the cancelled job says nothing the failure did not.
            log.debug("Spark job cancelled after a deterministic failure", exc_info=True)
            raise JobAbortedError(watch.message()) from None
        finally:
            watch.stop()
            rescaler.stop()
            watcher.stop()
            if coordinator is not None:
                coordinator.stop()
        ended_normally = True
    finally:
        # Stopped, unless a shared_spark() scope keeps it for the next run (never after
        # a run that raised: its cancelled jobs may still be ending).
        release(spark, ended_normally)
    results = [SubtaskResult(**r) for r in rows]
    failed = [r for r in results if r.status == "failed" and r.error]
    if failed:  # the last task to end failed, before the watch saw its event
        raise JobAbortedError(str(failed[0].error))
    _ = options  # validated above, before Spark started
    if on_summary is not None:
        on_summary(
            RunSummary(
                plan.job,
                time.monotonic() - began,
                results,
                _ends_of(plan, "source", 0),
                _ends_of(plan, "sink", -1),
                last,
                config.dead_letter,
                dead_letters=dead_letter_counts(settings, plan.job) if config.dead_letter else None,
            )
        )
    return results


def _ends_of(plan: JobPlan, kind: NodeKind, at: int) -> list[str]:
    """Operators of ``kind`` (source or sink), or chains that start (``at`` 0) or end
    (``at`` -1) with one."""
    out = []
    for op in plan.operators:
        chain = op.description.get("chain") if op.kind == "chain" else None
        if op.kind == kind or (chain and chain[at].get("kind") == kind):
            out.append(str(op.name))
    return out


def _prepare_run(
    config: JobConfig,
    settings: KafkaSettings,
    from_checkpoint: int | None,
    rewind_to: int | None,
) -> tuple[JobPlan, Rescale | None, str]:
    """Before Spark starts: the plan at this run's widths, the compatibility report of
    changed code, the rescale to continue, the topics, the ``submitted`` event; returns
    the plan, the rescale and the new run's id."""
    plan = load_plan(config.pipeline, config.job_id, config.conf)
    last = last_run_shape(settings, plan.job)
    recorded = last.plan
    plan = with_parallelism(keep_recorded_max_parallelism(plan, recorded), config.parallelism)
    evolved_from = check_evolution(plan, last, config.allow_dropped_state)
    # Records of a channel's earlier schemas may still be in it: its readers resolve them.
    plan = with_earlier_schemas(plan, channel_history(last.topologies))
    rescale = shape_for_run(
        settings, plan, recorded, last.rescale, rewind_to, evolved_from, last.topology
    )
    prepare_topics(plan, settings, config.dead_letter)
    run_id = uuid.uuid4().hex
    record_submission(config, plan, settings, run_id, from_checkpoint, rewind_to, rescale)
    return plan, rescale, run_id


def _spark_conf(config: JobConfig) -> dict[str, str]:
    """The static Spark configuration this job wants (what a context is created with, and
    what :func:`spillway.spark_jobs.spark.sharedctx.reusable` compares)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = {
        "spark.app.name": f"spillway-{config.job_id}",
        "spark.speculation": "false",
        "spark.task.maxFailures": str(config.task_attempts),
        # Loopback unless the deployment says otherwise (containers set SPARK_LOCAL_IP
        # to their own host name so executors elsewhere can reach the driver).
        "spark.driver.host": os.environ["SPARK_LOCAL_IP"],
        "spark.driver.bindAddress": os.environ["SPARK_LOCAL_IP"],
        "spark.ui.enabled": "false",
        "spark.python.worker.reuse": "false",
        # Forks workers with Spillway's modules already imported (a restart's imports).
        "spark.python.daemon.module": "spillway.spark_jobs.spark.daemon",
        "spark.executorEnv.PYTHONPATH": os.pathsep.join(_python_path()),
    }
    if config.master:
        conf["spark.master"] = config.master
    if config.cores_max is not None:  # --slots on a cluster (spillway.spark_jobs.spark.taskslots)
        conf["spark.cores.max"] = str(config.cores_max)
    java = jvm_options(config.master)
    if java is not None:  # Spark's log4j output into the run's log file
        conf["spark.driver.extraJavaOptions"] = java
    if config.progress:  # Spark's own stage bar would overwrite our progress line
        conf["spark.ui.showConsoleProgress"] = "false"
    return conf


def _python_path() -> list[str]:
    """``sys.path`` for the executors, less the running context's SparkFiles directory.

    pyspark puts that directory on the driver's ``sys.path`` when a context starts; it
    belongs to that context, not to the job, and left in it would make every later run's
    configuration differ from the one the context was created with, so a kept context
    (:mod:`spillway.spark_jobs.spark.sharedctx`) would never be reused. Without a running
    context (``spillway run``: one per process) this is ``sys.path`` as it was.
    """
    own = None
    pyspark = sys.modules.get("pyspark")
    if pyspark is not None and pyspark.SparkContext._active_spark_context is not None:
        own = pyspark.SparkFiles.getRootDirectory()
    return [p for p in sys.path if p and p != own]


def _spark_session(config: JobConfig) -> Any:
    """The Spark session of this job (driver on loopback unless SPARK_LOCAL_IP says not):
    a new one, or inside :func:`spillway.spark_jobs.spark.sharedctx.shared_spark` the kept
    one if its configuration is the same."""
    return session_for(lambda: _spark_conf(config), lambda conf: _new_spark_session(config, conf))


def _new_spark_session(config: JobConfig, wanted: Mapping[str, str]) -> Any:
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    conf = SparkConf().setAll(list(wanted.items()))
    stderr = jvm_stderr(config.master)
    if (
        stderr is not None
        and SparkContext._active_spark_context is None
        and (SparkContext._gateway is None)
    ):
        # pyspark's documented hook for capturing the gateway JVM's output.
        with open(stderr, "ab") as log_file:
            gateway = launch_gateway(conf, popen_kwargs={"stderr": log_file})  # type: ignore[no-untyped-call]
        SparkContext(conf=conf, gateway=gateway)
    return SparkSession.builder.config(conf=conf).getOrCreate()


def _coordinator(
    config: JobConfig, settings: KafkaSettings, plan: JobPlan, run_id: str
) -> Coordinator | None:
    """The started global-checkpoint coordinator (None in interval mode: none needed)."""
    if config.checkpoint_mode == "interval":
        return None
    coordinator = Coordinator(
        settings,
        plan.job,
        run_id,
        [f"{s.operator}[{s.index}]" for s in plan.subtasks()],
        config.global_interval_s,
        config.global_timeout_s,
        config.keep_global,
    )
    coordinator.start()
    return coordinator


def _check_slots(config: JobConfig, bounded: bool, n: int, slots: int) -> None:
    """An unbounded job needs a task slot per subtask at once; a bounded one may queue."""
    if not bounded and slots < n:
        raise ConfigError(
            f"job {config.job_id} is unbounded and needs a task slot for each of its {n} "
            f"subtasks at once, but Spark offers {slots}; use --slots {n} (or "
            f"--master 'local[{n},{config.task_attempts}]'), or add executor cores"
        )
    if slots < n:
        log.info("%d subtasks on %d slots: bounded job, upstream operators run first", n, slots)


def _operator_runs(
    sc: Any,
    plan: JobPlan,
    payload: tuple[
        JobConfig, int | None, dict[str, str], str, list[PlanShape], list[ModuleCode | None]
    ],
) -> OperatorRuns:
    """One Spark job per plan operator (a chain is one), each task running one subtask
    (with the pipeline code of the last live upgrade, if any:
    spillway.spark_jobs.spark.shipcode)."""
    config, from_checkpoint, env, run_id, shape, code = payload

    def run_job(indices: Sequence[int], generation: int) -> list[dict[str, Any]]:
        # A restarted operator resumes from its latest checkpoint, not from --from-checkpoint.
        start = from_checkpoint if generation == 0 else None
        args = (config, start, env, run_id, generation, shape[0], code[0])
        idx = tuple(indices)
        rdd = sc.parallelize(range(len(idx)), len(idx))
        rows: list[dict[str, Any]] = rdd.mapPartitionsWithIndex(
            lambda i, _it: _task(args, idx[i])
        ).collect()
        return rows

    # One producer for the stop requests: a new client for each (connect, producer id)
    # lay on the path of every live rescale and upgrade.
    announcer: list[Any] = []

    def announce_stop(operator: str, generation: int) -> None:
        if not announcer:
            announcer.append(idempotent_producer(settings, linger_ms=0))
        record_job_event(
            settings,
            plan.job,
            "operator-stop-requested",
            producer=announcer[0],
            run=run_id,
            # Not "operator": readers take events with that key for a subtask's own.
            target=operator,
            generation=generation,
        )

    settings = config.settings()
    chained = {
        str(m["name"]): op.name for op in plan.operators for m in op.description.get("chain", ())
    }
    book = OperatorJobs(
        plan.job, operator_groups([(op.name, op.parallelism) for op in plan.operators]), chained
    )
    return OperatorRuns(sc, book, plan.subtasks(), run_job, announce_stop)


@contextlib.contextmanager
def _stop_on_sigterm(
    settings: KafkaSettings, plan: JobPlan, run_id: str, on_stop: Callable[[], None]
) -> Iterator[None]:
    """While the job runs, SIGTERM asks every subtask to checkpoint and stop (not to die)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be installed from the main thread
        return

    def request_stop(signum: int, _frame: object) -> None:
        log.warning(
            "SIGTERM: asking every subtask of %s to take a last checkpoint and stop", plan.job
        )
        record_job_event(settings, plan.job, "stop-requested", run=run_id)
        on_stop()

    previous = signal.signal(signal.SIGTERM, request_stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _task(
    payload: tuple[JobConfig, int | None, dict[str, str], str, int, PlanShape, ModuleCode | None],
    index: int,
) -> Iterator[dict[str, Any]]:
    """Body of one Spark task: run subtask ``index`` of the plan (in the operator job's
    generation that the payload names; with the upgraded pipeline code if it has one)."""
    from pyspark import TaskContext

    config, from_checkpoint, env, run_id, generation, shape, code = payload
    for key in [k for k in os.environ if k.startswith(config.env_prefixes)]:
        del os.environ[key]  # the submitter's environment wins, including what it unset
    os.environ.update(env)
    forwarded_env(config.forward_env)  # their secret values are scrubbed here too
    subtask_logging()  # the run's log file, if it has one (spillway.spark_jobs.spark.runlog)
    for noisy in ("py4j", "pyspark"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    ctx = TaskContext.get()
    attempt = ctx.attemptNumber() if ctx is not None else 0
    entered = time.time()
    phases = PhaseClock()
    # Forked from spillway.spark_jobs.spark.daemon: the fork time it noted; else the process's start
    # time. A worker PySpark reuses (spark.python.worker.reuse) was born for an earlier task,
    # maybe before this one was scheduled: for this attempt its Python started on entry.
    global _TASKS_ENTERED
    _TASKS_ENTERED += 1
    born = (
        getattr(sys.modules.get("__main__"), "spillway_forked_at", None) or process_start_time()
        if _TASKS_ENTERED == 1
        else entered
    )
    if born is not None:
        phases.mark("python_started", born)
        phases.step("worker", max(0.0, entered - born))
    if code is not None:  # after the environment and conf: the module may read them at import
        jobconf.install(config.conf)
        install(code)
    # The driver's key-group counts (a job keeps those it first ran with) and widths.
    plan = shape.apply(load_plan(config.pipeline, config.job_id, config.conf))
    subtask = plan.subtasks()[index]
    phases.mark("imported")  # this module, the pipeline's and their imports
    phases.lap("plan")
    if shape.awaiting is not None:  # launched ahead of a live rescale's handover
        ready = await_handover(
            config.settings(), plan.job, shape, run_id, (subtask.operator, generation)
        )
        phases.lap("handover")
        if ready is None:
            return  # the handover failed: the operator starts again as it was
        shape = ready
    options = config.options(from_checkpoint, run_id, generation, shape.rescale)
    runner = SubtaskRunner(plan, subtask, config.settings(), options, attempt, phases=phases)
    # Redos within this attempt (spillway.recovery.runtime.redo): a transaction a changing
    # cluster would not let finish is redone from the last checkpoint by a new runner in
    # this process, within bounds, instead of failing the task (a restart).
    budget = RedoBudget()
    while True:
        started = time.time()
        try:
            result = runner.run()
        except ProducerFencedError as e:
            # Fenced by a newer incarnation (a Spark retry elsewhere, or `spillway replay`):
            # it owns the subtask now, and retrying would only fence it back, so end quietly.
            # Fenced with no newer incarnation: the broker aborted a transaction that outlived
            # transaction.timeout.ms (e.g. the process was stopped); only a retry continues it.
            if not newer_incarnation(config.settings(), subtask, os.getpid(), started):
                raise ProducerFencedError(
                    f"{subtask}: {e}; no newer incarnation exists, so the broker aborted a "
                    "transaction that outlived transaction.timeout.ms: retrying the subtask",
                    subtasks=[subtask],
                ) from e
            log.warning("%s: %s", subtask, e)
            result = runner.result
            result.status = "fenced"
        except SpillwayError as e:
            decision = budget.decide(e, time.time(), runner.resumed_at, runner.result.checkpoints)
            if decision.verdict is Verdict.REDO:
                # Same attempt, same transactional id: the new runner's init_transactions
                # fences the failed producer (also one abandoned in a call that ignored its
                # timeout) and it restores from the last committed checkpoint.
                time.sleep(decision.pause_s)
                if runner.result.checkpoints:
                    # Past --from-checkpoint now: the redo continues from the latest.
                    options = replace(options, from_checkpoint=None)
                # The attempt's planned crashes (SPILLWAY_CRASH_AT) keep their counts.
                runner = SubtaskRunner(
                    plan,
                    subtask,
                    config.settings(),
                    options,
                    attempt,
                    phases=PhaseClock(),
                    faults=runner.crash.faults,
                )
                runner.observer.redoing(decision.redo, e, decision.stall_s, decision.reason)
                continue
            if budget.redos:
                log.warning("%s: not redone again (%s)", subtask, decision.reason)
            if not e.deterministic:
                raise  # Spark retries the task; the subtask restarts from its checkpoint
            # A retry would meet the same error: end the attempt without one, so Spark does
            # not retry it. The driver saw the "failed" event and stops the job
            # (spillway.spark_jobs.spark.failfast).
            result = runner.result
            result.error = abort_message(subtask, e)
        break
    result.redos = budget.total
    yield asdict(result)
