"""Find Java and Maven, and resolve Apache Kafka's broker jars into a user cache.

The jars are resolved once per Kafka version into
``<cache>/kafka-<version>-<binding>/lib`` by running Maven on the ``pom.xml`` shipped in
this package: its ``kafka.version`` by default, or another release (``-Dkafka.version``)
with the logging binding of its major version (see :func:`logging_binding`). A marker
file written only after Maven succeeded makes later starts download nothing; a download
interrupted half-way has no marker and is redone.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import shutil
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

from spillway.channels.errors import BrokerUnavailableError, ConfigError

log = logging.getLogger(__name__)

CACHE_DIR_ENV = "SPILLWAY_CACHE_DIR"
MIN_JAVA = 17
_JAVA_FIX = "install OpenJDK 17+ (apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
_MAVEN_FIX = "install Maven (apt-get install maven); it fetches the Kafka broker jars once"
_MAVEN_TIMEOUT_S = 900.0
_MARKER = ".complete"


def cache_dir() -> Path:
    """``$SPILLWAY_CACHE_DIR``, else ``$XDG_CACHE_HOME/spillway``, else ``~/.cache/spillway``."""
    if explicit := os.environ.get(CACHE_DIR_ENV):
        return Path(explicit).expanduser().absolute()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return (base / "spillway").absolute()


def pom_bytes() -> bytes:
    """The packaged ``pom.xml`` that names the Kafka broker and its logging binding."""
    return resources.files("spillway.devtools.localbroker").joinpath("pom.xml").read_bytes()


def kafka_version(pom: bytes | None = None) -> str:
    """The Kafka version the packaged ``pom.xml`` resolves (its ``kafka.version`` property)."""
    root = ET.fromstring(pom if pom is not None else pom_bytes())
    for element in root.iter():
        if element.tag.rsplit("}", 1)[-1] == "kafka.version" and element.text:
            return element.text.strip()
    raise ConfigError("devtools/localbroker/pom.xml has no <kafka.version> property")


def logging_binding(version: str) -> str:
    """``log4j2`` for Kafka 4.x and later, ``reload4j`` (log4j 1.x) for 3.x.

    Kafka 4.0 dropped log4j 1.x: its broker reads a log4j2 configuration. The name is
    also the ``pom.xml`` profile that adds the binding's jars.
    """
    match = re.match(r"(\d+)\.\d+", version)
    if match is None:
        raise ConfigError(f"Kafka version {version!r} is not MAJOR.MINOR[.PATCH], e.g. 4.4.0")
    return "log4j2" if int(match.group(1)) >= 4 else "reload4j"


def java_executable() -> Path:
    """Return the ``java`` to run: ``$JAVA_HOME/bin/java`` if it exists, else the one on PATH.

    Raises :class:`ConfigError` with the fix if there is none or it is older than Java 17.
    """
    candidates = []
    if java_home := os.environ.get("JAVA_HOME"):
        candidates.append(str(Path(java_home) / "bin" / "java"))
    candidates.append("java")
    found = next((path for c in candidates if (path := shutil.which(c))), None)
    if found is None:
        raise ConfigError(f"Java was not found (no java on PATH): {_JAVA_FIX}")
    java = Path(found)
    try:
        probe = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"{java} -version failed ({exc}): {_JAVA_FIX}") from exc
    major = java_major_version(probe.stderr + probe.stdout)
    if major is None:
        raise ConfigError(f"cannot tell the version of {java} from `java -version`: {_JAVA_FIX}")
    if major < MIN_JAVA:
        raise ConfigError(f"{java} is Java {major}; Kafka needs Java {MIN_JAVA}+: {_JAVA_FIX}")
    return java


def java_major_version(version_output: str) -> int | None:
    """Parse the major version from ``java -version`` output (``1.8.0_x`` is Java 8)."""
    match = re.search(r'version "(\d+)(?:\.(\d+))?', version_output)
    if match is None:
        return None
    major = int(match.group(1))
    if major == 1 and match.group(2) is not None:
        return int(match.group(2))
    return major


def maven_executable() -> Path:
    """Return ``mvn`` from PATH; raise :class:`ConfigError` with the fix if it is missing."""
    found = shutil.which("mvn")
    if found is None:
        raise ConfigError(f"Maven was not found (no mvn on PATH): {_MAVEN_FIX}")
    return Path(found)


def resolve_jars(cache: Path | None = None, version: str | None = None) -> Path:
    """Return a directory holding every runtime jar of Kafka ``version``'s broker.

    ``version`` None is the packaged ``pom.xml``'s. The first call per Kafka version runs
    Maven (needs network access to Maven Central, or a filled ``~/.m2``); later calls only
    check the marker file. Safe to call from several processes at once: they serialise
    on a lock file.
    """
    pom = pom_bytes()
    version = version or kafka_version(pom)
    # The binding is part of the name: a release resolved with another binding (or by an
    # older Spillway, whose marker differs) lives in a directory of its own, so two
    # checkouts sharing the cache never re-resolve, and delete, each other's jars.
    home = (cache or cache_dir()) / f"kafka-{version}-{logging_binding(version)}"
    lib = home / "lib"
    marker = home / _MARKER
    # The marker holds the pom's digest: a changed pom (e.g. another logging binding)
    # with the same Kafka version is resolved again instead of silently reusing old jars.
    digest = hashlib.sha256(pom + f"\n{version}\n{logging_binding(version)}".encode()).hexdigest()
    if _marker_matches(marker, digest) and lib.is_dir():
        return lib
    home.mkdir(parents=True, exist_ok=True)
    with cache_lock(home / ".lock"):
        if _marker_matches(marker, digest) and lib.is_dir():
            return lib  # another process finished while we waited for the lock
        marker.unlink(missing_ok=True)
        shutil.rmtree(lib, ignore_errors=True)
        _run_maven(pom, home, lib, version)
        tmp = marker.with_suffix(".tmp")
        tmp.write_text(digest + "\n", encoding="ascii")
        tmp.replace(marker)
    return lib


def _run_maven(pom: bytes, home: Path, lib: Path, version: str) -> None:
    mvn = maven_executable()
    # Maven runs on a copy of the pom: the installed package may be read-only, and
    # Maven must not leave files next to our sources.
    pom_copy = home / "pom.xml"
    pom_copy.write_bytes(pom)
    binding = logging_binding(version)
    command = [
        str(mvn),
        "-q",
        "-B",
        "-f",
        str(pom_copy),
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={lib}",
        f"-Dkafka.version={version}",
        # Exactly one logging binding: the other profile is switched off explicitly.
        f"-P{binding},!{'reload4j' if binding == 'log4j2' else 'log4j2'}",
    ]
    log.info("Resolving Kafka %s broker jars with Maven into %s (first start only)", version, lib)
    started = time.monotonic()
    try:
        result = subprocess.run(
            command,
            cwd=home,
            capture_output=True,
            text=True,
            timeout=_MAVEN_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise BrokerUnavailableError(
            f"Maven did not finish resolving the Kafka jars within {_MAVEN_TIMEOUT_S:.0f} s; "
            "check network access to Maven Central (or the proxy in ~/.m2/settings.xml)"
        ) from exc
    if result.returncode != 0 or not (lib / f"kafka_2.13-{version}.jar").is_file():
        output = "\n".join((result.stdout + result.stderr).strip().splitlines()[-20:])
        raise BrokerUnavailableError(
            f"Maven could not resolve the Kafka {version} jars (exit code {result.returncode}); "
            "check network access to Maven Central (or the proxy in ~/.m2/settings.xml).\n"
            f"$ {' '.join(command)}\n{output}"
        )
    log.info("Resolved %d jars in %.1f s", len(list(lib.glob("*.jar"))), time.monotonic() - started)


def _marker_matches(marker: Path, digest: str) -> bool:
    try:
        return marker.read_text(encoding="ascii").strip() == digest
    except OSError:
        return False


@contextlib.contextmanager
def cache_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing) while the block runs, so two
    processes filling one cache directory do not build it twice at once."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
