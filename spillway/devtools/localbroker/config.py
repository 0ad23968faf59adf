"""Configuration of the local broker and the files rendered from it.

Everything the broker owns lives in one data directory::

    <data_dir>/server.properties   Kafka configuration (rewritten on every start)
    <data_dir>/log4j2.properties   logging configuration of Kafka 4.x (rewritten on every start)
    <data_dir>/log4j.properties    the same for Kafka 3.x (log4j 1.x, reload4j)
    <data_dir>/broker.log          the broker's log (log4j, rolled at 10 MB)
    <data_dir>/broker.out          the JVM's stdout/stderr (crashes before log4j is up)
    <data_dir>/broker.pid          PID of the running broker; absent when stopped
    <data_dir>/data/               Kafka's log.dirs, incl. meta.properties once formatted
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from spillway.channels.errors import ConfigError
from spillway.devtools.localbroker.process import free_ports

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
class SaslListener:
    """An extra ``SASL_PLAINTEXT`` listener (mechanism PLAIN) on 127.0.0.1, for security tests.

    ``users`` maps user names to passwords (JAAS ``user_<name>``). With ``authorizer`` the
    broker enforces ACLs (KRaft ``StandardAuthorizer``): ``super_users`` may do anything,
    everyone else only what ACLs grant. The PLAINTEXT and controller listeners stay
    unauthenticated (principal ``User:ANONYMOUS``, a super user when ACLs are on) so the
    node itself, its readiness probe and test set-up keep working.
    """

    port: int
    users: Mapping[str, str] = field(default_factory=dict, repr=False)
    authorizer: bool = False
    super_users: tuple[str, ...] = ("admin",)

    def __post_init__(self) -> None:
        for name in self.users:
            if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
                raise ConfigError(f"SASL user name {name!r} must be [A-Za-z0-9_-]+")
        for password in self.users.values():
            if '"' in password or "\\" in password:
                # They would end the JAAS string early.
                raise ConfigError("local broker SASL passwords cannot contain '\"' or backslashes")


@dataclass(frozen=True)
class QuorumMember:
    """This node's place in a KRaft quorum of several combined broker+controller nodes
    (:mod:`spillway.devtools.localbroker.quorum`).

    ``node_id``: this node's ``node.id``. ``voters``: every node's ``(node.id, controller
    port)``, this one included. ``cluster_id``: the one id every node's storage is
    formatted with (a node formatted with another id cannot join). ``replication``: the
    replication factor of new topics and the internal topics (offsets, transaction state),
    with ``min.insync.replicas`` one less (at least 1).
    """

    node_id: int
    voters: tuple[tuple[int, int], ...]
    cluster_id: str
    replication: int

    def __post_init__(self) -> None:
        ids = [n for n, _ in self.voters]
        if self.node_id not in ids or len(set(ids)) != len(ids):
            raise ConfigError(
                f"node.id {self.node_id} must be one of the quorum's distinct ids {ids}"
            )
        if not 1 <= self.replication <= len(ids):
            raise ConfigError(
                f"replication {self.replication} needs 1 to {len(ids)} brokers (the quorum's)"
            )

    @property
    def min_insync(self) -> int:
        """``min.insync.replicas`` (and the transaction log's min ISR): one replica may be lost."""
        return max(1, self.replication - 1)


@dataclass(frozen=True)
class BrokerConfig:
    """Where the local broker keeps its files and which loopback ports it listens on.

    ``data_dir`` is always absolute, so the path written into the PID check and the
    command line is the same whatever the working directory of a later command.
    ``quorum``: this node's place in a quorum of several nodes; None (the default) for a
    single node that is its own quorum.
    """

    data_dir: Path
    port: int = DEFAULT_PORT
    controller_port: int = DEFAULT_CONTROLLER_PORT
    sasl: SaslListener | None = None
    quorum: QuorumMember | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_dir", Path(self.data_dir).expanduser().absolute())
        ports = [("--port", self.port), ("--controller-port", self.controller_port)]
        if self.sasl is not None:
            ports.append(("SASL port", self.sasl.port))
        for name, value in ports:
            if not 1 <= value <= 65535:
                raise ConfigError(f"{name} {value} is not a TCP port: use 1-65535")
        if self.port == self.controller_port:
            raise ConfigError(
                f"--port and --controller-port are both {self.port}: "
                "the broker and its controller need two different ports"
            )
        if self.sasl is not None and self.sasl.port in (self.port, self.controller_port):
            raise ConfigError(
                f"the SASL port {self.sasl.port} is also the client or controller port: "
                "every listener needs its own port"
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
    def with_free_ports(
        cls,
        data_dir: Path | str,
        *,
        sasl_users: Mapping[str, str] | None = None,
        authorizer: bool = False,
    ) -> BrokerConfig:
        """A config for a throw-away broker in ``data_dir`` on currently free ports.

        ``sasl_users`` adds a SASL_PLAINTEXT (PLAIN) listener for those users; with
        ``authorizer`` ACLs are enforced there (see :class:`SaslListener`).
        """
        port, controller_port, sasl_port = free_ports(3, HOST)
        sasl = (
            None
            if sasl_users is None
            else SaslListener(sasl_port, dict(sasl_users), authorizer=authorizer)
        )
        return cls(data_dir=Path(data_dir), port=port, controller_port=controller_port, sasl=sasl)

    @property
    def bootstrap(self) -> str:
        """``host:port`` for clients' ``bootstrap.servers`` (the PLAINTEXT listener)."""
        return f"{HOST}:{self.port}"

    @property
    def sasl_bootstrap(self) -> str:
        """``host:port`` of the SASL_PLAINTEXT listener; :class:`ConfigError` without one."""
        if self.sasl is None:
            raise ConfigError("this broker has no SASL listener; configure BrokerConfig.sasl")
        return f"{HOST}:{self.sasl.port}"

    @property
    def server_properties(self) -> Path:
        return self.data_dir / "server.properties"

    @property
    def log4j_properties(self) -> Path:
        return self.data_dir / "log4j.properties"

    @property
    def log4j2_properties(self) -> Path:
        return self.data_dir / "log4j2.properties"

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
    """Return ``server.properties`` for a combined broker+controller node (KRaft): a
    single node, or one node of ``config.quorum``.

    All listeners are on 127.0.0.1. Internal topics are sized for a small machine and
    replicated as the quorum says (once on a single node), and topics are never
    auto-created: a typo in a topic name must fail loudly.
    """
    listeners = f"PLAINTEXT://{HOST}:{config.port},CONTROLLER://{HOST}:{config.controller_port}"
    advertised = f"PLAINTEXT://{HOST}:{config.port}"
    protocols = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    if config.sasl is not None:
        listeners += f",SASL_PLAINTEXT://{HOST}:{config.sasl.port}"
        advertised += f",SASL_PLAINTEXT://{HOST}:{config.sasl.port}"
        protocols += ",SASL_PLAINTEXT:SASL_PLAINTEXT"
    member = config.quorum
    node_id = member.node_id if member is not None else 1
    voters = member.voters if member is not None else ((1, config.controller_port),)
    replication = member.replication if member is not None else 1
    min_insync = member.min_insync if member is not None else 1
    settings: dict[str, str | int] = {
        "process.roles": "broker,controller",
        "node.id": node_id,
        "controller.quorum.voters": ",".join(f"{n}@{HOST}:{port}" for n, port in voters),
        "listeners": listeners,
        "advertised.listeners": advertised,
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": protocols,
        "log.dirs": str(config.log_dirs),
        "num.partitions": 1,
        "offsets.topic.replication.factor": replication,
        # The default of 50 partitions costs seconds of start-up on two cores.
        "offsets.topic.num.partitions": 4,
        "transaction.state.log.replication.factor": replication,
        "transaction.state.log.min.isr": min_insync,
        "transaction.state.log.num.partitions": 4,
        # No other members can join a group on a development broker; don't wait for them.
        "group.initial.rebalance.delay.ms": 0,
        "auto.create.topics.enable": "false",
        **_sasl_settings(config.sasl),
    }
    if member is not None:
        # A topic created without its own settings survives the loss of one broker.
        settings["default.replication.factor"] = replication
        settings["min.insync.replicas"] = min_insync
    lines = ["# Written by spillway on every start; edits are overwritten."]
    lines += [f"{key}={_escape(str(value))}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"


def _sasl_settings(sasl: SaslListener | None) -> dict[str, str | int]:
    if sasl is None:
        return {}
    users = "".join(f' user_{name}="{password}"' for name, password in sasl.users.items())
    # The broker's own PLAIN login is unused (inter-broker traffic is PLAINTEXT) but the
    # JAAS section must exist; the user_<name> entries are who may log in.
    jaas = f"org.apache.kafka.common.security.plain.PlainLoginModule required{users};"
    out: dict[str, str | int] = {
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
    }
    if sasl.authorizer:
        # ANONYMOUS is the principal of the unauthenticated PLAINTEXT and controller
        # listeners: the node talks to itself there, and set-up (creating ACLs) uses it.
        supers = [f"User:{u}" for u in (*sasl.super_users, "ANONYMOUS")]
        out["authorizer.class.name"] = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
        out["super.users"] = ";".join(supers)
        out["allow.everyone.if.no.acl.found"] = "false"
    return out


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


def render_log4j2_properties(config: BrokerConfig) -> str:
    """Return a log4j2 configuration (Kafka 4.x) that logs to ``broker.log`` only.

    The same log as :func:`render_log4j_properties` gives Kafka 3.x: rolled at 10 MB, two
    old files kept. ``status = warn`` keeps log4j2's own start-up chatter out of the log.
    """
    log_file = str(config.log_file)
    settings = {
        "status": "warn",
        "appender.file.type": "RollingFile",
        "appender.file.name": "file",
        "appender.file.fileName": log_file,
        "appender.file.filePattern": f"{log_file}.%i",
        "appender.file.layout.type": "PatternLayout",
        "appender.file.layout.pattern": "[%d] %p %m (%c)%n",
        "appender.file.policies.type": "Policies",
        "appender.file.policies.size.type": "SizeBasedTriggeringPolicy",
        "appender.file.policies.size.size": "10MB",
        "appender.file.strategy.type": "DefaultRolloverStrategy",
        "appender.file.strategy.max": "2",
        "rootLogger.level": "INFO",
        "rootLogger.appenderRef.file.ref": "file",
    }
    return "".join(f"{key}={_escape(value)}\n" for key, value in settings.items())


def read_ports(server_properties: Path) -> tuple[int | None, int | None]:
    """Return (port, controller port) from a ``server.properties`` we wrote, or Nones."""
    try:
        text = server_properties.read_text(encoding="latin-1")
    except OSError:
        return None, None
    # Anchored at "=" or "," so that SASL_PLAINTEXT:// is not taken for PLAINTEXT://.
    port = re.search(r"^listeners=(?:.*,)?PLAINTEXT://[^:,]+:(\d+)", text, re.MULTILINE)
    controller = re.search(r"^listeners=(?:.*,)?CONTROLLER://[^:,]+:(\d+)", text, re.MULTILINE)
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
