"""B3s figures (Structured Streaming losing an executor) on small hand-made observations."""

from __future__ import annotations

from typing import Any

import pytest

from bench.sssb3 import EXECUTOR_CLASS, executors_in, summarise
from bench.sssb3stats import Seen, Timeline, latency_figures, output_check


def row(arrival: float, latency: float, seq: int = 0, page: str = "p", views: int = 1) -> Seen:
    return (arrival, seq, round((arrival - latency) * 1000), page, views)


def test_latency_figures_around_the_kill() -> None:
    seen = [
        row(98.0, 0.1),
        row(98.5, 0.1),
        row(99.0, 0.2),
        row(99.5, 0.2),  # before: q90 = p99 = 0.2
        row(100.5, 1.0),
        row(101.2, 0.5),
        row(102.5, 0.2),
        row(103.5, 0.2),
        row(104.5, 9.0),  # after kill + after_s: not counted
    ]
    f = latency_figures(seen, Timeline(kill=100.0, base_s=2.0, after_s=4.0))
    assert f["baseline_latency_q90_s"] == pytest.approx(0.2)
    # 1-s windows: [100,101) 1.0 and [101,102) 0.5 are above 0.22, the rest are not.
    assert f["back_within_10pct_s"] == pytest.approx(2.0)
    assert f["first_output_after_kill_s"] == pytest.approx(0.5)
    assert f["max_latency_after_kill_s"] == pytest.approx(1.0)
    assert f["p99_before_s"] == pytest.approx(0.2)
    assert f["p99_after_s"] == pytest.approx(0.5 + 0.5 * 0.99)  # of [1.0, 0.5]
    assert f["window_p99_before_max_s"] == pytest.approx(0.2)
    assert f["window_p99_after_max_s"] == pytest.approx(1.0)


def test_latency_figures_not_back_and_nothing_before() -> None:
    still_high = [row(98.0, 0.1), row(100.5, 1.0), row(103.5, 1.0)]
    f = latency_figures(still_high, Timeline(kill=100.0, base_s=2.0, after_s=4.0))
    assert f["back_within_10pct_s"] is None
    nothing_before = latency_figures([row(100.5, 1.0)], Timeline(100.0, 2.0, 4.0))
    assert nothing_before["baseline_latency_q90_s"] is None
    assert nothing_before["back_within_10pct_s"] is None
    assert nothing_before["p99_before_s"] is None
    assert nothing_before["window_p99_before_max_s"] is None
    assert nothing_before["first_output_after_kill_s"] == pytest.approx(0.5)


PAGES = {0: "a", 1: "b", 2: "a", 3: "a", 4: "b"}  # a: seqs 0, 2, 3; b: seqs 1, 4


def test_output_check_counts_duplicates_wrong_rows_and_gaps() -> None:
    seen = [
        row(1.0, 0.1, seq=0, page="a", views=1),
        row(1.0, 0.1, seq=1, page="b", views=1),
        row(2.0, 0.1, seq=3, page="a", views=3),  # covers seqs 2 and 3
        row(3.0, 0.1, seq=3, page="a", views=3),  # re-written: 2 records again
        row(3.0, 0.1, seq=4, page="b", views=1),  # wrong: b's first record is seq 1
    ]
    assert output_check(seen, 5, PAGES.__getitem__) == {
        "sent": 5,
        "rows": 5,
        "duplicate_rows": 2,
        "duplicate_records": 3,
        "wrong_rows": 1,
        "missing": 1,  # b's second record (seq 4) is covered by no row
        "exact_but_duplicates": False,
    }


def test_output_check_exact_with_duplicates() -> None:
    seen = [
        row(1.0, 0.1, seq=2, page="a", views=2),
        row(1.0, 0.1, seq=1, page="b", views=1),
        row(1.5, 0.1, seq=1, page="b", views=1),
        row(2.0, 0.1, seq=3, page="a", views=3),
        row(2.0, 0.1, seq=4, page="b", views=2),
    ]
    got = output_check(seen, 5, PAGES.__getitem__)
    assert (got["duplicate_rows"], got["duplicate_records"]) == (1, 1)
    assert (got["wrong_rows"], got["missing"], got["exact_but_duplicates"]) == (0, 0, True)


def test_executors_found_in_each_workers_tree_only() -> None:
    parents = {10: 1, 11: 10, 12: 11, 20: 1, 21: 20, 22: 21, 30: 1}
    argv = {
        11: ["java", "-cp", "x", EXECUTOR_CLASS],
        12: ["python", "-m", "pyspark.daemon"],
        21: ["bash", "run.sh"],
        22: ["java", EXECUTOR_CLASS],
        30: ["java", EXECUTOR_CLASS],  # not under a worker: someone else's
    }
    assert executors_in([10, 20], parents, argv.get) == {10: [11], 20: [22]}


def test_summarise_medians_ranges_and_flags() -> None:
    def r(back: float | None, dups: int, exact: bool) -> dict[str, Any]:
        return {"back_within_10pct_s": back, "duplicate_rows": dups, "exact_but_duplicates": exact}

    out = summarise([r(2.0, 0, True), r(None, 4, True), r(6.0, 2, True)])
    assert out["back_within_10pct_s"] == {"median": 4.0, "low": 2.0, "high": 6.0, "runs": 2}
    assert out["duplicate_rows"] == {"median": 2.0, "low": 0.0, "high": 4.0, "runs": 3}
    assert (out["rounds"], out["not_back"], out["output_exact_but_duplicates"]) == (3, 1, True)
    assert "p99_after_s" not in out  # measured in no round
    assert summarise([r(1.0, 0, False)])["output_exact_but_duplicates"] is False
