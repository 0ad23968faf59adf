"""Bad options and bad pipeline references give clear errors (exit 2, no traceback)."""

from __future__ import annotations

import pytest

from spillway.cli import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "no_colon", "--job-id", "j"], "must look like MODULE:PIPELINE"),
        (["run", "no_such_module_xyz:p", "--job-id", "j"], "cannot import pipeline module"),
        (["run", "spillway.examples.clicks:nope", "--job-id", "j"], "has no attribute 'nope'"),
        (["run", "spillway.examples.clicks:pipeline", "--job-id", "bad.id"], "invalid job id"),
        (
            ["run", "spillway.examples.clicks:pipeline", "--job-id", "j", "--task-attempts", "0"],
            "--task-attempts",
        ),
        (
            [
                "run",
                "spillway.examples.clicks:pipeline",
                "--job-id",
                "j",
                "--kafka-config",
                "novalue",
            ],
            "KEY=VALUE",
        ),
        (
            [
                "run",
                "spillway.examples.clicks:pipeline",
                "--job-id",
                "j",
                "--checkpoint-interval",
                "0",
                "--bootstrap",
                "127.0.0.1:1",
            ],
            "--checkpoint-interval must be > 0",
        ),
    ],
)
def test_bad_run_options(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_missing_broker_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "run",
            "spillway.examples.clicks:pipeline",
            "--job-id",
            "j",
            "--bootstrap",
            "127.0.0.1:1",
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "no Kafka broker answered at 127.0.0.1:1" in err
    assert "spillway broker start" in err


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["frobnicate"]) == 2
