"""Running one benchmark process and measuring it (CPU, memory, load), broker included.

:func:`run_tool` runs a command to completion and takes its CPU time and peak RSS from
``wait4`` (the whole life of the process, start-up included). :func:`run_engine` runs a
``bench.peers`` engine and measures only the stretch between its ``READY`` and ``DONE``
lines, by sampling its process tree in ``/proc`` (see :mod:`bench.procstat`).
In both, the broker JVM's CPU time over the same stretch is read from ``/proc/<pid>/stat``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from typing import IO, Any

from bench import procstat


class MeasureError(Exception):
    """A measured process failed or did not finish in time (the message says which)."""


@dataclass(frozen=True)
class Measured:
    """One measured stretch of one process (tree)."""

    seconds: float
    cpu_s: float  # the measured processes
    broker_cpu_s: float  # the broker JVM over the same stretch
    peak_rss_bytes: int
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]

    def per_cpu_second(self, records: int) -> float:
        """Records per CPU-second of the processes and the broker together."""
        return records / (self.cpu_s + self.broker_cpu_s)

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


def _broker_cpu(pid: int) -> float:
    stat = procstat.read_stat(pid)
    if stat is None:
        raise MeasureError(f"the broker (pid {pid}) is gone")
    return procstat.cpu_seconds([stat])


def run_tool(command: list[str], broker_pid: int, timeout_s: float) -> tuple[str, Measured]:
    """Run ``command`` to the end; its stdout and its measured life (from ``wait4``).

    Raises :class:`MeasureError` on a non-zero exit or when it runs past ``timeout_s``
    (then it is killed).
    """
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        load0, b0, t0 = procstat.load_average(), _broker_cpu(broker_pid), time.monotonic()
        proc = subprocess.Popen(command, stdout=out, stderr=err, start_new_session=True)
        timer = _Killer(proc, timeout_s)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        timer.cancel()
        seconds = time.monotonic() - t0
        b1, load1 = _broker_cpu(broker_pid), procstat.load_average()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    what = " ".join(command[4:5])
    if timer.fired:
        raise MeasureError(f"{what} ran longer than {timeout_s:.0f} s (killed)")
    if proc.returncode != 0:
        raise MeasureError(f"{what} exited {proc.returncode}: {stderr[-800:]}")
    cpu = usage.ru_utime + usage.ru_stime
    # ru_maxrss is in KiB on Linux.
    return stdout, Measured(seconds, cpu, b1 - b0, usage.ru_maxrss * 1024, load0, load1)


@dataclass(frozen=True)
class EngineRun:
    """What :func:`run_engine` measured between READY and DONE."""

    measured: Measured
    started: float  # unix time of READY, as the engine printed it
    finished: float  # unix time of DONE
    # Records the engine had processed before READY (Structured Streaming's first
    # micro-batch: READY comes once it completed), so not in the measured window.
    before_ready: int = 0


def _expect(stream: IO[str], word: str, proc: subprocess.Popen[str], what: str) -> list[str]:
    """The fields of the engine's next ``WORD <unix time> [records before]`` line."""
    for line in stream:
        if line.startswith(word + " "):
            return line.split()
    proc.wait()
    raise MeasureError(f"{what} exited {proc.returncode} before printing {word}")


def run_engine(args: list[str], broker_pid: int, timeout_s: float, log: IO[str]) -> EngineRun:
    """Run ``python -m bench.peers ARGS``; measure its tree between READY and DONE.

    Its stderr goes to ``log``. A run past ``timeout_s`` is killed (its process group,
    which only it and its children are in) and raises :class:`MeasureError`.
    """
    what = f"bench.peers {args[0]}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.peers", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    assert proc.stdin is not None
    timer = _Killer(proc, timeout_s)
    try:
        ready = _expect(proc.stdout, "READY", proc, what)
        load0 = procstat.load_average()
        cpu0 = procstat.cpu_seconds(procstat.read_tree(proc.pid))
        b0 = _broker_cpu(broker_pid)
        with procstat.PeakRss(proc.pid) as peak:
            finished = float(_expect(proc.stdout, "DONE", proc, what)[1])
            cpu1 = procstat.cpu_seconds(procstat.read_tree(proc.pid))
            b1 = _broker_cpu(broker_pid)
        load1 = procstat.load_average()
        proc.stdin.close()
        if proc.wait(120) != 0:
            raise MeasureError(f"{what} exited {proc.returncode} after DONE")
    finally:
        timer.cancel()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if timer.fired:
        raise MeasureError(f"{what} did not finish within {timeout_s:.0f} s (killed)")
    started = float(ready[1])
    m = Measured(finished - started, cpu1 - cpu0, b1 - b0, peak.peak, load0, load1)
    return EngineRun(m, started, finished, int(ready[2]) if len(ready) > 2 else 0)


def run_whole(
    command: list[str], broker_pid: int, timeout_s: float, log: IO[str], cwd: str | None = None
) -> Measured:
    """Run ``command`` to its end with stdin closed; measure its whole process tree's life.

    CPU and peak RSS of the tree are sampled from ``/proc`` (:class:`procstat.TreeSampler`),
    so grandchildren that their parent never waits for (Spark's JVM, PySpark's workers)
    count too; the broker's CPU over the same stretch beside it. Its stdout and stderr go
    to ``log``. Raises :class:`MeasureError` on a non-zero exit or a time-out (killed).
    """
    what = " ".join(command[:4])
    load0, b0, t0 = procstat.load_average(), _broker_cpu(broker_pid), time.monotonic()
    proc = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        cwd=cwd,
        start_new_session=True,
    )
    timer = _Killer(proc, timeout_s)
    try:
        with procstat.TreeSampler(proc.pid) as tree:
            # Sample until the root exits. Not proc.poll(): it would reap the root, and the
            # last sample must read the exited (zombie) root's own CPU time first.
            while not _exited(proc.pid):
                time.sleep(0.05)
            tree.sample()
        proc.wait()
        seconds = time.monotonic() - t0
        b1, load1 = _broker_cpu(broker_pid), procstat.load_average()
    finally:
        timer.cancel()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        _kill_group_leftovers(proc.pid)
    if timer.fired:
        raise MeasureError(f"{what} ran longer than {timeout_s:.0f} s (killed)")
    if proc.returncode != 0:
        raise MeasureError(f"{what} exited {proc.returncode} (see the log)")
    return Measured(seconds, tree.cpu_s, b1 - b0, tree.peak_rss, load0, load1)


def _exited(pid: int) -> bool:
    """Whether child ``pid`` has exited, without reaping it."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # already reaped (by the time-out killer's poll)
        return True


def _kill_group_leftovers(pgid: int) -> None:
    """SIGKILL what is left of the run's own process group (an orphaned JVM or worker)."""
    # ProcessLookupError, the usual case: every process of the run has exited.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


class _Killer:
    """Kills a process group after a timeout unless cancelled first."""

    def __init__(self, proc: subprocess.Popen[Any], timeout_s: float) -> None:
        self.fired = False
        self._proc = proc
        self._timer = threading.Timer(timeout_s, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        if self._proc.poll() is None:
            self.fired = True
            os.killpg(self._proc.pid, signal.SIGKILL)

    def cancel(self) -> None:
        self._timer.cancel()
