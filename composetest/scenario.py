"""The fault run, inside the engine's network namespace (``python -m composetest.scenario``).

1. ``compose up`` the deployment; wait until every service is healthy and the three
   brokers are in the cluster.
2. Run the example job with the README's one-line ``spark-submit`` (driver in
   spark-master, executors on both workers); wait until every subtask has committed
   two checkpoints.
3. ``docker kill`` a worker. Wait until each of its unfinished subtasks restarted.
4. ``docker kill`` a broker. Wait until no partition is led by it and every running
   subtask has committed a checkpoint since (the job goes on with two brokers).
5. ``docker start`` the broker. Wait until every partition has three in-sync replicas.
6. Wait for the job; check its output against the batch reference, exactly, and the
   event log: after the worker kill exactly its unfinished subtasks restarted, and every
   restarted subtask replayed only its own partitions (:mod:`composetest.checks`).
7. Run a pipeline module that is not in the image (:mod:`composetest.ownjob`, written into
   the mounted pipelines directory) with ``spillway run ... --conf``; scrape its metrics
   on the port published on the host's loopback while it runs, and check its output
   exactly.

The worker goes first so that each restart can be told apart by when it started: a
broker loss can restart subtasks too (a transaction that cannot finish within its
timeout is aborted, and its subtask restarts from its checkpoint); those are reported.

Prints what it saw and writes the figures as JSON (:class:`Report`).
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException

from composetest import checks, observe, ownjob
from composetest.cluster import (
    BROKERS,
    MASTER,
    SERVICES,
    Deployment,
    output_rows,
    readme_submit,
)
from composetest.host import ComposeTestError
from spillway.channels.errors import SpillwayError
from spillway.examples import clicks

log = logging.getLogger(__name__)

_HEALTHY_TIMEOUT_S = 300.0
_READY_TIMEOUT_S = 240.0
_RECOVERY_TIMEOUT_S = 180.0
_JOB_TIMEOUT_S = 900.0
_CHECKPOINTS_BEFORE_KILL = 2
_POLL_S = 0.5
_WARN_EVERY_S = 15.0
# The own pipeline: records, their factor (a --conf setting) and about how long they take.
_OWN_RECORDS = 3_000
_OWN_FACTOR = 7
_OWN_EMIT_S = 20.0


@dataclass(frozen=True)
class Plan:
    """What to run: the deployment, the job and what to kill."""

    compose: list[str]
    docker_host: str
    env: dict[str, str]
    job: str
    records: int
    parallelism: int
    broker: str
    worker: str
    work_dir: str


@dataclass
class Report:
    """Figures of one fault run (seconds unless named otherwise; times are wall times)."""

    up_healthy_s: float = 0.0
    submit_to_ready_s: float = 0.0
    worker_lost_subtasks: list[str] = field(default_factory=list)
    worker_killed_at: float | None = None
    worker_kill_to_all_restarted_s: float | None = None
    broker_killed_at: float | None = None
    broker_kill_to_leaders_moved_s: float | None = None
    broker_kill_to_every_subtask_committed_s: float | None = None
    broker_loss_restarted: list[str] = field(default_factory=list)
    broker_loss_redone: list[str] = field(default_factory=list)  # redos are no restart
    broker_start_to_isr_full_s: float | None = None
    job_s: float = 0.0
    output_rows: int = 0
    own_job_s: float | None = None
    own_output_rows: int = 0
    own_metrics_subtasks: list[str] = field(default_factory=list)
    worker_recoveries: list[str] = field(default_factory=list)
    broker_recoveries: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def wait_until(
    what: str,
    ready: Callable[[], bool],
    timeout: float,
    job: subprocess.Popen[bytes] | None = None,
) -> float:
    """Poll ``ready`` until it is true; return the seconds it took.

    Raises :class:`ComposeTestError` naming ``what`` after ``timeout`` seconds, or at once
    if ``job`` exits meanwhile.
    """
    started = time.monotonic()
    warned = 0.0
    while not _ready(ready, what, time.monotonic() - warned > _WARN_EVERY_S):
        if job is not None and job.poll() is not None:
            raise ComposeTestError(f"the job exited (code {job.returncode}) while waiting: {what}")
        if time.monotonic() - started > timeout:
            raise ComposeTestError(f"not within {timeout:.0f} s: {what}")
        if time.monotonic() - warned > _WARN_EVERY_S:
            warned = time.monotonic()
        time.sleep(_POLL_S)
    return time.monotonic() - started


def _ready(ready: Callable[[], bool], what: str, say: bool) -> bool:
    # A look at the cluster may fail while a broker is down or a leader moves: that is
    # "not yet"; the caller's time-out bounds the wait.
    try:
        return ready()
    except (KafkaException, SpillwayError) as exc:
        if say:
            log.warning("still waiting (%s): %s", what, exc)
        return False


def finished(events: list[dict[str, Any]]) -> set[str]:
    """Subtasks that have finished."""
    return {checks.name(e) for e in checks.of_kind(events, "finished")}


def run(plan: Plan, report: Report) -> None:
    """Carry out the fault run, filling ``report``; raises on a step that cannot go on."""
    deployment = Deployment(tuple(plan.compose), plan.docker_host, plan.env)
    work = Path(plan.work_dir)
    deployment.down()  # whatever a run that died left
    started = time.monotonic()
    deployment.up()
    deployment.wait_healthy(SERVICES, _HEALTHY_TIMEOUT_S)
    wait_until("three brokers in the cluster", lambda: observe.brokers() == {1, 2, 3}, 120)
    report.up_healthy_s = time.monotonic() - started
    _say(f"deployment up and healthy in {report.up_healthy_s:.1f} s")

    submitted = time.monotonic()
    job_log = work / f"job-{plan.job}.log"
    job = deployment.popen(readme_submit(plan.job), job_log)
    try:
        report.submit_to_ready_s = wait_until(
            f"every subtask has committed {_CHECKPOINTS_BEFORE_KILL} checkpoints",
            lambda: _all_checkpointed(plan),
            _READY_TIMEOUT_S,
            job,
        )
        _say(f"job ready to be hurt {report.submit_to_ready_s:.1f} s after spark-submit")
        _kill_worker(plan, deployment, report, job)
        _kill_broker(plan, deployment, report, job)
        _restart_broker(plan, deployment, report, job)
        code = job.wait(_JOB_TIMEOUT_S)
    except ComposeTestError as exc:
        raise ComposeTestError(f"{exc}\nlast lines of {job_log}:\n{_tail(job_log)}") from exc
    finally:
        if job.poll() is None:
            job.kill()
            job.wait(30)
    report.job_s = time.monotonic() - submitted
    tail = _tail(job_log)
    if code != 0:
        report.problems.append(f"spark-submit exited {code}:\n{tail}")
    _say(f"job ended (exit {code}) {report.job_s:.1f} s after spark-submit")
    _check(plan, deployment, report)
    _own_pipeline(plan, deployment, report)


def _tail(path: Path, lines: int = 15) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _all_checkpointed(plan: Plan) -> bool:
    # Every subtask started first: the driver has created the job's topics by then.
    starts = {checks.name(e) for e in checks.of_kind(observe.events(plan.job), "started")}
    if starts != set(checks.subtasks(plan.parallelism)):
        return False
    latest = observe.latest_checkpoints(plan.job, plan.parallelism)
    return all(c is not None and c[0] + 1 >= _CHECKPOINTS_BEFORE_KILL for c in latest.values())


def _kill_broker(
    plan: Plan, deployment: Deployment, report: Report, job: subprocess.Popen[bytes]
) -> None:
    node = BROKERS.index(plan.broker) + 1
    running = set(checks.subtasks(plan.parallelism)) - finished(observe.events(plan.job))
    if not running:
        report.problems.append(f"the job had finished before {plan.broker} was killed")
    killed_at = deployment.kill(plan.broker)
    report.broker_killed_at = killed_at
    _say(f"docker kill {plan.broker} (node {node}); running subtasks: {sorted(running)}")

    def leaders_moved() -> bool:
        states = observe.partitions(plan.job)
        return bool(states) and all(s.leader not in (node, -1) for s in states)

    def all_committed() -> bool:
        done = finished(observe.events(plan.job))
        latest = observe.latest_checkpoints(plan.job, plan.parallelism)
        waiting = {
            s: latest[s]
            for s in running
            if not (s in done or ((c := latest[s]) is not None and c[1] > killed_at))
        }
        if waiting:
            log.info("not committed since the broker kill: %s", waiting)
        return not waiting

    wait_until("no partition led by the killed broker", leaders_moved, _RECOVERY_TIMEOUT_S, job)
    report.broker_kill_to_leaders_moved_s = time.time() - killed_at
    wait_until(
        "every running subtask committed since the broker kill",
        all_committed,
        _RECOVERY_TIMEOUT_S,
        job,
    )
    report.broker_kill_to_every_subtask_committed_s = time.time() - killed_at
    _say(
        f"{plan.broker} lost: leaders moved {report.broker_kill_to_leaders_moved_s:.1f} s, every "
        f"running subtask committed again {report.broker_kill_to_every_subtask_committed_s:.1f} s "
        "after the kill"
    )


def _kill_worker(
    plan: Plan, deployment: Deployment, report: Report, job: subprocess.Popen[bytes]
) -> None:
    events = observe.events(plan.job)
    hosts = checks.latest_hosts(events)
    done = finished(events)
    lost = sorted(s for s, host in hosts.items() if host == plan.worker and s not in done)
    report.worker_lost_subtasks = lost
    # Mid-stream: the sources still emit, so the lost subtasks have work to come back to.
    # Which subtasks the worker holds is Spark's choice; at least one must be unfinished.
    if not lost or any(s.startswith("clicks") for s in done):
        report.problems.append(
            f"the kill of {plan.worker} did not land mid-stream (its unfinished subtasks: "
            f"{lost}; finished: {sorted(done)}): raise --emit-seconds"
        )
    killed_at = deployment.kill(plan.worker)
    report.worker_killed_at = killed_at
    _say(f"docker kill {plan.worker}; its unfinished subtasks: {lost}")

    def restarted() -> bool:
        return set(lost) <= checks.restarted_between(observe.events(plan.job), killed_at, 1e12)

    wait_until(f"{lost} restarted", restarted, _RECOVERY_TIMEOUT_S, job)
    report.worker_kill_to_all_restarted_s = time.time() - killed_at
    _say(
        f"{plan.worker} lost: every subtask of it restarted "
        f"{report.worker_kill_to_all_restarted_s:.1f} s after the kill"
    )


def _restart_broker(
    plan: Plan, deployment: Deployment, report: Report, job: subprocess.Popen[bytes]
) -> None:
    started_at = deployment.start(plan.broker)

    def isr_full() -> bool:
        states = observe.partitions(plan.job)
        return bool(states) and all(len(s.isr) == len(BROKERS) for s in states)

    wait_until(f"{plan.broker} back in every ISR", isr_full, _RECOVERY_TIMEOUT_S)
    report.broker_start_to_isr_full_s = time.time() - started_at
    _say(
        f"docker start {plan.broker}: every partition has 3 in-sync replicas again "
        f"{report.broker_start_to_isr_full_s:.1f} s later"
    )


def _check(plan: Plan, deployment: Deployment, report: Report) -> None:
    events = observe.events(plan.job)
    rows = output_rows(deployment)
    report.output_rows = len(rows)
    report.problems += checks.output_problems(rows, clicks.reference(plan.records))
    if report.worker_killed_at is None or report.broker_killed_at is None:
        return  # a step failed before both faults: already a problem
    faults = checks.Faults(
        plan.worker,
        report.worker_killed_at,
        frozenset(report.worker_lost_subtasks),
        report.broker_killed_at,
    )
    report.problems += checks.localized_problems(events, plan.job, plan.parallelism, faults)
    # Per restarted subtask: when it came back and what it replayed (known once finished).
    by_worker = checks.recoveries(events, faults.worker_killed_at, faults.broker_killed_at)
    by_broker = checks.recoveries(events, faults.broker_killed_at)
    report.worker_recoveries = [r.describe() for r in by_worker]
    report.broker_recoveries = [r.describe() for r in by_broker]
    report.broker_loss_restarted = sorted({r.subtask for r in by_broker})
    report.broker_loss_redone = checks.redone_between(events, faults.broker_killed_at)


def _own_pipeline(plan: Plan, deployment: Deployment, report: Report) -> None:
    """The user's module from the mounted directory, with ``--conf`` settings: its output
    must be exact, and its metrics must answer on the port published on the host."""
    job = f"{plan.job}-own"
    records, factor = _OWN_RECORDS, _OWN_FACTOR
    conf = ownjob.settings(records, factor, rate=records / _OWN_EMIT_S)
    job_log = Path(plan.work_dir) / f"job-{job}.log"
    started = time.monotonic()
    proc = deployment.popen(ownjob.run_argv(job, conf), job_log)
    url = f"http://127.0.0.1:{ownjob.METRICS_PORT}/metrics"
    wanted = {f"{op}[0]" for op in ownjob.OPERATORS}
    seen: dict[str, float] = {}

    def scraped() -> bool:
        nonlocal seen
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                seen = ownjob.checkpoints_by_subtask(response.read().decode(), job)
        except OSError:
            return False
        return set(seen) == wanted and all(v >= 1 for v in seen.values())

    try:
        wait_until(f"{url} lists a checkpoint of every subtask of {job}", scraped, 240, proc)
        report.own_metrics_subtasks = sorted(seen)
        code = proc.wait(_JOB_TIMEOUT_S)
    except (ComposeTestError, subprocess.TimeoutExpired) as exc:
        report.problems.append(f"own pipeline: {exc}\n{_tail(job_log)}")
        return
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    report.own_job_s = time.monotonic() - started
    if code != 0:
        report.problems.append(f"own pipeline: spillway run exited {code}:\n{_tail(job_log)}")
        return
    text = deployment.exec(MASTER, "sh", "-c", f"cat {ownjob.OUT_DIR}/out/*.jsonl", timeout=120)
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    report.own_output_rows = len(rows)
    expected = ownjob.expected_rows(records, factor)
    if sorted(rows, key=lambda r: int(r["n"])) != expected:
        report.problems.append(
            f"own pipeline: {len(rows)} output rows differ from the {len(expected)} expected "
            f"(first rows {rows[:3]})"
        )
    _say(
        f"own pipeline {ownjob.MODULE} ran from the mounted directory in "
        f"{report.own_job_s:.1f} s: {len(rows)} rows as expected with own.factor={factor}; "
        f"{url} listed {report.own_metrics_subtasks}"
    )


def _say(message: str) -> None:
    print(f"[compose-test {time.strftime('%H:%M:%S')}] {message}", flush=True)


def main(argv: list[str]) -> int:
    """``python -m composetest.scenario PLAN.json REPORT.json``: 0 if every check held."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    plan = Plan(**json.loads(Path(argv[0]).read_text(encoding="utf-8")))
    report = Report()
    try:
        run(plan, report)
    except ComposeTestError as exc:
        report.problems.append(str(exc))
    finally:
        Path(argv[1]).write_text(json.dumps(asdict(report), indent=2), encoding="utf-8")
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
