"""Security on a broker that authenticates (SASL/PLAIN) and enforces ACLs.

The module starts its own :class:`LocalBroker` with a SASL_PLAINTEXT listener and the
KRaft StandardAuthorizer. The job runs as ``User:alice``, who has no rights but the
prefixed grants of :func:`spillway.channels.acls.job_acls`, and it reaches the broker only
through the SASL listener with settings from a properties file. So when its output
equals the batch reference, every producer, consumer and admin client — driver, Spark
executors, status and recovery commands — got the settings, and the documented ACLs
are enough. Alice's password is a distinctive string that must appear nowhere: not in
any output, log, error message, status, nor in any record of the job's topics.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # not re-exported in stubs
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from spillway.channels.acls import job_acls
from spillway.channels.ids import JobId
from spillway.devtools.localbroker import BrokerConfig, LocalBroker
from spillway.examples import clicks
from tests.integration.gates import Gates
from tests.integration.support import read_output

pytestmark = [pytest.mark.broker, pytest.mark.spark]

REF = "spillway.examples.clicks:pipeline"
HELD_REF = "tests.integration.gates:held_clicks"  # the same, held at the test's gates
RECORDS = 12_000
SECRET = "Zq7-planted-SECRET-pw-4711"
WRONG = "Wr0ng-planted-pw-0815"
USER = "alice"


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerConfig]:
    """A broker with a SASL/PLAIN listener and ACLs enforced there; stopped by its PID."""
    config = BrokerConfig.with_free_ports(
        tmp_path_factory.mktemp("sasl-broker"),
        sasl_users={"admin": "admin-pw", USER: SECRET},
        authorizer=True,
    )
    broker = LocalBroker(config)
    broker.start()
    try:
        yield config
    finally:
        broker.stop()


def grant(broker: BrokerConfig, job: str) -> None:
    """Give alice exactly the documented grants for ``job`` (as the ANONYMOUS super user)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    bindings = [
        AclBinding(
            ResourceType[g.resource],
            g.prefix,
            ResourcePatternType.PREFIXED,
            g.principal,
            "*",
            AclOperation[g.operation],
            AclPermissionType.ALLOW,
        )
        for g in job_acls(JobId(job), f"User:{USER}")
    ]
    for future in admin.create_acls(bindings).values():
        future.result()


def client_file(tmp_path: Path, password: str) -> Path:
    path = tmp_path / f"client-{password[:5]}.properties"
    path.write_text(
        "# alice's settings\n"
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=PLAIN\n"
        f"sasl.username={USER}\n"
        f"sasl.password={password}\n",
        encoding="utf-8",
    )
    return path


def kafka_args(broker: BrokerConfig, settings: Path) -> list[str]:
    """Only the SASL listener, only settings from the file."""
    return ["--bootstrap", broker.sasl_bootstrap, "--kafka-config-file", str(settings)]


def spillway(
    *argv: str, module: str = "spillway.cli", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a Spillway command line in a child process, capturing everything it prints."""
    return subprocess.run(
        [sys.executable, "-m", module, *argv],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def every_record(bootstrap: str, prefix: str) -> list[bytes]:
    """Keys, values and headers of every message (committed or not) in topics under ``prefix``.

    One consumer is assigned every non-empty partition at once and reads until each one's
    position reached its high watermark: reading the ~90 partitions one after another
    waited out a poll timeout at the end of each (a log ending in a transaction marker
    delivers nothing more), most of this test's wall time.
    """
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = admin.list_topics(timeout=10).topics
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "security-check",
            "isolation.level": "read_uncommitted",
            "enable.auto.commit": False,
        }
    )
    out: list[bytes] = []
    try:
        ends: dict[tuple[str, int], int] = {}
        starts = []
        for name, meta in topics.items():
            if not name.startswith(prefix):
                continue
            for p in meta.partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(name, p), timeout=10)
                if high > low:
                    ends[(name, p)] = high
                    starts.append(TopicPartition(name, p, low))
        consumer.assign(starts)
        deadline = time.monotonic() + 120
        left = dict(ends)
        while left:
            assert time.monotonic() < deadline, f"cannot read {sorted(left)}"
            for m in consumer.consume(1000, 0.5):
                assert m.error() is None, m.error()
                out += [m.key() or b"", m.value() or b""]
                out += [v for _, v in m.headers() or [] if v]
            # Positions, not message offsets: transaction markers are never delivered.
            positions = consumer.position([TopicPartition(t, p) for t, p in left])
            for tp in positions:
                if tp.offset >= left[(tp.topic, tp.partition)]:
                    del left[(tp.topic, tp.partition)]
    finally:
        consumer.close()
    return out


def low_watermark(bootstrap: str, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "security-check"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, partition), 10)[0])
    finally:
        consumer.close()


def pruned(bootstrap: str, topic: str) -> bool:
    """True once records of ``topic``'s partition 0 were deleted (False: no topic yet)."""
    try:
        return low_watermark(bootstrap, topic, 0) > 0
    except KafkaException:
        return False


def test_job_status_and_recovery_cli_with_sasl_settings_only_and_prefixed_acls(
    sasl_broker: BrokerConfig, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    grant(sasl_broker, unique)
    kafka = kafka_args(sasl_broker, client_file(tmp_path, SECRET))
    out = tmp_path / "out"
    env = {
        "CLICKS_RECORDS": str(RECORDS),
        "CLICKS_OUT": str(out),
        "CLICKS_PARALLELISM": "2",
    }
    # Held at half its input (tests/integration/gates.py), with short checkpoint intervals,
    # until clicks[0]'s old checkpoint records were pruned (DeleteRecords) under the ACLs.
    gates = Gates(tmp_path / "gates", monkeypatch, [RECORDS // 2])
    ckpt_topic = f"spillway.{unique}.ckpt.clicks"
    gates.start(
        ("clicks[0]'s checkpoints pruned", partial(pruned, sasl_broker.bootstrap, ckpt_topic))
    )
    run = spillway(
        "run",
        HELD_REF,
        "--job-id",
        unique,
        "--master",
        "local[8,2]",
        "--checkpoint-interval",
        "0.1",
        "--dead-letter",
        *kafka,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert gates.missed == []
    assert read_output(out) == clicks.reference(RECORDS)
    # Old checkpoint records were pruned (DeleteRecords), and without a warning.
    prune_lines = [line for line in run.stderr.splitlines() if "prune" in line]
    assert not prune_lines
    clicks0 = [line for line in run.stdout.splitlines() if "clicks[0]" in line]
    low = low_watermark(sasl_broker.bootstrap, ckpt_topic, 0)
    assert low > 0, clicks0

    status = spillway("status", "--job", unique, "--json", *kafka)
    assert status.returncode == 0, status.stderr
    assert status.stdout.count('"state": "finished"') == 8
    recovery = spillway("status", "--job", unique, *kafka, module="recovery")
    assert recovery.returncode == 0, recovery.stderr
    assert recovery.stdout.count("finished") == 8
    replay = spillway(
        "replay", "--job", unique, "--operator", "count", "--subtask", "0", *kafka, env=env
    )
    assert replay.returncode == 0, replay.stderr
    assert '"status": "skipped"' in replay.stdout

    outputs = [run, status, recovery, replay]
    for text in (p.stdout + p.stderr for p in outputs):
        assert SECRET not in text
    records = every_record(sasl_broker.bootstrap, f"spillway.{unique}.")
    assert any(b'"event": "finished"' in r for r in records)  # the event log was read
    assert not [r for r in records if SECRET.encode() in r]
    assert SECRET not in sasl_broker.log_file.read_text(encoding="utf-8", errors="replace")


def test_wrong_password_fails_at_start_naming_authentication(
    sasl_broker: BrokerConfig, unique: str, tmp_path: Path
) -> None:
    grant(sasl_broker, unique)
    kafka = kafka_args(sasl_broker, client_file(tmp_path, WRONG))
    env = {"CLICKS_RECORDS": "1000", "CLICKS_OUT": str(tmp_path / "out")}
    # The password also given on the command line, as --kafka-config items override the file.
    argv_password = ["--kafka-config", f"sasl.password={WRONG}"]
    runs = [
        spillway("run", REF, "--job-id", unique, *kafka, *argv_password, env=env),
        spillway("status", "--job", unique, *kafka),
        spillway("checkpoints", "--job", unique, *kafka, module="recovery"),
        spillway("replay", "--job", unique, "--operator", "count", "--subtask", "0", *kafka),
    ]
    for proc in runs:
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert "rejected this client's credentials" in proc.stderr
        assert "Authentication failed: Invalid username or password" in proc.stderr
        assert "sasl.password" in proc.stderr  # says what to check
        assert "Traceback" not in proc.stderr
        assert WRONG not in proc.stdout + proc.stderr
        assert SECRET not in proc.stdout + proc.stderr
    assert not (tmp_path / "out").exists()  # the job never started


def test_missing_acls_fail_at_start_naming_the_grant(
    sasl_broker: BrokerConfig, unique: str, tmp_path: Path
) -> None:
    # No grant() for this job: alice may not create its topics.
    kafka = kafka_args(sasl_broker, client_file(tmp_path, SECRET))
    env = {"CLICKS_RECORDS": "1000", "CLICKS_OUT": str(tmp_path / "out")}
    proc = spillway("run", REF, "--job-id", unique, *kafka, env=env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"does not allow this client to create topic spillway.{unique}." in proc.stderr
    assert "docs/security.md" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
