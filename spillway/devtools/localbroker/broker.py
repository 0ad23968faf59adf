"""A single-node KRaft Kafka broker run from Apache Kafka's jars, for development and tests.

The broker runs as a detached JVM (its own session, so Ctrl-C in the terminal that
started it does not stop it) and is found again through its PID file. It binds
127.0.0.1 only. Data survives ``stop``/``start``: storage is formatted once.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaException
from tenacity import (
    Retrying,
    before_sleep_log,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential,
)

from spillway.channels.errors import BrokerUnavailableError, ConfigError
from spillway.channels.kafka.clients import admin_client
from spillway.devtools.localbroker import process
from spillway.devtools.localbroker.config import (
    HOST,
    MAX_HEAP,
    MIN_HEAP,
    BrokerConfig,
    read_ports,
    render_log4j2_properties,
    render_log4j_properties,
    render_server_properties,
)
from spillway.devtools.localbroker.jars import (
    java_executable,
    kafka_version,
    logging_binding,
    resolve_jars,
)

log = logging.getLogger(__name__)

_MAIN_CLASS = "kafka.Kafka"
_STORAGE_TOOL = "kafka.tools.StorageTool"
_TOOL_HEAP = "256m"
_ERROR_TAIL_LINES = 30


class StartResult(enum.Enum):
    """What :meth:`LocalBroker.start` did."""

    STARTED = "started"
    ALREADY_RUNNING = "already running"


class StopResult(enum.Enum):
    """What :meth:`LocalBroker.stop` did."""

    STOPPED = "stopped"  # exited after SIGTERM (clean shutdown)
    KILLED = "killed"  # ignored SIGTERM for stop_timeout seconds and got SIGKILL
    NOT_RUNNING = "not running"


@dataclass(frozen=True)
class BrokerStatus:
    """A snapshot of the broker's process state (it does not probe the Kafka protocol)."""

    running: bool
    bootstrap: str
    pid: int | None
    data_dir: Path

    def describe(self) -> str:
        """One line for people: ``running  bootstrap=... pid=... dir=...``."""
        state = "running" if self.running else "stopped"
        pid = f"  pid={self.pid}" if self.pid is not None else ""
        return f"{state}  bootstrap={self.bootstrap}{pid}  dir={self.data_dir}"


class _NotReady(Exception):
    """The broker process is up but does not answer a metadata request yet."""


class LocalBroker(process.StartedHere):
    """Start, stop and inspect one local broker, identified by its data directory.

    Several ``LocalBroker`` objects (or processes) for the same directory see the same
    broker: state lives in the directory, not in the object. Operations on one
    directory are serialised by a lock file. Signals go only to the PID in the PID
    file, and only after checking that it is our ``kafka.Kafka`` process running this
    directory's ``server.properties``.
    """

    def __init__(
        self,
        config: BrokerConfig | None = None,
        *,
        start_timeout: float = 60.0,
        stop_timeout: float = 30.0,
        jar_cache: Path | None = None,
        kafka: str | None = None,
    ) -> None:
        """No I/O happens here. ``jar_cache`` overrides :func:`jars.cache_dir`.

        ``kafka`` is the Apache Kafka release to run (e.g. ``"3.9.1"``); None is the one
        the packaged ``pom.xml`` names. A data directory formatted by one major version
        is not meant to be started by an older one.
        """
        self.config = config if config is not None else BrokerConfig.resolve()
        self._kafka = kafka
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self._jar_cache = jar_cache
        self._process: subprocess.Popen[bytes] | None = None
        self._started_here = False

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:<port>``, for clients' ``bootstrap.servers``."""
        return self.config.bootstrap

    def start(self) -> StartResult:
        """Start the broker and return once it answers a metadata request.

        Returns ``ALREADY_RUNNING`` without doing anything if this directory's broker is
        running; a stale PID file is removed. Resolves the Kafka jars on first use and
        formats the storage on the directory's first start only.

        Raises :class:`ConfigError` if a port is taken or Java/Maven is missing, and
        :class:`BrokerUnavailableError` (with the tail of the broker's log) if the broker
        exits or does not answer within ``start_timeout`` seconds; it is stopped then.
        """
        config = self.config
        config.data_dir.mkdir(parents=True, exist_ok=True)
        with self._locked():
            pid = self._running_pid()
            if pid is not None:
                self._check_running_ports_match()
                log.info("Local Kafka broker already running at %s (pid %d)", self.bootstrap, pid)
                return StartResult.ALREADY_RUNNING
            self._check_ports_free()
            # Java first: Maven needs it too, and its own error would be less clear.
            java = java_executable()
            lib = resolve_jars(self._jar_cache, self.kafka_version)
            config.server_properties.write_text(render_server_properties(config), "latin-1")
            if self._log4j2:
                config.log4j2_properties.write_text(render_log4j2_properties(config), "latin-1")
            else:
                config.log4j_properties.write_text(render_log4j_properties(config), "latin-1")
            if not config.meta_properties.exists():
                self._format_storage(java, lib)
            started = time.monotonic()
            proc = self._spawn(java, lib)
            process.wait_or_reap(proc, self._wait_ready, self._terminate, config.pid_file)
            self._started_here = True
            log.info(
                "Local Kafka broker ready at %s (pid %d) in %.1f s",
                self.bootstrap,
                proc.pid,
                time.monotonic() - started,
            )
            return StartResult.STARTED

    def stop(self) -> StopResult:
        """Stop the broker: SIGTERM to the recorded PID, SIGKILL after ``stop_timeout`` s.

        Returns once the process is gone and the PID file is removed. A PID file whose
        process is gone, or is not our broker, is removed and nothing is signalled.
        """
        if not self.config.data_dir.is_dir():
            return StopResult.NOT_RUNNING
        with self._locked():
            pid = self._running_pid()
            if pid is None:
                return StopResult.NOT_RUNNING
            result = self._terminate(pid)
            self.config.pid_file.unlink(missing_ok=True)
            log.info("Local Kafka broker (pid %d) %s", pid, result.value)
            return result

    def kill(self) -> bool:
        """SIGKILL this directory's broker (a crash, not a shutdown) and wait until it is
        gone; False if it was not running. Only the recorded PID, checked to be ours, is
        signalled; the PID file is removed."""
        with self._locked():
            pid = self._running_pid()
            if pid is None:
                return False
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            if not self._wait_gone(pid, 10.0):
                raise BrokerUnavailableError(f"pid {pid} survived SIGKILL; check it by hand")
            self.config.pid_file.unlink(missing_ok=True)
            log.info("Local Kafka broker (pid %d) killed", pid)
            return True

    def status(self) -> BrokerStatus:
        """Whether this directory's broker process runs, with its bootstrap address and PID."""
        pid = self._running_pid()
        bootstrap = self.bootstrap
        if pid is not None:
            # Report where the running broker really listens, even if this object was
            # configured with other ports.
            port, _ = read_ports(self.config.server_properties)
            bootstrap = f"{HOST}:{port}" if port is not None else bootstrap
        return BrokerStatus(
            running=pid is not None,
            bootstrap=bootstrap,
            pid=pid,
            data_dir=self.config.data_dir,
        )

    def logs(self, lines: int = 50) -> list[str]:
        """The last ``lines`` lines of ``broker.log`` ([] if the broker never started)."""
        return process.tail_lines(self.config.log_file, lines)

    # -- internals -------------------------------------------------------------

    def _markers(self) -> tuple[str, str]:
        return _MAIN_CLASS, str(self.config.server_properties)

    def _running_pid(self) -> int | None:
        """The PID of this directory's running broker; removes a stale PID file."""
        pid_file = self.config.pid_file
        pid = process.read_pid(pid_file)
        if pid is None:
            if pid_file.exists():
                log.info("Removing unreadable PID file %s", pid_file)
                pid_file.unlink(missing_ok=True)
            return None
        if process.is_our_broker(pid, self._markers()):
            return pid
        log.info("Removing stale PID file %s (pid %d is not our broker)", pid_file, pid)
        pid_file.unlink(missing_ok=True)
        return None

    def _check_running_ports_match(self) -> None:
        # server.properties is only rewritten while the broker is stopped, so it holds
        # the ports of the running broker.
        running = read_ports(self.config.server_properties)
        wanted = (self.config.port, self.config.controller_port)
        if running != wanted:
            raise ConfigError(
                f"the broker in {self.config.data_dir} is already running on port {running[0]} "
                f"(controller port {running[1]}), not {wanted[0]} ({wanted[1]}); stop it first "
                f"(`spillway broker stop --dir {self.config.data_dir}`) to change its ports"
            )

    def _check_ports_free(self) -> None:
        ports = [
            ("with `spillway broker start --port <N>`", self.config.port),
            ("with `spillway broker start --controller-port <N>`", self.config.controller_port),
        ]
        if self.config.sasl is not None:
            ports.append(("for SaslListener.port", self.config.sasl.port))
        for how, port in ports:
            if not process.port_is_free(HOST, port):
                raise ConfigError(
                    f"port {port} on {HOST} is already in use (another Kafka broker or "
                    f"program), so the local broker cannot listen there; choose a free one {how}"
                )

    @property
    def kafka_version(self) -> str:
        """The Apache Kafka release this broker runs (e.g. ``4.4.0``)."""
        return self._kafka or kafka_version()

    @property
    def _log4j2(self) -> bool:
        return logging_binding(self.kafka_version) == "log4j2"

    def _java_command(self, java: Path, lib: Path, heap: str) -> list[str]:
        logging_config = (
            f"-Dlog4j2.configurationFile={self.config.log4j2_properties.as_uri()}"
            if self._log4j2
            else f"-Dlog4j.configuration={self.config.log4j_properties.as_uri()}"
        )
        return [
            str(java),
            f"-Xmx{heap}",
            "-Djava.awt.headless=true",
            logging_config,
            "-cp",
            # The JVM expands this wildcard itself; no shell is involved.
            str(lib / "*"),
        ]

    def _format_storage(self, java: Path, lib: Path) -> None:
        tool = [*self._java_command(java, lib, _TOOL_HEAP), _STORAGE_TOOL]
        member = self.config.quorum
        # Every node of a quorum is formatted with the quorum's one cluster id.
        cluster_id = (
            member.cluster_id
            if member is not None
            else self._run_tool([*tool, "random-uuid"]).strip().splitlines()[-1]
        )
        self._run_tool(
            [*tool, "format", "-t", cluster_id, "-c", str(self.config.server_properties)]
        )
        log.info("Formatted broker storage in %s (cluster id %s)", self.config.log_dirs, cluster_id)

    def _run_tool(self, command: list[str]) -> str:
        try:
            result = subprocess.run(
                command,
                cwd=self.config.data_dir,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise BrokerUnavailableError(f"{_STORAGE_TOOL} did not finish in 120 s") from exc
        if result.returncode != 0:
            raise BrokerUnavailableError(
                f"{_STORAGE_TOOL} failed (exit code {result.returncode}) for "
                f"{self.config.data_dir}:\n{(result.stdout + result.stderr).strip()}"
            )
        return result.stdout

    def _spawn(self, java: Path, lib: Path) -> subprocess.Popen[bytes]:
        command = [
            *self._java_command(java, lib, MAX_HEAP),
            f"-Xms{MIN_HEAP}",
            # Die instead of limping on in a state nobody can diagnose from a test run.
            "-XX:+ExitOnOutOfMemoryError",
        ]
        # -cp must directly precede its value, so the main class goes after the JVM flags.
        command += [_MAIN_CLASS, str(self.config.server_properties)]
        with self.config.console_file.open("ab") as console:
            proc = subprocess.Popen(
                command,
                cwd=self.config.data_dir,
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._process = proc
        process.write_pid(self.config.pid_file, proc.pid)
        log.info("Started local Kafka broker (pid %d), waiting for %s", proc.pid, self.bootstrap)
        return proc

    def _wait_ready(self, proc: subprocess.Popen[bytes]) -> None:
        retrying = Retrying(
            stop=stop_after_delay(self.start_timeout),
            wait=wait_exponential(multiplier=0.1, max=1.0),
            retry=retry_if_exception_type(_NotReady),
            before_sleep=before_sleep_log(log, logging.DEBUG),
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    code = proc.poll()
                    if code is not None:
                        raise BrokerUnavailableError(
                            f"the local Kafka broker exited during start (exit code {code}); "
                            f"{self._log_excerpt()}"
                        )
                    self._probe()
        except _NotReady as exc:
            raise BrokerUnavailableError(
                f"the local Kafka broker did not answer at {self.bootstrap} within "
                f"{self.start_timeout:.0f} s ({exc}); it is being stopped. {self._log_excerpt()}"
            ) from exc

    def _probe(self) -> None:
        # A plain TCP connect first: until the port is open, librdkafka would only
        # print connection-refused noise to stderr on every attempt.
        try:
            with socket.create_connection((HOST, self.config.port), timeout=1.0):
                pass
        except OSError as exc:
            raise _NotReady(f"port {self.config.port} not open: {exc}") from exc
        admin = admin_client(self.bootstrap)
        try:
            metadata = admin.list_topics(timeout=5.0)
        except KafkaException as exc:
            raise _NotReady(f"metadata request failed: {exc}") from exc
        if not metadata.brokers:
            raise _NotReady("metadata lists no brokers yet")

    def _terminate(self, pid: int) -> StopResult:
        os.kill(pid, signal.SIGTERM)
        if self._wait_gone(pid, self.stop_timeout):
            return StopResult.STOPPED
        log.warning(
            "Local Kafka broker (pid %d) ignored SIGTERM for %.0f s; sending SIGKILL",
            pid,
            self.stop_timeout,
        )
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if not self._wait_gone(pid, 10.0):
            raise BrokerUnavailableError(f"pid {pid} survived SIGKILL; check it by hand")
        return StopResult.KILLED

    def _wait_gone(self, pid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self._is_gone(pid):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
        return True

    def _is_gone(self, pid: int) -> bool:
        proc = self._process
        if proc is not None and proc.pid == pid:
            # Our own child is waited for through Popen: it records the exit code and
            # does not warn later that the process "is still running".
            return proc.poll() is not None
        return not process.is_alive(pid)

    def _log_excerpt(self) -> str:
        parts = []
        for path in (self.config.log_file, self.config.console_file):
            lines = process.tail_lines(path, _ERROR_TAIL_LINES)
            if lines:
                parts.append(f"last lines of {path}:\n" + "\n".join(lines))
        return "\n".join(parts) if parts else f"{self.config.log_file} is empty."

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        # Serialises start/stop on one directory across processes (CLI and tests).
        with (self.config.data_dir / ".lock").open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
