"""bench.rescaleseriesstats: per direction, the pause, the dip and each phase."""

from __future__ import annotations

from typing import Any

import pytest

from bench import rescaleseriesstats as rss


def rescale(previous: int, n: int, pause: float, dip: float, stop: float) -> dict[str, Any]:
    return {
        "previous": previous,
        "parallelism": n,
        "pause_s": pause,
        "dip": {"dip": dip},
        "durations": {"stop_requested": 0.1, "last_checkpoint": stop},
        "since_request": {"stop_requested": 0.1, "last_checkpoint": 0.1 + stop},
    }


RESCALES = [
    rescale(2, 4, 3.0, 0.1, 1.0),
    rescale(4, 2, 2.0, 0.0, 0.5),
    rescale(2, 4, 5.0, 0.3, 2.0),
    rescale(4, 2, 4.0, 0.2, 0.7),
    rescale(2, 4, 4.0, 0.2, 1.5),
]


def test_summary_per_direction_and_over_all() -> None:
    s = rss.summarise(RESCALES)
    assert list(s) == ["2→4", "4→2", "all"]
    assert s["2→4"]["pause_s"] == {"median": 4.0, "low": 3.0, "high": 5.0, "runs": 3}
    assert s["4→2"]["pause_s"] == {"median": 3.0, "low": 2.0, "high": 4.0, "runs": 2}
    assert s["all"]["dip"] == {"median": 0.2, "low": 0.0, "high": 0.3, "runs": 5}
    assert s["2→4"]["phases_s"]["last_checkpoint"] == {
        "median": 1.5,
        "low": 1.0,
        "high": 2.0,
        "runs": 3,
    }
    assert list(s["all"]["phases_s"]) == ["stop_requested", "last_checkpoint"]
    assert s["4→2"]["since_request_s"]["last_checkpoint"] == pytest.approx(
        {"median": 0.7, "low": 0.6, "high": 0.8, "runs": 2}
    )


def test_render_names_each_direction_and_phase() -> None:
    lines = rss.render(rss.summarise(RESCALES[:2]))
    assert lines == [
        "2→4 (1 rescales): pause 3.00 s (3.00–3.00), dip of the operators not rescaled "
        "10.00 % (10.00–10.00)",
        "  stop_requested: 0.10 s (0.10–0.10) after the request, +0.10 s (0.10–0.10) after "
        "the phase before",
        "  last_checkpoint: 1.10 s (1.10–1.10) after the request, +1.00 s (1.00–1.00) after "
        "the phase before",
        "4→2 (1 rescales): pause 2.00 s (2.00–2.00), dip of the operators not rescaled "
        "0.00 % (0.00–0.00)",
        "  stop_requested: 0.10 s (0.10–0.10) after the request, +0.10 s (0.10–0.10) after "
        "the phase before",
        "  last_checkpoint: 0.60 s (0.60–0.60) after the request, +0.50 s (0.50–0.50) after "
        "the phase before",
        "all (2 rescales): pause 2.50 s (2.00–3.00), dip of the operators not rescaled "
        "5.00 % (0.00–10.00)",
        "  stop_requested: 0.10 s (0.10–0.10) after the request, +0.10 s (0.10–0.10) after "
        "the phase before",
        "  last_checkpoint: 0.85 s (0.60–1.10) after the request, +0.75 s (0.50–1.00) after "
        "the phase before",
    ]
