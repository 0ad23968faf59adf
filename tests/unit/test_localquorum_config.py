"""The local quorum's configuration (spillway.devtools.localbroker.quorum): no Java needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from spillway.channels.errors import ConfigError
from spillway.devtools.localbroker.config import QuorumMember, render_server_properties
from spillway.devtools.localbroker.quorum import LocalQuorum, new_cluster_id, quorum_configs


def parse_properties(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if line and line[0] != "#")
    return {key: value for key, value in pairs}


def test_three_nodes_share_one_quorum_and_cluster_id_on_their_own_ports_and_dirs(
    tmp_path: Path,
) -> None:
    configs = quorum_configs(tmp_path, 3)
    props = [parse_properties(render_server_properties(c)) for c in configs]
    assert [p["node.id"] for p in props] == ["1", "2", "3"]
    voters = {p["controller.quorum.voters"] for p in props}
    assert len(voters) == 1
    assert voters.pop().count("@127.0.0.1:") == 3
    assert len({c.data_dir for c in configs}) == 3
    ports = [c.port for c in configs] + [c.controller_port for c in configs]
    assert len(set(ports)) == 6
    assert len({c.quorum.cluster_id for c in configs if c.quorum is not None}) == 1
    for p in props:
        assert p["default.replication.factor"] == "3"
        assert p["min.insync.replicas"] == "2"
        assert p["offsets.topic.replication.factor"] == "3"
        assert p["transaction.state.log.replication.factor"] == "3"
        assert p["transaction.state.log.min.isr"] == "2"
        assert "127.0.0.1" in p["listeners"]
        assert "0.0.0.0" not in p["listeners"]
    quorum = LocalQuorum(configs)
    assert quorum.bootstrap == ",".join(f"127.0.0.1:{c.port}" for c in configs)


def test_a_single_node_keeps_its_own_settings(tmp_path: Path) -> None:
    (config,) = quorum_configs(tmp_path, 1)
    p = parse_properties(render_server_properties(config))
    assert p["transaction.state.log.min.isr"] == "1"
    assert p["min.insync.replicas"] == "1"


def test_a_member_must_be_one_of_its_voters_and_replication_fit_them() -> None:
    with pytest.raises(ConfigError, match=r"node\.id 4"):
        QuorumMember(4, ((1, 1000), (2, 1001)), new_cluster_id(), 2)
    with pytest.raises(ConfigError, match="replication 3"):
        QuorumMember(1, ((1, 1000), (2, 1001)), new_cluster_id(), 3)


def test_cluster_ids_are_kafka_uuids() -> None:
    ids = {new_cluster_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
