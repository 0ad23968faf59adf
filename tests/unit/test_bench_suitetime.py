"""bench.suitetime with a fake runner, clock and load: what it runs, in which order, and
what it records. No make, no broker."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from bench import suitetime


class FakeClock:
    """A clock that only the fake runner moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_every_tier_runs_in_order_and_a_failure_does_not_stop_the_next() -> None:
    clock = FakeClock()
    ran: list[tuple[list[str], Path]] = []
    took = {"test": 812.25, "soak": 1500.0}
    codes = {"test": 2, "soak": 0}

    def run(command: Sequence[str], cwd: Path) -> int:
        ran.append((list(command), cwd))
        clock.now += took[command[1]]
        return codes[command[1]]

    def sleep(s: float) -> None:
        clock.now += s

    # Each tier: the settle check(s), the load before, the load after.
    test_loads = [(1.5, 1.0, 0.5), (1.5, 1.0, 0.5), (1.9, 1.2, 0.6)]
    soak_loads = [(4.1, 2.0, 1.0), (2.5, 2.0, 1.0), (1.8, 1.3, 0.7), (1.8, 1.3, 0.7)]
    loads = iter([*test_loads, *soak_loads, (0.4, 1.1, 0.9)])
    times = suitetime.time_tiers(
        ["test", "soak"], Path("/repo"), run, clock, lambda: next(loads), make="mk", sleep=sleep
    )
    assert ran == [(["mk", "test"], Path("/repo")), (["mk", "soak"], Path("/repo"))]
    assert times == [
        suitetime.TierTime("test", ["mk", "test"], 812.2, 2, (1.5, 1.0, 0.5), (1.9, 1.2, 0.6)),
        # soak waited two polls for the load to fall under 2; the wait is not its time
        suitetime.TierTime(
            "soak", ["mk", "soak"], 1500.0, 0, (1.8, 1.3, 0.7), (0.4, 1.1, 0.9), 10.0
        ),
    ]


def test_settle_gives_up_after_its_maximum_and_says_how_long_it_waited() -> None:
    clock = FakeClock()

    def sleep(s: float) -> None:
        clock.now += s

    assert suitetime.settle(2.0, 12.0, clock, lambda: (3.0, 3.0, 3.0), sleep) == 15.0
    assert suitetime.settle(2.0, 12.0, clock, lambda: (1.0, 3.0, 3.0), sleep) == 0.0
    assert suitetime.settle(2.0, 0.0, clock, lambda: (9.0, 9.0, 9.0), sleep) == 0.0


def test_report_shows_each_tier_beside_its_target_and_the_total() -> None:
    compose = ["make", "compose-test"]
    times = [
        suitetime.TierTime("test", ["make", "test"], 812.0, 0, (1.5, 1, 1), (1.9, 1, 1)),
        suitetime.TierTime("compose-test", compose, 300.0, 1, (0, 0, 0), (0.5, 0, 0)),
    ]
    assert suitetime.report(times).splitlines() == [
        "tier             seconds    target  exit  load before -> after  (settled)",
        "test               812.0       900     0  1.50 -> 1.90  (0 s)",
        "compose-test       300.0               1  0.00 -> 0.50  (0 s)",
        "total             1112.0      3600",
    ]


def test_main_writes_the_json_with_the_commit_and_fails_if_a_tier_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(suitetime, "commit_of", lambda root: {"commit": "abc", "dirty": False})
    commands: list[list[str]] = []

    def run(command: Sequence[str], cwd: Path) -> int:
        commands.append(list(command))
        return 0 if command[1] == "soak" else 3

    out = tmp_path / "r.json"
    argv = ["soak", "test", "--out", str(out), "--settle-max", "0"]
    assert suitetime.main(argv, run=run) == 1
    assert commands == [["make", "soak"], ["make", "test"]]
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "suitetime"
    assert (doc["commit"], doc["dirty"]) == ("abc", False)
    assert [(t["tier"], t["exit_code"]) for t in doc["tiers"]] == [("soak", 0), ("test", 3)]
    assert all(len(t["load_before"]) == 3 and len(t["load_after"]) == 3 for t in doc["tiers"])
    assert doc["targets_s"] == {"test": 900.0, "soak": 1500.0, "total": 3600.0}
    assert doc["settle"] == {"load_below": 2.0, "max_s": 0.0}
    assert doc["total_s"] == round(sum(t["seconds"] for t in doc["tiers"]), 1)


def test_main_refuses_a_tier_it_does_not_know() -> None:
    with pytest.raises(SystemExit) as refused:
        suitetime.main(["unit"], run=lambda command, cwd: 0)
    assert refused.value.code == 2


def test_commit_of_a_directory_outside_git_is_unknown(tmp_path: Path) -> None:
    assert suitetime.commit_of(tmp_path) == {"commit": None, "dirty": None}
