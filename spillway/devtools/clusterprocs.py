"""Processes of the local cluster: sessions, signals, the master's JSON view (Linux: /proc)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import signal
import time
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from spillway.channels.errors import ConfigError
from spillway.devtools.clustertypes import (
    HOST,
    KILL_WAIT_S,
    MASTER_CLASS,
    WORKER_CLASS,
    ClusterError,
    Ports,
    StopResult,
)

log = logging.getLogger("spillway.devtools.cluster")


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


def registered_ui_ports(master_json: Mapping[str, Any] | None) -> set[int]:
    """Web UI ports of the workers the master reports ALIVE."""
    ports = set()
    for worker in (master_json or {}).get("workers", []):
        address = str(worker.get("webuiaddress", ""))
        port = address.rpartition(":")[2]
        if worker.get("state") == "ALIVE" and port.isdigit():
            ports.add(int(port))
    return ports


def session_members(sid: int) -> list[int]:
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


def signal_session(sid: int, members: list[int], signum: signal.Signals) -> None:
    # The group first (its leader is the session leader); then members that moved to a
    # group of their own, such as pyspark's daemon and its forked workers.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(sid, signum)
    for pid in members:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


# -- command line -----------------------------------------------------------------


def signal_until_gone(
    sid: int, signum: signal.Signals, timeout: float, reap: Callable[[int], None]
) -> bool:
    """Send ``signum`` to every member of session ``sid``, also to members that appear
    meanwhile (a worker may still launch an executor while it shuts down); True once
    the session is empty, False after ``timeout`` seconds. ``reap`` waits for our own
    children, so they do not linger as zombies."""
    signalled: set[int] = set()
    deadline = time.monotonic() + timeout
    while True:
        reap(sid)
        members = session_members(sid)
        if not members:
            return True
        if time.monotonic() >= deadline:
            return False
        new = [pid for pid in members if pid not in signalled]
        if new:
            signal_session(sid, new, signum)
            signalled.update(new)
        time.sleep(0.1)


def master_json(ports: Ports) -> dict[str, Any] | None:
    """The master's JSON view (``/json/``), or None if it does not answer."""
    url = f"http://{HOST}:{ports.master_ui}/json/"
    try:
        # The master is on loopback; never go through a proxy from the environment.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(url, timeout=2.0) as response:
            data = json.loads(response.read().decode("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def terminate_session(
    name: str, sid: int, stop_timeout: float, reap: Callable[[int], None]
) -> StopResult:
    """SIGTERM every process of Spark daemon ``name``'s session ``sid``, SIGKILL what is
    left after ``stop_timeout`` seconds; a ClusterError if something survives that."""
    if not session_members(sid):
        return StopResult.NOT_RUNNING
    if signal_until_gone(sid, signal.SIGTERM, stop_timeout, reap):
        return StopResult.STOPPED
    log.warning(
        "Spark %s: pids %s ignored SIGTERM for %.0f s; sending SIGKILL",
        name,
        session_members(sid),
        stop_timeout,
    )
    if not signal_until_gone(sid, signal.SIGKILL, KILL_WAIT_S, reap):
        raise ClusterError(
            f"processes {session_members(sid)} of Spark {name} survived SIGKILL; check them by hand"
        )
    return StopResult.KILLED


def master_args(ports: Ports) -> list[str]:
    """``spark-class`` arguments of the master."""
    return [
        MASTER_CLASS,
        "--host",
        HOST,
        "--port",
        str(ports.master),
        "--webui-port",
        str(ports.master_ui),
    ]


def worker_args(ports: Ports, ui_port: int, cores: int, memory: str, work_dir: Path) -> list[str]:
    """``spark-class`` arguments of one worker."""
    return [
        WORKER_CLASS,
        f"spark://{HOST}:{ports.master}",
        "--host",
        HOST,
        "--cores",
        str(cores),
        "--memory",
        memory,
        "--webui-port",
        str(ui_port),
        "--work-dir",
        str(work_dir),
    ]
