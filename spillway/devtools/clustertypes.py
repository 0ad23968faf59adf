"""The local cluster's names, ports and results (:mod:`spillway.devtools.cluster`)."""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spillway.channels.errors import ConfigError, SpillwayError
from spillway.devtools.localbroker import StopResult as BrokerStopResult
from spillway.devtools.localbroker import free_ports

HOST = "127.0.0.1"
CLUSTER_DIR_ENV = "SPILLWAY_CLUSTER_DIR"
DEFAULT_DIR = Path(".spillway") / "cluster"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
MARKER_PROPERTY = "spillway.cluster"
EXIT_NOT_RUNNING = 3
"""``status`` exit code when any component is stopped (as in LSB init scripts)."""

STATE_FILE = "cluster.json"
STATE_VERSION = 1
ERROR_TAIL_LINES = 30
KILL_WAIT_S = 10.0


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


BROKER_STOP = {
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
            "version": STATE_VERSION,
            "broker": self.broker,
            "broker_controller": self.broker_controller,
            "master": self.master,
            "master_ui": self.master_ui,
            "worker_uis": list(self.worker_uis),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Ports:
        if data.get("version") != STATE_VERSION:
            raise ConfigError(
                f"{STATE_FILE} has version {data.get('version')!r}, expected {STATE_VERSION}; "
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


def load_ports(root: Path) -> Ports | None:
    """The ports in ``root``'s ``cluster.json``; None if the cluster was never started."""
    try:
        data = json.loads((root / STATE_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {root / STATE_FILE}: {exc}") from exc
    return Ports.from_json(data)


def save_ports(root: Path, ports: Ports) -> None:
    """Write ``cluster.json`` (a temporary file, renamed: readers never see half of it)."""
    path = root / STATE_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(ports.to_json(), indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
