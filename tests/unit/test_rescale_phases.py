"""spillway.recovery.observe.rescalephases: a live rescale's phases folded from events."""

from __future__ import annotations

from typing import Any

from spillway.recovery.observe.rescalephases import (
    RESCALE_PHASES,
    describe_rescales,
    driver_phases,
    fold_rescales,
)


def started(index: int, t: float, python: float, restored: float) -> dict[str, Any]:
    phases = {"python_started": python, "restored": restored}
    return {"event": "started", "operator": "count", "index": index, "time": t, "phases": phases}


def phases_event(request: str, previous: int, n: int, t0: float) -> dict[str, Any]:
    return {
        "event": "rescale-phases",
        "request": request,
        "target": "count",
        "previous": previous,
        "parallelism": n,
        "phases": driver_phases(t0, t0 + 0.1, t0 + 0.5, t0 + 0.9, t0 + 1.0),
        "steps": {"stop": 0.4, "prepare": 0.3},
        "time": t0 + 1.0,
    }


EVENTS = [
    started(0, 1.0, 0.5, 0.9),  # the old subtasks' starts, before the handover
    started(1, 1.0, 0.5, 0.9),
    phases_event("r1", 2, 4, 10.0),
    started(2, 11.5, 11.2, 11.4),
    started(0, 11.6, 11.1, 11.5),
    started(1, 11.4, 11.1, 11.3),
    started(3, 12.0, 11.3, 11.9),
    started(3, 13.0, 12.5, 12.9),  # a second attempt: the first start counts
]


def test_a_rescale_ends_with_its_slowest_new_subtask() -> None:
    (r,) = fold_rescales(EVENTS)
    assert r.complete()
    assert r.times == {
        "requested": 10.0,
        "stop_requested": 10.1,
        "last_checkpoint": 10.5,
        "handover": 10.9,
        "scheduled": 11.0,
        "python_started": 11.3,
        "restored": 11.9,
        "processing": 12.0,
    }
    assert list(r.durations()) == list(RESCALE_PHASES[1:])
    assert r.pause_s() == 2.0
    assert r.steps == {"stop": 0.4, "prepare": 0.3}
    assert r.to_json()["pause_s"] == 2.0


def test_a_rescale_is_incomplete_until_every_new_subtask_started() -> None:
    (r,) = fold_rescales(EVENTS[:5])
    assert not r.complete()
    assert r.started == 2
    assert r.pause_s() is None
    assert "processing" not in r.times
    assert describe_rescales(EVENTS[:5]) == [
        "rescale count 2 → 4: requested → stop_requested +0.10s → last_checkpoint +0.40s → "
        "handover +0.40s → scheduled +0.10s; 2/4 new subtasks processing"
    ]


def test_a_later_rescale_of_the_operator_takes_the_starts_after_its_handover() -> None:
    events = [*EVENTS, phases_event("r2", 4, 2, 20.0), started(1, 21.5, 21.0, 21.4)]
    first, second = fold_rescales(events)
    assert first.pause_s() == 2.0
    assert second.started == 1
    assert not second.complete()
    events.append(started(0, 22.0, 21.2, 21.8))
    assert fold_rescales(events)[1].pause_s() == 2.0
    assert describe_rescales(events)[1] == (
        "rescale count 4 → 2: requested → stop_requested +0.10s → last_checkpoint +0.40s → "
        "handover +0.40s → scheduled +0.10s → python_started +0.20s → restored +0.60s → "
        "processing +0.20s; pause 2.00 s"
    )


def test_new_subtasks_launched_before_the_handover_are_timed_in_time_order() -> None:
    ahead = {
        **phases_event("r1", 2, 4, 10.0),
        # Launched right after the last checkpoint, before the handover is taken.
        "phases": driver_phases(10.0, 10.1, 10.5, 10.9, 10.6),
    }
    events = [ahead, *(started(j, 11.2, 10.7, 11.1) for j in range(4))]
    (r,) = fold_rescales(events)
    assert list(r.durations()) == [
        "stop_requested",
        "last_checkpoint",
        "scheduled",
        "python_started",
        "handover",
        "restored",
        "processing",
    ]
    assert r.since_request() == {
        "stop_requested": 0.1,
        "last_checkpoint": 0.5,
        "handover": 0.9,
        "scheduled": 0.6,
        "python_started": 0.7,
        "restored": 1.1,
        "processing": 1.2,
    }
    assert min(r.durations().values()) >= 0
