"""The guarantee option is validated before anything starts."""

from __future__ import annotations

import pytest

from spillway.channels.errors import ConfigError
from spillway.spark_jobs.spark.jobconfig import JobConfig


def test_unknown_guarantee_is_rejected_with_the_choices() -> None:
    config = JobConfig(
        "spillway.examples.clicks:pipeline", "unused", "127.0.0.1:9", guarantee="at-most-once"
    )
    with pytest.raises(ConfigError, match="exactly-once, at-least-once"):
        config.options()
