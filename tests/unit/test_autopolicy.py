"""The autoscaler's decisions from sequences of measurements: DS2's rule, bounds,
cooldown and the rule against oscillation (no I/O)."""

from __future__ import annotations

import pytest

from spillway.recovery.control.autopolicy import (
    AutoscalePolicy,
    Bounds,
    Decision,
    Measurement,
    Reason,
    Settings,
    describe_decisions,
    needed,
)

SETTINGS = Settings(target_utilisation=0.5, cooldown_s=30, down_after_s=20, lag_target=100)


def m(t: float, p: int, rate: float, backlog: int = 0, max_p: int | None = 8) -> Measurement:
    """``count`` at time ``t`` with ``p`` subtasks, each processing 100 records per busy s."""
    return Measurement("count", t, p, rate, 100.0, backlog, max_p)


def run(policy: AutoscalePolicy, seq: list[Measurement]) -> list[tuple[float, int, int, str]]:
    """Feed ``seq``, applying each decision to the following measurements' parallelism."""
    out: list[tuple[float, int, int, str]] = []
    p = seq[0].parallelism
    for x in seq:
        d = policy.observe(Measurement(x.operator, x.time, p, x.input_rate, x.true_rate,
                                       x.backlog, x.max_parallelism))  # fmt: skip
        if d is not None:
            out.append((d.time, d.previous, d.parallelism, str(d.reason)))
            p = d.parallelism
    return out


def test_needed_is_ds2s_rule() -> None:
    assert needed(m(0, 1, 100), 0.5) == 2  # 100 rec/s at 50 of 100 rec/busy s each
    assert needed(m(0, 1, 101), 0.5) == 3
    assert needed(m(0, 1, 0), 0.5) == 1  # never below one subtask
    assert needed(m(0, 1, 70), 0.7) == 1  # exactly at the target: no rounding up
    with pytest.raises(ValueError, match="true rate must be positive"):
        needed(Measurement("count", 0, 1, 10, 0.0, 0), 0.5)


def test_a_step_up_scales_up_at_once_and_then_waits_for_the_cooldown() -> None:
    policy = AutoscalePolicy({"count": Bounds(1, 6)}, SETTINGS)
    seq = [m(t, 1, 40) for t in range(10)] + [m(t, 1, 250) for t in range(10, 60)]
    # 250 rec/s needs 5 at once; then no decision: the operator is as wide as needed
    assert run(policy, seq) == [(10, 1, 5, "scale-up")]


def test_a_scale_up_within_the_cooldown_waits_for_its_end() -> None:
    policy = AutoscalePolicy({"count": Bounds(1, 6)}, SETTINGS)
    seq = [m(0, 1, 120)] + [m(t, 1, 280) for t in range(1, 40)]
    # 120 needs 3; 280 needs 6, decided at the first measurement after the cooldown
    assert run(policy, seq) == [(0, 1, 3, "scale-up"), (30, 3, 6, "scale-up")]


def test_a_scale_down_needs_the_whole_window_below_and_goes_to_its_highest_need() -> None:
    policy = AutoscalePolicy({"count": Bounds(1, 6)}, SETTINGS)
    seq = [m(0, 1, 250)]  # up to 5
    seq += [m(t, 5, 40 if t % 2 else 140) for t in range(1, 80)]  # needs 1 or 3 by turns
    # below from t=30 (after the cooldown), 20 s of it: down at 50, to the 3 it still needed
    assert run(policy, seq) == [(0, 1, 5, "scale-up"), (50, 5, 3, "scale-down")]


def test_a_measurement_at_the_current_width_restarts_the_scale_down_window() -> None:
    policy = AutoscalePolicy({"count": Bounds(1, 6)}, SETTINGS)
    seq = [m(t, 3, 40) for t in range(15)] + [m(15, 3, 140)]  # 140 needs 3: as is
    seq += [m(t, 3, 40) for t in range(16, 40)]
    assert run(policy, seq) == [(36, 3, 1, "scale-down")]  # 20 s after below again at 16


def test_no_scale_down_while_the_backlog_is_over_its_target() -> None:
    policy = AutoscalePolicy({"count": Bounds(1, 6)}, SETTINGS)
    seq = [m(t, 4, 40, backlog=500) for t in range(30)]
    seq += [m(t, 4, 40, backlog=100) for t in range(30, 60)]
    assert run(policy, seq) == [(50, 4, 1, "scale-down")]


def test_a_step_up_and_back_down_makes_one_decision_each_way_never_reversed_early() -> None:
    """The scenario of the integration test: 3x the input rate, then back."""
    policy = AutoscalePolicy({"count": Bounds(1, 4)}, SETTINGS)
    seq = [m(t, 1, 45) for t in range(20)]
    seq += [m(t, 1, 135) for t in range(20, 35)]  # briefly high: up, then held in cooldown
    seq += [m(t, 1, 45) for t in range(35, 100)]
    decisions = run(policy, seq)
    # the scale-down window starts once the cooldown is over: 20 + 30 + 20
    assert decisions == [(20, 1, 3, "scale-up"), (70, 3, 1, "scale-down")]


def test_bounds_and_max_parallelism_cap_the_decision() -> None:
    policy = AutoscalePolicy({"count": Bounds(2, 10)}, SETTINGS)
    assert run(policy, [m(0, 2, 10_000, max_p=4)]) == [(0, 2, 4, "scale-up")]
    policy = AutoscalePolicy({"count": Bounds(1, 3)}, SETTINGS)
    assert run(policy, [m(0, 1, 10_000, max_p=None)]) == [(0, 1, 3, "scale-up")]
    # below the user's minimum: brought up to it even though the demand is low
    policy = AutoscalePolicy({"count": Bounds(2, 3)}, SETTINGS)
    assert run(policy, [m(0, 1, 1)]) == [(0, 1, 2, "bounds")]
    # a minimum above max_parallelism: the operator's limit wins
    policy = AutoscalePolicy({"count": Bounds(5, 6)}, SETTINGS)
    assert run(policy, [m(0, 4, 1, max_p=4)]) == []


def test_operators_without_bounds_are_left_alone() -> None:
    policy = AutoscalePolicy({"other": Bounds(1, 4)}, SETTINGS)
    assert run(policy, [m(t, 1, 10_000) for t in range(5)]) == []


def test_bounds_parse_and_refuse() -> None:
    assert Bounds.parse("count=1:4") == ("count", Bounds(1, 4))
    for bad in ("count", "count=1", "=1:2", "count=3:2", "count=0:2", "count=a:2"):
        with pytest.raises(ValueError, match=r"OPERATOR=MIN:MAX|1 <= min <= max|invalid literal"):
            Bounds.parse(bad)
    with pytest.raises(ValueError, match="target utilisation"):
        Settings(target_utilisation=0)


def test_a_decision_event_carries_its_inputs_and_status_describes_it() -> None:
    d = Decision("count", 5.0, 1, 3, Reason.SCALE_UP, 3, m(5.0, 1, 135.25, backlog=7))
    doc = d.to_event()
    assert doc == {
        "target": "count",
        "previous": 1,
        "parallelism": 3,
        "reason": "scale-up",
        "needed": 3,
        "measured": {
            "parallelism": 1,
            "input_rate": 135.25,
            "true_rate": 100.0,
            "backlog": 7,
            "max_parallelism": 8,
        },
    }
    events = [
        {"event": "autoscale-decided", "request": "r1", **doc},
        {"event": "rescaled", "request": "r1", "target": "count"},
        {"event": "autoscale-decided", "request": "r2", **doc, "previous": 3},
        {"event": "rescale-failed", "request": "r2", "error": "RescaleError: no"},
    ]
    assert describe_decisions(events) == [
        "autoscale: count 1 -> 3 (scale-up: input 135.25 rec/s, true rate 100.0 rec/busy s "
        "per subtask, backlog 7, needed 3), applied",
        "autoscale: count 3 -> 3 (scale-up: input 135.25 rec/s, true rate 100.0 rec/busy s "
        "per subtask, backlog 7, needed 3), failed: RescaleError: no",
    ]
    assert describe_decisions(events, last=1) == describe_decisions(events)[1:]
