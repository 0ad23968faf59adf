"""The broker we run on: transactions on the session broker, and the local broker's lifecycle.

Lifecycle tests use their own :class:`LocalBroker` (own directory, own free ports), so
stopping and restarting it never disturbs the session broker other tests share.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # not re-exported in stubs
    AdminClient,
    NewTopic,
)

from spillway.channels.errors import BrokerUnavailableError, ConfigError
from spillway.cli import main
from spillway.devtools.localbroker import BrokerConfig, LocalBroker, StartResult, StopResult

pytestmark = pytest.mark.broker

_TIMEOUT_S = 30.0


def create_topic(bootstrap: str, name: str) -> str:
    # Keep the client referenced until the result is in: a collected client cancels it.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])
    futures[name].result(timeout=_TIMEOUT_S)
    return name


def transactional_producer(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(_TIMEOUT_S)
    return producer


def produce_committed(bootstrap: str, topic: str, values: list[bytes], txn_id: str) -> None:
    producer = transactional_producer(bootstrap, txn_id)
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value)
    producer.commit_transaction(_TIMEOUT_S)


def read_all(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    """Every value in partition 0 of ``topic`` up to its end (the LSO for read_committed)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        values: list[bytes] = []
        deadline = time.monotonic() + _TIMEOUT_S
        while time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return values
                raise KafkaException(error)
            value = message.value()
            assert value is not None
            values.append(value)
        raise AssertionError(f"no end of partition {topic}[0] within {_TIMEOUT_S} s: {values}")
    finally:
        consumer.close()


# -- transactions (session broker) -------------------------------------------------


def test_read_committed_sees_committed_and_not_aborted(kafka_bootstrap: str, unique: str) -> None:
    topic = create_topic(kafka_bootstrap, unique)
    producer = transactional_producer(kafka_bootstrap, f"{unique}-txn")

    producer.begin_transaction()
    producer.produce(topic, b"committed-1")
    producer.commit_transaction(_TIMEOUT_S)

    producer.begin_transaction()
    producer.produce(topic, b"aborted")
    producer.flush(_TIMEOUT_S)  # make sure the record really reaches the log before the abort
    producer.abort_transaction(_TIMEOUT_S)

    producer.begin_transaction()
    producer.produce(topic, b"committed-2")
    producer.commit_transaction(_TIMEOUT_S)

    assert read_all(kafka_bootstrap, topic, "read_committed") == [b"committed-1", b"committed-2"]
    # The aborted record is in the log; only the isolation level hides it.
    assert read_all(kafka_bootstrap, topic, "read_uncommitted") == [
        b"committed-1",
        b"aborted",
        b"committed-2",
    ]


def test_second_producer_with_same_transactional_id_fences_the_first(
    kafka_bootstrap: str, unique: str
) -> None:
    topic = create_topic(kafka_bootstrap, unique)
    txn_id = f"{unique}-txn"
    old = transactional_producer(kafka_bootstrap, txn_id)
    old.begin_transaction()
    old.produce(topic, b"zombie")
    old.flush(_TIMEOUT_S)

    new = transactional_producer(kafka_bootstrap, txn_id)  # bumps the epoch: fences `old`

    with pytest.raises(KafkaException) as raised:
        old.commit_transaction(_TIMEOUT_S)
    error: KafkaError = raised.value.args[0]
    assert error.code() == KafkaError._FENCED or error.fatal(), error

    new.begin_transaction()
    new.produce(topic, b"successor")
    new.commit_transaction(_TIMEOUT_S)
    assert read_all(kafka_bootstrap, topic, "read_committed") == [b"successor"]


# -- local broker lifecycle (a broker of its own) ----------------------------------


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A local broker only these tests start and stop; started once for the module."""
    broker = LocalBroker(BrokerConfig.with_free_ports(tmp_path_factory.mktemp("own-broker")))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def test_second_start_is_a_noop_that_says_so(
    own_broker: LocalBroker, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    own_broker.start()  # no-op if running: keeps this test independent of the order
    pid = own_broker.status().pid
    assert pid is not None
    caplog.clear()

    with caplog.at_level("INFO", logger="spillway.devtools.localbroker"):
        assert own_broker.start() is StartResult.ALREADY_RUNNING
        exit_code = main(["broker", "start", "--dir", str(own_broker.config.data_dir)])

    assert exit_code == 0
    assert capsys.readouterr().out.strip() == own_broker.bootstrap
    assert caplog.text.count("already running") == 2
    assert own_broker.status().pid == pid


def test_start_with_other_ports_while_running_is_a_config_error(own_broker: LocalBroker) -> None:
    own_broker.start()
    config = own_broker.config
    other = LocalBroker(BrokerConfig(config.data_dir, config.port + 1, config.controller_port))

    with pytest.raises(ConfigError, match=rf"already running on port {config.port}.*stop it first"):
        other.start()
    assert other.status().bootstrap == own_broker.bootstrap  # where it really listens


def test_restart_keeps_committed_records(own_broker: LocalBroker, unique: str) -> None:
    own_broker.start()
    topic = create_topic(own_broker.bootstrap, unique)
    values = [f"record-{i}".encode() for i in range(100)]
    produce_committed(own_broker.bootstrap, topic, values, f"{unique}-txn")
    old_pid = own_broker.status().pid

    assert own_broker.stop() is StopResult.STOPPED
    assert not own_broker.status().running
    assert own_broker.start() is StartResult.STARTED

    assert own_broker.status().pid != old_pid
    assert read_all(own_broker.bootstrap, topic, "read_committed") == values


def test_stop_leaves_no_process(own_broker: LocalBroker) -> None:
    own_broker.start()
    pid = own_broker.status().pid
    assert pid is not None

    assert own_broker.stop() is StopResult.STOPPED

    assert not Path(f"/proc/{pid}").exists()  # gone, not even a zombie
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not own_broker.config.pid_file.exists()
    assert own_broker.stop() is StopResult.NOT_RUNNING


def test_broker_dying_during_start_raises_with_its_log(tmp_path: Path) -> None:
    config = BrokerConfig.with_free_ports(tmp_path)
    # Storage "formatted" for another node: Kafka refuses to start on it and exits.
    config.log_dirs.mkdir(parents=True)
    config.meta_properties.write_text(
        "version=1\nnode.id=7\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\n"
        "directory.id=AAAAAAAAAAAAAAAAAAAAAQ\n"
    )
    broker = LocalBroker(config)

    with pytest.raises(BrokerUnavailableError, match="exited during start") as raised:
        broker.start()

    assert "node id" in str(raised.value)  # the tail of broker.log names the cause
    assert not config.pid_file.exists()
    assert not broker.status().running
