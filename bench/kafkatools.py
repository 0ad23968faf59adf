"""B0, the ceiling: Kafka's own producer and consumer perf tests on the benchmark's broker.

The tools are ``org.apache.kafka.tools.ProducerPerformance`` and ``ConsumerPerformance``
from ``org.apache.kafka:kafka-tools`` (the classes behind ``kafka-producer-perf-test.sh``
and ``kafka-consumer-perf-test.sh``). Maven resolves them once, from ``kafka-tools-pom.xml``
next to this file, into ``<cache>/kafka-tools-<version>/lib`` (the cache of
``spillway.devtools.localbroker.jars``); a marker written after Maven succeeded makes later runs
download nothing. Output parsing is pure and unit-tested.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from spillway.devtools.localbroker.jars import cache_dir, java_executable, maven_executable

POM = Path(__file__).resolve().parent / "kafka-tools-pom.xml"
VERSION = "3.9.1"
_MARKER = ".complete"
_MAVEN_TIMEOUT_S = 900.0
JVM_HEAP = "-Xmx256m"  # two cores and other engineers: keep the tools' JVMs small


class ToolError(Exception):
    """A perf tool could not be resolved or run, or printed something we cannot read."""


def resolve_pom(pom: Path, name: str, check_jar: str, cache: Path | None = None) -> Path:
    """Resolve the runtime dependencies of ``pom`` with Maven into ``<cache>/<name>/lib``.

    Runs Maven only the first time (or when the pom changed): a marker holding the pom
    is written after Maven succeeded and ``check_jar`` is there.
    """
    home = (cache or cache_dir()) / name
    lib, marker = home / "lib", home / _MARKER
    text = pom.read_bytes()
    if marker.is_file() and marker.read_bytes() == text and lib.is_dir():
        return lib
    home.mkdir(parents=True, exist_ok=True)
    (home / "pom.xml").write_bytes(text)
    command = [
        str(maven_executable()),
        "-q",
        "-B",
        "-f",
        str(home / "pom.xml"),
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={lib}",
    ]
    result = subprocess.run(
        command, cwd=home, capture_output=True, text=True, timeout=_MAVEN_TIMEOUT_S, check=False
    )
    if result.returncode != 0 or not (lib / check_jar).is_file():
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-20:])
        raise ToolError(
            f"Maven could not resolve {pom.name} (exit {result.returncode}); check network "
            f"access to Maven Central.\n$ {' '.join(command)}\n{tail}"
        )
    marker.write_bytes(text)
    return lib


def resolve_tools(cache: Path | None = None) -> Path:
    """The directory with the kafka-tools jars and their dependencies (Maven, first time)."""
    return resolve_pom(POM, f"kafka-tools-{VERSION}", f"kafka-tools-{VERSION}.jar", cache)


# B0s (bench.ceiling): the producer tuned for throughput, as its docs suggest.
TUNED_PRODUCER = ("linger.ms=10", "batch.size=262144")


def producer_command(
    lib: Path,
    bootstrap: str,
    topic: str,
    records: int,
    size: int,
    props: tuple[str, ...] = (),
) -> list[str]:
    """``ProducerPerformance`` at full speed, acks=all, ``size``-byte values, plus ``props``."""
    return [
        str(java_executable()),
        JVM_HEAP,
        "-cp",
        f"{lib}/*",
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic",
        topic,
        "--num-records",
        str(records),
        "--record-size",
        str(size),
        "--throughput",
        "-1",
        "--producer-props",
        f"bootstrap.servers={bootstrap}",
        "acks=all",
        *props,
    ]


def consumer_command(lib: Path, bootstrap: str, topic: str, records: int, group: str) -> list[str]:
    """``ConsumerPerformance`` reading ``records`` messages of ``topic`` from the start."""
    return [
        str(java_executable()),
        JVM_HEAP,
        "-cp",
        f"{lib}/*",
        "org.apache.kafka.tools.ConsumerPerformance",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--messages",
        str(records),
        "--group",
        group,
        "--timeout",
        "60000",
    ]


@dataclass(frozen=True)
class ProducerFigures:
    """The summary line of ``ProducerPerformance``."""

    records: int
    records_per_s: float
    avg_latency_ms: float
    p50_ms: float
    p99_ms: float


_PRODUCER = re.compile(
    r"(?P<n>\d+) records sent, (?P<rate>[\d.]+) records/sec \([\d.]+ MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, [\d.]+ ms max latency, (?P<p50>\d+) ms 50th, "
    r"\d+ ms 95th, (?P<p99>\d+) ms 99th"
)


def parse_producer(output: str) -> ProducerFigures:
    """The final summary of ``ProducerPerformance`` output (the last matching line)."""
    matches = list(_PRODUCER.finditer(output))
    if not matches:
        raise ToolError(f"no ProducerPerformance summary in its output: {output[-500:]!r}")
    m = matches[-1]
    return ProducerFigures(
        int(m["n"]), float(m["rate"]), float(m["avg"]), float(m["p50"]), float(m["p99"])
    )


@dataclass(frozen=True)
class ConsumerFigures:
    """The result row of ``ConsumerPerformance``."""

    records: int
    records_per_s: float  # including the time to join the group
    fetch_records_per_s: float  # fetching only


def parse_consumer(output: str) -> ConsumerFigures:
    """The header and value line of ``ConsumerPerformance`` output, by column name."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for i, line in enumerate(lines[:-1]):
        if line.startswith("start.time"):
            names = [n.strip() for n in line.split(",")]
            values = dict(zip(names, (v.strip() for v in lines[i + 1].split(",")), strict=False))
            try:
                return ConsumerFigures(
                    int(values["data.consumed.in.nMsg"]),
                    float(values["nMsg.sec"]),
                    float(values["fetch.nMsg.sec"]),
                )
            except (KeyError, ValueError) as e:
                raise ToolError(f"unreadable ConsumerPerformance row {lines[i + 1]!r}") from e
    raise ToolError(f"no ConsumerPerformance result in its output: {output[-500:]!r}")
