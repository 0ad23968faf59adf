"""bench.statesweepstats: readiness from heartbeats, fill times, log parsing, the summary."""

from __future__ import annotations

from typing import Any

import pytest

from bench import statesweepstats as st


def _beat(index: int, attempt: int, t: float, **fields: Any) -> dict[str, Any]:
    return {"operator": "count", "index": index, "attempt": attempt, "time": t, **fields}


def test_newest_beat_prefers_the_newer_attempt_over_a_later_time() -> None:
    beats = [_beat(0, 1, 10.0, state_keys=5), _beat(0, 0, 12.0, state_keys=9)]
    assert st.newest_beat(beats, "count", 0) == beats[0]
    assert st.newest_beat(beats, "count", 1) is None


def test_filled_needs_every_subtask_and_the_exact_total() -> None:
    beats = [_beat(0, 0, 1.0, state_keys=480), _beat(1, 0, 1.0, state_keys=520)]
    assert st.state_keys(beats, "count", 2) == [480, 520]
    assert st.filled(beats, "count", 2, 1000)
    assert not st.filled(beats, "count", 2, 1001)
    # count[0] restarted: its new attempt has not restored yet.
    restarted = [*beats, _beat(0, 1, 2.0)]
    assert st.state_keys(restarted, "count", 2) == [None, 520]
    assert not st.filled(restarted, "count", 2, 1000)
    assert not st.filled(beats[1:], "count", 2, 520)


def test_checkpoint_of_one_attempt() -> None:
    beats = [
        _beat(0, 0, 1.0, checkpoint=7),
        _beat(0, 0, 2.0, checkpoint=9),
        _beat(0, 1, 3.0),
        _beat(1, 1, 3.0, checkpoint=40),
    ]
    assert st.checkpoint_of(beats, "count", 0, 0) == 9
    assert st.checkpoint_of(beats, "count", 0, 1) is None


def test_fill_times_from_the_first_start_to_the_last_finish() -> None:
    events = [
        {"event": "started", "operator": "fill", "index": 1, "time": 101.0},
        {"event": "started", "operator": "fill", "index": 0, "time": 100.0},
        {"event": "started", "operator": "count", "index": 0, "time": 90.0},
        {"event": "finished", "operator": "fill", "index": 0, "time": 106.5},
    ]
    assert not st.fill_finished(events)
    events.append({"event": "finished", "operator": "fill", "index": 1, "time": 107.0})
    assert st.fill_finished(events)
    assert st.fill_times(events, 116.0) == {"sources_s": 7.0, "fill_s": 16.0}
    with pytest.raises(ValueError, match="'fill'"):
        st.fill_times(events[2:3], 116.0)


RESTORER = "spillway.recovery.restore.restorer"


def test_restored_records_of_one_subtask_in_log_order() -> None:
    lines = [
        f"2026 INFO {RESTORER}: j/count[1] restored 10 keys from 12 changelog records",
        f"2026 INFO {RESTORER}: j/count[0] restored 0 keys from 0 changelog records",
        "noise j/count[0] restored nothing",
        f"2026 INFO {RESTORER}: j/count[0] restored 487 keys from 1376 changelog records",
    ]
    assert st.restored_records(lines, "j/count[0]") == [(0, 0), (487, 1376)]
    assert st.restored_records(lines, "j/count[2]") == []


def _kill(p: float, c: float | None, records: int) -> dict[str, Any]:
    return {
        "kill_to_processing_s": p,
        "kill_to_caught_up_s": c,
        "restore_s": p - 0.25,
        "state_step_s": p / 2,
        "restored_records": records,
        "changelog_records": records + 10,
        "changelog_bytes": records * 10,
    }


def test_summarise_medians_and_ranges_per_size() -> None:
    sizes = {
        1_000_000: [_kill(2.0, 2.5, 500_000), _kill(1.0, None, 500_100), _kill(3.0, 3.5, 500_200)],
        1000: [_kill(0.5, 0.5, 490)],
    }
    out = st.summarise(sizes)
    assert list(out) == ["1000", "1000000"]
    big = out["1000000"]
    assert big["kills"] == 3
    assert big["kill_to_processing_s"] == {"median": 2.0, "low": 1.0, "high": 3.0, "runs": 3}
    assert big["kill_to_caught_up_s"] == {"median": 3.0, "low": 2.5, "high": 3.5, "runs": 2}
    assert big["restore_s"] == {"median": 1.75, "low": 0.75, "high": 2.75, "runs": 3}
    assert big["restored_records"]["median"] == 500_100
    assert big["changelog_bytes"] == {
        "median": 5_001_000,
        "low": 5_000_000,
        "high": 5_002_000,
        "runs": 3,
    }
    assert out["1000"]["state_step_s"] == {"median": 0.25, "low": 0.25, "high": 0.25, "runs": 1}


def test_summarise_a_figure_no_kill_has() -> None:
    kill = {**_kill(1.0, 1.0, 10), "restored_records": None}
    assert st.summarise({10: [kill]})["10"]["restored_records"] is None


def test_render_one_row_per_size() -> None:
    lines = st.render(st.summarise({1000: [_kill(0.5, 0.5, 490)]}))
    assert len(lines) == 2
    assert lines[0].split(" | ")[0].strip() == "keys"
    cells = [c.strip() for c in lines[1].split(" | ")]
    assert cells[:4] == ["1,000", "1", "0.50 (0.50–0.50)", "0.50 (0.50–0.50)"]
    assert cells[-3:] == ["490 (490–490)", "500 (500–500)", "0.00 (0.00–0.00)"]


def test_load_line() -> None:
    result = {
        "load_before": [1.0, 2.0, 3.0],
        "load_after": [4.0, 5.5, 6.0],
        "sizes": [{"restarts": [{"load_at_kill": 2.5}, {"load_at_kill": 1.25}]}],
    }
    assert st.load_line(result) == (
        "load average (1/5/15 min) before 1.00/2.00/3.00, after 4.00/5.50/6.00; "
        "1-min at the kills 1.25–2.50"
    )
