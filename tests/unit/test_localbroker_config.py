"""Local broker pieces that need no Java, Maven or broker: rendering, checks, CLI errors."""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from spillway.channels.errors import ConfigError
from spillway.cli import main
from spillway.devtools.localbroker import BrokerConfig, LocalBroker, StopResult, cache_dir, jars
from spillway.devtools.localbroker.config import (
    render_log4j2_properties,
    render_log4j_properties,
    render_server_properties,
)
from spillway.devtools.localbroker.process import free_ports, tail_lines


def parse_properties(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if line and line[0] != "#")
    return {key: value for key, value in pairs}


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port on 127.0.0.1 that something is listening on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


def test_server_properties_for_a_single_loopback_node(tmp_path: Path) -> None:
    config = BrokerConfig(tmp_path, port=29092, controller_port=29093)

    props = parse_properties(render_server_properties(config))

    assert props == {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": "1@127.0.0.1:29093",
        "listeners": "PLAINTEXT://127.0.0.1:29092,CONTROLLER://127.0.0.1:29093",
        "advertised.listeners": "PLAINTEXT://127.0.0.1:29092",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(tmp_path / "data"),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
    }


def test_log4j_writes_to_broker_log_in_the_data_dir(tmp_path: Path) -> None:
    props = parse_properties(render_log4j_properties(BrokerConfig(tmp_path)))

    assert props["log4j.rootLogger"] == "INFO, file"
    assert props["log4j.appender.file.File"] == str(tmp_path / "broker.log")


def test_log4j2_writes_to_broker_log_in_the_data_dir(tmp_path: Path) -> None:
    props = parse_properties(render_log4j2_properties(BrokerConfig(tmp_path)))

    assert props["rootLogger.level"] == "INFO"
    assert props["rootLogger.appenderRef.file.ref"] == props["appender.file.name"] == "file"
    assert props["appender.file.fileName"] == str(tmp_path / "broker.log")
    assert props["appender.file.filePattern"] == str(tmp_path / "broker.log") + ".%i"


def test_logging_binding_follows_the_major_version() -> None:
    assert jars.logging_binding("4.4.0") == "log4j2"
    assert jars.logging_binding("4.0") == "log4j2"
    assert jars.logging_binding("3.9.1") == "reload4j"
    with pytest.raises(ConfigError, match=r"'latest' is not MAJOR.MINOR"):
        jars.logging_binding("latest")


def test_paths_are_escaped_for_java_properties(tmp_path: Path) -> None:
    config = BrokerConfig(tmp_path / "caf\u00e9 \\ dir")

    props = parse_properties(render_server_properties(config))

    # java.util.Properties reads ISO-8859-1 and treats '\' as an escape.
    assert props["log.dirs"] == str(tmp_path) + "/caf\\u00e9 \\\\ dir/data"


def test_data_dir_is_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert BrokerConfig(Path("rel")).data_dir == tmp_path / "rel"


def test_resolve_defaults_env_and_remembered_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SPILLWAY_BROKER_DIR", raising=False)
    default = BrokerConfig.resolve()
    assert (default.data_dir, default.port, default.controller_port) == (
        tmp_path / ".spillway" / "broker",
        9092,
        9093,
    )

    monkeypatch.setenv("SPILLWAY_BROKER_DIR", str(tmp_path / "env"))
    assert BrokerConfig.resolve().data_dir == tmp_path / "env"

    # A directory remembers the ports it was last started with; explicit ports win.
    started = BrokerConfig(tmp_path / "env", port=29094, controller_port=29095)
    started.data_dir.mkdir()
    started.server_properties.write_text(render_server_properties(started))
    assert BrokerConfig.resolve() == started
    assert BrokerConfig.resolve(port=29096).port == 29096


@pytest.mark.parametrize(
    ("port", "controller_port", "message"),
    [
        (0, 9093, "--port 0 is not a TCP port"),
        (9092, 70000, "--controller-port 70000 is not a TCP port"),
        (9092, 9092, "both 9092"),
    ],
)
def test_bad_ports_are_config_errors(
    tmp_path: Path, port: int, controller_port: int, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig(tmp_path, port=port, controller_port=controller_port)


def test_taken_port_is_a_config_error_naming_port_and_option(
    tmp_path: Path, taken_port: int
) -> None:
    (free,) = free_ports(1)
    broker = LocalBroker(BrokerConfig(tmp_path, port=taken_port, controller_port=free))

    with pytest.raises(ConfigError, match=rf"port {taken_port} .*already in use.*--port"):
        broker.start()
    assert not broker.config.pid_file.exists()


def test_taken_controller_port_names_its_option(tmp_path: Path, taken_port: int) -> None:
    (free,) = free_ports(1)
    broker = LocalBroker(BrokerConfig(tmp_path, port=free, controller_port=taken_port))

    with pytest.raises(ConfigError, match=rf"port {taken_port} .*--controller-port"):
        broker.start()


def test_cli_reports_errors_without_traceback(
    tmp_path: Path, taken_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    exit_code = main(["broker", "start", "--dir", str(tmp_path), "--port", str(taken_port)])

    err = capsys.readouterr().err
    assert exit_code == 2
    assert err.startswith(f"spillway: error: port {taken_port} ")
    assert "Traceback" not in err


def test_cli_status_of_a_stopped_broker(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    exit_code = main(["broker", "status", "--dir", str(tmp_path), "--port", "29100"])

    assert exit_code == 3
    assert capsys.readouterr().out.startswith("stopped  bootstrap=127.0.0.1:29100")


def test_stale_pid_file_is_removed_and_its_process_left_alone(tmp_path: Path) -> None:
    broker = LocalBroker(BrokerConfig(tmp_path))
    # Our own PID: alive, but not a kafka.Kafka process for this directory.
    broker.config.pid_file.write_text(f"{os.getpid()}\n")

    assert broker.stop() is StopResult.NOT_RUNNING
    assert not broker.config.pid_file.exists()

    broker.config.pid_file.write_text(f"{os.getpid()}\n")
    assert not broker.status().running
    assert not broker.config.pid_file.exists()


def test_logs_are_the_tail_of_broker_log(tmp_path: Path) -> None:
    broker = LocalBroker(BrokerConfig(tmp_path))
    assert broker.logs(5) == []

    broker.config.log_file.write_text("".join(f"line {i}\n" for i in range(100_000)))

    assert broker.logs(3) == ["line 99997", "line 99998", "line 99999"]
    assert tail_lines(broker.config.log_file, 0) == []


@pytest.mark.parametrize(
    ("output", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('java version "1.8.0_292"', 8),
        ('openjdk version "21" 2023-09-19', 21),
        ('openjdk version "23-ea" 2024-09-17', 23),
        ("no version here", None),
    ],
)
def test_java_major_version(output: str, major: int | None) -> None:
    assert jars.java_major_version(output) == major


def test_missing_java_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(shutil, "which", lambda _name: None)

    with pytest.raises(ConfigError, match=r"apt-get install openjdk-17-jre-headless"):
        jars.java_executable()


def test_old_java_is_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "bin" / "java"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'java version \"11.0.2\"' >&2\n")
    fake.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))

    with pytest.raises(ConfigError, match=r"Java 11; Kafka needs Java 17\+"):
        jars.java_executable()


def test_cache_dir_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SPILLWAY_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert cache_dir() == tmp_path / "home" / ".cache" / "spillway"

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "spillway"

    monkeypatch.setenv("SPILLWAY_CACHE_DIR", str(tmp_path / "own"))
    assert cache_dir() == tmp_path / "own"


def test_packaged_pom_names_the_kafka_version() -> None:
    assert jars.kafka_version() == "4.4.0"


def test_jars_resolve_once_and_redo_a_half_finished_download(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[Path] = []

    def fake_maven(_pom: bytes, _home: Path, lib: Path, _version: str) -> None:
        runs.append(lib)
        lib.mkdir()
        (lib / "kafka.jar").touch()

    monkeypatch.setattr(jars, "_run_maven", fake_maven)
    lib = tmp_path / f"kafka-{jars.kafka_version()}-log4j2" / "lib"
    lib.mkdir(parents=True)
    (lib / "half-downloaded.jar").touch()  # a previous run died: no marker

    assert jars.resolve_jars(tmp_path) == lib
    assert jars.resolve_jars(tmp_path) == lib  # marker present: Maven not run again

    assert runs == [lib]
    assert sorted(p.name for p in lib.iterdir()) == ["kafka.jar"]

    # Another release resolves into a directory of its own, once.
    old = tmp_path / "kafka-3.9.1-reload4j" / "lib"
    assert jars.resolve_jars(tmp_path, "3.9.1") == old
    assert jars.resolve_jars(tmp_path, "3.9.1") == old
    assert runs == [lib, old]


def test_missing_maven_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil, "which", lambda _name: None)

    with pytest.raises(ConfigError, match=r"apt-get install maven"):
        jars.resolve_jars(tmp_path)
    assert not (tmp_path / f"kafka-{jars.kafka_version()}-log4j2" / ".complete").exists()
