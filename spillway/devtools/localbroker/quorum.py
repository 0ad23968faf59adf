"""Several local KRaft nodes (combined broker+controller) as one replicated cluster.

For tests and measurements of broker loss (tests/integration/test_broker_loss.py,
``python -m bench.brokerloss``)::

    with LocalQuorum.with_free_ports(tmp_path / "quorum") as quorum:
        quorum.bootstrap        # "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
        quorum.kill(2)          # SIGKILL node 2 (a crash)
        quorum.restart(2)       # start it again on its ports, with its data

Each node is a :class:`~spillway.devtools.localbroker.broker.LocalBroker` in a directory of
its own (``<base>/node-<id>``: its ``server.properties``, logs, data and PID file), on
loopback ports of its own; the quorum is static (``controller.quorum.voters``), every
node's storage formatted with one cluster id. Topics (and the offsets and transaction
state topics) are replicated to every node, ``min.insync.replicas`` one less: any one
node may die without a write being refused. Processes are signalled only by their
recorded, checked PIDs.
"""

from __future__ import annotations

import base64
import concurrent.futures
import time
import uuid
from pathlib import Path

from confluent_kafka import KafkaException

from spillway.channels.errors import BrokerUnavailableError, ConfigError
from spillway.channels.kafka.clients import admin_client
from spillway.devtools.localbroker import process
from spillway.devtools.localbroker.broker import LocalBroker
from spillway.devtools.localbroker.config import HOST, BrokerConfig, QuorumMember

DEFAULT_SIZE = 3


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (as Kafka's
    ``Uuid``), never starting with ``-`` (a command line would take it for an option)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def quorum_configs(base_dir: Path, size: int = DEFAULT_SIZE) -> list[BrokerConfig]:
    """The configs of a quorum of ``size`` nodes (ids 1..size) under ``base_dir``, on
    loopback ports free a moment ago, replicated ``size`` times (min ISR ``size - 1``)."""
    if size < 1:
        raise ConfigError(f"a quorum needs at least one node, not {size}")
    ports = process.free_ports(2 * size, HOST)
    voters = tuple((n + 1, ports[2 * n + 1]) for n in range(size))
    cluster_id = new_cluster_id()
    return [
        BrokerConfig(
            data_dir=Path(base_dir) / f"node-{n + 1}",
            port=ports[2 * n],
            controller_port=ports[2 * n + 1],
            quorum=QuorumMember(n + 1, voters, cluster_id, size),
        )
        for n in range(size)
    ]


class LocalQuorum(process.StartedHere):
    """A local cluster of combined broker+controller nodes, ids 1..n. No I/O until
    :meth:`start`; ``with quorum:`` starts it and stops every node it started."""

    def __init__(self, configs: list[BrokerConfig], *, start_timeout: float = 120.0) -> None:
        """``configs``: one per node, as :func:`quorum_configs` makes them."""
        self.nodes = {
            c.quorum.node_id if c.quorum is not None else 1: LocalBroker(
                c, start_timeout=start_timeout
            )
            for c in configs
        }
        self.start_timeout = start_timeout

    @classmethod
    def with_free_ports(cls, base_dir: Path, size: int = DEFAULT_SIZE) -> LocalQuorum:
        """A quorum of ``size`` nodes under ``base_dir`` on free loopback ports."""
        return cls(quorum_configs(base_dir, size))

    @property
    def bootstrap(self) -> str:
        """Every node's client address, comma-separated (``bootstrap.servers``)."""
        return ",".join(b.bootstrap for b in self.nodes.values())

    def start(self) -> None:
        """Start every node at once (a node answers only once a majority of the quorum
        runs) and return when every broker is registered; a node that fails to start
        stops the others it started and raises its :class:`BrokerUnavailableError`."""
        with concurrent.futures.ThreadPoolExecutor(len(self.nodes)) as pool:
            futures = [pool.submit(b.start) for b in self.nodes.values()]
            errors = [f.exception() for f in futures]
        failed = [e for e in errors if e is not None]
        self._started_here = True
        if failed:
            self.stop()
            raise failed[0]
        self.await_brokers(len(self.nodes))

    def stop(self) -> None:
        """Stop every node (SIGTERM, SIGKILL after the node's stop timeout), by PID."""
        with concurrent.futures.ThreadPoolExecutor(len(self.nodes)) as pool:
            list(pool.map(lambda b: b.stop(), self.nodes.values()))

    def kill(self, node_id: int) -> bool:
        """SIGKILL node ``node_id`` (a crash); False if it was not running."""
        return self._node(node_id).kill()

    def restart(self, node_id: int) -> None:
        """Start node ``node_id`` again (its ports and data kept) and wait until every
        node's broker is registered again."""
        self._node(node_id).start()
        self.await_brokers(len(self.nodes))

    def running(self) -> list[int]:
        """The ids of the nodes whose process runs."""
        return [n for n, b in self.nodes.items() if b.status().running]

    def await_brokers(self, count: int) -> None:
        """Wait until the cluster's metadata lists ``count`` brokers;
        :class:`BrokerUnavailableError` after ``start_timeout`` seconds."""
        deadline = time.monotonic() + self.start_timeout
        seen = 0
        while time.monotonic() < deadline:
            try:
                seen = len(admin_client(self.bootstrap).list_topics(timeout=5.0).brokers)
            except KafkaException:
                seen = 0
            if seen >= count:
                return
            time.sleep(0.2)
        raise BrokerUnavailableError(
            f"the local quorum at {self.bootstrap} lists {seen} of {count} brokers after "
            f"{self.start_timeout:.0f}s"
        )

    def _node(self, node_id: int) -> LocalBroker:
        try:
            return self.nodes[node_id]
        except KeyError:
            raise ConfigError(f"no node {node_id} in the quorum: {sorted(self.nodes)}") from None
