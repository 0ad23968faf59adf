"""Crash points: parsing, and that a planned crash is a real SIGKILL at the right time."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from spillway.channels.errors import ConfigError
from spillway.channels.ids import JobId, OperatorName, SubtaskId
from spillway.recovery.runtime.faults import POINTS, CrashPoint, Faults, parse

_CHILD = """
import sys, time
from spillway.channels.ids import JobId, OperatorName, SubtaskId
from spillway.recovery.runtime.faults import Faults
f = Faults(SubtaskId(JobId("j"), OperatorName("op"), 1), attempt=2, spec=sys.argv[1])
for point in sys.argv[2:]:
    if point == "during-commit":
        # 1 s, not the 2 ms of a real commit: the print below must come first even on a
        # loaded machine (with 2 ms, the kill sometimes beat it there).
        f.reached_soon(point, delay_s=1.0)
    else:
        f.reached(point)
    print("passed", point, flush=True)
time.sleep(5)
print("survived", flush=True)
"""


def _run(spec: str, *points: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _CHILD, spec, *points], capture_output=True, text=True, timeout=30
    )


def test_every_point_parses() -> None:
    spec = ",".join(f"op:1:{p}:0:2" for p in POINTS)
    assert [c.point for c in parse(spec)] == list(POINTS)
    assert parse("op:1:restore:3") == [CrashPoint("op", 1, "restore", 3, 1)]


def test_unknown_point_is_rejected_with_the_choices() -> None:
    with pytest.raises(ConfigError, match="before-produce"):
        parse("op:1:halfway:0")


def test_the_nth_time_at_the_point_of_the_planned_attempt_is_a_sigkill() -> None:
    p = _run("op:1:after-produce:2:2", "after-produce", "after-produce", "after-commit")
    assert p.returncode == -signal.SIGKILL
    assert p.stdout.split("\n")[0] == "passed after-produce"
    assert "survived" not in p.stdout
    other_attempt = _run("op:1:after-produce:0:1", "after-produce")
    assert other_attempt.returncode == 0
    assert "survived" in other_attempt.stdout


def test_during_commit_dies_from_a_thread_while_the_caller_goes_on() -> None:
    p = _run("op:1:during-commit:2", "during-commit")
    assert p.returncode == -signal.SIGKILL
    assert "passed during-commit" in p.stdout  # the call after it (the commit) had started
    assert "survived" not in p.stdout


def test_a_crash_can_name_the_generation_of_the_operator_s_job() -> None:
    assert parse("op:1:restore:0:1:2") == [CrashPoint("op", 1, "restore", 0, 1, 2)]
    assert parse("op:1:restore:0")[0].generation is None
    sub = SubtaskId(JobId("j"), OperatorName("op"), 1)
    # Generation 0's crash does not fire again when a live change starts generation 1
    # (whose attempts count from 0 again); one without a generation fires in each.
    assert Faults(sub, 0, "op:1:restore:0:1:0", generation=0).armed
    assert not Faults(sub, 0, "op:1:restore:0:1:0", generation=1).armed
    assert Faults(sub, 0, "op:1:restore:0:1:1", generation=1).armed
    assert Faults(sub, 0, "op:1:restore:0", generation=3).armed
    with pytest.raises(ConfigError, match=r"ATTEMPT\[:N\[:GEN\]\]"):
        parse("op:1:restore:0:1:x")
    with pytest.raises(ConfigError, match="must look like"):
        parse("op:1:restore:0:1:1:9")
