"""Kafka Streams as a peer: the Java application in ``bench/kstreams`` and how to run it.

:func:`build` runs Maven once on ``bench/kstreams/pom.xml`` (kafka-streams of the same
release as the local broker, ``spillway.devtools.localbroker.jars.kafka_version``) into
``<cache>/kstreams-<digest>``; the digest covers the pom, the sources and the Kafka version,
so a changed source is rebuilt and an unchanged one never. :func:`command` is the JVM
command line of one instance. Pure helpers (:func:`source_digest`, :func:`command`) are
unit-tested; the build itself is exercised by ``make bench``.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

from bench.kafkatools import ToolError
from spillway.devtools.localbroker.jars import (
    cache_dir,
    java_executable,
    kafka_version,
    maven_executable,
)

PROJECT = Path(__file__).resolve().parent / "kstreams"
MAIN = "io.spillway.bench.PageViews"
# The JVM sized for the work (reasons in docs/benchmarks.md, "Kafka Streams peer
# configuration"): a fixed 256 MiB heap (-Xms = -Xmx: no resizing while measured), enough
# for the producer's 32 MiB buffer, a 5,000-record poll, the 4 MiB record cache and the
# 2,000 counts (RocksDB lives off-heap); the Parallel collector, the throughput collector:
# no concurrent marking or refinement threads competing for the two shared cores, and
# young-generation pauses of a few ms over a small live set, far under the commit interval.
JVM_OPTIONS = (
    "-Xms256m",
    "-Xmx256m",
    "-XX:+UseParallelGC",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
)
_MAVEN_TIMEOUT_S = 900.0
_MARKER = ".complete"


def source_digest(files: Iterable[tuple[str, bytes]], version: str) -> str:
    """A short digest of ``(relative path, content)`` pairs and the Kafka version. Pure."""
    h = hashlib.sha256(version.encode())
    for name, data in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()[:16]


def _sources(project: Path) -> list[tuple[str, bytes]]:
    paths = [project / "pom.xml", *sorted((project / "src").rglob("*.java"))]
    return [(str(p.relative_to(project)), p.read_bytes()) for p in paths]


def build(project: Path = PROJECT, cache: Path | None = None, version: str | None = None) -> Path:
    """The built application's directory (``app.jar`` + ``lib/``); Maven the first time.

    Raises :class:`~bench.kafkatools.ToolError` with Maven's last lines when the build fails.
    """
    version = version or kafka_version()
    home = (cache or cache_dir()) / f"kstreams-{source_digest(_sources(project), version)}"
    marker = home / _MARKER
    if marker.is_file():
        return home
    build_dir = home / "build"
    shutil.rmtree(build_dir, ignore_errors=True)
    shutil.copytree(project, build_dir)
    command = [
        str(maven_executable()),
        "-q",
        "-B",
        "package",
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={home / 'lib'}",
        f"-Dkafka.version={version}",
    ]
    result = subprocess.run(
        command,
        cwd=build_dir,
        capture_output=True,
        text=True,
        timeout=_MAVEN_TIMEOUT_S,
        check=False,
    )
    jar = build_dir / "target" / "spillway-bench-kstreams-1.jar"
    if result.returncode != 0 or not jar.is_file():
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-20:])
        raise ToolError(
            f"Maven could not build {project / 'pom.xml'} (exit {result.returncode}); check "
            f"network access to Maven Central and JDK >= 17.\n$ {' '.join(command)}\n{tail}"
        )
    shutil.copy2(jar, home / "app.jar")
    marker.write_text(version + "\n")
    return home


def command(
    home: Path,
    bootstrap: str,
    input_topic: str,
    output_topic: str,
    records: int,
    commit_interval_s: float,
    state_dir: str,
    application_id: str,
    standby_replicas: int = 0,
    java: Path | None = None,
    traced: bool = False,
) -> list[str]:
    """The JVM command of one instance (``records`` 0: run until stdin closes). Pure.

    ``traced`` (B3): outputs also carry ``seq`` and ``ts`` of the record counted last.
    """
    if records < 0 or commit_interval_s <= 0 or standby_replicas < 0:
        raise ValueError(
            f"records ({records}) and standby replicas ({standby_replicas}) must be >= 0 "
            f"and the commit interval ({commit_interval_s} s) > 0"
        )
    return [
        str(java or java_executable()),
        *JVM_OPTIONS,
        "-cp",
        f"{home / 'app.jar'}:{home / 'lib'}/*",
        MAIN,
        bootstrap,
        input_topic,
        output_topic,
        str(records),
        str(round(commit_interval_s * 1000)),
        state_dir,
        application_id,
        str(standby_replicas),
        *(["traced"] if traced else []),
    ]
