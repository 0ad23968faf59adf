"""Small OS helpers for the broker process: PID files, identity checks, ports, log tails.

Processes are only ever addressed by the PID we recorded, and only after checking that
the PID still belongs to our broker: PIDs are reused, and killing by name could hit
someone else's Kafka.
"""

from __future__ import annotations

import abc
import contextlib
import errno
import os
import socket
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self


def read_pid(pid_file: Path) -> int | None:
    """The PID recorded in ``pid_file``, or None if the file is missing or unreadable."""
    try:
        text = pid_file.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() and int(text) > 0 else None


def write_pid(pid_file: Path, pid: int) -> None:
    """Record ``pid`` atomically, so a reader never sees a half-written file."""
    tmp = pid_file.with_suffix(".tmp")
    tmp.write_text(f"{pid}\n", encoding="ascii")
    tmp.replace(pid_file)


def is_alive(pid: int) -> bool:
    """True if ``pid`` names a running process (zombies count as gone)."""
    _reap(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, but belongs to another user
    return _state(pid) != "Z"


def command_line(pid: int) -> list[str] | None:
    """The argv of ``pid``, or None if it has exited or cannot be read."""
    # Linux only (procfs). Without it we cannot prove a PID is ours, and then we
    # treat it as someone else's: never signalled, its PID file considered stale.
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [arg.decode(errors="replace") for arg in raw.split(b"\0") if arg]


def is_our_broker(pid: int, markers: Sequence[str]) -> bool:
    """True if ``pid`` is alive and its command line contains every string in ``markers``."""
    if not is_alive(pid):
        return False
    argv = command_line(pid)
    return argv is not None and all(marker in argv for marker in markers)


def port_is_free(host: str, port: int) -> bool:
    """True if nothing listens on ``host:port`` (a bind succeeds).

    SO_REUSEADDR mirrors what the JVM sets on its server sockets, so a port only held
    by TIME_WAIT connections of a broker we just stopped counts as free.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports that were free a moment ago (the OS picks them).

    For tests and throw-away brokers. All sockets are held open until every port is
    picked, so the OS cannot hand out the same port twice.
    """
    with contextlib.ExitStack() as stack:
        probes = [
            stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            for _ in range(count)
        ]
        for probe in probes:
            probe.bind((host, 0))
        return [int(probe.getsockname()[1]) for probe in probes]


def tail_lines(path: Path, count: int) -> list[str]:
    """The last ``count`` lines of ``path`` (without newlines); [] if it does not exist.

    Reads backwards in blocks, so the cost does not grow with the size of the log.
    """
    if count <= 0:
        return []
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return []
    with handle:
        end = handle.seek(0, os.SEEK_END)
        data = b""
        position = end
        while position > 0 and data.count(b"\n") <= count:
            step = min(64 * 1024, position)
            position -= step
            handle.seek(position)
            data = handle.read(step) + data
    lines = data.decode(errors="replace").splitlines()
    return lines[-count:]


def _reap(pid: int) -> None:
    # A child of this very process stays a zombie (and kill(pid, 0) succeeds) until
    # it is waited for; collect it if it is ours. Not our child: nothing to do.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The state follows the parenthesised command name, which may contain spaces.
    return stat.rpartition(")")[2].split()[0]


def wait_or_reap(
    proc: subprocess.Popen[bytes],
    wait_ready: Callable[[subprocess.Popen[bytes]], None],
    terminate: Callable[[int], object],
    pid_file: Path,
) -> None:
    """Wait until the server just spawned as ``proc`` answers (``wait_ready``). If that
    fails in any way, Ctrl-C included, stop it (``terminate``) and forget its PID file
    before re-raising: a half-started server is never left behind."""
    try:
        wait_ready(proc)
    except BaseException:
        if proc.poll() is None:
            terminate(proc.pid)
        pid_file.unlink(missing_ok=True)
        raise


class StartedHere(abc.ABC):
    """A server the project runs (broker, registry, cluster) as a context manager.

    ``with server:`` starts it and, on leaving, stops it only if this object started it:
    one that was already running when the block began belongs to whoever started it.
    Subclasses set ``_started_here`` in ``start()`` when they launched the processes.
    """

    _started_here: bool = False

    @abc.abstractmethod
    def start(self) -> object:
        """Start the server, or attach to the one already running."""

    @abc.abstractmethod
    def stop(self) -> object:
        """Stop the server."""

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._started_here:
            self.stop()
            self._started_here = False
