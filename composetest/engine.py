"""A private Docker engine inside a network namespace of its own, stopped by PID.

``dockerd`` runs in the namespace ``spillway-compose`` on the socket
``/run/spillway-compose/docker.sock``, never on the default ``/var/run/docker.sock``
(the test suite would take an engine there for a testcontainers engine). Bridges, routes
and ``ip_forward`` stay inside the namespace, and with ``--iptables=false`` the host's
firewall is never touched; nothing inside can reach out. Its data root (images, build
cache) is kept in the cache between runs; everything else it leaves on the host is
removed by :func:`stop` (see :class:`HostTraces`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from composetest.host import DOCKER_CLIENT, ComposeTestError, run, which

log = logging.getLogger(__name__)

NAMESPACE = "spillway-compose"
# The containers' upstream resolver (composetest.nxdns), on the namespace's loopback.
# 192.0.2.0/24 is TEST-NET-1 (RFC 5737): no real host has it. Engine 20.10 queries
# upstream servers from inside the container, so a 127.x one cannot serve.
DNS_ADDRESS = "192.0.2.53"
RUN_DIR = Path("/run/spillway-compose")
_START_TIMEOUT_S = 60.0
_STOP_TIMEOUT_S = 30.0

# What dockerd 20.10 creates on the host outside its data and exec roots (checked with
# `find -newer` around a run): removed afterwards unless they were there before.
_TRACE_FILES = (Path("/etc/docker/key.json"),)
_TRACE_DIRS = (
    Path("/etc/docker"),
    Path("/run/docker/plugins"),
    Path("/run/docker"),
    Path("/run/containerd/s"),
    Path("/run/containerd"),
    Path("/run/netns"),
    Path("/run/mount"),
)
_CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Engine:
    """A Docker engine to talk to: its ``host`` URL, and the PID of the dockerd we started.

    ``pid`` and ``namespace`` are None for an engine someone else runs (``$DOCKER_HOST``).
    """

    host: str
    pid: int | None
    namespace: str | None
    dns_pid: int | None = None

    def docker(self, *args: str) -> list[str]:
        """argv of Debian's docker client on this engine."""
        return [str(DOCKER_CLIENT), "-H", self.host, *args]

    def env(self) -> dict[str, str]:
        """Environment for compose and other clients (``DOCKER_HOST``, BuildKit on)."""
        return {"DOCKER_HOST": self.host, "DOCKER_BUILDKIT": "1"}

    def inside(self, argv: list[str]) -> list[str]:
        """``argv`` run in the engine's network namespace, where its ports are published."""
        if self.namespace is None:
            return argv
        return ["nsenter", f"--net=/run/netns/{self.namespace}", *argv]


@dataclass(frozen=True)
class HostTraces:
    """Which of the paths dockerd may create existed before it started."""

    existed: frozenset[Path]

    @classmethod
    def snapshot(cls) -> HostTraces:
        """Record the paths that exist now."""
        paths = [*_TRACE_FILES, *_TRACE_DIRS, *_cgroup_dirs()]
        return cls(frozenset(p for p in paths if p.exists()))

    def remove_new(self) -> list[Path]:
        """Remove the traces that did not exist at the snapshot; return what was removed.

        Directories are only removed when empty (rmdir), so nothing of anyone else's goes.
        """
        removed = []
        for path in _TRACE_FILES:
            if path not in self.existed and path.is_file():
                path.unlink()
                removed.append(path)
        for path in _cgroup_dirs():
            if path not in self.existed and path.is_dir() and _rmdir_cgroup(path):
                removed.append(path)
        for path in _TRACE_DIRS:
            if path not in self.existed and path.is_dir():
                with contextlib.suppress(OSError):  # not empty: someone else uses it
                    path.rmdir()
                    removed.append(path)
        return removed


def _rmdir_cgroup(path: Path) -> bool:
    """Remove a cgroup and its child groups (BuildKit's ``buildkit``), deepest first.

    A cgroup directory holds only the kernel's control files, and rmdir removes it once
    no process is in it; one that still has processes stays (False).
    """
    try:
        for root, dirs, _ in os.walk(path, topdown=False):
            for child in dirs:
                (Path(root) / child).rmdir()
        path.rmdir()
    except OSError as exc:
        log.warning("cgroup %s stays: %s", path, exc)
        return False
    return True


def _cgroup_dirs() -> list[Path]:
    # cgroupfs driver: containers live in <controller>/docker/<id>; the "docker" group stays.
    return [c / "docker" for c in sorted(_CGROUP_ROOT.iterdir()) if c.is_dir()]


def from_environment() -> Engine | None:
    """The engine at ``$DOCKER_HOST`` if it is set and answers, else None."""
    host = os.environ.get("DOCKER_HOST")
    if not host:
        return None
    engine = Engine(host, None, None)
    run(engine.docker("version", "--format", "{{.Server.Version}}"), timeout=30)
    return engine


def create_namespace(name: str = NAMESPACE) -> None:
    """Create the network namespace ``name`` (again, if a run left it).

    Loopback up, with :data:`DNS_ADDRESS` on it where :mod:`composetest.nxdns` answers:
    containers reach it through their gateway, as they would reach a real resolver, and
    nothing leaves the namespace.
    """
    if Path(f"/run/netns/{name}").exists():
        run(["ip", "netns", "delete", name], timeout=30)
    run(["ip", "netns", "add", name], timeout=30)
    inside = ["ip", "netns", "exec", name, "ip"]
    run([*inside, "link", "set", "lo", "up"], timeout=30)
    run([*inside, "addr", "add", f"{DNS_ADDRESS}/32", "dev", "lo"], timeout=30)


def delete_namespace(name: str = NAMESPACE) -> None:
    """Delete the network namespace ``name`` if it exists."""
    if Path(f"/run/netns/{name}").exists():
        run(["ip", "netns", "delete", name], timeout=30)


def start(data_root: Path, namespace: str = NAMESPACE, run_dir: Path = RUN_DIR) -> Engine:
    """Start dockerd in ``namespace`` with ``data_root``; return once it answers.

    The socket, PID file, exec root, log and an empty daemon.json (the host's
    /etc/docker/daemon.json must not apply) are in ``run_dir``.
    """
    dockerd = which("dockerd")
    if dockerd is None:
        raise ComposeTestError("dockerd is not installed: apt-get install docker.io")
    stop_leftover(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    data_root.mkdir(parents=True, exist_ok=True)
    config = run_dir / "daemon.json"
    # Containers' upstream DNS: composetest.nxdns on the namespace's loopback (see there).
    config.write_text(json.dumps({"dns": [DNS_ADDRESS]}), encoding="ascii")
    dns = _spawn(
        [
            "nsenter",
            f"--net=/run/netns/{namespace}",
            sys.executable,
            "-m",
            "composetest.nxdns",
            DNS_ADDRESS,
        ],
        run_dir / "nxdns.log",
    )
    host = f"unix://{run_dir / 'docker.sock'}"
    argv = [
        "nsenter",
        f"--net=/run/netns/{namespace}",
        dockerd,
        "-H",
        host,
        "--data-root",
        str(data_root),
        "--exec-root",
        str(run_dir / "exec"),
        "--pidfile",
        str(run_dir / "docker.pid"),
        "--config-file",
        str(config),
        "--iptables=false",
        "--ip-masq=false",
    ]
    proc = _spawn(argv, run_dir / "dockerd.log")
    engine = Engine(host, proc.pid, namespace, dns.pid)
    try:
        _wait_answers(engine, proc, run_dir)
    except BaseException:
        stop_pid(dns.pid)
        raise
    return engine


def _spawn(argv: list[str], log_file: Path) -> subprocess.Popen[bytes]:
    log.info("$ %s", " ".join(argv))
    with log_file.open("ab") as out:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True
        )


def _wait_answers(engine: Engine, proc: subprocess.Popen[bytes], run_dir: Path) -> None:
    started = time.monotonic()
    while time.monotonic() - started < _START_TIMEOUT_S:
        if proc.poll() is not None:
            raise ComposeTestError(
                f"dockerd exited during start (exit {proc.returncode}); "
                f"see {run_dir / 'dockerd.log'}"
            )
        probe = subprocess.run(
            engine.docker("version", "--format", "{{.Server.Version}}"),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if probe.returncode == 0:
            log.info(
                "Docker engine %s up in %.1f s (pid %d, %s)",
                probe.stdout.strip(),
                time.monotonic() - started,
                proc.pid,
                engine.host,
            )
            return
        time.sleep(0.5)
    stop_pid(proc.pid)
    raise ComposeTestError(f"dockerd did not answer within {_START_TIMEOUT_S:.0f} s")


def stop(engine: Engine, run_dir: Path = RUN_DIR) -> None:
    """Stop the dockerd we started (by PID; its containerd goes with it), then our DNS."""
    if engine.pid is not None:
        stop_pid(engine.pid)
        _stop_shims(run_dir)
    if engine.dns_pid is not None:
        stop_pid(engine.dns_pid)


def stop_pid(pid: int) -> None:
    """SIGTERM ``pid``, SIGKILL after a bounded wait; return once it is gone."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if not _wait_gone(pid, _STOP_TIMEOUT_S):
        log.warning("dockerd (pid %d) ignored SIGTERM for %.0f s: SIGKILL", pid, _STOP_TIMEOUT_S)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if not _wait_gone(pid, 10.0):
            raise ComposeTestError(f"dockerd (pid {pid}) survived SIGKILL; stop it by hand")


def stop_leftover(run_dir: Path = RUN_DIR) -> None:
    """Stop a dockerd a previous run left (its PID file in ``run_dir``, its socket in argv)."""
    with contextlib.suppress(OSError, ValueError):
        pid = int((run_dir / "docker.pid").read_text().strip())
        if str(run_dir / "docker.sock") in " ".join(_argv(pid)):
            log.warning("Stopping the dockerd (pid %d) a previous run left", pid)
            stop_pid(pid)
    _stop_shims(run_dir)


def _stop_shims(run_dir: Path) -> None:
    # A dockerd that had to be killed leaves its containers' shims; they name our exec root.
    marker = str(run_dir / "exec")
    for pid in _pids():
        argv = _argv(pid)
        if argv and "containerd" in Path(argv[0]).name and any(marker in a for a in argv):
            log.warning("Stopping leftover %s (pid %d)", argv[0], pid)
            stop_pid(pid)


def _pids() -> Iterator[int]:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            yield int(entry.name)


def _argv(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # our own child stays a zombie until reaped
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
