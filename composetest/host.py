"""The host side: required tools (installed with apt-get when missing) and bounded commands."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from spillway.channels.errors import SpillwayError

log = logging.getLogger(__name__)

# Command -> the Debian package that provides it.
REQUIRED: dict[str, str] = {
    "dockerd": "docker.io",
    "docker-compose": "docker-compose",
    "debootstrap": "debootstrap",
    "ip": "iproute2",
    "nsenter": "util-linux",
    "dpkg-scanpackages": "dpkg-dev",
    "mvn": "maven",
    "java": "openjdk-17-jre-headless",
}
# Debian's own client: it builds with BuildKit (DOCKER_BUILDKIT=1) without buildx, which a
# newer client found first on PATH may refuse to do.
DOCKER_CLIENT = Path("/usr/bin/docker")
_SBIN = ("/usr/local/sbin", "/usr/sbin", "/sbin")
_OUTPUT_TAIL = 40


class ComposeTestError(SpillwayError):
    """A step of ``make compose-test`` failed; the message says which and what to do."""


def which(command: str) -> str | None:
    """``command`` on PATH or in the sbin directories (a non-login root may lack them)."""
    return shutil.which(command) or shutil.which(command, path=os.pathsep.join(_SBIN))


def missing_packages() -> list[str]:
    """Debian packages to install for the commands that are missing (docker client too)."""
    missing = {pkg for cmd, pkg in REQUIRED.items() if which(cmd) is None}
    if not DOCKER_CLIENT.is_file():
        missing.add("docker.io")
    return sorted(missing)


def ensure_tools() -> None:
    """Install the missing tools with apt-get; :class:`ComposeTestError` if not root."""
    packages = missing_packages()
    if not packages:
        return
    if os.geteuid() != 0:
        raise ComposeTestError(
            f"missing {', '.join(packages)}: run make compose-test as root (it installs them "
            f"with apt-get) or install them yourself: apt-get install {' '.join(packages)}"
        )
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    started = time.monotonic()
    run(["apt-get", "update", "-q"], timeout=600, env=env)
    run(
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
        timeout=1200,
        env=env,
    )
    log.info("Installed %s in %.0f s", " ".join(packages), time.monotonic() - started)


def run(
    command: Sequence[str | Path],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    quiet: bool = False,
) -> str:
    """Run ``command`` (stdin closed) and return its stdout.

    ``env`` is added to this process's environment. A non-zero exit or a time-out raises
    :class:`ComposeTestError` with the command and the tail of its output.
    """
    argv = [str(c) for c in command]
    if not quiet:
        log.info("$ %s", " ".join(argv))
    try:
        result = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **env} if env else None,
            cwd=cwd,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ComposeTestError(f"`{' '.join(argv)}` did not finish within {timeout:.0f} s") from exc
    except FileNotFoundError as exc:
        raise ComposeTestError(f"`{argv[0]}` is not installed: {exc}") from exc
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-_OUTPUT_TAIL:])
        raise ComposeTestError(f"`{' '.join(argv)}` failed (exit {result.returncode}):\n{tail}")
    return result.stdout
