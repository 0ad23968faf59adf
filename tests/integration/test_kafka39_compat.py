"""Compatibility smoke test: Spillway on an Apache Kafka 3.9 broker.

The local broker and the compose deployment run Kafka 4.x; users may still run 3.9. Here
a :class:`LocalBroker` runs Kafka 3.9.1 (the same class, with its ``kafka`` version
parameter: reload4j logging, 3.9's jars) and the click job runs on it with one subtask
SIGKILLed part way: the output must equal the batch reference exactly, and only the
killed subtask restarts, replaying only its own channel partition.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from spillway.channels.routing.keygroups import DEFAULT_MAX_PARALLELISM, key_group_range
from spillway.devtools.demo import run_demo
from spillway.devtools.localbroker import BrokerConfig, LocalBroker
from spillway.devtools.localbroker.process import command_line

pytestmark = pytest.mark.soak

KAFKA_39 = "3.9.1"


@pytest.fixture(scope="module")
def broker_39(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    broker = LocalBroker(
        BrokerConfig.with_free_ports(tmp_path_factory.mktemp("kafka-39")), kafka=KAFKA_39
    )
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.mark.broker
@pytest.mark.spark
def test_click_job_with_a_subtask_killed_is_exactly_once_on_kafka_39(
    broker_39: LocalBroker, unique: str, tmp_path: Path
) -> None:
    # The broker really is 3.9.1: its JVM runs the 3.9.1 jars.
    pid = broker_39.status().pid
    assert pid is not None
    argv = command_line(pid) or []
    classpath = argv[argv.index("-cp") + 1]
    assert Path(classpath).parent.name == "lib"
    assert Path(classpath).parent.parent.name == f"kafka-{KAFKA_39}-reload4j"

    report = run_demo(
        broker_39.bootstrap,
        records=60_000,
        parallelism=2,
        kill="count:1",
        kill_after=2,
        out_dir=str(tmp_path / "demo"),
        duration_s=8,
        job=unique,
    )
    assert report["checks"]["output equals the batch reference"]
    assert report["restarted"] == ["count[1]"]
    assert report["ok"], report["checks"]
    replay = report["replay"]
    # Key groups: count[1] owns the upper half of the keyed channel's partitions (was
    # partition 1 alone) and replays only some of those.
    own = key_group_range(1, 2, DEFAULT_MAX_PARALLELISM)
    assert replay
    assert set(replay) <= {f"spillway.{unique}.ch.enrich.count[{g}]" for g in own}
    assert sum(end - start for start, end, _n in replay.values()) > 0
    assert sum(n for _s, _e, n in replay.values()) > 0
