"""``spillway autoscale`` and ``spillway run --autoscale``: their options (no broker)."""

from __future__ import annotations

import pytest

from spillway.channels.errors import ConfigError
from spillway.cli import build_parser
from spillway.recovery.control.autopolicy import Bounds, Settings
from spillway.spark_jobs.autoscale.cli import parse_bounds, policy_of


def test_the_options_make_the_policy() -> None:
    argv = ["autoscale", "--job", "j", "--bounds", "count=1:4", "--bounds", "enrich=2:3",
            "--target-utilisation", "0.8", "--cooldown", "20", "--down-after", "10",
            "--lag-target", "200"]  # fmt: skip
    args = build_parser().parse_args(argv)
    policy = policy_of(args)
    assert policy.bounds == {"count": Bounds(1, 4), "enrich": Bounds(2, 3)}
    assert policy.settings == Settings(0.8, 20.0, 10.0, 200)
    assert args.window == 10.0
    assert policy_of(build_parser().parse_args(["autoscale", "--job", "j", "--bounds", "a=1:1"]))
    run = build_parser().parse_args(["run", "m:p", "--job-id", "j", "--autoscale", "count=1:4"])
    assert parse_bounds(run.autoscale) == {"count": Bounds(1, 4)}


def test_malformed_bounds_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="must look like OPERATOR=MIN:MAX"):
        parse_bounds(["count=4"])
    with pytest.raises(ConfigError, match="need 1 <= min <= max"):
        parse_bounds(["count=4:2"])
    with pytest.raises(ConfigError, match="bounds name operator 'count' twice"):
        parse_bounds(["count=1:2", "count=1:3"])
    args = build_parser().parse_args(
        ["autoscale", "--job", "j", "--bounds", "a=1:2", "--target-utilisation", "1.5"]
    )
    with pytest.raises(ConfigError, match="target utilisation"):
        policy_of(args)
