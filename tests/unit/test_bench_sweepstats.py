"""bench.sweepstats: the figures of one kill of B3's phase sweep, on hand-made timelines."""

from __future__ import annotations

from typing import Any

import pytest

from bench import sweepstats
from bench.localized import Settings


def test_phase_is_the_time_since_the_last_checkpoint_over_the_last_spacing() -> None:
    cps = [10.0, 11.0, 12.0, 13.2]
    assert sweepstats.phase_of(cps, 12.25) == pytest.approx(0.25)
    assert sweepstats.phase_of(cps, 13.5) == pytest.approx(0.3 / 1.2)
    assert sweepstats.phase_of(cps, 10.5) is None  # one checkpoint before it: no cycle yet


def test_one_interval_of_input_counts_the_killed_subtasks_records_of_the_last_spacing() -> None:
    cps = [10.0, 11.0, 12.5]
    # spacing 1.5 s before the kill at 13.0: [11.5, 13.0)
    inputs = {1: 11.0, 2: 11.5, 3: 12.0, 4: 12.9, 5: 13.0, 6: 12.2}
    mine = {1, 2, 3, 4, 5}.__contains__  # seq 6 went to the other subtask
    assert sweepstats.interval_input(cps, 13.0, inputs, mine) == 3
    assert sweepstats.interval_input(cps[:1], 13.0, inputs, mine) is None


def test_runner_replay_sums_every_partition_and_keeps_none() -> None:
    assert sweepstats.runner_replayed({"t[0]": [5, 9, 4], "t[1]": [2, 3, 1]}) == 5
    assert sweepstats.runner_replayed({}) == 0
    assert sweepstats.runner_replayed(None) is None


def test_p99_around_compares_the_spans_and_finds_the_worst_100ms_window() -> None:
    # 100 records at 1.0 s on each side, off the window edges (5 ms in); 0.8 s before that
    control = [(8.005 + i / 100, 0.8) for i in range(100)]
    before = [(9.005 + i / 100, 1.0) for i in range(100)]
    after = [(10.005 + i / 100, 1.0) for i in range(100)]
    after[5] = (10.055, 3.0)  # one slow record in the window [10.0, 10.1)
    f = sweepstats.p99_around([*control, *before, *after], 10.0, 1.0)
    assert f["p99_before_s"] == 1.0
    assert f["p99_after_s"] == pytest.approx(1.0 + 0.01 * 2.0)  # 99th of 100: interpolated
    assert f["p99_rise"] == pytest.approx(0.02)
    assert f["p99_control_rise"] == pytest.approx(0.25)  # 0.8 → 1.0 with no kill between
    assert f["window_p99_max_before_s"] == 1.0
    # 10 records in [10.0, 10.1), one of them 3.0: its p99 is 3.0 - 0.09 * 2.0
    assert f["window_p99_max_after_s"] == pytest.approx(3.0 - 0.09 * 2.0)


def _kill(**kw: Any) -> dict[str, Any]:
    # count[0] owns the even seqs; checkpoints every second; kill at 12.4 (phase 0.4).
    sent = {s: 10.0 + s * 0.1 for s in range(20)}
    channel = {s: t + 0.05 for s, t in sent.items()}  # parse→count: readable 50 ms later
    # count's output: committed with its checkpoint at 12.0, so visible for seq <= 14 only
    out = {s: t + 0.5 for s, t in channel.items() if t + 0.5 < 12.0}
    seen = [channel, channel, out, out]
    restart = {
        "attempt": 3,
        "kill_to_processing_s": 0.6,
        "kill_to_caught_up_s": 0.9,
        "replay_basis": "read",
        "replay": {"c[0]": [4, 4, 0]},
    }
    args: dict[str, Any] = dict(
        kill=12.4,
        phase_target=0.375,
        checkpoints=[10.0, 11.0, 12.0, 13.0],
        seen=seen,
        sent=sent,
        mine=lambda s: s % 2 == 0,
        restart=restart,
        caught_up_replay={"c[0]": [4, 6, 2]},
        span=1.0,
    )
    args.update(kw)
    return sweepstats.kill_figures(**args)


def test_a_kill_takes_the_replay_of_the_caught_up_event_and_judges_it() -> None:
    f = _kill()
    assert f["phase"] == pytest.approx(0.4)
    assert f["replayed"] == 2
    # every seq 0..19 readable by 12.4 (10.05 + 0.1 s); not out by then: 15..19; mine: 16, 18
    assert f["replayed_observer_bound"] == 2
    # readable in [11.4, 12.4): seqs 14..19; mine: 14, 16, 18
    assert f["interval_input"] == 3
    assert f["within_interval"] is True
    assert f["kill_to_caught_up_s"] == 0.9


def test_a_kill_without_a_caught_up_event_falls_back_to_the_started_replay() -> None:
    f = _kill(caught_up_replay=None)
    assert f["replayed"] == 0
    assert f["within_interval"] is True
    over = _kill(caught_up_replay={"c[0]": [0, 9, 4]})  # 4 > one interval's 3
    assert over["within_interval"] is False


def test_summary_counts_kills_within_the_interval_and_the_tenths_covered() -> None:
    kills = [_kill(), _kill(caught_up_replay={"c[0]": [0, 9, 9]})]
    kills[1]["phase"] = 0.95
    s = sweepstats.summarise(kills)
    assert s["kills"] == 2
    assert s["within_interval"] == 1
    assert s["above_observer_bound"] == 1  # 2 and 9 re-processed, the bound is 2
    assert s["phase_tenths_covered"] == [4, 9]
    assert (s["p99_rise_above_10pct"], s["p99_control_above_10pct"]) == (0, 0)
    assert s["replayed"] == {"median": 5.5, "low": 2.0, "high": 9.0, "runs": 2}


def test_the_sweep_visits_every_phase_once_in_a_seeded_order() -> None:
    phases = Settings(kills=20, seed=1).phases()
    assert sorted(phases) == [(k + 0.5) / 20 for k in range(20)]
    assert phases == Settings(kills=20, seed=1).phases()
    assert phases != sorted(phases)
