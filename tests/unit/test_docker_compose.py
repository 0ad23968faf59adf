"""The cluster deployment in ``docker/``: compose file, Dockerfile and README agree.

Nothing here starts a container. The checks read ``docker/compose.yaml`` (PyYAML applies
the ``<<`` merge keys as compose does), ``docker/Dockerfile`` and the ``spark-submit`` line
of ``docker/README.md`` and verify that they are consistent with each other.

Whether ``docker compose -f docker/compose.yaml config -q`` (Compose v2) and
``docker-compose -f docker/compose.yaml config -q`` (Debian's 1.29) also run is decided
once, at import time: only if that compose answers ``version`` (``config`` needs no
engine). Without it that check is not part of this module at all, rather than a skipped
test. ``make compose-test`` brings the file up for real (composetest/).
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from importlib.metadata import version
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
COMPOSE_FILE = DOCKER / "compose.yaml"

BROKERS = ("kafka-1", "kafka-2", "kafka-3")
WORKERS = ("spark-worker-1", "spark-worker-2")
MASTER = "spark-master"
KAFKA_IMAGE = "apache/kafka:4.4.0"
REPLICATION = 3
MIN_ISR = 2

# Keys of the compose specification this file may use; a typo (e.g. "healtcheck") would
# otherwise pass every other check and only fail on a real engine.
SERVICE_KEYS = {
    "image",
    "build",
    "restart",
    "hostname",
    "environment",
    "command",
    "ports",
    "volumes",
    "healthcheck",
    "depends_on",
}
HEALTHCHECK_KEYS = {"test", "interval", "timeout", "retries", "start_period"}


def _compose_works(*argv: str) -> bool:
    found = shutil.which(argv[0])
    if found is None:
        return False
    try:
        probe = subprocess.run(
            [found, *argv[1:], "version"], capture_output=True, timeout=20, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


COMPOSE_PLUGIN = _compose_works("docker", "compose")
COMPOSE_V1 = _compose_works("docker-compose")


def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def services() -> dict[str, Any]:
    result: dict[str, Any] = compose()["services"]
    return result


def env(service: str) -> dict[str, str]:
    """A service's environment with every value as the string the container sees."""
    return {k: str(v) for k, v in services()[service]["environment"].items()}


def listeners(value: str) -> dict[str, tuple[str, int]]:
    """``NAME://host:port,...`` -> {NAME: (host, port)}."""
    result = {}
    for item in value.split(","):
        name, _, address = item.partition("://")
        host, _, port = address.rpartition(":")
        result[name] = (host, int(port))
    return result


def published(service: str) -> dict[int, tuple[str, int]]:
    """Container port -> (host address, host port) of a service's ``ports``."""
    result = {}
    for spec in services()[service].get("ports", []):
        parts = str(spec).split(":")
        # "HOST_PORT:PORT" (or a bare "PORT") publishes on every interface of the host.
        host_ip = parts[0] if len(parts) == 3 else "0.0.0.0"
        result[int(parts[-1])] = (host_ip, int(parts[-2] if len(parts) > 1 else parts[-1]))
    return result


def readme_submit() -> list[str]:
    """The documented one-line ``spark-submit`` of the example, as argv."""
    lines = [
        line
        for line in (DOCKER / "README.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("docker compose") and "spark-submit" in line
    ]
    assert len(lines) == 1, lines
    return shlex.split(lines[0])


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def dockerfile() -> str:
    return (DOCKER / "Dockerfile").read_text(encoding="utf-8")


# -- services and images ---------------------------------------------------------------


def test_services_and_images() -> None:
    svc = services()
    assert set(svc) == {*BROKERS, MASTER, *WORKERS}
    for name in BROKERS:
        assert svc[name]["image"] == KAFKA_IMAGE
        assert "build" not in svc[name]
    spark_images = {svc[name]["image"] for name in (MASTER, *WORKERS)}
    assert len(spark_images) == 1, "master and workers must run the same image"
    for name in (MASTER, *WORKERS):
        build = svc[name]["build"]
        # Paths are relative to the compose file: the context is the repository root.
        assert (DOCKER / build["context"]).resolve() == ROOT
        assert (ROOT / build["dockerfile"]).resolve() == DOCKER / "Dockerfile"


def test_only_known_compose_keys_are_used() -> None:
    data = compose()
    # No top-level `name:`: Debian's docker-compose 1.29 rejects it. The project
    # name comes from docker/.env, which both 1.29 and v2 read from the project directory.
    assert set(data) - {k for k in data if k.startswith("x-")} == {"services", "volumes"}
    dotenv = (DOCKER / ".env").read_text(encoding="utf-8").splitlines()
    assert "COMPOSE_PROJECT_NAME=spillway" in dotenv
    for name, service in services().items():
        assert set(service) <= SERVICE_KEYS, (name, set(service) - SERVICE_KEYS)
        assert set(service["healthcheck"]) <= HEALTHCHECK_KEYS, name
        for dep in service.get("depends_on", {}).values():
            assert dep == {"condition": "service_healthy"}, name


def test_every_service_has_a_health_check_and_restarts() -> None:
    for name, service in services().items():
        test = service["healthcheck"]["test"]
        assert test[0] == "CMD", name
        assert service["restart"] == "unless-stopped", name


# -- Kafka ---------------------------------------------------------------------------


def test_brokers_have_distinct_node_ids_and_one_cluster_id() -> None:
    ids = [int(env(b)["KAFKA_NODE_ID"]) for b in BROKERS]
    assert sorted(ids) == [1, 2, 3]
    cluster_ids = {env(b)["CLUSTER_ID"] for b in BROKERS}
    assert len(cluster_ids) == 1
    (cluster_id,) = cluster_ids
    # A Kafka cluster id is a UUID in URL-safe base64 without padding: 22 characters.
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster_id)
    assert not cluster_id.startswith("-")  # would read as an option in kafka-storage.sh


def test_quorum_voters_are_the_brokers_controller_listeners() -> None:
    for broker in BROKERS:
        e = env(broker)
        assert e["KAFKA_PROCESS_ROLES"] == "broker,controller"
        voters = {}
        for voter in e["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(","):
            node_id, _, address = voter.partition("@")
            host, _, port = address.rpartition(":")
            voters[int(node_id)] = (host, int(port))
        expected = {}
        for other in BROKERS:
            other_env = env(other)
            controller = other_env["KAFKA_CONTROLLER_LISTENER_NAMES"]
            _, port = listeners(other_env["KAFKA_LISTENERS"])[controller]
            expected[int(other_env["KAFKA_NODE_ID"])] = (services()[other]["hostname"], port)
        assert voters == expected, broker


def test_listeners_advertised_listeners_and_published_ports_agree() -> None:
    external_host_ports = set()
    for broker in BROKERS:
        e = env(broker)
        own = listeners(e["KAFKA_LISTENERS"])
        advertised = listeners(e["KAFKA_ADVERTISED_LISTENERS"])
        protocols = dict(
            item.split(":") for item in e["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")
        )
        controller = e["KAFKA_CONTROLLER_LISTENER_NAMES"]
        inter_broker = e["KAFKA_INTER_BROKER_LISTENER_NAME"]

        assert set(own) == set(protocols) == {"INTERNAL", "EXTERNAL", "CONTROLLER"}
        assert controller == "CONTROLLER"
        assert inter_broker == "INTERNAL"
        assert all(host == "" for host, _ in own.values()), "bind inside the container"
        # The controller listener is never advertised to clients nor published.
        assert set(advertised) == {"INTERNAL", "EXTERNAL"}
        assert own[controller][1] not in published(broker)
        # INTERNAL: the service's host name on the listener's port.
        assert advertised["INTERNAL"] == (services()[broker]["hostname"], own["INTERNAL"][1])
        assert services()[broker]["hostname"] == broker
        # EXTERNAL: the host address and port the listener's port is published on.
        ports = published(broker)
        assert set(ports) == {own["EXTERNAL"][1]}
        assert advertised["EXTERNAL"] == ports[own["EXTERNAL"][1]]
        external_host_ports.add(ports[own["EXTERNAL"][1]][1])
    assert len(external_host_ports) == len(BROKERS)


def test_replication_three_and_min_isr_two_everywhere() -> None:
    for broker in BROKERS:
        e = env(broker)
        assert int(e["KAFKA_DEFAULT_REPLICATION_FACTOR"]) == REPLICATION
        assert int(e["KAFKA_MIN_INSYNC_REPLICAS"]) == MIN_ISR
        assert int(e["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"]) == REPLICATION
        assert int(e["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"]) == MIN_ISR
        assert int(e["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"]) == REPLICATION
        assert e["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert MIN_ISR < REPLICATION <= len(BROKERS)


def test_brokers_keep_their_data_in_named_volumes() -> None:
    declared = set(compose()["volumes"])
    mounts = []
    for broker in BROKERS:
        (volume,) = services()[broker]["volumes"]
        name, _, target = volume.partition(":")
        assert target == env(broker)["KAFKA_LOG_DIRS"] == "/var/lib/kafka/data"
        assert name in declared
        mounts.append(name)
    assert len(set(mounts)) == len(BROKERS)


def test_broker_health_check_asks_its_own_internal_listener_without_a_jvm() -> None:
    # The check was kafka-broker-api-versions.sh, a JVM every 10 s per broker.
    # Now bash sends an ApiVersions request over /dev/tcp and reads the answer's header.
    for broker in BROKERS:
        test = services()[broker]["healthcheck"]["test"]
        assert test[:3] == ["CMD", "bash", "-c"]
        port = listeners(env(broker)["KAFKA_LISTENERS"])["INTERNAL"][1]
        script = test[3]
        assert script.startswith(f"exec 3<>/dev/tcp/localhost/{port} ")
        # Request: size 10, api key 18 (ApiVersions), version 0, correlation id 1, no client id.
        assert "printf '\\0\\0\\0\\12\\0\\22\\0\\0\\0\\0\\0\\1\\377\\377'" in script
        # The answer must carry correlation id 1 ($$: compose's escape for $).
        assert script.endswith("grep -q ' 00 00 00 01$$'")
        assert "java" not in script
        assert ".sh" not in script


def test_brokers_and_spark_jvms_have_small_heaps() -> None:
    for broker in BROKERS:
        assert env(broker)["KAFKA_HEAP_OPTS"] == "-Xms256m -Xmx384m"
    for name in (MASTER, *WORKERS):
        e = env(name)
        assert e["SPARK_DAEMON_MEMORY"] == "256m"
        assert e["SPARK_EXECUTOR_MEMORY"] == "512m"
    for worker in WORKERS:
        # A worker's memory holds two executors: its own and one replacing a lost worker's.
        assert option(services()[worker]["command"], "--memory") == "1g"


# -- Spark ---------------------------------------------------------------------------


def master_address() -> tuple[str, int, int]:
    """(host, port, web UI port) of the master service's command."""
    command = services()[MASTER]["command"]
    assert command[:2] == ["/opt/spark/bin/spark-class", "org.apache.spark.deploy.master.Master"]
    host = option(command, "--host")
    assert host == services()[MASTER]["hostname"] == MASTER
    return host, int(option(command, "--port")), int(option(command, "--webui-port"))


def test_workers_use_the_master_service() -> None:
    host, port, _ = master_address()
    for worker in WORKERS:
        command = services()[worker]["command"]
        assert command[:2] == [
            "/opt/spark/bin/spark-class",
            "org.apache.spark.deploy.worker.Worker",
        ]
        assert command[2] == f"spark://{host}:{port}"
        assert option(command, "--host") == services()[worker]["hostname"] == worker
        assert int(option(command, "--cores")) >= 1
        assert services()[worker]["depends_on"] == {MASTER: {"condition": "service_healthy"}}
        assert env(worker)["SPARK_LOCAL_IP"] == worker
    assert env(MASTER)["SPARK_LOCAL_IP"] == MASTER


def test_spark_health_checks_ask_the_web_uis() -> None:
    _, _, ui = master_address()
    assert services()[MASTER]["healthcheck"]["test"][-1] == f"http://{MASTER}:{ui}/json/"
    for worker in WORKERS:
        worker_ui = option(services()[worker]["command"], "--webui-port")
        assert services()[worker]["healthcheck"]["test"][-1] == f"http://{worker}:{worker_ui}/json/"


def test_driver_and_executors_see_the_same_job_environment() -> None:
    job = {k: v for k, v in env(MASTER).items() if k.startswith("CLICKS_")}
    assert set(job) >= {"CLICKS_RECORDS", "CLICKS_PARALLELISM", "CLICKS_OUT"}
    for worker in WORKERS:
        assert {k: v for k, v in env(worker).items() if k.startswith("CLICKS_")} == job
    for name in (MASTER, *WORKERS):
        volume = services()[name]["volumes"][0]
        name_, _, target = volume.partition(":")
        assert name_ in compose()["volumes"]
        assert job["CLICKS_OUT"].startswith(target + "/")


def test_own_pipelines_are_mounted_and_on_the_python_path_everywhere() -> None:
    # The driver puts its sys.path into spark.executorEnv.PYTHONPATH, so the directory must
    # be at the same path in every container, read-only.
    for name in (MASTER, *WORKERS):
        assert services()[name]["volumes"][1] == (
            "${SPILLWAY_PIPELINES:-./pipelines}:/opt/spillway/pipelines:ro"
        )
        assert env(name)["PYTHONPATH"] == "/opt/spillway/pipelines"
    assert (DOCKER / "pipelines").is_dir()  # the default source of the bind mount


def test_the_driver_metrics_port_is_published_on_loopback() -> None:
    assert published(MASTER)[9400] == ("127.0.0.1", 9400)


def test_every_published_port_is_on_loopback_and_distinct() -> None:
    host_ports = []
    for name in services():
        for host_ip, host_port in published(name).values():
            assert host_ip == "127.0.0.1", name
            host_ports.append(host_port)
    assert len(host_ports) == len(set(host_ports))
    # Only the master's web UI and the driver's metrics are published among its ports (not
    # the master's RPC port).
    _, _, ui = master_address()
    assert set(published(MASTER)) == {ui, 9400}


# -- README and Dockerfile -----------------------------------------------------------


def test_readme_submit_matches_the_compose_file() -> None:
    argv = readme_submit()
    assert argv[:6] == ["docker", "compose", "-f", "docker/compose.yaml", "exec", MASTER]
    assert argv[6] == "spark-submit"
    host, port, _ = master_address()
    assert option(argv, "--master") == f"spark://{host}:{port}"
    script = argv[argv.index("--master") + 2]
    assert script == "/opt/spillway/spark_jobs/run.py"
    assert (ROOT / script.removeprefix("/opt/spillway/")).is_file()
    assert argv[argv.index(script) + 1] == "spillway.examples.clicks:pipeline"
    internal = []
    for broker in BROKERS:
        advertised = listeners(env(broker)["KAFKA_ADVERTISED_LISTENERS"])
        internal.append("{}:{}".format(*advertised["INTERNAL"]))
    assert option(argv, "--bootstrap").split(",") == internal
    assert int(option(argv, "--replication-factor")) == REPLICATION
    assert int(option(argv, "--min-insync-replicas")) == MIN_ISR


def test_readme_says_how_it_is_run_for_real() -> None:
    # The deployment runs now (make compose-test); the "not run yet" note goes.
    text = (DOCKER / "README.md").read_text(encoding="utf-8")
    assert "**Not run yet.**" not in text
    assert "make compose-test" in text


def test_standin_override_replaces_only_the_images() -> None:
    override = yaml.safe_load((DOCKER / "compose.standin.yaml").read_text(encoding="utf-8"))
    assert set(override) == {"services"}
    assert set(override["services"]) == set(services())
    for name, service in override["services"].items():
        assert set(service) == {"image"}, name
        variable = "SPILLWAY_KAFKA_IMAGE" if name in BROKERS else "SPILLWAY_SPARK_IMAGE"
        assert service["image"].startswith("${" + variable + ":?"), name


def test_dockerfile_builds_on_official_spark_with_java17_and_python3() -> None:
    text = dockerfile()
    default = re.search(r"^ARG SPARK_VERSION=(\d+)\.(\d+)\.(\d+)$", text, re.MULTILINE)
    assert default is not None
    froms = re.findall(r"^FROM (\S+)", text, re.MULTILINE)
    assert froms == ["apache/spark:${SPARK_VERSION}-scala2.13-java17-python3-ubuntu"]
    # Same major version as the pyspark the project is developed and tested with.
    assert default.group(1) == version("pyspark").split(".")[0]
    assert re.search(r"^USER spark$", text.strip().splitlines()[-1])


def test_dockerfile_installs_the_package_with_python_311() -> None:
    text = dockerfile()
    assert re.search(r"^COPY \. /opt/spillway$", text, re.MULTILINE)
    assert "python3.11 -m venv /opt/spillway-venv" in text
    install = re.search(r"/opt/spillway-venv/bin/pip install [^;\n]*", text)
    assert install is not None
    assert "/opt/spillway " in install.group(0)
    assert '"pyspark==${SPARK_VERSION}"' in install.group(0)
    assert "PYSPARK_PYTHON=/opt/spillway-venv/bin/python" in text
    assert "/opt/spark/bin" in text  # spark-submit on PATH for `docker compose exec`


def test_build_context_leaves_out_local_state() -> None:
    ignored = {
        line.strip()
        for line in (DOCKER / "Dockerfile.dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".git", ".venv", ".spillway"} <= ignored
    # Files the package build needs must stay in the context.
    assert not ignored & {"pyproject.toml", "README.md", "channels", "spark_jobs"}


if COMPOSE_V1:

    def test_docker_compose_1_config_accepts_the_file() -> None:
        result = subprocess.run(
            ["docker-compose", "-f", str(COMPOSE_FILE), "config", "-q"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr


if COMPOSE_PLUGIN:

    def test_docker_compose_config_accepts_the_file() -> None:
        result = subprocess.run(
            ["docker", "compose", "-f", str(COMPOSE_FILE), "config", "-q"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
