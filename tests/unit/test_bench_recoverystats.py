"""B3's pure figures (bench.recoverystats): replayed records, recovery time, dips."""

from __future__ import annotations

import pytest

from bench import recoverystats


def test_replayed_counts_records_readable_before_the_kill_whose_result_was_not_committed() -> None:
    inputs = {0: 1.0, 1: 2.0, 2: 3.0, 3: 4.0, 4: 6.0}
    outputs = {0: 1.5, 1: 2.5, 2: 5.5}  # 2 committed only after the kill, 3 never
    assert recoverystats.replayed(inputs, outputs, kill=5.0) == 2  # 2 and 3; 4 came later
    assert recoverystats.replayed(inputs, outputs, kill=5.0, only=lambda seq: seq != 3) == 1


def test_window_quantiles_bucket_points_by_time_and_skip_empty_windows() -> None:
    points = [(10.0, 1.0), (10.5, 3.0), (11.2, 2.0), (13.9, 7.0), (14.0, 9.0)]
    assert recoverystats.window_quantiles(points, 10.0, 14.0, 1.0) == [
        (10.0, 2.0),
        (11.0, 2.0),
        (13.0, 7.0),
    ]
    assert recoverystats.window_quantiles(points, 10.0, 11.0, 1.0, q=0.9)[0][1] == 2.8
    with pytest.raises(ValueError, match="positive"):
        recoverystats.window_quantiles(points, 0.0, 1.0, 0.0)


def test_back_within_is_the_end_of_the_last_window_above_the_limit() -> None:
    # baseline 1.0 → limit 1.1; windows of 2 s from the kill at 100.
    points = [(100.5, 5.0), (102.5, 1.05), (104.5, 1.5), (106.5, 1.0), (108.5, 1.09)]
    assert recoverystats.back_within(points, 100.0, 110.0, 1.0, 0.1, 2.0) == pytest.approx(6.0)
    # The 0.9-quantile sees a slow tail the median hides.
    tail = [(100.1, 1.0), (100.2, 1.0), (100.3, 3.0), (103.0, 1.0)]
    assert recoverystats.back_within(tail, 100.0, 104.0, 1.0) == 0.0
    assert recoverystats.back_within(tail, 100.0, 104.0, 1.0, q=0.9) == pytest.approx(2.0)


def test_back_within_none_when_still_above_at_the_end_and_zero_when_never_above() -> None:
    assert recoverystats.back_within([(100.5, 1.0), (103.0, 2.0)], 100.0, 104.0, 1.0) is None
    assert recoverystats.back_within([(100.5, 1.0), (103.0, 1.1)], 100.0, 104.0, 1.0) == 0.0


def test_dip_and_count_between() -> None:
    assert recoverystats.dip(200.0, 180.0) == pytest.approx(0.1)
    assert recoverystats.dip(200.0, 220.0) == pytest.approx(-0.1)
    with pytest.raises(ValueError, match="positive"):
        recoverystats.dip(0.0, 1.0)
    times = {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}
    assert recoverystats.count_between(times, 2.0, 4.0, lambda seq: True) == 2
    assert recoverystats.count_between(times, 0.0, 9.0, lambda seq: seq % 2 == 0) == 2
