"""``spillway cluster start|stop|status|logs``: a Spark standalone cluster and a Kafka broker.

:class:`LocalCluster` runs, as local processes bound to 127.0.0.1 only, a
:class:`~channels.localbroker.LocalBroker`, a Spark standalone master and N workers from
the pyspark installation (``<pyspark>/bin/spark-class``; no Spark download, no Docker)::

    cluster = LocalCluster(".spillway/cluster")
    cluster.start()         # broker, master, workers; returns once every worker registered
    cluster.master_url      # "spark://127.0.0.1:<port>"
    cluster.bootstrap       # "127.0.0.1:<port>"
    cluster.stop()          # master, workers, broker; nothing of ours is left running

Everything lives in one directory (default ``.spillway/cluster``)::

    cluster.json            ports, so status/stop in another process find the cluster
    broker/                 the broker's own directory (data, PID file, logs)
    master.pid  master.log  one PID file and one log per Spark daemon
    worker-1.pid  worker-1.log  ...
    work/worker-1/          the worker's work dir: executors' stdout/stderr per application

Each Spark daemon starts in its own session (``start_new_session``), so its PID is also
its process group and session id. The worker's executors and their Python workers stay
in that session (pyspark's daemon makes its own process *group*, not a new session), so
``stop`` signals every process of the recorded session and only those: SIGTERM, a
bounded wait, then SIGKILL. A recorded PID is only trusted while its command line still
carries this directory's marker (``-Dspillway.cluster=<dir>``): PIDs are reused.

Sized for a small machine: 1 core and 1 GiB per worker, 512 MiB per daemon JVM. Killing
one worker (:meth:`LocalCluster.worker_pids`) is a real node failure on one machine.
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import fcntl
import importlib.util
import json
import logging
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from channels.errors import ConfigError, SpillwayError
from channels.localbroker import BrokerConfig, LocalBroker, free_ports
from channels.localbroker import StartResult as BrokerStartResult
from channels.localbroker import StopResult as BrokerStopResult
from channels.localbroker import process as proc_util
from channels.localbroker.jars import java_executable

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
CLUSTER_DIR_ENV = "SPILLWAY_CLUSTER_DIR"
DEFAULT_DIR = Path(".spillway") / "cluster"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
MARKER_PROPERTY = "spillway.cluster"
EXIT_NOT_RUNNING = 3
"""``status`` exit code when any component is stopped (as in LSB init scripts)."""

_STATE_FILE = "cluster.json"
_STATE_VERSION = 1
_ERROR_TAIL_LINES = 30
_KILL_WAIT_S = 10.0


class ClusterError(SpillwayError):
    """A component of the local cluster did not start, did not register, or survived SIGKILL."""


class StartResult(enum.Enum):
    """What :meth:`LocalCluster.start` did."""

    STARTED = "started"  # at least one component was started
    ALREADY_RUNNING = "already running"


class StopResult(enum.Enum):
    """What stopping one component did."""

    STOPPED = "stopped"  # every process of it exited after SIGTERM
    KILLED = "killed"  # some ignored SIGTERM for stop_timeout seconds and got SIGKILL
    NOT_RUNNING = "not running"


_BROKER_STOP = {
    BrokerStopResult.STOPPED: StopResult.STOPPED,
    BrokerStopResult.KILLED: StopResult.KILLED,
    BrokerStopResult.NOT_RUNNING: StopResult.NOT_RUNNING,
}


@dataclass(frozen=True)
class Ports:
    """Every port the cluster listens on (all on 127.0.0.1), kept in ``cluster.json``."""

    broker: int
    broker_controller: int
    master: int
    master_ui: int
    worker_uis: tuple[int, ...]

    @classmethod
    def pick(cls, workers: int) -> Ports:
        """Ports that were free a moment ago, chosen by the OS."""
        ports = free_ports(4 + workers, HOST)
        return cls(ports[0], ports[1], ports[2], ports[3], tuple(ports[4:]))

    def to_json(self) -> dict[str, Any]:
        return {
            "version": _STATE_VERSION,
            "broker": self.broker,
            "broker_controller": self.broker_controller,
            "master": self.master,
            "master_ui": self.master_ui,
            "worker_uis": list(self.worker_uis),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Ports:
        if data.get("version") != _STATE_VERSION:
            raise ConfigError(
                f"{_STATE_FILE} has version {data.get('version')!r}, expected {_STATE_VERSION}; "
                f"stop the cluster and remove the file"
            )
        return cls(
            int(data["broker"]),
            int(data["broker_controller"]),
            int(data["master"]),
            int(data["master_ui"]),
            tuple(int(p) for p in data["worker_uis"]),
        )


@dataclass(frozen=True)
class ComponentStatus:
    """One component's process state; ``detail`` is its address (and for workers, registration)."""

    name: str
    running: bool
    pid: int | None
    detail: str

    def describe(self) -> str:
        """One line for people: ``master    running  pid=...  spark://...``."""
        state = "running" if self.running else "stopped"
        pid = f"pid={self.pid}" if self.pid is not None else "-"
        return f"{self.name:<10} {state:<8} {pid:<12} {self.detail}"


@dataclass(frozen=True)
class ClusterStatus:
    """Every component's status, and the workers the master reports ALIVE (None: no answer)."""

    components: tuple[ComponentStatus, ...]
    alive_workers: int | None

    @property
    def running(self) -> bool:
        """True if every component's process runs."""
        return all(c.running for c in self.components)


class LocalCluster:
    """Start, stop and inspect one local cluster, identified by its directory.

    As with :class:`LocalBroker`, state lives in the directory, not in the object: another
    ``LocalCluster`` (or ``spillway cluster`` process) on the same directory sees the same
    cluster, and start/stop on one directory are serialised by a lock file.
    """

    def __init__(
        self,
        root: Path | str | None = None,
        *,
        workers: int = 2,
        worker_cores: int = 1,
        worker_memory: str = "1g",
        daemon_memory: str = "512m",
        app_cores: int | None = None,
        env: Mapping[str, str] | None = None,
        start_timeout: float = 120.0,
        stop_timeout: float = 30.0,
    ) -> None:
        """No I/O happens here.

        ``app_cores`` caps the cores the master grants an application that does not set
        ``spark.cores.max`` (the master's ``spark.deploy.defaultCores``; None: all free
        cores). With cores to spare on the workers, the master replaces the executors of a
        lost worker on the others.

        ``env`` is added to the environment of the master and workers; executors and their
        Python workers inherit it (e.g. settings a pipeline reads from the environment on
        executors). ``SPARK_LOCAL_IP`` is always 127.0.0.1.
        """
        if workers < 1 or worker_cores < 1:
            raise ConfigError(
                f"a cluster needs at least 1 worker with 1 core, got workers={workers}, "
                f"worker_cores={worker_cores}"
            )
        if app_cores is not None and app_cores < 1:
            raise ConfigError(f"app_cores must be at least 1, got {app_cores}")
        default = os.environ.get(CLUSTER_DIR_ENV) or DEFAULT_DIR
        self.root = Path(root if root is not None else default).absolute()
        self.workers = workers
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.daemon_memory = daemon_memory
        self.app_cores = app_cores
        self.env = dict(env or {})
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._started_here = False

    # -- addresses ---------------------------------------------------------------

    @property
    def ports(self) -> Ports:
        """The ports in ``cluster.json``; raises :class:`ConfigError` if it was never started."""
        ports = self._load_ports()
        if ports is None:
            raise ConfigError(
                f"no cluster was started in {self.root}; run `spillway cluster start "
                f"--dir {self.root}` first"
            )
        return ports

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:<port>``, for ``--master``."""
        return f"spark://{HOST}:{self.ports.master}"

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:<port>`` of the cluster's broker, for ``--bootstrap``."""
        return f"{HOST}:{self.ports.broker}"

    @property
    def master_ui_url(self) -> str:
        """The master's web UI (its JSON view is at ``/json/``)."""
        return f"http://{HOST}:{self.ports.master_ui}"

    @property
    def worker_names(self) -> list[str]:
        """``worker-1`` ... : as many as the running cluster has, else as configured."""
        ports = self._load_ports()
        count = len(ports.worker_uis) if ports is not None else self.workers
        return [f"worker-{i}" for i in range(1, count + 1)]

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> StartResult:
        """Start whatever is not running and return once every worker registered.

        Reuses the ports of ``cluster.json`` (so a single killed worker can be started
        again); picks free ports if there is none or the cluster is fully stopped and one
        of them was taken meanwhile. Raises :class:`ClusterError` (with the end of the
        failing component's log) if a component exits or is not ready within
        ``start_timeout`` seconds; what this call started is stopped again then.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        with self._locked():
            started: list[str] = []
            began = time.monotonic()
            try:
                ports = self._ports_for_start()
                java = java_executable()
                spark_home = pyspark_home()
                # The master boots while the broker starts: both take seconds on 2 cores.
                if self._running_pid("master") is None:
                    self._stop_component("master")  # what is left of a killed one
                    self._spawn("master", self._master_args(ports), java, spark_home)
                    started.append("master")
                if self._broker(ports).start() is BrokerStartResult.STARTED:
                    started.append("broker")
                self._wait_master(ports)
                for name, ui_port in zip(self.worker_names, ports.worker_uis, strict=True):
                    if self._running_pid(name) is None:
                        # A SIGKILLed worker can leave executors behind in its session.
                        self._stop_component(name)
                        args = self._worker_args(name, ports, ui_port)
                        self._spawn(name, args, java, spark_home)
                        started.append(name)
                self._wait_workers(ports)
            except BaseException:
                # Never leave a half-started cluster behind (also on Ctrl-C).
                for name in reversed(started):
                    with contextlib.suppress(Exception):
                        self._stop_component(name)
                raise
            if not started:
                log.info("Local cluster in %s already running", self.root)
                return StartResult.ALREADY_RUNNING
            self._started_here = True
            log.info(
                "Local cluster ready in %.1f s: master %s (%d workers), broker %s",
                time.monotonic() - began,
                self.master_url,
                self.workers,
                self.bootstrap,
            )
            return StartResult.STARTED

    def stop(self) -> dict[str, StopResult]:
        """Stop the master, the workers, then the broker; return what happened to each.

        Every process in a Spark daemon's session (the daemon JVM, its executors and their
        Python workers) gets SIGTERM, and SIGKILL after ``stop_timeout`` seconds.
        """
        results: dict[str, StopResult] = {}
        if not self.root.is_dir():
            return {name: StopResult.NOT_RUNNING for name in self._names()}
        with self._locked():
            # The master first: it would have the workers launch replacement executors.
            for name in ["master", *reversed(self.worker_names), "broker"]:
                results[name] = self._stop_component(name)
        return results

    def status(self) -> ClusterStatus:
        """Each component's process state, and the workers the master reports ALIVE."""
        ports = self._load_ports()
        components = []
        broker_status = self._broker(ports).status() if ports is not None else None
        components.append(
            ComponentStatus(
                "broker",
                broker_status is not None and broker_status.running,
                broker_status.pid if broker_status is not None else None,
                f"bootstrap={self.bootstrap}" if ports is not None else "",
            )
        )
        master_json = self._master_json(ports) if ports is not None else None
        pid = self._running_pid("master")
        detail = f"{self.master_url}  ui={self.master_ui_url}" if ports is not None else ""
        components.append(ComponentStatus("master", pid is not None, pid, detail))
        registered = _registered_ui_ports(master_json)
        for i, name in enumerate(self.worker_names):
            pid = self._running_pid(name)
            detail = ""
            if ports is not None and i < len(ports.worker_uis):
                ui = ports.worker_uis[i]
                state = "registered" if ui in registered else "not registered"
                detail = f"ui=http://{HOST}:{ui}  {state}"
            components.append(ComponentStatus(name, pid is not None, pid, detail))
        alive = len(registered) if master_json is not None else None
        return ClusterStatus(tuple(components), alive)

    def worker_pids(self) -> list[int]:
        """PIDs of the running worker JVMs (SIGKILL one to simulate a node failure)."""
        return [pid for name in self.worker_names if (pid := self._running_pid(name)) is not None]

    def processes(self) -> list[int]:
        """Every live process of this cluster: the broker, and each Spark daemon's session."""
        pids: set[int] = set()
        broker_pid = proc_util.read_pid(self._broker_config(None).pid_file)
        if broker_pid is not None and proc_util.is_alive(broker_pid):
            pids.add(broker_pid)
        for name in ["master", *self.worker_names]:
            sid = proc_util.read_pid(self._pid_file(name))
            if sid is not None and self._session_trusted(name, sid):
                pids.update(_session_members(sid))
        return sorted(pids)

    def logs(self, name: str, lines: int = 50) -> list[str]:
        """The last ``lines`` lines of a component's log ("broker", "master", "worker-1", ...)."""
        if name == "broker":
            return self._broker(self._load_ports()).logs(lines)
        return proc_util.tail_lines(self._log_file(name), lines)

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # Only stop what this object started: a cluster that was already running when the
        # block began belongs to whoever started it.
        if self._started_here:
            self.stop()
            self._started_here = False

    # -- internals: files and ports ----------------------------------------------

    def _names(self) -> list[str]:
        return ["broker", "master", *self.worker_names]

    def _pid_file(self, name: str) -> Path:
        return self.root / f"{name}.pid"

    def _log_file(self, name: str) -> Path:
        return self.root / f"{name}.log"

    def _marker(self) -> str:
        return f"-D{MARKER_PROPERTY}={self.root}"

    def _load_ports(self) -> Ports | None:
        try:
            data = json.loads((self.root / _STATE_FILE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read {self.root / _STATE_FILE}: {exc}") from exc
        return Ports.from_json(data)

    def _save_ports(self, ports: Ports) -> None:
        path = self.root / _STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(ports.to_json(), indent=2) + "\n", encoding="utf-8")
        tmp.replace(path)

    def _ports_for_start(self) -> Ports:
        saved = self._load_ports()
        if saved is not None and len(saved.worker_uis) != self.workers:
            if self.processes():
                raise ConfigError(
                    f"the cluster in {self.root} runs {len(saved.worker_uis)} workers, not "
                    f"{self.workers}; stop it first (`spillway cluster stop --dir {self.root}`)"
                )
            saved = None
        if saved is not None and not self.processes():
            wanted = [saved.broker, saved.broker_controller, saved.master, saved.master_ui]
            if not all(proc_util.port_is_free(HOST, p) for p in [*wanted, *saved.worker_uis]):
                saved = None  # fully stopped, and a port was taken meanwhile: pick new ones
        ports = saved if saved is not None else Ports.pick(self.workers)
        self._save_ports(ports)
        return ports

    def _broker_config(self, ports: Ports | None) -> BrokerConfig:
        directory = self.root / "broker"
        if ports is None:
            return BrokerConfig.resolve(directory)
        return BrokerConfig(
            data_dir=directory, port=ports.broker, controller_port=ports.broker_controller
        )

    def _broker(self, ports: Ports | None) -> LocalBroker:
        return LocalBroker(
            self._broker_config(ports),
            start_timeout=self.start_timeout,
            stop_timeout=self.stop_timeout,
        )

    # -- internals: Spark daemons ------------------------------------------------

    def _master_args(self, ports: Ports) -> list[str]:
        return [
            MASTER_CLASS,
            "--host",
            HOST,
            "--port",
            str(ports.master),
            "--webui-port",
            str(ports.master_ui),
        ]

    def _worker_args(self, name: str, ports: Ports, ui_port: int) -> list[str]:
        work_dir = self.root / "work" / name
        work_dir.mkdir(parents=True, exist_ok=True)
        return [
            WORKER_CLASS,
            f"spark://{HOST}:{ports.master}",
            "--host",
            HOST,
            "--cores",
            str(self.worker_cores),
            "--memory",
            self.worker_memory,
            "--webui-port",
            str(ui_port),
            "--work-dir",
            str(work_dir),
        ]

    def _spawn(self, name: str, args: list[str], java: Path, spark_home: Path) -> None:
        local_dirs = self.root / "tmp"
        local_dirs.mkdir(exist_ok=True)
        env = {**os.environ, **self.env}
        # The REST submission server would listen on the fixed port 6066; we never use it.
        master_opts = ["-Dspark.master.rest.enabled=false"]
        if self.app_cores is not None:
            master_opts.append(f"-Dspark.deploy.defaultCores={self.app_cores}")
        env.update(
            SPARK_HOME=str(spark_home),
            JAVA_HOME=str(java.resolve().parent.parent),
            SPARK_LOCAL_IP=HOST,
            SPARK_LOCAL_DIRS=str(local_dirs),
            SPARK_DAEMON_MEMORY=self.daemon_memory,
            # Quoted: the launcher splits this on spaces, and the directory may contain some.
            SPARK_DAEMON_JAVA_OPTS=f'"{self._marker()}"',
            SPARK_MASTER_OPTS=" ".join(master_opts),
        )
        command = [str(spark_home / "bin" / "spark-class"), *args]
        with self._log_file(name).open("ab") as out:
            child = subprocess.Popen(
                command,
                cwd=self.root,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                # Own session: the PID is also the process group and session id, which the
                # executors and Python workers this daemon starts stay in.
                start_new_session=True,
            )
        self._children[child.pid] = child
        proc_util.write_pid(self._pid_file(name), child.pid)
        log.info("Started Spark %s (pid %d), log %s", name, child.pid, self._log_file(name))

    def _running_pid(self, name: str) -> int | None:
        """The PID of this directory's running daemon ``name``; removes a stale PID file."""
        pid_file = self._pid_file(name)
        pid = proc_util.read_pid(pid_file)
        if pid is None:
            return None
        self._reap(pid)
        if self._is_ours(name, pid):
            return pid
        if not _session_members(pid) or proc_util.is_alive(pid):
            # Dead with nothing left in its session, or the PID now belongs to someone else.
            log.info(
                "Removing stale PID file %s (pid %d is gone or not our %s)", pid_file, pid, name
            )
            pid_file.unlink(missing_ok=True)
        return None

    def _is_ours(self, name: str, pid: int) -> bool:
        main_class = MASTER_CLASS if name == "master" else WORKER_CLASS
        if not proc_util.is_alive(pid):
            return False
        argv = proc_util.command_line(pid)
        if argv is None:
            return False
        if argv and Path(argv[0]).name == "bash":
            # spark-class has not exec'd the JVM yet (only right after our own spawn).
            return pid in self._children
        return main_class in argv and self._marker() in argv

    def _session_trusted(self, name: str, sid: int) -> bool:
        """True if processes in session ``sid`` are ours: the leader is, or it is dead.

        A session id cannot be handed to a new process while any member of the session
        lives, so members of a session whose leader exited are still ours.
        """
        self._reap(sid)
        return self._is_ours(name, sid) or not proc_util.is_alive(sid)

    def _stop_component(self, name: str) -> StopResult:
        if name == "broker":
            return _BROKER_STOP[self._broker(self._load_ports()).stop()]
        pid_file = self._pid_file(name)
        sid = proc_util.read_pid(pid_file)
        if sid is None:
            return StopResult.NOT_RUNNING
        if not self._session_trusted(name, sid):
            log.info("Removing stale PID file %s (pid %d is not our %s)", pid_file, sid, name)
            pid_file.unlink(missing_ok=True)
            return StopResult.NOT_RUNNING
        result = self._terminate_session(name, sid)
        pid_file.unlink(missing_ok=True)
        log.info("Spark %s (session %d) %s", name, sid, result.value)
        return result

    def _terminate_session(self, name: str, sid: int) -> StopResult:
        if not _session_members(sid):
            return StopResult.NOT_RUNNING
        if self._signal_until_gone(sid, signal.SIGTERM, self.stop_timeout):
            return StopResult.STOPPED
        log.warning(
            "Spark %s: pids %s ignored SIGTERM for %.0f s; sending SIGKILL",
            name,
            _session_members(sid),
            self.stop_timeout,
        )
        if not self._signal_until_gone(sid, signal.SIGKILL, _KILL_WAIT_S):
            raise ClusterError(
                f"processes {_session_members(sid)} of Spark {name} survived SIGKILL; "
                f"check them by hand"
            )
        return StopResult.KILLED

    def _signal_until_gone(self, sid: int, signum: signal.Signals, timeout: float) -> bool:
        """Send ``signum`` to every member of session ``sid``, also to members that appear
        meanwhile (a worker may still launch an executor while it shuts down); True once
        the session is empty, False after ``timeout`` seconds."""
        signalled: set[int] = set()
        deadline = time.monotonic() + timeout
        while True:
            self._reap(sid)
            members = _session_members(sid)
            if not members:
                return True
            if time.monotonic() >= deadline:
                return False
            new = [pid for pid in members if pid not in signalled]
            if new:
                _signal_session(sid, new, signum)
                signalled.update(new)
            time.sleep(0.1)

    def _reap(self, pid: int) -> None:
        # Our own child is waited for through Popen (no zombie, no ResourceWarning).
        child = self._children.get(pid)
        if child is not None and child.poll() is not None:
            del self._children[pid]

    # -- internals: readiness ----------------------------------------------------

    def _master_json(self, ports: Ports) -> dict[str, Any] | None:
        url = f"http://{HOST}:{ports.master_ui}/json/"
        try:
            # The master is on loopback; never go through a proxy from the environment.
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            with opener.open(url, timeout=2.0) as response:
                data = json.loads(response.read().decode("utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _wait_master(self, ports: Ports) -> None:
        self._wait(
            "master",
            lambda: (self._master_json(ports) or {}).get("status") == "ALIVE",
            ["master"],
        )

    def _wait_workers(self, ports: Ports) -> None:
        wanted = set(ports.worker_uis)

        def registered() -> bool:
            return wanted <= _registered_ui_ports(self._master_json(ports))

        self._wait("workers to register", registered, ["master", *self.worker_names])

    def _wait(self, what: str, ready: Callable[[], bool], watched: list[str]) -> None:
        deadline = time.monotonic() + self.start_timeout
        while not ready():
            for name in watched:
                if self._running_pid(name) is None:
                    raise ClusterError(
                        f"Spark {name} exited during start; {self._log_excerpt(name)}"
                    )
            if time.monotonic() >= deadline:
                excerpts = " ".join(self._log_excerpt(n) for n in watched)
                raise ClusterError(
                    f"timed out after {self.start_timeout:.0f} s waiting for {what} in "
                    f"{self.root}; it is being stopped. {excerpts}"
                )
            time.sleep(0.5)

    def _log_excerpt(self, name: str) -> str:
        path = self._log_file(name)
        lines = proc_util.tail_lines(path, _ERROR_TAIL_LINES)
        if not lines:
            return f"{path} is empty."
        return f"last lines of {path}:\n" + "\n".join(lines)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with (self.root / ".lock").open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def pyspark_home() -> Path:
    """The installed pyspark package directory, which holds ``bin/spark-class`` and the jars."""
    spec = importlib.util.find_spec("pyspark")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    home = Path(locations[0]) if locations else None
    if home is None or not (home / "bin" / "spark-class").is_file():
        raise ConfigError(
            "pyspark with bin/spark-class was not found in this Python environment; "
            "install the package with its dependencies (`pip install -e .`)"
        )
    return home


def _registered_ui_ports(master_json: Mapping[str, Any] | None) -> set[int]:
    """Web UI ports of the workers the master reports ALIVE."""
    ports = set()
    for worker in (master_json or {}).get("workers", []):
        address = str(worker.get("webuiaddress", ""))
        port = address.rpartition(":")[2]
        if worker.get("state") == "ALIVE" and port.isdigit():
            ports.add(int(port))
    return ports


def _session_members(sid: int) -> list[int]:
    """Live processes (zombies excluded) whose session id is ``sid``. Linux only: reads /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        # Fields after the parenthesised command name: state ppid pgrp session ...
        fields = stat.rpartition(")")[2].split()
        if len(fields) >= 4 and fields[0] != "Z" and int(fields[3]) == sid:
            members.append(int(entry.name))
    return members


def _signal_session(sid: int, members: list[int], signum: signal.Signals) -> None:
    # The group first (its leader is the session leader); then members that moved to a
    # group of their own, such as pyspark's daemon and its forked workers.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(sid, signum)
    for pid in members:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


# -- command line -----------------------------------------------------------------


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``cluster start|stop|status|logs`` to the ``spillway`` command line."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--dir",
        type=Path,
        default=None,
        help=f"cluster directory (default: ${CLUSTER_DIR_ENV}, else ./{DEFAULT_DIR})",
    )

    cluster = subparsers.add_parser(
        "cluster",
        help="run a local Spark standalone cluster plus a Kafka broker (no Docker)",
        description="Run a Kafka broker, a Spark standalone master and workers as local "
        "processes on 127.0.0.1, from the pyspark installation and Kafka's jars.",
    )
    actions = cluster.add_subparsers(
        title="actions", dest="action", metavar="ACTION", required=True
    )

    start = actions.add_parser(
        "start",
        parents=[common],
        help="start the cluster (what is not running) and print master=, bootstrap=, ui=",
    )
    start.add_argument("--workers", type=int, default=2, help="number of workers (default: 2)")
    start.add_argument("--worker-cores", type=int, default=1, help="cores per worker (default: 1)")
    start.add_argument(
        "--worker-memory", default="1g", help="memory per worker for executors (default: 1g)"
    )
    start.add_argument(
        "--timeout", type=float, default=120.0, help="seconds to wait for readiness (default: 120)"
    )
    start.set_defaults(run=_start)

    stop = actions.add_parser(
        "stop",
        parents=[common],
        help="stop every component (exit code 1 if something had to be SIGKILLed)",
    )
    stop.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="seconds to wait after SIGTERM before SIGKILL (default: 30)",
    )
    stop.set_defaults(run=_stop)

    status = actions.add_parser(
        "status",
        parents=[common],
        help=f"show each component (exit code {EXIT_NOT_RUNNING} if any is stopped)",
    )
    status.set_defaults(run=_status)

    logs = actions.add_parser("logs", parents=[common], help="print the end of a component's log")
    logs.add_argument("component", help="broker, master, worker-1, ...")
    logs.add_argument("-n", "--lines", type=int, default=50, help="number of lines (default: 50)")
    logs.set_defaults(run=_logs)


def _start(args: argparse.Namespace) -> int:
    cluster = LocalCluster(
        args.dir,
        workers=args.workers,
        worker_cores=args.worker_cores,
        worker_memory=args.worker_memory,
        start_timeout=args.timeout,
    )
    cluster.start()
    print(f"master={cluster.master_url}")
    print(f"bootstrap={cluster.bootstrap}")
    print(f"ui={cluster.master_ui_url}")
    return 0


def _stop(args: argparse.Namespace) -> int:
    results = LocalCluster(args.dir, stop_timeout=args.timeout).stop()
    for name, result in results.items():
        print(f"{name:<10} {result.value}")
    return 1 if StopResult.KILLED in results.values() else 0


def _status(args: argparse.Namespace) -> int:
    status = LocalCluster(args.dir).status()
    for component in status.components:
        print(component.describe())
    if status.alive_workers is not None:
        print(f"master reports {status.alive_workers} alive worker(s)")
    return 0 if status.running else EXIT_NOT_RUNNING


def _logs(args: argparse.Namespace) -> int:
    for line in LocalCluster(args.dir).logs(args.component, args.lines):
        print(line)
    return 0
