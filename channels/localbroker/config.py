"""Configuration of the local broker and the files rendered from it.

Everything the broker owns lives in one data directory::

    <data_dir>/server.properties   Kafka configuration (rewritten on every start)
    <data_dir>/log4j.properties    logging configuration (rewritten on every start)
    <data_dir>/broker.log          the broker's log (log4j, rolled at 10 MB)
    <data_dir>/broker.out          the JVM's stdout/stderr (crashes before log4j is up)
    <data_dir>/broker.pid          PID of the running broker; absent when stopped
    <data_dir>/data/               Kafka's log.dirs, incl. meta.properties once formatted
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from channels.errors import ConfigError
from channels.localbroker.process import free_ports

HOST = "127.0.0.1"
"""The only address the local broker binds to or advertises."""

DEFAULT_PORT = 9092
DEFAULT_CONTROLLER_PORT = 9093
DEFAULT_DATA_DIR = Path(".spillway") / "broker"
BROKER_DIR_ENV = "SPILLWAY_BROKER_DIR"

# The broker shares two cores with Spark and the tests: a small fixed heap is plenty
# for a single-node development broker and keeps the machine responsive.
MAX_HEAP = "512m"
MIN_HEAP = "128m"


@dataclass(frozen=True)
class BrokerConfig:
    """Where the local broker keeps its files and which loopback ports it listens on.

    ``data_dir`` is always absolute, so the path written into the PID check and the
    command line is the same whatever the working directory of a later command.
    """

    data_dir: Path
    port: int = DEFAULT_PORT
    controller_port: int = DEFAULT_CONTROLLER_PORT

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_dir", Path(self.data_dir).expanduser().absolute())
        for name, value in (("--port", self.port), ("--controller-port", self.controller_port)):
            if not 1 <= value <= 65535:
                raise ConfigError(f"{name} {value} is not a TCP port: use 1-65535")
        if self.port == self.controller_port:
            raise ConfigError(
                f"--port and --controller-port are both {self.port}: "
                "the broker and its controller need two different ports"
            )

    @classmethod
    def resolve(
        cls,
        data_dir: Path | str | None = None,
        port: int | None = None,
        controller_port: int | None = None,
    ) -> BrokerConfig:
        """Build a config from explicit values, then the environment, then defaults.

        The data directory is ``data_dir``, else ``$SPILLWAY_BROKER_DIR``, else
        ``.spillway/broker`` under the current directory. A port not given explicitly
        is the one the data directory was last started with (read back from its
        ``server.properties``), else 9092 / 9093; so ``status`` and ``stop`` find a
        broker started with ``--port`` without repeating the option.
        """
        if data_dir is None:
            data_dir = os.environ.get(BROKER_DIR_ENV) or DEFAULT_DATA_DIR
        directory = Path(data_dir)
        saved_port, saved_controller_port = read_ports(directory / "server.properties")
        return cls(
            data_dir=directory,
            port=port if port is not None else saved_port or DEFAULT_PORT,
            controller_port=(
                controller_port
                if controller_port is not None
                else saved_controller_port or DEFAULT_CONTROLLER_PORT
            ),
        )

    @classmethod
    def with_free_ports(cls, data_dir: Path | str) -> BrokerConfig:
        """A config for a throw-away broker in ``data_dir`` on two currently free ports."""
        port, controller_port = free_ports(2, HOST)
        return cls(data_dir=Path(data_dir), port=port, controller_port=controller_port)

    @property
    def bootstrap(self) -> str:
        """``host:port`` for clients' ``bootstrap.servers``."""
        return f"{HOST}:{self.port}"

    @property
    def server_properties(self) -> Path:
        return self.data_dir / "server.properties"

    @property
    def log4j_properties(self) -> Path:
        return self.data_dir / "log4j.properties"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "broker.log"

    @property
    def console_file(self) -> Path:
        return self.data_dir / "broker.out"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "broker.pid"

    @property
    def log_dirs(self) -> Path:
        return self.data_dir / "data"

    @property
    def meta_properties(self) -> Path:
        """Written by ``StorageTool format``; its presence means the storage is formatted."""
        return self.log_dirs / "meta.properties"


def render_server_properties(config: BrokerConfig) -> str:
    """Return ``server.properties`` for a single combined broker+controller node (KRaft).

    All listeners are on 127.0.0.1. Internal topics are sized for one node on a small
    machine, and topics are never auto-created: a typo in a topic name must fail loudly.
    """
    settings: dict[str, str | int] = {
        "process.roles": "broker,controller",
        "node.id": 1,
        "controller.quorum.voters": f"1@{HOST}:{config.controller_port}",
        "listeners": f"PLAINTEXT://{HOST}:{config.port},CONTROLLER://{HOST}:{config.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{config.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(config.log_dirs),
        "num.partitions": 1,
        "offsets.topic.replication.factor": 1,
        # The default of 50 partitions costs seconds of start-up on two cores.
        "offsets.topic.num.partitions": 4,
        "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1,
        "transaction.state.log.num.partitions": 4,
        # No other members can join a group on a single development node; don't wait for them.
        "group.initial.rebalance.delay.ms": 0,
        "auto.create.topics.enable": "false",
    }
    lines = ["# Written by spillway on every start; edits are overwritten."]
    lines += [f"{key}={_escape(str(value))}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"


def render_log4j_properties(config: BrokerConfig) -> str:
    """Return a log4j 1.x (reload4j) configuration that logs to ``broker.log`` only.

    Without a configuration log4j prints "No appenders could be found" and drops
    every broker message, including the reason the broker failed to start.
    """
    appender = "log4j.appender.file"
    settings = {
        "log4j.rootLogger": "INFO, file",
        appender: "org.apache.log4j.RollingFileAppender",
        f"{appender}.File": str(config.log_file),
        f"{appender}.MaxFileSize": "10MB",
        f"{appender}.MaxBackupIndex": "2",
        f"{appender}.layout": "org.apache.log4j.PatternLayout",
        f"{appender}.layout.ConversionPattern": "[%d] %p %m (%c)%n",
    }
    return "".join(f"{key}={_escape(value)}\n" for key, value in settings.items())


def read_ports(server_properties: Path) -> tuple[int | None, int | None]:
    """Return (port, controller port) from a ``server.properties`` we wrote, or Nones."""
    try:
        text = server_properties.read_text(encoding="latin-1")
    except OSError:
        return None, None
    port = re.search(r"^listeners=.*PLAINTEXT://[^:,]+:(\d+)", text, re.MULTILINE)
    controller = re.search(r"^listeners=.*CONTROLLER://[^:,]+:(\d+)", text, re.MULTILINE)
    return (
        int(port.group(1)) if port else None,
        int(controller.group(1)) if controller else None,
    )


def _escape(value: str) -> str:
    """Escape a value for java.util.Properties, which reads files as ISO-8859-1."""
    out = []
    for char in value:
        if char == "\\":
            out.append("\\\\")
        elif " " <= char <= "~":
            out.append(char)
        else:
            out.extend(f"\\u{unit:04x}" for unit in _utf16_units(char))
    return "".join(out)


def _utf16_units(char: str) -> list[int]:
    data = char.encode("utf-16-be", "surrogatepass")
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]
