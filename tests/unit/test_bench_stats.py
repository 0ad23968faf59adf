"""The statistics behind the channel benchmark's table: median, min–max, per-run ratios."""

from __future__ import annotations

import math

import pytest

from bench.stats import Spread, rate, ratios, spread


def test_spread_of_an_odd_count_is_the_middle_value_and_the_extremes() -> None:
    assert spread([3.0, 1.0, 2.0]) == Spread(median=2.0, low=1.0, high=3.0, runs=3)


def test_spread_of_an_even_count_takes_the_mean_of_the_two_middle_values() -> None:
    assert spread([4.0, 1.0, 3.0, 2.0]) == Spread(median=2.5, low=1.0, high=4.0, runs=4)


def test_one_outlier_moves_the_range_but_not_the_median() -> None:
    s = spread([100.0, 101.0, 99.0, 100.0, 5.0])
    assert s.median == 100.0
    assert (s.low, s.high) == (5.0, 101.0)


def test_spread_of_a_single_run_is_that_run() -> None:
    assert spread([7.5]) == Spread(7.5, 7.5, 7.5, 1)


@pytest.mark.parametrize("values", [[], [1.0, math.nan], [math.inf]])
def test_spread_refuses_no_values_and_broken_measurements(values: list[float]) -> None:
    with pytest.raises(ValueError, match="values"):
        spread(values)


def test_ratios_pair_figures_of_the_same_run() -> None:
    assert ratios([10.0, 30.0], [5.0, 10.0]) == [2.0, 3.0]


def test_ratio_of_medians_is_not_the_median_of_per_run_ratios() -> None:
    # Why ratios are taken run by run: here the medians alone would claim 1.0×,
    # although in every run one side was 2× or 0.5× the other.
    spw, hand = [1.0, 2.0, 4.0], [2.0, 1.0, 8.0]
    assert spread(spw).median / spread(hand).median == 1.0
    assert spread(ratios(spw, hand)) == Spread(median=0.5, low=0.5, high=2.0, runs=3)


def test_ratios_refuse_unpaired_runs_and_non_positive_denominators() -> None:
    with pytest.raises(ValueError, match="cannot pair 2 numerators with 1"):
        ratios([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="positive"):
        ratios([1.0], [0.0])


def test_rate_is_amount_per_second() -> None:
    assert rate(300_000, 1.5) == 200_000
    with pytest.raises(ValueError, match="positive"):
        rate(1, 0.0)
    with pytest.raises(ValueError, match="positive"):
        rate(1, math.nan)
