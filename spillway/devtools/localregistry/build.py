"""Build the local schema registry (Apicurio Registry) with Maven into a user cache.

The Maven project shipped in ``runner/`` is copied to ``<cache>/apicurio-<version>`` and
built once (``mvn package``: Quarkus's build over Apicurio's application jar from Maven
Central). A marker file written only after the build succeeded, holding the digest of the
shipped project, makes later starts build nothing; a changed project is built again.
"""

from __future__ import annotations

import hashlib
import logging
import re
import shutil
import subprocess
import time
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from spillway.channels.errors import BrokerUnavailableError
from spillway.devtools.localbroker.jars import cache_dir, cache_lock, maven_executable

log = logging.getLogger(__name__)

_MAVEN_TIMEOUT_S = 1200.0
_MARKER = ".complete"
RUNNER_JAR = Path("target") / "registry-runner-1-runner.jar"


def _project() -> Traversable:
    return resources.files("spillway.devtools.localregistry").joinpath("runner")


def _files(root: Traversable, prefix: str = "") -> dict[str, bytes]:
    """Every file under ``root`` by its relative path (the shipped Maven project)."""
    out: dict[str, bytes] = {}
    for child in root.iterdir():
        name = f"{prefix}{child.name}"
        if child.is_dir():
            out.update(_files(child, f"{name}/"))
        elif child.is_file():
            out[name] = child.read_bytes()
    return out


def apicurio_version() -> str:
    """The Apicurio Registry version the shipped ``runner/pom.xml`` builds."""
    pom = _project().joinpath("pom.xml").read_text(encoding="utf-8")
    match = re.search(r"<apicurio\.version>([^<]+)</apicurio\.version>", pom)
    if match is None:
        raise BrokerUnavailableError("localregistry/runner/pom.xml has no <apicurio.version>")
    return match.group(1).strip()


def build_registry(cache: Path | None = None) -> Path:
    """The runnable registry jar (its ``lib/`` beside it), built on the first call.

    Needs Maven and network access to Maven Central on the first call (about 100 MB of
    jars, a minute or two); later calls only check the marker. Several processes may
    call at once: they serialise on a lock file. :class:`BrokerUnavailableError` with
    Maven's last lines if the build fails.
    """
    files = _files(_project())
    digest = hashlib.sha256(
        b"".join(name.encode() + b"\0" + body for name, body in sorted(files.items()))
    ).hexdigest()
    home = (cache or cache_dir()) / f"apicurio-{apicurio_version()}"
    marker, jar = home / _MARKER, home / RUNNER_JAR
    if _marker_matches(marker, digest) and jar.is_file():
        return jar
    home.mkdir(parents=True, exist_ok=True)
    with cache_lock(home / ".lock"):
        if _marker_matches(marker, digest) and jar.is_file():
            return jar  # another process built it while we waited
        marker.unlink(missing_ok=True)
        shutil.rmtree(home / "src", ignore_errors=True)
        shutil.rmtree(home / "target", ignore_errors=True)
        for name, body in files.items():
            path = home / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(body)
        _run_maven(home, jar)
        tmp = marker.with_suffix(".tmp")
        tmp.write_text(digest + "\n", encoding="ascii")
        tmp.replace(marker)
    return jar


def _run_maven(home: Path, jar: Path) -> None:
    command = [str(maven_executable()), "-q", "-B", "-f", str(home / "pom.xml"), "package"]
    log.info("Building the local schema registry with Maven in %s (first start only)", home)
    started = time.monotonic()
    try:
        result = subprocess.run(
            command, cwd=home, capture_output=True, text=True, timeout=_MAVEN_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise BrokerUnavailableError(
            f"Maven did not build the schema registry within {_MAVEN_TIMEOUT_S:.0f} s; check "
            "network access to Maven Central (or the proxy in ~/.m2/settings.xml)"
        ) from exc
    if result.returncode != 0 or not jar.is_file():
        output = "\n".join((result.stdout + result.stderr).strip().splitlines()[-20:])
        raise BrokerUnavailableError(
            f"Maven could not build the schema registry (exit code {result.returncode}); check "
            "network access to Maven Central (or the proxy in ~/.m2/settings.xml).\n"
            f"$ {' '.join(command)}\n{output}"
        )
    log.info("Built the schema registry in %.1f s", time.monotonic() - started)


def _marker_matches(marker: Path, digest: str) -> bool:
    try:
        return marker.read_text(encoding="ascii").strip() == digest
    except OSError:
        return False
