"""Pipeline settings: ``--conf KEY=VALUE`` / ``--env NAME`` parsing, validation and recording."""

from __future__ import annotations

import pytest

from spillway.channels.config import scrub_secrets
from spillway.channels.errors import ConfigError
from spillway.cli import main
from spillway.recovery.job.jobconf import (
    conf,
    forwarded_env,
    masked,
    parse_conf,
    parse_env_names,
    replay_conf,
)
from spillway.recovery.job.loader import load_plan
from spillway.spark_jobs.api import pipeline

RUN = ["run", "spillway.examples.clicks:pipeline", "--job-id", "j", "--bootstrap", "127.0.0.1:1"]


def test_parse_conf_keeps_values_whole_and_the_last_wins() -> None:
    got = parse_conf(["a=1", "url=jdbc:x?a=b", "a=2", "empty="])
    assert got == {"a": "2", "url": "jdbc:x?a=b", "empty": ""}


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (["novalue"], "--conf 'novalue' must look like KEY=VALUE"),
        (["a=1", "=x"], "--conf '=x' must look like KEY=VALUE"),
        # An item that looks like a secret is named by position, not echoed.
        (["ok=1", "db.password:hunter2"], "--conf item 2 must look like KEY=VALUE"),
    ],
)
def test_bad_conf_items(items: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_conf(items)
    assert str(e.value).startswith(message)
    assert "hunter2" not in str(e.value)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("A=1", "--env A=...: --env takes only the NAME"),
        ("1A", "--env '1A' is not an environment variable name"),
        ("", "--env '' is not an environment variable name"),
    ],
)
def test_bad_env_names(name: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_env_names([name])
    assert str(e.value).startswith(message)


def test_env_names_deduplicated_in_order_and_must_be_set() -> None:
    assert parse_env_names(["B", "A", "B"]) == ("B", "A")
    assert forwarded_env(["A"], {"A": "1", "B": "2"}) == {"A": "1"}
    with pytest.raises(ConfigError, match=r"^--env C: C is not set in this environment"):
        forwarded_env(["A", "C"], {"A": "1"})


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--conf", "novalue"], "--conf 'novalue' must look like KEY=VALUE"),
        (["--env", "X=1"], "--env X=...: --env takes only the NAME"),
        (["--env", "SPILLWAY_UNIT_SURELY_UNSET"], "--env SPILLWAY_UNIT_SURELY_UNSET: "),
    ],
)
def test_run_rejects_bad_options_before_anything_starts(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # The bootstrap answers nothing: the error must come before any broker contact.
    assert main([*RUN, *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"spillway: error: {message}")
    assert "Traceback" not in err


def test_conf_is_what_the_plan_was_loaded_with() -> None:
    load_plan("spillway.examples.clicks:pipeline", "j", {"greeting": "hi"})
    assert pipeline.conf("greeting") == "hi"
    assert pipeline.conf("other", "default") == "default"
    with pytest.raises(ConfigError, match=r"'other' is not set; pass --conf other=VALUE"):
        conf("other")
    load_plan("spillway.examples.clicks:pipeline", "j")  # a plan without settings
    with pytest.raises(ConfigError, match=r"\(settings given: none\)"):
        conf("greeting")


def test_a_pipeline_reading_conf_gets_it_while_it_is_built() -> None:
    plan = load_plan(
        "tests.integration.pipelines:configured",
        "j",
        {"records": "7", "greeting": "x", "out.dir": "/tmp/never-written"},
    )
    assert plan.operator("events").description["count"] == 7
    with pytest.raises(ConfigError, match=r"'records' is not set"):
        load_plan("tests.integration.pipelines:configured", "j")


def test_secret_settings_are_masked_when_recorded_and_scrubbed_in_text() -> None:
    settings = {"db.password": "pw-unit-123", "api.token": "tok-unit-456", "dir": "/x"}
    assert masked(settings) == {"db.password": "***", "api.token": "***", "dir": "/x"}
    load_plan("spillway.examples.clicks:pipeline", "j", settings)
    assert scrub_secrets("pw-unit-123 and tok-unit-456 in /x") == "*** and *** in /x"


def test_replay_takes_the_recorded_settings_and_asks_for_what_was_not_recorded() -> None:
    submitted = {"conf": {"dir": "/x", "db.password": "***"}, "env": ["NEEDED"]}
    with pytest.raises(ConfigError, match=r"secret setting 'db.password'.*--conf db.password="):
        replay_conf("j", submitted, {}, {"NEEDED": "1"})
    given = {"db.password": "pw"}
    with pytest.raises(ConfigError, match=r"forwards \$NEEDED to its tasks \(--env NEEDED\)"):
        replay_conf("j", submitted, given, {})
    got = replay_conf("j", submitted, {**given, "dir": "/y"}, {"NEEDED": "1"})
    assert got == {"dir": "/y", "db.password": "pw"}
    assert replay_conf("j", None, {"a": "1"}, {}) == {"a": "1"}  # submitted by an older version
