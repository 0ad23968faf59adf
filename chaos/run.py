"""One chaos run: the keyed job on a broker of its own, faults injected, output checked.

The run owns everything it starts — a :class:`LocalBroker` on free loopback ports, the
``spillway run`` driver (its own session, so its JVM and Python workers go with it) and a
zombie copy of a subtask — and stops each by its PID. Faults, in order:

1. the seeded subtask crash schedule (``SPILLWAY_CRASH_AT``), until the event log shows
   every planned kill and no other;
1a. ``rescale`` and ``upgrade``: the schedule's live changes (:mod:`chaos.changes`), each
   with a kill of one of the subtasks it starts, until only those subtasks have started;
2. ``broker-kill``: SIGKILL of the broker, restarted on the same directory and ports;
3. ``broker-term``: SIGTERM of the broker (clean shutdown), restarted;
4. ``broker-stop``: SIGSTOP of the broker for longer than the transaction timeout, then
   SIGCONT;
5. ``subtask-stop``: SIGSTOP of ``gen[0]``'s process, caught with a transaction open on
   the broker, for longer than the transaction timeout, then SIGCONT: the broker has
   aborted that transaction, so its next commit fails (fenced) and Spark retries it;
6. ``zombie``: a second copy of one subtask (``spillway replay``) started while Spark's
   copy runs: the older copy must be fenced;
7. ``driver-kill``: SIGKILL of the driver's whole session, then the job is run again
   (unpaced, to finish quickly); its copy of the zombied subtask fences the zombie.

Then the checks of :mod:`chaos.check` run on what Kafka holds.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from chaos import observe
from chaos.changes import inject_change, replays_outside
from chaos.check import OutputReport, check_output, kill_mismatches
from chaos.pipeline import OPERATORS, RESCALABLE, UPGRADABLE, reference
from chaos.schedule import CHANGES, Schedule, make_schedule
from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, OperatorName, TopicPartition
from spillway.channels.naming import channel_topic
from spillway.devtools.localbroker import BrokerConfig, LocalBroker

log = logging.getLogger("chaos")

REF = "chaos.pipeline:pipeline"
PARALLELISM = 2
FAULTS = (*CHANGES, "broker-kill", "broker-term", "broker-stop", "subtask-stop", "zombie",
          "driver-kill")  # fmt: skip
# The broker checks for timed-out transactions every 10 s
# (transaction.abort.timed.out.transaction.cleanup.interval.ms): a stop must outlast the
# transaction timeout plus that. Kafka's default, kept on purpose: a 1 s check lands in
# the seconds after a broker restart when its coordinator skips ABORT markers, and a run
# with it lost exactly-once (docs/architecture.md, "an abort whose markers the broker
# never writes").
ABORT_CHECK_S = 10.0
BROKER_START_S = 180.0
STEADY_S = 3.0  # a subtask this long past its start is processing, not restoring


@dataclass(frozen=True)
class Profile:
    """How big a run is and what it injects."""

    name: str
    records: int
    kills: int = 16
    keys: int = 100
    # The first run's sources are paced to emit for about this long: past the last fault.
    emit_s: float = 240.0
    faults: tuple[str, ...] = FAULTS
    checkpoint_interval_s: float = 0.5
    transaction_timeout_ms: int = 10_000
    max_kills_per_subtask: int = 3
    timeout_s: float = 600.0  # for the whole run; a hung job fails the run


SHORT = Profile("short", 200_000)
LONG = Profile("long", 400_000, kills=20, emit_s=300.0)  # x 5 seeds: 2M records


@dataclass
class Report:
    """What a run injected and what the checks found."""

    profile: str
    seed: int
    guarantee: str
    records: int
    job: str
    schedule: str = ""
    kills_planned: int = 0
    kills_by_point: dict[str, int] = field(default_factory=dict)
    kill_mismatches: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)  # live changes injected, in order
    change_mismatches: list[str] = field(default_factory=list)  # restarts not asked for
    faults: dict[str, int] = field(default_factory=dict)  # other faults injected, by kind
    fault_notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # a fault without its expected effect
    output: OutputReport = field(default_factory=OutputReport)  # committed vs reference
    uncommitted: int = 0  # output records in the log, read_uncommitted (aborted ones too)
    aborted_messages: int = 0  # channel + output messages only read_uncommitted sees
    open_transactions: list[str] = field(default_factory=list)
    replay_outside: list[str] = field(default_factory=list)
    restarts: int = 0  # subtask attempts beyond the first, all runs
    seconds: float = 0.0

    @property
    def exact(self) -> bool:
        """Every check passed: output exact, no open transaction, replay local, kills as planned."""
        return self.output.exact and not (
            self.open_transactions
            or self.replay_outside
            or self.kill_mismatches
            or self.change_mismatches
            or self.problems
        )

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON (with ``exact``)."""
        return {**asdict(self), "exact": self.exact}


class ChaosRun:
    """One seeded run of a profile; :meth:`run` once."""

    def __init__(
        self, profile: Profile, seed: int, workdir: Path, guarantee: str = "exactly-once"
    ) -> None:
        self.profile = profile
        self.seed = seed
        self.workdir = workdir
        self.guarantee = guarantee
        self.job = f"chaos-{profile.name}-{seed}-{uuid.uuid4().hex[:6]}"
        self.out_topic = f"{self.job}.out"
        self.schedule: Schedule = make_schedule(
            seed, profile.kills, OPERATORS, PARALLELISM, profile.max_kills_per_subtask,
            changes=[c for c in CHANGES if c in profile.faults], rescalable=RESCALABLE,
            upgradable=UPGRADABLE,
        )  # fmt: skip
        self._widths: dict[str, int] = {}  # operators rescaled live so far: their widths
        # A restart after SIGKILL recovers every log first (hundreds of partitions): on a
        # loaded machine that outlasts the default minute before the listener opens.
        self.broker = LocalBroker(
            BrokerConfig.with_free_ports(workdir / "broker"), start_timeout=BROKER_START_S
        )
        self.settings = KafkaSettings(self.broker.bootstrap)
        self.report = Report(profile.name, seed, guarantee, profile.records, self.job)
        self._driver: subprocess.Popen[bytes] | None = None
        self._zombie: subprocess.Popen[bytes] | None = None
        self._deadline = 0.0
        self._runs: list[str] = []

    # -- the run -------------------------------------------------------------------------

    def run(self) -> Report:
        """Start the broker, run the job under faults to its end, check, stop everything."""
        t0 = time.monotonic()
        self._deadline = t0 + self.profile.timeout_s
        self.broker.start()
        try:
            self._create_output_topic()
            self._inject()
            self._check()
        finally:
            self._stop_all()
        self.report.seconds = round(time.monotonic() - t0, 1)
        return self.report

    def _inject(self) -> None:
        faults = set(self.profile.faults)
        self.report.schedule = self.schedule.spec()
        self.report.kills_planned = len(self.schedule.crashes)
        self.report.kills_by_point = self.schedule.by_point()
        self._start_driver(crash_spec=self.schedule.spec())
        run1 = self._wait_for_run(0)
        self._wait_for_kills(run1)
        for change in self.schedule.changes:
            self._count(change.kind)
            self.report.changes.append(change.describe())
            self.report.change_mismatches += inject_change(
                self.settings, JobId(self.job), run1, change, self._until, self._wait_checkpoints
            )
            if change.kind == "rescale":
                self._widths[change.operator] = change.width
        if "broker-kill" in faults:
            self._broker_down(signal.SIGKILL, "broker-kill")
        if "broker-term" in faults:
            self._broker_down(signal.SIGTERM, "broker-term")
        if "broker-stop" in faults:
            self._stop_broker()
        if "subtask-stop" in faults:
            self._stop_subtask("gen", 0)
        if "zombie" in faults:
            self._start_zombie("weigh", 1)
        if "driver-kill" in faults:
            self._wait_checkpoints(2)
            assert self._driver is not None
            os.killpg(self._driver.pid, signal.SIGKILL)
            self._driver.wait(60)
            self._count("driver-kill")
            # The rerun is unpaced: every fault is in, the rest only has to finish. It
            # fences the zombie copy in turn (a copy outside Spark that nothing restarts).
            self._start_driver(crash_spec="", paced=False)
            self._wait_for_run(1)
        self._wait_driver()

    # -- faults --------------------------------------------------------------------------

    def _wait_for_kills(self, run: str) -> None:
        """Until the attempts seen are exactly the schedule's (every kill happened)."""
        planned, silent = self.schedule.kills(), self.schedule.silent_attempts()
        subtasks = [f"{op}[{i}]" for op in OPERATORS for i in range(PARALLELISM)]

        def problems() -> list[str]:
            events = observe.events(self.settings, JobId(self.job))
            return kill_mismatches(events, run, planned, silent, subtasks)

        waited = self._until(lambda: not problems(), "planned kills", self.profile.timeout_s)
        if waited:
            self.report.kill_mismatches = waited + problems()

    def _broker_down(self, sig: signal.Signals, kind: str) -> None:
        self._wait_checkpoints(2)
        pid = self.broker.status().pid
        assert pid is not None
        if sig == signal.SIGTERM:
            self.broker.stop()  # SIGTERM, waits for the clean shutdown
        else:
            os.kill(pid, sig)
            self._wait_gone(pid)
        self._count(kind)
        time.sleep(1.0)
        self.broker.start()

    def _stop_subtask(self, op: str, index: int) -> None:
        """SIGSTOP a source subtask with a transaction open on the broker, past the
        transaction timeout; its transaction must be aborted, its commit fail, Spark retry it.

        A source's subtask is the only writer of its forward channel's partition, so an
        open transaction there (last stable offset below the high watermark) is its own.
        """
        self._wait_checkpoints(2)
        own = TopicPartition(
            channel_topic(JobId(self.job), OperatorName(op), OperatorName("weigh")), index
        )
        pid = 0
        for _ in range(60):  # it may be restarting (a broker fault just before), or between
            started = self._latest_start(op, index)  # transactions: try again
            pid = int(started["pid"])
            time.sleep(max(0.0, float(started["time"]) + STEADY_S - time.time()))
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                time.sleep(1.0)
                continue
            if any(str(own) in o for o in observe.open_transactions(self.settings, [own.topic])):
                break
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.3)
        else:
            self.report.problems.append(f"{op}[{index}]: never caught with an open transaction")
            return
        try:
            time.sleep(self.profile.transaction_timeout_ms / 1000 + ABORT_CHECK_S + 2)
        finally:
            os.kill(pid, signal.SIGCONT)
        self._count("subtask-stop")

        def retried() -> bool:
            later = self._latest_start(op, index)
            return bool(later["pid"] != pid)

        self._note_unless(
            self._until(retried, f"a retry of {op}[{index}] after SIGCONT", 90.0),
            f"{op}[{index}] (pid {pid}) was not retried after its stop",
        )
        failed = [
            e
            for e in observe.events(self.settings, JobId(self.job))
            if e.get("event") == "failed" and e.get("pid") == pid
        ]
        if failed:
            self.report.fault_notes.append(
                f"subtask-stop {op}[{index}] pid {pid}: {failed[0]['error'][:160]}"
            )
        else:
            self.report.problems.append(f"{op}[{index}] (pid {pid}) did not fail after its stop")

    def _start_zombie(self, op: str, index: int) -> None:
        """A second live copy of a subtask; Spark's (older) copy must be fenced."""
        self._wait_checkpoints(2)
        older = self._latest_start(op, index)
        cmd = [sys.executable, "-m", "spillway.recovery", "replay", "--job", self.job]
        cmd += ["--operator", op, "--subtask", str(index), "--bootstrap", self.broker.bootstrap]
        with open(self.workdir / "zombie.log", "wb") as out:
            self._zombie = subprocess.Popen(
                cmd,
                env=self._env(""),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._count("zombie")

        def fenced() -> bool:
            return any(
                e.get("event") == "failed"
                and e.get("pid") == older["pid"]
                and "Fenced" in str(e.get("error"))
                for e in observe.events(self.settings, JobId(self.job))
            )

        self._note_unless(
            self._until(fenced, "the older copy fenced"),
            f"{op}[{index}] (pid {older['pid']}) was not fenced by its second copy",
        )

    def _stop_broker(self) -> None:
        self._wait_checkpoints(2)
        pid = self.broker.status().pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(self.profile.transaction_timeout_ms / 1000 + 2)
        finally:
            os.kill(pid, signal.SIGCONT)
        self._count("broker-stop")

    # -- the job -------------------------------------------------------------------------

    def _env(self, crash_spec: str, paced: bool = True) -> dict[str, str]:
        p = self.profile
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPILLWAY_")}
        env.update(
            SPILLWAY_CHAOS_RECORDS=str(p.records),
            SPILLWAY_CHAOS_KEYS=str(p.keys),
            SPILLWAY_CHAOS_SEED=str(self.seed),
            SPILLWAY_CHAOS_OUT=self.out_topic,
            SPILLWAY_CRASH_AT=crash_spec,
        )
        if paced:
            env["SPILLWAY_CHAOS_RATE"] = str(p.records / PARALLELISM / p.emit_s)
        return env

    def _start_driver(self, crash_spec: str, paced: bool = True) -> None:
        p = self.profile
        # Planned kills + room for the other faults: a broker fault can fail every subtask
        # once or twice (timeouts while it is away).
        attempts = p.max_kills_per_subtask + 9
        slots = self.schedule.slots(OPERATORS, PARALLELISM)
        cmd = [sys.executable, "-m", "spillway.cli", "run", REF, "--job-id", self.job]
        cmd += ["--bootstrap", self.broker.bootstrap, "--master", f"local[{slots},{attempts}]"]
        # A rerun keeps the widths live rescales gave (the code's would rescale back).
        cmd += [f"--parallelism={op}={n}" for op, n in sorted(self._widths.items())]
        cmd += ["--task-attempts", str(attempts)]
        cmd += ["--checkpoint-interval", str(p.checkpoint_interval_s)]
        cmd += ["--transaction-timeout-ms", str(p.transaction_timeout_ms)]
        cmd += ["--guarantee", self.guarantee]
        n = len(self._runs)
        with open(self.workdir / f"driver-{n}.log", "wb") as out:
            self._driver = subprocess.Popen(
                cmd,
                env=self._env(crash_spec, paced),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _wait_for_run(self, n: int) -> str:
        """The run id of the ``n``-th submission, once the driver has announced it."""

        def submitted() -> list[str]:
            return [
                str(e["run"])
                for e in observe.events(self.settings, JobId(self.job))
                if e.get("event") == "submitted"
            ]

        self._until(lambda: len(submitted()) > n, f"submission {n}")
        runs = submitted()
        self._runs = runs
        return runs[n]

    def _wait_driver(self) -> None:
        assert self._driver is not None
        self._until(
            lambda: self._driver is not None and self._driver.poll() is not None,
            "job end",
            self.profile.timeout_s,
        )
        rc = self._driver.poll()
        if rc != 0:
            self.report.problems.append(f"driver exited {rc}: see driver-*.log")
        if self._zombie is not None:
            self._until(
                lambda: self._zombie is not None and self._zombie.poll() is not None, "zombie end"
            )
            last = (self.workdir / "zombie.log").read_text(errors="replace").strip()
            last = last.splitlines()[-1][:200] if last else ""
            self.report.fault_notes.append(f"zombie copy exited {self._zombie.poll()}: {last}")

    def _wait_checkpoints(self, n: int) -> None:
        """Let every live subtask commit about ``n`` more checkpoints."""
        time.sleep(n * self.profile.checkpoint_interval_s + 1.0)

    def _latest_start(self, op: str, index: int) -> dict[str, Any]:
        found: dict[str, Any] = {}

        def seen() -> bool:
            nonlocal found
            for e in observe.events(self.settings, JobId(self.job)):
                if (e.get("event"), e.get("run"), e.get("operator"), e.get("index")) == (
                    "started",
                    self._runs[-1],
                    op,
                    index,
                ):
                    found = e
            return bool(found)

        self._until(seen, f"{op}[{index}] started")
        return found

    def _create_output_topic(self) -> None:
        from spillway.channels.kafka.admin import Admin, TopicSpec

        Admin(self.settings).ensure_topics([TopicSpec(self.out_topic, PARALLELISM, {})])

    # -- checks --------------------------------------------------------------------------

    def _check(self) -> None:
        p, r = self.profile, self.report
        committed = observe.read_output(self.settings, self.out_topic, committed=True)
        r.output = check_output(committed, reference(p.records, p.keys, self.seed))
        r.uncommitted = len(observe.read_output(self.settings, self.out_topic, committed=False))
        topics = observe.job_topics(self.settings, JobId(self.job), [self.out_topic])
        r.open_transactions = observe.open_transactions(self.settings, topics)
        data = [t for t in topics if ".ch." in t] + [self.out_topic]
        r.aborted_messages = observe.count_messages(
            self.settings, data, committed=False
        ) - observe.count_messages(self.settings, data, committed=True)
        events = observe.events(self.settings, JobId(self.job))
        plan = observe.plan_in(REF, self._env(""), self.job)
        r.replay_outside = replays_outside(plan, self._widths, events)
        r.restarts = sum(
            1 for e in events if e.get("event") == "started" and int(e.get("attempt", 0)) > 0
        )

    # -- plumbing ------------------------------------------------------------------------

    def _count(self, kind: str) -> None:
        self.report.faults[kind] = self.report.faults.get(kind, 0) + 1
        log.info("chaos %s: injected %s", self.job, kind)

    def _note_unless(self, problems: list[str], note: str) -> None:
        if problems:
            self.report.problems += [note, *problems]

    def _until(
        self, ready: Callable[[], bool], what: str, timeout_s: float = 120.0, step_s: float = 1.0
    ) -> list[str]:
        """Poll ``ready`` until true (``[]``) or the driver died / ``timeout_s`` or the run's
        deadline passed (``[what ...]``, so the caller can report it)."""
        deadline = min(self._deadline, time.monotonic() + timeout_s)
        while True:
            try:
                if ready():
                    return []
            except Exception as e:  # a broker restarting: ask again
                log.info("chaos: waiting for %s: %s", what, e)
            if self._driver is not None and self._driver.poll() is not None and what != "job end":
                return [f"driver exited ({self._driver.poll()}) while waiting for {what}"]
            if time.monotonic() > deadline:
                return [f"timed out waiting for {what}"]
            time.sleep(step_s)

    def _wait_gone(self, pid: int, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # our child (the broker): reap it
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)

    def _stop_all(self) -> None:
        for proc in (self._driver, self._zombie):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(60)
        pid = self.broker.status().pid
        if pid is not None:
            os.kill(pid, signal.SIGCONT)  # in case a failure left it stopped
        self.broker.stop()
