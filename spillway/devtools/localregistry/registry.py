"""A local schema registry (Apicurio Registry, in memory) for development and tests.

It runs as a detached JVM (its own session) found again through its PID file, binds
127.0.0.1 only, and serves the Confluent Schema Registry API at :attr:`LocalRegistry.url`.
Its storage is in memory: a stop forgets every schema. Everything it owns lives in one
directory::

    <dir>/registry.pid   PID of the running registry; absent when stopped
    <dir>/registry.port  the port it was started on
    <dir>/registry.out   the JVM's output (its log)
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import logging
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from spillway.channels.errors import BrokerUnavailableError, ConfigError
from spillway.devtools.localbroker import process
from spillway.devtools.localbroker.jars import java_executable
from spillway.devtools.localregistry.build import build_registry

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
DEFAULT_PORT = 8081  # the Confluent Schema Registry's
DEFAULT_DIR = Path(".spillway") / "registry"
REGISTRY_DIR_ENV = "SPILLWAY_REGISTRY_DIR"
API_PATH = "/apis/ccompat/v7"
_ERROR_TAIL_LINES = 30


class StopResult(enum.StrEnum):
    """What :meth:`LocalRegistry.stop` did."""

    STOPPED = "stopped"
    KILLED = "killed"
    NOT_RUNNING = "not running"


class LocalRegistry(process.StartedHere):
    """The registry of one directory: ``start()``, ``stop()``, ``url``.

    ``port`` None is the port it last ran on, else 8081. Used as a context manager it
    stops on exit only a registry it started itself.
    """

    def __init__(
        self,
        directory: Path | None = None,
        port: int | None = None,
        *,
        start_timeout: float = 120.0,
        stop_timeout: float = 30.0,
        cache: Path | None = None,
    ) -> None:
        env = os.environ.get(REGISTRY_DIR_ENV)
        self.dir = (directory or (Path(env) if env else DEFAULT_DIR)).absolute()
        self.port = port if port is not None else (self._last_port() or DEFAULT_PORT)
        if not 0 < self.port < 65536:
            raise ConfigError(f"registry port must be 1..65535, got {self.port}")
        self.start_timeout, self.stop_timeout, self._cache = start_timeout, stop_timeout, cache
        self._process: subprocess.Popen[bytes] | None = None
        self._started_here = False

    @property
    def url(self) -> str:
        """The Confluent-compatible API's base URL, for ``RegistryConfig(url=...)``."""
        return f"http://{HOST}:{self.port}{API_PATH}"

    @property
    def pid_file(self) -> Path:
        """``<dir>/registry.pid``."""
        return self.dir / "registry.pid"

    @property
    def log_file(self) -> Path:
        """``<dir>/registry.out``: the JVM's output."""
        return self.dir / "registry.out"

    def running_pid(self) -> int | None:
        """The PID of this directory's running registry; removes a stale PID file."""
        pid = process.read_pid(self.pid_file)
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return None
        if process.is_our_broker(pid, (self._marker(),)):
            return pid
        log.info("Removing stale PID file %s (pid %d is not our registry)", self.pid_file, pid)
        self.pid_file.unlink(missing_ok=True)
        return None

    def start(self) -> bool:
        """Start the registry and return once its API answers; False if it already ran.

        Builds it on first use (:func:`build_registry`). :class:`ConfigError` if the port
        is taken or Java/Maven is missing; :class:`BrokerUnavailableError` with the end of
        its log if it exits or does not answer within ``start_timeout`` s (it is stopped).
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        with self._locked():
            pid = self.running_pid()
            if pid is not None:
                self.port = self._last_port() or self.port
                log.info("Local schema registry already running at %s (pid %d)", self.url, pid)
                return False
            if not process.port_is_free(HOST, self.port):
                raise ConfigError(f"port {self.port} on {HOST} is taken; pick another with --port")
            java = java_executable()
            jar = build_registry(self._cache)
            (self.dir / "registry.port").write_text(f"{self.port}\n", encoding="ascii")
            started = time.monotonic()
            proc = self._spawn(java, jar)
            process.wait_or_reap(proc, self._wait_ready, self._terminate, self.pid_file)
            self._started_here = True
            log.info(
                "Local schema registry ready at %s (pid %d) in %.1f s",
                self.url, proc.pid, time.monotonic() - started,
            )  # fmt: skip
            return True

    def stop(self) -> StopResult:
        """SIGTERM to the recorded PID, SIGKILL after ``stop_timeout`` s; never another's."""
        if not self.dir.is_dir():
            return StopResult.NOT_RUNNING
        with self._locked():
            pid = self.running_pid()
            if pid is None:
                return StopResult.NOT_RUNNING
            result = self._terminate(pid)
            self.pid_file.unlink(missing_ok=True)
            log.info("Local schema registry (pid %d) %s", pid, result.value)
            return result

    def logs(self, lines: int = 50) -> list[str]:
        """The last ``lines`` lines of the registry's output."""
        return process.tail_lines(self.log_file, lines)

    def _marker(self) -> str:
        # An argument of its own names this directory's registry among the machine's JVMs.
        return f"-Dspillway.registry.dir={self.dir}"

    def _last_port(self) -> int | None:
        try:
            text = (self.dir / "registry.port").read_text(encoding="ascii").strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def _spawn(self, java: Path, jar: Path) -> subprocess.Popen[bytes]:
        command = [
            str(java),
            "-Xmx384m",
            "-XX:+ExitOnOutOfMemoryError",
            self._marker(),
            f"-Dquarkus.http.host={HOST}",
            f"-Dquarkus.http.port={self.port}",
            # One H2 connection is plenty for a test registry (the default pool is 20).
            "-Dquarkus.datasource.jdbc.min-size=1",
            "-Dquarkus.datasource.jdbc.initial-size=1",
            "-jar",
            str(jar),
        ]
        with self.log_file.open("ab") as out:
            proc = subprocess.Popen(
                command,
                cwd=self.dir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._process = proc
        process.write_pid(self.pid_file, proc.pid)
        log.info("Started local schema registry (pid %d), waiting for %s", proc.pid, self.url)
        return proc

    def _wait_ready(self, proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + self.start_timeout
        while True:
            code = proc.poll()
            if code is not None:
                raise BrokerUnavailableError(
                    f"the local schema registry exited during start (exit code {code}); "
                    f"{self._log_excerpt()}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/subjects", timeout=2.0) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() >= deadline:
                raise BrokerUnavailableError(
                    f"the local schema registry did not answer at {self.url} within "
                    f"{self.start_timeout:.0f} s; it is being stopped. {self._log_excerpt()}"
                )
            time.sleep(0.5)

    def _terminate(self, pid: int) -> StopResult:
        os.kill(pid, signal.SIGTERM)
        if self._wait_gone(pid, self.stop_timeout):
            return StopResult.STOPPED
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if not self._wait_gone(pid, 10.0):
            raise BrokerUnavailableError(f"pid {pid} survived SIGKILL; check it by hand")
        return StopResult.KILLED

    def _wait_gone(self, pid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            proc = self._process
            gone = (
                proc.poll() is not None
                if proc is not None and proc.pid == pid
                else not process.is_alive(pid)
            )
            if gone:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    def _log_excerpt(self) -> str:
        lines = process.tail_lines(self.log_file, _ERROR_TAIL_LINES)
        return f"last lines of {self.log_file}:\n" + "\n".join(lines) if lines else ""

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with (self.dir / ".lock").open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
