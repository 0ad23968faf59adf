"""``spillway cluster start|stop|status|logs``: a Spark standalone cluster and a Kafka broker.

:class:`LocalCluster` runs, as local processes bound to 127.0.0.1 only, a
:class:`~spillway.devtools.localbroker.LocalBroker`, a Spark standalone master and N workers from
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

Parts: :mod:`spillway.devtools.clustertypes` (ports, results), :mod:`spillway.devtools.clusterprocs`
(sessions, signals, the master's view), :mod:`spillway.devtools.clustercli` (the command).

Sized for a small machine: 1 core and 1 GiB per worker, 512 MiB per daemon JVM. Killing
one worker (:meth:`LocalCluster.worker_pids`) is a real node failure on one machine.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from spillway.channels.errors import ConfigError
from spillway.devtools.clusterprocs import (
    master_args,
    master_json,
    pyspark_home,
    registered_ui_ports,
    session_members,
    terminate_session,
    worker_args,
)
from spillway.devtools.clustertypes import (
    BROKER_STOP,
    CLUSTER_DIR_ENV,
    DEFAULT_DIR,
    ERROR_TAIL_LINES,
    EXIT_NOT_RUNNING,
    HOST,
    MARKER_PROPERTY,
    MASTER_CLASS,
    WORKER_CLASS,
    ClusterError,
    ClusterStatus,
    ComponentStatus,
    Ports,
    StartResult,
    StopResult,
    load_ports,
    save_ports,
)
from spillway.devtools.localbroker import BrokerConfig, LocalBroker
from spillway.devtools.localbroker import StartResult as BrokerStartResult
from spillway.devtools.localbroker import process as proc_util
from spillway.devtools.localbroker.jars import java_executable

# What callers import from here (the rest lives in clustertypes / clusterprocs).
__all__ = ["EXIT_NOT_RUNNING", "ClusterError", "LocalCluster", "StartResult", "StopResult"]

log = logging.getLogger(__name__)


class LocalCluster(proc_util.StartedHere):
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
        ports = load_ports(self.root)
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
        ports = load_ports(self.root)
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
                    self._spawn("master", master_args(ports), java, spark_home)
                    started.append("master")
                if self._broker(ports).start() is BrokerStartResult.STARTED:
                    started.append("broker")
                self._wait_master(ports)
                for name, ui_port in zip(self.worker_names, ports.worker_uis, strict=True):
                    if self._running_pid(name) is None:
                        # A SIGKILLed worker can leave executors behind in its session.
                        self._stop_component(name)
                        work_dir = self.root / "work" / name
                        work_dir.mkdir(parents=True, exist_ok=True)
                        args = worker_args(
                            ports, ui_port, self.worker_cores, self.worker_memory, work_dir
                        )
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
        ports = load_ports(self.root)
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
        view = master_json(ports) if ports is not None else None
        pid = self._running_pid("master")
        detail = f"{self.master_url}  ui={self.master_ui_url}" if ports is not None else ""
        components.append(ComponentStatus("master", pid is not None, pid, detail))
        registered = registered_ui_ports(view)
        for i, name in enumerate(self.worker_names):
            pid = self._running_pid(name)
            detail = ""
            if ports is not None and i < len(ports.worker_uis):
                ui = ports.worker_uis[i]
                state = "registered" if ui in registered else "not registered"
                detail = f"ui=http://{HOST}:{ui}  {state}"
            components.append(ComponentStatus(name, pid is not None, pid, detail))
        alive = len(registered) if view is not None else None
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
                pids.update(session_members(sid))
        return sorted(pids)

    def logs(self, name: str, lines: int = 50) -> list[str]:
        """The last ``lines`` lines of a component's log ("broker", "master", "worker-1", ...)."""
        if name == "broker":
            return self._broker(load_ports(self.root)).logs(lines)
        return proc_util.tail_lines(self._log_file(name), lines)

    # -- internals: files and ports ----------------------------------------------

    def _names(self) -> list[str]:
        return ["broker", "master", *self.worker_names]

    def _pid_file(self, name: str) -> Path:
        return self.root / f"{name}.pid"

    def _log_file(self, name: str) -> Path:
        return self.root / f"{name}.log"

    def _marker(self) -> str:
        return f"-D{MARKER_PROPERTY}={self.root}"

    def _ports_for_start(self) -> Ports:
        saved = load_ports(self.root)
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
        save_ports(self.root, ports)
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
        if not session_members(pid) or proc_util.is_alive(pid):
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
            return BROKER_STOP[self._broker(load_ports(self.root)).stop()]
        pid_file = self._pid_file(name)
        sid = proc_util.read_pid(pid_file)
        if sid is None:
            return StopResult.NOT_RUNNING
        if not self._session_trusted(name, sid):
            log.info("Removing stale PID file %s (pid %d is not our %s)", pid_file, sid, name)
            pid_file.unlink(missing_ok=True)
            return StopResult.NOT_RUNNING
        result = terminate_session(name, sid, self.stop_timeout, self._reap)
        pid_file.unlink(missing_ok=True)
        log.info("Spark %s (session %d) %s", name, sid, result.value)
        return result

    def _reap(self, pid: int) -> None:
        # Our own child is waited for through Popen (no zombie, no ResourceWarning).
        child = self._children.get(pid)
        if child is not None and child.poll() is not None:
            del self._children[pid]

    # -- internals: readiness ----------------------------------------------------

    def _wait_master(self, ports: Ports) -> None:
        self._wait(
            "master",
            lambda: (master_json(ports) or {}).get("status") == "ALIVE",
            ["master"],
        )

    def _wait_workers(self, ports: Ports) -> None:
        wanted = set(ports.worker_uis)

        def registered() -> bool:
            return wanted <= registered_ui_ports(master_json(ports))

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
        lines = proc_util.tail_lines(path, ERROR_TAIL_LINES)
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
