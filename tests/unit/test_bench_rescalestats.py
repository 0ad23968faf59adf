"""bench.rescalestats: the live pause from events, the dip from sampled counts, the summary."""

from __future__ import annotations

import pytest

from bench import rescalestats as rs


def started(op: str, index: int, t: float) -> dict[str, object]:
    return {"event": "started", "operator": op, "index": index, "time": t}


EVENTS = [
    started("count", 0, 1.0),
    started("count", 1, 1.0),
    started("side", 0, 1.0),
    {"event": "rescale-requested", "request": "r1", "time": 10.0},
    {"event": "rescaled", "request": "r1", "parallelism": 4, "previous": 2, "time": 11.5},
    started("count", 2, 12.0),
    started("count", 0, 12.5),
    started("count", 1, 12.2),
    started("count", 3, 13.0),
    started("count", 3, 14.0),  # a second attempt: the first start counts
]


def test_live_pause_runs_from_the_request_to_the_last_new_subtasks_first_start() -> None:
    assert rs.live_pause(EVENTS, "count") == {
        "requested": 10.0,
        "handed_over_s": 1.5,
        "pause_s": 3.0,
    }


def test_live_pause_is_not_complete_until_every_new_subtask_started() -> None:
    with pytest.raises(KeyError):
        rs.live_pause(EVENTS[:-2], "count")
    assert not rs.all_started(EVENTS[:-2], "count", 4, 11.5)
    assert rs.all_started(EVENTS, "count", 4, 11.5)


def test_count_at_interpolates_between_samples_and_refuses_outside_them() -> None:
    samples = [(0.0, 0), (1.0, 100), (2.0, 300)]
    assert rs.count_at(samples, 1.0) == 100.0
    assert rs.count_at(samples, 1.5) == 200.0
    with pytest.raises(ValueError, match="no sample"):
        rs.count_at(samples, 2.5)


def test_dip_compares_the_window_after_the_request_with_the_one_before() -> None:
    # 100/s until t=20, then 80/s.
    samples = [(float(t), 100 * min(t, 20) + 80 * max(0, t - 20)) for t in range(40)]
    d = rs.dip(samples, 20.0, 22.0, 10.0)  # stretched to the 5-s minimum window
    assert d == pytest.approx(
        {"before_per_s": 100.0, "during_per_s": 80.0, "window_s": 5.0, "dip": 0.2}
    )


def test_summary_takes_the_ratio_round_by_round() -> None:
    rounds = [
        {
            "live": {"pause_s": p, "handed_over_s": 1.0},
            "dip": {"dip": 0.0},
            "whole_job": {"pause_s": w, "stopped_s": 2.0},
        }
        for p, w in [(2.0, 20.0), (4.0, 10.0), (3.0, 30.0)]
    ]
    s = rs.summarise(rounds)
    assert s["pause_over_whole_job"] == {"median": 0.1, "low": 0.1, "high": 0.4, "runs": 3}
    assert s["live_pause_s"]["median"] == 3.0
    assert len(rs.render(s)) == 6
