"""Measuring one gated engine run of the windows benchmark (:mod:`bench.windowpeers`).

:func:`run_spillway` and :func:`run_quix` start an engine (:mod:`bench.winengines`), wait
until it has finished set-up and waits at its first record, then measure from opening the
gate to the last window committed: wall time, CPU of the engine's process tree
(:class:`TreeCpu`) and of the broker JVM, peak RSS, load average.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from confluent_kafka import Consumer, TopicPartition

from bench import procstat
from bench.measure import Measured, MeasureError
from bench.winengines import WinConfig

ROOT = Path(__file__).resolve().parent.parent


class TreeCpu:
    """CPU seconds of a process tree from :meth:`start`, counting processes that exit.

    :func:`bench.procstat.cpu_seconds` of a tree counts an exited process only through
    its parent's ``cutime``, which Linux adds when the parent *waits* for it. PySpark's
    daemon ignores ``SIGCHLD``, so its finished workers (a subtask whose task ended) are
    reaped without that, and their time would vanish. So every ``every_s`` the tree is
    sampled: a process counts with its own time at its last sample (what it spent after
    that, at most ``every_s``, is missed), plus the reaped-children time of the
    processes still alive at the end. Peak RSS (summed over the tree) comes along.
    """

    def __init__(self, root: int, every_s: float = 0.1) -> None:
        self.root, self.every_s = root, every_s
        self.peak_rss = 0
        self._base: dict[int, tuple[int, int]] = {}  # pid -> (own, children) at start
        self._last: dict[int, tuple[int, int]] = {}
        self._alive: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tree-cpu", daemon=True)

    def _sample(self) -> None:
        stats = procstat.read_tree(self.root)
        self._alive = {s.pid for s in stats}
        for s in stats:
            self._last[s.pid] = (s.utime + s.stime, s.cutime + s.cstime)
        self.peak_rss = max(self.peak_rss, procstat.rss_bytes(stats))

    def start(self) -> None:
        """Take the baseline and start sampling."""
        self._sample()
        self._base = dict(self._last)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self._sample()

    def stop(self) -> float:
        """Stop sampling; CPU seconds since :meth:`start`."""
        self._stop.set()
        self._thread.join()
        self._sample()
        ticks = 0
        for pid, (own, children) in self._last.items():
            own0, children0 = self._base.get(pid, (0, 0))
            ticks += own - own0
            if pid in self._alive:
                ticks += children - children0
        return ticks / procstat.CLOCK_TICKS


class _Stretch:
    """CPU of a process tree plus the broker's, wall time and load, from creation on."""

    def __init__(self, root: int, broker_pid: int) -> None:
        self.broker_pid = broker_pid
        self.load0 = procstat.load_average()
        self.cpu = TreeCpu(root)
        self.cpu.start()
        self.broker0 = _broker_cpu(broker_pid)
        self.t0 = time.monotonic()

    def close(self) -> Measured:
        """Stop measuring: the figures since creation."""
        seconds = time.monotonic() - self.t0
        broker = _broker_cpu(self.broker_pid) - self.broker0
        cpu = self.cpu.stop()
        load1 = procstat.load_average()
        return Measured(seconds, cpu, broker, self.cpu.peak_rss, self.load0, load1)


def _broker_cpu(pid: int) -> float:
    stat = procstat.read_stat(pid)
    if stat is None:
        raise MeasureError(f"the broker (pid {pid}) is gone")
    return procstat.cpu_seconds([stat])


def _kill_tree(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL ``proc``'s process group and every process of its tree (PySpark's daemon
    puts itself in a group of its own), by PID."""
    pids = [s.pid for s in procstat.read_tree(proc.pid)]
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(30)


class _JobEvents:
    """Tails a Spillway job's event topic (started / finished / failed per subtask)."""

    def __init__(self, bootstrap: str, job: str) -> None:
        from spillway.channels.ids import JobId
        from spillway.recovery.observe.events import events_topic

        self.topic = events_topic(JobId(job))
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": job + "-bench-events",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "allow.auto.create.topics": False,
            }
        )
        self.consumer.assign([TopicPartition(self.topic, 0, 0)])
        self.events: list[dict[str, Any]] = []

    def poll(self) -> None:
        """Take what arrived (waits up to 50 ms)."""
        for m in self.consumer.consume(500, 0.05):
            if m.error() is None:
                self.events.append(json.loads(m.value() or b"{}"))

    def of(self, kind: str) -> list[dict[str, Any]]:
        """The events of one kind so far."""
        return [e for e in self.events if e.get("event") == kind]

    def close(self) -> None:
        """Close the consumer."""
        self.consumer.close()


def _await(
    events: _JobEvents, kind: str, n: int, proc: subprocess.Popen[Any], deadline: float
) -> None:
    while len(events.of(kind)) < n:
        if failed := events.of("failed"):
            raise MeasureError(f"spillway subtask failed: {failed[0].get('error')}")
        if proc.poll() is not None:
            raise MeasureError(f"spillway run exited {proc.returncode} before {n} {kind!r}")
        if time.monotonic() > deadline:
            raise MeasureError(f"spillway: fewer than {n} {kind!r} events in time")
        events.poll()


def run_spillway(
    bootstrap: str,
    broker_pid: int,
    cfg: WinConfig,
    timeout_s: float,
    job: str,
    log: IO[str],
    *,
    module: str = "bench.winengines",
    more_env: Mapping[str, str] | None = None,
) -> tuple[Measured, dict[str, Any]]:
    """``spillway run <module>:pipeline`` on Spark local mode, gated; measured from the
    gate to the last subtask's ``finished`` event (its final checkpoint committed).
    ``more_env``: settings besides ``cfg``'s (the join's right topic)."""
    settings = {**cfg.env(), **(more_env or {})}
    env = {**os.environ, **settings}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    os.environ.update(settings)  # for plan() here
    n = len(importlib.import_module(module).pipeline().plan(job).subtasks())
    spillway = str(Path(sys.executable).parent / "spillway")
    args = [spillway, "run", f"{module}:pipeline", "--job-id", job]
    args += ["--bootstrap", bootstrap, "--checkpoint-interval", "1", "--progress", "off"]
    deadline = time.monotonic() + timeout_s
    proc = subprocess.Popen(args, env=env, stdout=log, stderr=log, start_new_session=True, cwd=ROOT)
    events: _JobEvents | None = None
    try:
        events = _JobEvents(bootstrap, job)
        _await(events, "started", n, proc, deadline)
        stretch = _Stretch(proc.pid, broker_pid)
        cfg.gate.touch()
        _await(events, "finished", n, proc, deadline)
        measured = stretch.close()
        if proc.wait(max(1.0, deadline - time.monotonic())) != 0:
            raise MeasureError(f"spillway run exited {proc.returncode}")
        finished = events.of("finished")
        late = sum(int((e.get("set_aside") or {}).get("late", 0)) for e in finished)
        info = {"job": job, "subtasks": n, "late": late}
        return measured, info
    finally:
        if events is not None:
            events.close()
        if proc.poll() is None:
            _kill_tree(proc)


def _line(stream: IO[str], word: str, what: str) -> None:
    for line in stream:
        if line.startswith(word + " "):
            return
    raise MeasureError(f"{what} ended before printing {word}")


def run_quix(
    bootstrap: str,
    broker_pid: int,
    cfg: WinConfig,
    timeout_s: float,
    name: str,
    log: IO[str],
    windows: int,
    *,
    module: str = "bench.winengines",
    more_args: Sequence[str] = (),
) -> tuple[Measured, dict[str, Any]]:
    """``python -m <module> quix``, gated; measured from the gate to ``DONE`` (``windows``
    results out and committed); ``name`` is its consumer group."""
    workdir = tempfile.mkdtemp(prefix=name + "-")
    args = [sys.executable, "-m", module, "quix", "--kind", cfg.kind, *more_args]
    args += ["--size-ms", str(cfg.size_ms), "--hop-ms", str(cfg.hop_ms)]
    args += ["--bootstrap", bootstrap, "--input", cfg.input, "--output", cfg.output]
    args += ["--gate", str(cfg.gate), "--name", name, "--workdir", workdir]
    args += ["--windows", str(windows)]
    proc = subprocess.Popen(
        args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
        start_new_session=True, cwd=ROOT,
    )  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdin is not None
    timer = _Timeout(proc, timeout_s)
    try:
        _line(proc.stdout, "READY", "quix")
        stretch = _Stretch(proc.pid, broker_pid)
        cfg.gate.touch()
        _line(proc.stdout, "DONE", "quix")
        measured = stretch.close()
        proc.stdin.close()
        if proc.wait(120) != 0:
            raise MeasureError(f"quix exited {proc.returncode} after DONE")
        return measured, {}
    except MeasureError as e:
        if timer.fired:
            raise MeasureError(f"quix did not finish within {timeout_s:.0f} s") from e
        raise
    finally:
        timer.cancel()
        if proc.poll() is None:
            _kill_tree(proc)
        shutil.rmtree(workdir, ignore_errors=True)


class _Timeout:
    """SIGKILLs a process tree after ``seconds`` unless cancelled first."""

    def __init__(self, proc: subprocess.Popen[Any], seconds: float) -> None:
        self.fired = False
        self._proc = proc
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        if self._proc.poll() is None:
            self.fired = True
            _kill_tree(self._proc)

    def cancel(self) -> None:
        """Do not fire."""
        self._timer.cancel()
