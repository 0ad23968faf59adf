"""Live upgrade without a broker: the compatibility check of an operator's new definition
(recovery/control/upgrade.py), the status lines, and shipping the pipeline module's source to
tasks (spark_jobs/spark/shipcode.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from spillway.channels.errors import ConfigError, UpgradeError
from spillway.recovery.control.upgrade import check_upgrade, describe_upgrades, upgrade_changes
from spillway.recovery.job.plan import JobPlan
from spillway.spark_jobs.api.pipeline import Pipeline
from spillway.spark_jobs.spark.shipcode import ModuleCode, install, read_module


def schema(*fields: str) -> dict[str, Any]:
    return {
        "type": "record",
        "name": "E",
        "fields": [{"name": f, "type": "string"} for f in fields],
    }


def plan(
    tag_schema: dict[str, Any] | None = None,
    rebalanced: bool = False,
    stateful_tag: bool = False,
    tag_name: str = "tag",
    tag_p: int = 2,
) -> JobPlan:
    """src(2) -> tag(2) -> out(1), variations of tag as given."""
    pipe = Pipeline("upgrade")
    src = pipe.generate("src", make=lambda i: {"k": str(i)}, schema=schema("k"), count=3,
                        parallelism=2)  # fmt: skip
    stream = src.rebalance() if rebalanced else src
    out_schema = tag_schema or schema("k", "version")
    if stateful_tag:
        tagged = src.key_by(lambda r: r["k"], max_parallelism=4).aggregate(
            tag_name, init=lambda: 0, add=lambda n, _r: n + 1,
            result=lambda k, n: {"k": k, "version": str(n)}, schema=out_schema,
            parallelism=tag_p,
        )  # fmt: skip
    else:
        tagged = stream.map(
            tag_name, lambda r: {**r, "version": "v2"}, schema=out_schema, parallelism=tag_p
        )
    tagged.write_jsonl("out", "/x", parallelism=1)
    return pipe.plan("j")


def test_a_new_function_with_the_same_channels_is_compatible() -> None:
    assert upgrade_changes(plan(), plan(), "tag") == []
    check_upgrade(plan(), plan(), "tag")  # no error


def test_a_width_in_the_new_code_that_changes_its_channels_is_refused() -> None:
    # tag at 1 subtask: its input is no longer forward from src's 2, its output no longer
    # rebalanced into out's 1; the running writers and readers would not match.
    assert upgrade_changes(plan(), plan(tag_p=1), "tag") == [
        'input from src:src: kind "forward" -> "rebalance"',
        'output to out: kind "rebalance" -> "forward"',
    ]


def test_a_changed_output_schema_is_refused_naming_the_channel_and_field() -> None:
    with pytest.raises(UpgradeError) as e:
        check_upgrade(plan(), plan(tag_schema=schema("k", "release")), "tag")
    message = str(e.value)
    assert "operator 'tag' of job j" in message
    assert "output to out: schema" in message
    assert '"release"' in message
    assert "the running code stays" in message


def test_a_changed_input_channel_is_refused() -> None:
    assert upgrade_changes(plan(), plan(rebalanced=True), "tag") == [
        'input from src:src: kind "forward" -> "rebalance"'
    ]


def test_an_operator_that_became_stateful_is_refused() -> None:
    changes = upgrade_changes(plan(), plan(stateful_tag=True), "tag")
    assert changes == [
        "stateful False -> True",
        'definition {"op": "map"} -> {"emit": "final", "op": "aggregate"}',
        'input from src:src: kind "forward" -> "hash"',
    ]


def test_an_operator_gone_from_the_new_code_is_refused() -> None:
    assert upgrade_changes(plan(), plan(tag_name="tag2"), "tag") == [
        "operator 'tag' is gone from the new code"
    ]


def test_an_unknown_operator_is_an_error_naming_the_job() -> None:
    with pytest.raises(UpgradeError, match="job j has no operator 'nope' to upgrade"):
        upgrade_changes(plan(), plan(), "nope")


def test_status_lists_the_upgrades_of_the_latest_run_only() -> None:
    events = [
        {"event": "submitted", "run": "r1"},
        {"event": "upgraded", "run": "r1", "target": "tag", "path": "/a.py", "time": 0.0,
         "stopped_s": 1.5},
        {"event": "submitted", "run": "r2"},
        {"event": "upgrade-failed", "run": "r2", "target": "tag", "time": 5.0},
        {"event": "upgraded", "run": "r2", "target": "tag", "path": "/b.py", "time": 60.0,
         "stopped_s": 0.7},
    ]  # fmt: skip
    assert describe_upgrades(events) == [
        "upgrade 1: tag restarted with the code of /b.py at 1970-01-01 00:01:00 UTC (stopped 0.7 s)"
    ]


def test_the_source_is_read_anew_and_runs_as_the_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "shipped_mod.py"
    path.write_text("VERSION = 'v1'\n")
    monkeypatch.delitem(sys.modules, "shipped_mod", raising=False)
    import shipped_mod  # type: ignore[import-not-found]

    assert shipped_mod.VERSION == "v1"
    path.write_text("VERSION = 'v2-new'\n")
    code = read_module("shipped_mod:pipeline")
    assert (code.module, code.path, code.source) == ("shipped_mod", str(path), path.read_text())
    assert sys.modules["shipped_mod"] is shipped_mod  # reading does not replace the import
    path.write_text("VERSION = 'v3'\n")  # what the driver read is what tasks run
    module = install(code)
    assert sys.modules["shipped_mod"] is module
    assert module.VERSION == "v2-new"
    assert module.__file__ == str(path)


def test_a_module_without_source_is_an_error() -> None:
    with pytest.raises(ConfigError, match="cannot read the source of pipeline module 'sys'"):
        read_module("sys:pipeline")


def test_a_failing_module_is_not_left_half_installed() -> None:
    broken = ModuleCode("broken_mod_for_test", "/nowhere/broken.py", "raise ValueError('x')\n")
    with pytest.raises(ValueError, match="x"):
        install(broken)
    assert "broken_mod_for_test" not in sys.modules
