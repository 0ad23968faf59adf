"""``python -m composetest`` (``make compose-test``): prepare, run the fault run, clean up.

Prints the time of every step, the images' sizes, which compose ran, the fault run's
figures and whether every check held; exits 0 only then.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from contextlib import suppress
from dataclasses import asdict
from pathlib import Path
from typing import Any

from composetest import composecli, engine, fetch, images, ownjob
from composetest.cache import compose_cache, exclusive
from composetest.cluster import BROKERS, SERVICES, WORKERS, Deployment
from composetest.composecli import ComposeCli
from composetest.host import ComposeTestError, ensure_tools, run
from composetest.scenario import Plan, Report

log = logging.getLogger(__name__)

DOCKER_DIR = fetch.repository_root() / "docker"
WORK_DIR = Path("/var/tmp/spillway-compose-test")
_SCENARIO_TIMEOUT_S = 2400.0


class Steps:
    """Wall time of each named step, in order."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._started = time.monotonic()

    def timed(self, name: str, started: float) -> None:
        """Record ``name`` as having taken since ``started`` (a monotonic time)."""
        self.seconds[name] = time.monotonic() - started
        _say(f"{name}: {self.seconds[name]:.1f} s")

    def total(self) -> float:
        """Seconds since this object was made."""
        return time.monotonic() - self._started


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Command-line options (every one has a default: ``make compose-test`` passes none)."""
    p = argparse.ArgumentParser(prog="python -m composetest", description=__doc__)
    p.add_argument("--records", type=int, default=400_000, help="clicks of the example job")
    p.add_argument(
        "--emit-seconds",
        type=float,
        default=90.0,
        help="pace the sources to emit for about this long, so the kills land mid-stream",
    )
    p.add_argument(
        "--compose",
        choices=("auto", "1", "2"),
        default="auto",
        help="auto: Compose v2 when present or buildable (built once, cached), else 1.29",
    )
    return p.parse_args(argv)


def choose_compose(cache: Path, wanted: str, steps: Steps) -> tuple[ComposeCli, list[ComposeCli]]:
    """The compose that runs the deployment, and every one available (to check the file)."""
    started = time.monotonic()
    one = composecli.v1()
    two = composecli.v2(cache, build=wanted != "1")
    steps.timed("compose CLIs", started)
    available = [c for c in (one, two) if c is not None]
    chosen = {"1": one, "2": two, "auto": two or one}[wanted]
    if chosen is None:
        raise ComposeTestError(f"no compose {wanted} here (have {[c.version for c in available]})")
    return chosen, available


def official_images(eng: engine.Engine) -> bool:
    """True if the official images the compose file names can be pulled."""
    dockerfile = (DOCKER_DIR / "Dockerfile").read_text(encoding="utf-8")
    spark_version = re.search(r"^ARG SPARK_VERSION=(\S+)$", dockerfile, re.MULTILINE)
    spark_from = re.search(r"^FROM (\S+)$", dockerfile, re.MULTILINE)
    if spark_version is None or spark_from is None:
        raise ComposeTestError("docker/Dockerfile has no ARG SPARK_VERSION=... / FROM line")
    spark = spark_from.group(1).replace("${SPARK_VERSION}", spark_version.group(1))
    return images.can_pull(eng, images.OFFICIAL_KAFKA) and images.can_pull(eng, spark)


def standins(eng: engine.Engine, cache: Path, steps: Steps) -> dict[str, images.Built]:
    """Fetch what the stand-ins need and build them (each step cached)."""
    started = time.monotonic()
    rootfs = fetch.rootfs_tar(cache)
    steps.timed("Debian rootfs (debootstrap)", started)
    started = time.monotonic()
    base = images.base_image(eng, rootfs)
    debs = fetch.debs(cache)
    steps.timed("Debian packages", started)
    started = time.monotonic()
    wheels = fetch.wheels(cache)
    steps.timed("wheels", started)
    started = time.monotonic()
    kafka = images.kafka(eng, base, debs, cache)
    steps.timed(f"Kafka image ({'built' if kafka.built else 'cached'})", started)
    started = time.monotonic()
    spark = images.spark(eng, base, debs, wheels, cache)
    steps.timed(f"Spark image ({'built' if spark.built else 'cached'})", started)
    return {"kafka": kafka, "spark": spark}


def check_config(clis: list[ComposeCli], files: list[Path], env: dict[str, str]) -> list[str]:
    """``config -q`` of the compose files with every compose available; their versions."""
    for cli in clis:
        run(cli.command(files, "config", "-q"), timeout=120, env=env)
    return [cli.version for cli in clis]


def run_deployment(
    eng: engine.Engine, cache: Path, args: argparse.Namespace, steps: Steps
) -> dict[str, Any]:
    """Images, then the scenario inside the namespace; the deployment is down afterwards."""
    cli, available = choose_compose(cache, args.compose, steps)
    started = time.monotonic()
    if official_images(eng):
        files = [DOCKER_DIR / "compose.yaml"]
        built: dict[str, images.Built] = {}
        env: dict[str, str] = {}
    else:
        files = [DOCKER_DIR / "compose.yaml", DOCKER_DIR / "compose.standin.yaml"]
        built = standins(eng, cache, steps)
        env = {
            "SPILLWAY_KAFKA_IMAGE": built["kafka"].ref,
            "SPILLWAY_SPARK_IMAGE": built["spark"].ref,
        }
    steps.timed("images in all", started)
    parallelism = 2
    env["CLICKS_RECORDS"] = str(args.records)
    env["CLICKS_PARALLELISM"] = str(parallelism)
    env["CLICKS_RATE"] = f"{args.records / parallelism / args.emit_seconds:.1f}"
    # A pipeline module of the user's, not in the image: mounted into the Spark containers.
    pipelines = WORK_DIR / "pipelines"
    ownjob.write_module(pipelines)
    env["SPILLWAY_PIPELINES"] = str(pipelines)
    accepted = check_config(available, files, {**env, **eng.env()})
    _say(f"compose files accepted by compose {', '.join(accepted)}; running with {cli.version}")
    deployment = Deployment(tuple(cli.command(files)), eng.host, env)
    if not built:
        deployment.run("build", timeout=1800)
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    plan = Plan(
        compose=list(deployment.compose),
        docker_host=eng.host,
        env=env,
        job=f"compose-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}",
        records=args.records,
        parallelism=parallelism,
        broker=BROKERS[1],
        worker=WORKERS[1],
        work_dir=str(WORK_DIR),
    )
    (WORK_DIR / "plan.json").write_text(json.dumps(asdict(plan), indent=2), encoding="utf-8")
    report_file = WORK_DIR / "report.json"
    report_file.unlink(missing_ok=True)
    started = time.monotonic()
    try:
        code = subprocess.run(
            eng.inside(
                [
                    sys.executable,
                    "-m",
                    "composetest.scenario",
                    str(WORK_DIR / "plan.json"),
                    str(report_file),
                ]
            ),
            stdin=subprocess.DEVNULL,
            timeout=_SCENARIO_TIMEOUT_S,
            check=False,
        ).returncode
    finally:
        steps.timed("fault run (up, job, kills, checks)", started)
        started = time.monotonic()
        _save_logs(deployment)
        deployment.down()
        steps.timed("compose down", started)
    report: dict[str, Any] = (
        json.loads(report_file.read_text(encoding="utf-8"))
        if report_file.is_file()
        else asdict(Report())
    )
    if code != 0 and not report["problems"]:
        report["problems"].append(f"the scenario exited {code}")
    report["compose"] = cli.version
    report["compose_checked"] = accepted
    report["images"] = {k: (b.ref, b.size_bytes, b.built, b.seconds) for k, b in built.items()}
    return report


def _save_logs(deployment: Deployment) -> None:
    """Every service's output (with time stamps) into ``WORK_DIR/logs``, for diagnosis."""
    logs = WORK_DIR / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    for service in SERVICES:
        with suppress(ComposeTestError):
            text = deployment.run("logs", "--no-color", "-t", service, timeout=120)
            (logs / f"{service}.log").write_text(text, encoding="utf-8")
    # The executors' output (the subtasks' logs) is in the workers' work directories;
    # docker cp reads them from a killed container too.
    for worker in WORKERS:
        with suppress(ComposeTestError):
            shutil.rmtree(logs / f"{worker}-work", ignore_errors=True)
            container = deployment.container(worker)
            deployment.docker("cp", f"{container}:/opt/spark/work", str(logs / f"{worker}-work"))


def main(argv: list[str]) -> int:
    """Run everything; 0 if every check held."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    args = parse_args(argv)
    steps = Steps()
    cache = compose_cache()
    try:
        with exclusive(cache / "lock"):
            started = time.monotonic()
            ensure_tools()
            steps.timed("tools (apt-get when missing)", started)
            external = engine.from_environment()
            if external is not None:
                report = run_deployment(external, cache, args, steps)
            else:
                report = _with_private_engine(cache, args, steps)
    except ComposeTestError as exc:
        _say(f"FAILED: {exc}")
        return 1
    _print_summary(report, steps)
    return 1 if report["problems"] else 0


def _with_private_engine(cache: Path, args: argparse.Namespace, steps: Steps) -> dict[str, Any]:
    if os.geteuid() != 0:
        raise ComposeTestError(
            "make compose-test starts its own Docker engine, which needs root; "
            "or point DOCKER_HOST at a running engine"
        )
    traces = engine.HostTraces.snapshot()
    started = time.monotonic()
    engine.create_namespace()
    eng: engine.Engine | None = None
    try:
        eng = engine.start(cache / "engine")
        steps.timed("engine start", started)
        return run_deployment(eng, cache, args, steps)
    finally:
        started = time.monotonic()
        if eng is not None:
            engine.stop(eng)
        engine.delete_namespace()
        removed = traces.remove_new()
        with suppress(FileNotFoundError):
            shutil.rmtree(engine.RUN_DIR)
        steps.timed("engine stop and clean-up", started)
        _say(f"removed from the host: {', '.join(map(str, removed)) or 'nothing'}")


def _print_summary(report: dict[str, Any], steps: Steps) -> None:
    load = os.getloadavg()
    _say(
        f"total {steps.total() / 60:.1f} min "
        f"(load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f})"
    )
    for name, (ref, size, built, seconds) in report["images"].items():
        how = f"built in {seconds:.0f} s" if built else "cached"
        _say(f"image {name}: {ref}, {images.describe_size(size)}, {how}")
    _say(
        f"compose {report['compose']} ran; the files were checked with {report['compose_checked']}"
    )
    for key in (
        "up_healthy_s",
        "submit_to_ready_s",
        "worker_kill_to_all_restarted_s",
        "broker_kill_to_leaders_moved_s",
        "broker_kill_to_every_subtask_committed_s",
        "broker_start_to_isr_full_s",
        "job_s",
        "own_job_s",
    ):
        value = report.get(key)
        _say(f"{key}: {'-' if value is None else f'{value:.1f}'}")
    _say(f"lost with the worker: {report['worker_lost_subtasks']}")
    for line in report["worker_recoveries"]:
        _say(f"  {line}")
    _say(f"restarted after the broker loss: {report['broker_loss_restarted']}")
    for line in report["broker_recoveries"]:
        _say(f"  {line}")
    _say(f"redone within their attempt after the broker loss: {report['broker_loss_redone']}")
    _say(f"output rows: {report['output_rows']}")
    _say(
        f"own pipeline (mounted, --conf): {report['own_output_rows']} output rows; metrics "
        f"scraped from the host: {report['own_metrics_subtasks']}"
    )
    if report["problems"]:
        for problem in report["problems"]:
            _say(f"FAILED: {problem}")
    else:
        _say(
            "every check held: output equals the reference, recovery stayed local, "
            "the job went on through the broker loss, the broker rejoined; the own "
            "pipeline ran from the mounted directory with its --conf setting, its output "
            "is exact and its metrics answered on the host"
        )


def _say(message: str) -> None:
    print(f"[compose-test {time.strftime('%H:%M:%S')}] {message}", flush=True)
