"""The subtask state machine: every allowed transition works, forbidden ones raise."""

from __future__ import annotations

from collections import deque

import pytest

from spillway.channels.errors import SpillwayError
from spillway.recovery.runtime.lifecycle import ALLOWED, IllegalTransitionError, Lifecycle, Phase

ALLOWED_PAIRS = sorted(
    ((src, dst) for src, targets in ALLOWED.items() for dst in targets),
    key=lambda pair: (pair[0].value, pair[1].value),
)
FORBIDDEN_PAIRS = [
    (Phase.CREATED, Phase.RUNNING),  # must restore first
    (Phase.CREATED, Phase.CHECKPOINTING),
    (Phase.CREATED, Phase.FINISHED),
    (Phase.CREATED, Phase.CREATED),
    (Phase.RESTORING, Phase.CHECKPOINTING),
    (Phase.RESTORING, Phase.STOPPED),
    (Phase.RUNNING, Phase.STOPPED),  # stopping happens at a checkpoint
    (Phase.RUNNING, Phase.FINISHED),  # finishing needs a final checkpoint
    (Phase.RUNNING, Phase.RESTORING),
    (Phase.RUNNING, Phase.RUNNING),
    (Phase.CHECKPOINTING, Phase.FINISHED),
    (Phase.CHECKPOINTING, Phase.CHECKPOINTING),
    (Phase.FINISHING, Phase.RUNNING),
    (Phase.FINISHING, Phase.STOPPED),
    (Phase.FINISHED, Phase.FAILED),
    (Phase.FINISHED, Phase.RUNNING),
    (Phase.STOPPED, Phase.FAILED),
    (Phase.STOPPED, Phase.RESTORING),
    (Phase.FAILED, Phase.RESTORING),
    (Phase.FAILED, Phase.FAILED),
]


def _path_to(target: Phase) -> list[Phase]:
    """The shortest sequence of allowed transitions from CREATED to ``target``."""
    prev: dict[Phase, Phase | None] = {Phase.CREATED: None}
    queue = deque([Phase.CREATED])
    while queue:
        p = queue.popleft()
        for nxt in sorted(ALLOWED[p], key=lambda ph: ph.value):
            if nxt not in prev:
                prev[nxt] = p
                queue.append(nxt)
    path: list[Phase] = []
    at: Phase | None = target
    while at is not None and at is not Phase.CREATED:
        path.append(at)
        at = prev[at]
    return path[::-1]


def lifecycle_in(phase: Phase) -> Lifecycle:
    lc = Lifecycle()
    for step in _path_to(phase):
        lc.to(step)
    assert lc.phase is phase
    return lc


def test_table_covers_every_phase() -> None:
    assert set(ALLOWED) == set(Phase)
    assert ALLOWED[Phase.FINISHED] == ALLOWED[Phase.STOPPED] == ALLOWED[Phase.FAILED] == frozenset()


def test_every_phase_is_reachable_from_created() -> None:
    for phase in Phase:
        assert lifecycle_in(phase).phase is phase


def test_starts_created() -> None:
    assert Lifecycle().phase is Phase.CREATED


@pytest.mark.parametrize(("src", "dst"), ALLOWED_PAIRS, ids=lambda p: p.name)
def test_allowed_transition(src: Phase, dst: Phase) -> None:
    lc = lifecycle_in(src)
    lc.to(dst)
    assert lc.phase is dst


def test_every_live_phase_can_fail() -> None:
    live = {Phase.CREATED, Phase.RESTORING, Phase.RUNNING, Phase.CHECKPOINTING, Phase.FINISHING}
    assert {p for p in Phase if Phase.FAILED in ALLOWED[p]} == live


@pytest.mark.parametrize(("src", "dst"), FORBIDDEN_PAIRS, ids=lambda p: p.name)
def test_forbidden_transition_raises_and_keeps_the_phase(src: Phase, dst: Phase) -> None:
    assert dst not in ALLOWED[src]
    lc = lifecycle_in(src)
    with pytest.raises(IllegalTransitionError) as info:
        lc.to(dst)
    assert str(info.value) == f"subtask cannot go from {src.name} to {dst.name}"
    assert lc.phase is src


def test_illegal_transition_is_a_spillway_error() -> None:
    assert issubclass(IllegalTransitionError, SpillwayError)


def test_after_checkpoint_returns_to_running() -> None:
    lc = lifecycle_in(Phase.RUNNING)
    lc.to(Phase.CHECKPOINTING)
    lc.after_checkpoint()
    assert lc.phase is Phase.RUNNING


def test_after_checkpoint_returns_to_finishing() -> None:
    lc = lifecycle_in(Phase.FINISHING)
    lc.to(Phase.CHECKPOINTING)
    lc.after_checkpoint()
    assert lc.phase is Phase.FINISHING
    lc.to(Phase.FINISHED)
    assert lc.phase is Phase.FINISHED


def test_after_checkpoint_remembers_the_latest_origin() -> None:
    lc = lifecycle_in(Phase.RUNNING)
    for _ in range(3):
        lc.to(Phase.CHECKPOINTING)
        lc.after_checkpoint()
        assert lc.phase is Phase.RUNNING
    lc.to(Phase.CHECKPOINTING)
    lc.to(Phase.FINISHING)  # the final checkpoint was requested during a checkpoint
    lc.to(Phase.CHECKPOINTING)
    lc.after_checkpoint()
    assert lc.phase is Phase.FINISHING


@pytest.mark.parametrize("phase", [Phase.RUNNING, Phase.FINISHING, Phase.FINISHED, Phase.CREATED])
def test_after_checkpoint_outside_a_checkpoint_raises(phase: Phase) -> None:
    lc = lifecycle_in(phase)
    with pytest.raises(IllegalTransitionError):
        lc.after_checkpoint()
    assert lc.phase is phase
