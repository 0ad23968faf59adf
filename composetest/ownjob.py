"""A user's own pipeline on the deployment: a module that is not in the image.

``make compose-test`` writes :data:`SOURCE` as ``<pipelines>/<MODULE>.py`` on the host,
in the directory ``docker/compose.yaml`` mounts at ``/opt/spillway/pipelines`` in the
driver's and the workers' containers (``SPILLWAY_PIPELINES``), runs it with
``spillway run`` in ``spark-master`` with its settings given by ``--conf``, scrapes the
driver's metrics on the port the compose file publishes on the host's loopback, and
checks the output against :func:`expected_rows` exactly.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from composetest.cluster import BROKERS

MODULE = "compose_own_job"
OUT_DIR = "/data/out/own"
METRICS_PORT = 9400  # published on the host as 127.0.0.1:9400 (docker/compose.yaml)
OPERATORS = ("numbers", "scale", "out")

SOURCE = '''"""Numbers 0..N-1, each scaled by a factor: a pipeline module outside the image."""

from __future__ import annotations

from dataclasses import dataclass

from spillway import Pipeline, conf


@dataclass(slots=True)
class Number:
    """One generated number."""

    n: int


@dataclass(slots=True)
class Scaled:
    """A number and its multiple."""

    n: int
    value: int


def make(i: int) -> Number:
    """Number ``i``."""
    return Number(n=i)


def pipeline() -> Pipeline:
    """``own.records`` numbers at ``own.rate`` per second, times ``own.factor``, as JSONL
    under ``own.out`` (every setting from ``spillway run --conf``)."""
    factor = int(conf("own.factor"))

    def scale(number: Number) -> Scaled:
        return Scaled(n=number.n, value=number.n * factor)

    p = Pipeline("own")
    numbers = p.generate(
        "numbers", make=make, count=int(conf("own.records")), rate=float(conf("own.rate"))
    )
    numbers.map("scale", scale).write_jsonl("out", conf("own.out"))
    return p
'''


def write_module(directory: Path) -> Path:
    """Write the module into ``directory`` (created), readable by the containers' user."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o755)
    path = directory / f"{MODULE}.py"
    path.write_text(SOURCE, encoding="utf-8")
    path.chmod(0o644)
    return path


def settings(records: int, factor: int, rate: float) -> dict[str, str]:
    """The ``--conf`` settings of one run."""
    return {
        "own.records": str(records),
        "own.factor": str(factor),
        "own.rate": str(rate),
        "own.out": OUT_DIR,
    }


def run_argv(job: str, conf: dict[str, str]) -> list[str]:
    """``compose`` arguments that run the module with ``spillway run`` in spark-master."""
    bootstrap = ",".join(f"{b}:19092" for b in BROKERS)
    argv = [
        "exec",
        "-T",
        "spark-master",
        "spillway",
        "run",
        f"{MODULE}:pipeline",
        "--job-id",
        job,
        "--master",
        "spark://spark-master:7077",
        "--bootstrap",
        bootstrap,
        "--replication-factor",
        "3",
        "--min-insync-replicas",
        "2",
        "--metrics-port",
        str(METRICS_PORT),
        "--metrics-host",
        "spark-master",
        "--log-dir",
        "/tmp/spillway-logs",
    ]
    for key, value in conf.items():
        argv += ["--conf", f"{key}={value}"]
    return argv


def expected_rows(records: int, factor: int) -> list[dict[str, int]]:
    """Every output row, in ``n`` order."""
    return [{"n": i, "value": i * factor} for i in range(records)]


def checkpoints_by_subtask(metrics_text: str, job: str) -> dict[str, float]:
    """``op[i]`` -> ``spillway_subtask_checkpoints_total`` of ``job`` in a scraped page."""
    return {
        f"{s.labels['operator']}[{s.labels['index']}]": s.value
        for family in text_string_to_metric_families(metrics_text)
        for s in family.samples
        if s.name == "spillway_subtask_checkpoints_total" and s.labels.get("job_id") == job
    }
