"""Client settings pass-through, secret masking, ACL grants and the SASL broker config."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest

from spillway.channels.acls import job_acls, kafka_acls_commands
from spillway.channels.config import (
    KafkaSettings,
    SecretFilter,
    parse_client_settings,
    read_client_settings,
    scrub_secrets,
)
from spillway.channels.errors import ConfigError
from spillway.channels.ids import JobId, SubtaskId
from spillway.channels.naming import changelog_topic, channel_topic, checkpoint_topic, operator_name
from spillway.devtools.localbroker import BrokerConfig, SaslListener
from spillway.devtools.localbroker.config import read_ports, render_server_properties

SECRET = "pw-Unit-9f3a"


def test_client_settings_file_and_items(tmp_path: Path) -> None:
    f = tmp_path / "c.properties"
    f.write_text(f"# comment\n\nsecurity.protocol = SASL_SSL\nsasl.password={SECRET}=x\n")
    assert read_client_settings(f) == {
        "security.protocol": "SASL_SSL",
        "sasl.password": f"{SECRET}=x",  # only the first '=' separates
    }
    assert parse_client_settings(["a=1", "b="]) == {"a": "1", "b": ""}


def test_malformed_setting_names_its_position_not_its_value() -> None:
    with pytest.raises(ConfigError) as info:
        parse_client_settings(["a=1", SECRET])
    assert str(info.value) == "--kafka-config item 2 must look like KEY=VALUE"


def test_missing_settings_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read Kafka client settings file"):
        read_client_settings(tmp_path / "nope")


def test_secrets_pass_through_but_are_masked_in_repr_and_text() -> None:
    s = KafkaSettings(
        "h:1",
        client={"sasl.username": "u", "sasl.password": SECRET, "ssl.key.password": "kp-Unit-77"},
    )
    assert s.base()["sasl.password"] == SECRET  # librdkafka gets it unchanged
    assert SECRET not in repr(s)
    assert SECRET not in str(s.redacted())
    assert s.redacted()["sasl.username"] == "u"
    assert scrub_secrets(f'error: "{SECRET}" and kp-Unit-77') == 'error: "***" and ***'
    assert scrub_secrets('{"e": "a\\"b"}') == '{"e": "a\\"b"}'


def test_secret_is_scrubbed_in_its_json_escaped_form_too() -> None:
    KafkaSettings("h:1", client={"sasl.password": 'q"uote-pw'})
    assert scrub_secrets('{"error": "q\\"uote-pw"}') == '{"error": "***"}'


def test_log_records_are_scrubbed() -> None:
    KafkaSettings("h:1", client={"sasl.password": SECRET})
    log = logging.getLogger("test.scrub")
    handler = logging.StreamHandler(io.StringIO())
    handler.addFilter(SecretFilter())
    log.addHandler(handler)
    try:
        log.warning("login with %s failed", SECRET)
        try:
            raise ValueError(f"bad {SECRET}")
        except ValueError:
            log.exception("oops")
    finally:
        log.removeHandler(handler)
    text = handler.stream.getvalue()
    assert SECRET not in text
    assert "login with *** failed" in text
    assert "ValueError: bad ***" in text


def test_job_acls_cover_every_name_the_job_uses() -> None:
    job = JobId("j1")
    grants = job_acls(job, "User:alice")
    prefixes = {(g.resource, g.prefix) for g in grants}
    assert prefixes == {
        ("TOPIC", "spillway.j1."),
        ("TRANSACTIONAL_ID", "spillway.j1."),
        ("GROUP", "spillway.j1."),
    }
    op = operator_name("count")
    sub = SubtaskId(job, op, 3)
    names = [channel_topic(job, op, op), changelog_topic(job, op), checkpoint_topic(job, op)]
    for name in [*names, sub.transactional_id, sub.group_id]:
        assert name.startswith("spillway.j1.")
    # Job ids cannot contain '.', so the prefix of j1 never matches j10's names.
    assert not "spillway.j10.ch.a.b".startswith("spillway.j1.")
    commands = kafka_acls_commands(grants, "k:9092")
    assert len(commands) == 3
    assert all("--resource-pattern-type prefixed" in c for c in commands)
    assert "--operation Delete --topic spillway.j1." in commands[0]


def test_sasl_listener_is_rendered_beside_plaintext(tmp_path: Path) -> None:
    config = BrokerConfig(
        tmp_path,
        port=29092,
        controller_port=29093,
        sasl=SaslListener(29094, {"admin": "a", "alice": SECRET}, authorizer=True),
    )
    text = render_server_properties(config)
    props = dict(line.split("=", 1) for line in text.splitlines() if not line.startswith("#"))
    assert props["listeners"] == (
        "PLAINTEXT://127.0.0.1:29092,CONTROLLER://127.0.0.1:29093,SASL_PLAINTEXT://127.0.0.1:29094"
    )
    assert props["advertised.listeners"].endswith(",SASL_PLAINTEXT://127.0.0.1:29094")
    assert props["sasl.enabled.mechanisms"] == "PLAIN"
    assert f'user_alice="{SECRET}"' in props["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    assert props["super.users"] == "User:admin;User:ANONYMOUS"
    assert props["inter.broker.listener.name"] == "PLAINTEXT"
    assert SECRET not in repr(config)
    config.data_dir.mkdir(parents=True, exist_ok=True)
    config.server_properties.write_text(text)
    assert read_ports(config.server_properties) == (29092, 29093)  # not the SASL port
    assert config.sasl_bootstrap == "127.0.0.1:29094"


def test_sasl_port_must_differ(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="SASL port 29092"):
        BrokerConfig(tmp_path, port=29092, controller_port=29093, sasl=SaslListener(29092))
