"""B3: localized recovery of one SIGKILLed subtask, swept across its checkpoint cycle.

One job per round: the traced B2 pipeline (:func:`bench.peers.spillway_pipeline`, every
record carries its ``seq`` and send time) with :data:`PARALLELISM` subtasks per operator,
run by ``spillway run`` on Spark local mode (one long-running task per subtask), fed at a
fixed rate by the benchmark, every hop followed by a read_committed observer
(:mod:`bench.latency`), and ``count[0]``'s checkpoint partition followed by one more, so
the benchmark sees each of its checkpoints become visible.

**The sweep** (:attr:`Settings.kills` kills, default 20): before each kill the benchmark
waits until ``count[0]`` has caught up from the previous one and :attr:`Settings.span_s`
seconds have passed (the baseline of the next kill), waits for its next checkpoint to
become visible, then SIGKILLs its Python process ``phase`` × the checkpoint interval
later, the phases ``(k + 0.5) / kills`` in a seeded random order, so the kills cover the
whole cycle evenly and the phase is not tied to the job's age. Spark retries that task
alone; it restores from its own latest checkpoint. Figures per kill:
:mod:`bench.sweepstats` (the phase where it landed, kill → processing and → caught up
from Spillway's phase records, records re-processed from its recovery record against the
observers' bound and one interval of its input, the unaffected records' p99).

**Then the whole job**, same run: SIGKILL the driver's process group (driver JVM, and
then every subtask process it leaves behind) and start ``spillway run`` again with the
same job id: every subtask restores from its own latest checkpoint. Measured: kill →
every subtask processing, kill → every subtask caught up, records re-processed (summed
over every subtask's recovery record).

The output is checked against the batch reference at the end: every update exactly once.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition

from bench import latency, peers, procstat, sweepstats, workload
from bench.kstreamsb3 import Pacer
from bench.restart import _caught_up, _events, _of, _wait_for
from bench.stats import spread

ENV_INPUT, ENV_OUTPUT = "SPILLWAY_B3_INPUT", "SPILLWAY_B3_OUTPUT"
PARALLELISM = 2
KILLED = ("count", 0)
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Settings:
    """Pace, sweep and timeline of one B3 round (seconds)."""

    rate: float = 300.0  # records/s into the input topic
    kills: int = 20  # of count[0], one per phase of the sweep
    checkpoint_interval_s: float = 1.0
    warmup_s: float = 10.0  # processing before the first kill
    span_s: float = 3.0  # the unaffected records' p99: this long before and after a kill
    whole_base_s: float = 10.0  # processing between the last sweep kill and the whole-job kill
    after_whole_s: float = 30.0  # input after the whole-job restart
    drain_s: float = 60.0  # after the last record is sent, for it to reach the output
    restart_timeout_s: float = 120.0
    seed: int = 1

    def phases(self) -> list[float]:
        """The sweep: ``(k + 0.5) / kills`` for every k, in a seeded random order."""
        out = [(k + 0.5) / self.kills for k in range(self.kills)]
        random.Random(self.seed).shuffle(out)
        return out


def pipeline() -> Any:
    """The traced pipeline over the topics named in the environment (``spillway run``)."""
    return peers.spillway_pipeline(
        os.environ[ENV_INPUT], os.environ[ENV_OUTPUT], traced=True, parallelism=PARALLELISM
    )


class _Job:
    """``spillway run bench.localized:pipeline`` in its own process group."""

    def __init__(
        self, bootstrap: str, job: str, env: dict[str, str], log: IO[str], options: list[str]
    ) -> None:
        self.bootstrap, self.job, self.env, self.log = bootstrap, job, env, log
        self.options = options  # more ``spillway run`` options
        self.proc: subprocess.Popen[bytes] | None = None
        self.launched = 0.0

    def start(self) -> None:
        spillway = str(Path(sys.executable).parent / "spillway")
        args = [spillway, "run", "bench.localized:pipeline", "--job-id", self.job]
        args += ["--bootstrap", self.bootstrap, *self.options]
        self.launched = time.time()
        self.proc = subprocess.Popen(
            args, env=self.env, stdout=self.log, stderr=self.log, start_new_session=True, cwd=ROOT
        )

    def tree(self) -> list[int]:
        """PIDs of the driver and every process below it (JVM, PySpark daemon, workers)."""
        assert self.proc is not None
        return [s.pid for s in procstat.read_tree(self.proc.pid)]

    def kill(self) -> None:
        """SIGKILL the driver's process group, then any process of its tree still alive
        (the PySpark daemon puts itself and its workers in a group of their own)."""
        assert self.proc is not None
        pids = self.tree()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self, timeout_s: float = 90.0) -> int:
        """SIGTERM (every subtask checkpoints and stops); SIGKILL if it does not exit."""
        assert self.proc is not None
        if self.proc.poll() is None:
            pids = self.tree()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
            for pid in pids:  # leftovers of the tree, by PID
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        return int(self.proc.returncode)


def _started(
    bootstrap: str, job: str, since: float, n: int, timeout_s: float
) -> list[dict[str, Any]]:
    """The ``started`` events after ``since``, once there are ``n`` (else RuntimeError)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [
            e
            for e in _events(bootstrap, job)
            if e.get("event") == "started" and float(e["time"]) > since
        ]
        if len(found) >= n:
            return found
        time.sleep(0.5)
    raise RuntimeError(f"job {job}: fewer than {n} subtasks started within {timeout_s:.0f} s")


class CheckpointWatch(threading.Thread):
    """Notes when each checkpoint of one subtask becomes visible (read_committed)."""

    def __init__(self, bootstrap: str, topic: str, partition: int) -> None:
        super().__init__(name=f"watch-{topic}[{partition}]", daemon=True)
        self.times: list[float] = []
        self._halt = threading.Event()
        self._new = threading.Condition()
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"b3-watch-{uuid.uuid4().hex[:8]}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 5,
            }
        )
        self._consumer.assign([CkTopicPartition(topic, partition, 0)])

    def run(self) -> None:
        while not self._halt.is_set():
            msgs = self._consumer.consume(100, 0.01)
            now = time.time()
            if any(m.error() is None for m in msgs):
                with self._new:
                    self.times.append(now)
                    self._new.notify_all()
        self._consumer.close()

    def next_after(self, t: float, timeout_s: float) -> float:
        """The time the first checkpoint after ``t`` became visible (waits for it)."""
        deadline = time.monotonic() + timeout_s
        with self._new:
            while not self.times or self.times[-1] <= t:
                if not self._new.wait(max(0.0, deadline - time.monotonic())):
                    raise RuntimeError(f"no checkpoint within {timeout_s:.0f} s")
            return next(x for x in self.times if x > t)

    def stop(self) -> None:
        """Stop and close the consumer."""
        self._halt.set()
        self.join(10)


def _sweep(
    bootstrap: str, job: str, watch: CheckpointWatch, s: Settings, t0: float
) -> list[tuple[float, float, int]]:
    """Kill ``count[0]`` once per phase of the sweep; ``(kill time, phase, attempt killed)``."""
    op, index = KILLED
    kills: list[tuple[float, float, int]] = []
    ready = t0 + s.warmup_s
    for k, phase in enumerate(s.phases()):
        time.sleep(max(0.0, ready - time.time()))
        last = _of(_events(bootstrap, job), "started", op, index)[-1]
        attempt = int(last["attempt"])
        checkpoint = watch.next_after(time.time(), s.restart_timeout_s)
        time.sleep(max(0.0, checkpoint + phase * s.checkpoint_interval_s - time.time()))
        killed = time.time()  # before the call: the death comes after, never before
        os.kill(int(last["pid"]), signal.SIGKILL)
        kills.append((killed, phase, attempt))
        _wait_for(
            bootstrap, job, lambda ev, a=attempt: _caught_up(ev, op, index, a), s.restart_timeout_s
        )
        # The next kill's baseline and its control window before it must not hold this
        # kill's after-window.
        ready = max(time.time(), killed + s.span_s) + 2 * s.span_s
        print(f"B3 kill {k + 1}/{s.kills} at phase {phase:.3f}: caught up", flush=True)
    return kills


def b3_round(bootstrap: str, admin: Any, s: Settings, log: IO[str]) -> dict[str, Any]:
    """One job: the sweep of localized kills, then one whole-job kill; the figures of both."""
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    from spillway.channels.ids import JobId, OperatorName, SubtaskId
    from spillway.channels.naming import checkpoint_topic
    from spillway.recovery.restore.ownership import owned_partitions

    job = f"bench-b3-{uuid.uuid4().hex[:8]}"
    source_topic, output = job + "-in", job + "-out"
    for t in (source_topic, output):
        admin.create_topics([NewTopic(t, PARALLELISM, 1)])[t].result(30)
    env = {**os.environ, ENV_INPUT: source_topic, ENV_OUTPUT: output}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    os.environ.update({ENV_INPUT: source_topic, ENV_OUTPUT: output})
    plan = pipeline().plan(job)
    n = len(plan.subtasks())
    channel = next(plan.topic_of(e) for e in plan.edges if str(e.downstream) == KILLED[0])
    owned = set(
        owned_partitions(plan, SubtaskId(JobId(job), OperatorName(KILLED[0]), KILLED[1])).of_topic(
            channel
        )
    )
    options = ["--checkpoint-interval", str(s.checkpoint_interval_s)]
    options += ["--task-attempts", str(s.kills + 4)]
    driver = _Job(bootstrap, job, env, log, options)
    observers: list[latency.Observer] = []
    pacer = Pacer(bootstrap, source_topic, s.rate)
    watch = CheckpointWatch(
        bootstrap, checkpoint_topic(JobId(job), OperatorName(KILLED[0])), KILLED[1]
    )
    out: dict[str, Any] = {"job": job, "subtasks": n, "settings": asdict(s)}
    try:
        driver.start()
        first = _started(bootstrap, job, driver.launched - 1, n, 180)
        out["startup_s"] = max(float(e["time"]) for e in first) - driver.launched
        observers = latency.observe_hops(bootstrap, plan, output, job + "-o")
        watch.start()
        t0 = time.time()
        pacer.start()
        kills = _sweep(bootstrap, job, watch, s, t0)
        time.sleep(s.whole_base_s)
        driver.kill()
        kill_whole = time.time()
        driver.start()
        _started(bootstrap, job, kill_whole, n, s.restart_timeout_s)
        time.sleep(s.after_whole_s)
        pacer.stop.set()
        pacer.join(60)
        deadline = time.monotonic() + s.drain_s
        while len(observers[-1].seen) < pacer.sent and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        pacer.stop.set()
        for o in observers:
            o.stop()
        watch.stop()
        out["exit_code"] = driver.stop()
    events = _events(bootstrap, job)
    check = workload.judge(
        workload.read_output(bootstrap, output, job + "-check"), workload.reference(pacer.sent)
    )
    with contextlib.suppress(Exception):  # tidying up, not a result
        for f in admin.delete_topics([source_topic, output]).values():
            f.result(30)
    seen = [o.seen for o in observers]
    partition = observers[1].partition

    def mine(seq: int) -> bool:
        return partition.get(seq) in owned

    out["output"] = asdict(check)
    out["sent"], out["arrived"] = pacer.sent, len(seen[-1])
    out["checkpoints"] = len(watch.times)
    out["kills"] = [
        _kill(events, k, phase, attempt, watch.times, seen, pacer.times, mine, s)
        for k, phase, attempt in kills
    ]
    out["whole"] = _whole(events, kill_whole, n)
    return out


def _kill(
    events: list[dict[str, Any]],
    killed: float,
    phase: float,
    attempt: int,
    checkpoints: list[float],
    seen: list[dict[int, float]],
    sent: dict[int, float],
    mine: Callable[[int], bool],
    s: Settings,
) -> dict[str, Any]:
    from bench import restartstats

    op, index = KILLED
    new = min(
        int(e["attempt"]) for e in _of(events, "started", op, index) if int(e["attempt"]) > attempt
    )
    restart = restartstats.restart_of(events, op, index, new, killed)
    caught = [e for e in _of(events, "caught-up", op, index) if int(e["attempt"]) == new]
    replay = caught[-1].get("replay") if caught else None
    return sweepstats.kill_figures(
        killed, phase, checkpoints, seen, sent, mine, restart, replay, s.span_s
    )


def _whole(events: list[dict[str, Any]], killed: float, n: int) -> dict[str, Any]:
    """Kill → every subtask processing / caught up, and every subtask's re-processed records,
    from the recovery records of the attempts started after the whole-job kill."""
    started = [e for e in events if e.get("event") == "started" and float(e["time"]) > killed]
    caught = [e for e in events if e.get("event") == "caught-up" and float(e["time"]) > killed]
    done: dict[tuple[str, int], float] = {}
    replay: dict[tuple[str, int], int] = {}
    for e in started + caught:
        who = (str(e["operator"]), int(e["index"]))
        at = (e.get("phases") or {}).get("caught_up")
        if at is not None:
            done[who] = max(done.get(who, 0.0), float(at))
        if (r := sweepstats.runner_replayed(e.get("replay"))) is not None:
            replay[who] = max(replay.get(who, 0), r)
    restarted = {(str(e["operator"]), int(e["index"])) for e in started}
    return {
        "kill": killed,
        "restarted": len(restarted),
        "kill_to_processing_s": max((float(e["time"]) for e in started), default=killed) - killed,
        "kill_to_caught_up_s": max(done.values()) - killed if len(done) == n else None,
        "replayed": sum(replay.values()),
        "replayed_per_subtask": {f"{o}[{i}]": r for (o, i), r in sorted(replay.items())},
    }


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The sweep's kills of every round pooled (:func:`bench.sweepstats.summarise`), the
    whole-job restarts' medians (min–max), and whether every output was exact."""

    def sp(values: list[float | None]) -> dict[str, Any] | None:
        xs = [float(v) for v in values if v is not None]
        return asdict(spread(xs)) if xs else None

    whole = [r["whole"] for r in rounds]
    return {
        "subtasks": rounds[0]["subtasks"],
        "local": sweepstats.summarise([k for r in rounds for k in r["kills"]]),
        "whole": {
            key: sp([w[key] for w in whole])
            for key in ("kill_to_processing_s", "kill_to_caught_up_s", "replayed")
        },
        "output_ok": all(r["output"]["every_update_once"] for r in rounds),
    }
