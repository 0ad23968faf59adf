"""The deployment through compose and the docker client: up, health, kill, start, exec, down."""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from composetest.host import DOCKER_CLIENT, ComposeTestError, run

log = logging.getLogger(__name__)

BROKERS = ("kafka-1", "kafka-2", "kafka-3")
MASTER = "spark-master"
WORKERS = ("spark-worker-1", "spark-worker-2")
SERVICES = (*BROKERS, MASTER, *WORKERS)
README = Path(__file__).resolve().parents[1] / "docker" / "README.md"


@dataclass(frozen=True)
class Deployment:
    """One compose project on one engine.

    ``compose`` is the compose argv up to the subcommand (``-p`` and every ``-f``
    included); ``env`` is what compose needs beyond this process's environment
    (``DOCKER_HOST``, the image names, the example's ``CLICKS_*`` settings).
    """

    compose: tuple[str, ...]
    docker_host: str
    env: dict[str, str] = field(default_factory=dict)

    def run(self, *args: str, timeout: float = 300.0, quiet: bool = False) -> str:
        """``compose ARGS``; raises :class:`ComposeTestError` on failure."""
        return run([*self.compose, *args], timeout=timeout, env=self._env(), quiet=quiet)

    def docker(self, *args: str, timeout: float = 120.0, quiet: bool = False) -> str:
        """``docker -H <engine> ARGS``."""
        argv = [str(DOCKER_CLIENT), "-H", self.docker_host, *args]
        return run(argv, timeout=timeout, quiet=quiet)

    def _env(self) -> dict[str, str]:
        return {**self.env, "DOCKER_HOST": self.docker_host}

    def up(self) -> None:
        """Create and start every service from images already in the engine."""
        self.run("up", "-d", "--no-build", timeout=600)

    def down(self) -> None:
        """Remove the containers, the network and the volumes (the data of this run)."""
        self.run("down", "-v", "--remove-orphans", "-t", "20", timeout=600)

    def container(self, service: str) -> str:
        """The container id of ``service`` (running or not)."""
        out = self.run("ps", "-a", "-q", service, timeout=60, quiet=True).split()
        if len(out) != 1:
            raise ComposeTestError(f"expected one container of {service}, compose lists {out}")
        return out[0]

    def health(self, service: str) -> str:
        """``healthy``, ``starting``, ``unhealthy`` or the state of a container without health."""
        out = self.docker(
            "inspect",
            "--format",
            "{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}",
            self.container(service),
            quiet=True,
        )
        return out.strip()

    def wait_healthy(self, services: tuple[str, ...], timeout: float) -> float:
        """Wait until every one of ``services`` is healthy; return the seconds it took."""
        started = time.monotonic()
        states: dict[str, str] = {}
        while time.monotonic() - started < timeout:
            states = {s: self.health(s) for s in services}
            if set(states.values()) == {"healthy"}:
                return time.monotonic() - started
            if "unhealthy" in states.values() or "exited" in states.values():
                break
            time.sleep(1.0)
        logs = {s: self.logs(s, 15) for s, st in states.items() if st != "healthy"}
        raise ComposeTestError(f"services not healthy after {timeout:.0f} s: {states}\n{logs}")

    def logs(self, service: str, lines: int) -> str:
        """The last ``lines`` lines of a service's output."""
        return self.run("logs", "--no-color", "--tail", str(lines), service, timeout=60)

    def kill(self, service: str) -> float:
        """``docker kill`` the service's container; return the wall time of the kill."""
        self.docker("kill", self.container(service))
        return time.time()

    def start(self, service: str) -> float:
        """``docker start`` the service's container; return the wall time."""
        self.docker("start", self.container(service))
        return time.time()

    def exec(self, service: str, *argv: str, timeout: float = 120.0) -> str:
        """Run ``argv`` in the service's container (no TTY) and return its stdout."""
        return self.run("exec", "-T", service, *argv, timeout=timeout)

    def popen(self, argv: list[str], log_file: Path) -> subprocess.Popen[bytes]:
        """Start ``compose ARGV`` in the background, its output to ``log_file``."""
        log.info("$ %s", " ".join([*self.compose, *argv]))
        with log_file.open("wb") as out:
            return subprocess.Popen(
                [*self.compose, *argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self._env()},
            )


def readme_submit(job: str) -> list[str]:
    """The README's one-line ``spark-submit`` (after ``compose ... exec``), for ``job``."""
    lines = [
        line
        for line in README.read_text(encoding="utf-8").splitlines()
        if line.startswith("docker compose") and "spark-submit" in line
    ]
    if len(lines) != 1:
        raise ComposeTestError(f"{README} must have one `docker compose ... spark-submit` line")
    argv = shlex.split(lines[0])
    tail = argv[argv.index("exec") + 1 :]
    tail[tail.index("--job-id") + 1] = job
    return ["exec", "-T", *tail]


def output_rows(deployment: Deployment) -> list[dict[str, object]]:
    """Every row of the example's JSONL output, read from the spark-out volume."""
    text = deployment.exec(MASTER, "sh", "-c", "cat /data/out/clicks/out/*.jsonl", timeout=300)
    return [json.loads(line) for line in text.splitlines() if line.strip()]
