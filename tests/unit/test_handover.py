"""The handed-over mark of a live rescale without a broker (recovery/restore/handover.py): which
previous owners a new subtask finds without it, what it continues from then, and what
``spillway status`` shows."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from spillway.recovery.restore.handover import Unmarked, describe_unmarked, live_handover, unmarked
from spillway.recovery.restore.rescale import OperatorHandover, Rescale, handover_checkpoint
from tests.unit.checkpointfakes import checkpoint
from tests.unit.rescalefakes import plan, restorer_of, sub

OLD, NEW = plan(count=2), plan(count=3)
# count[0] stopped for the rescale (marked); count[1] ended after checkpoint 9 without its
# stop checkpoint (killed, and not run again: its Spark job cancelled, say).
C0 = checkpoint(sub("count", 0), 8, OLD.fingerprint, handed_over=True)
C1 = checkpoint(sub("count", 1), 9, OLD.fingerprint)
SAVEPOINT = Rescale(1, (OLD.fingerprint,), {"count": OperatorHandover(2, {0: 8, 1: 9}, 9)})
LIVE = live_handover(SAVEPOINT, "count")


def restore(i: int, rescale: Rescale) -> Any:
    r = restorer_of(sub("count", i), {0: [C0], 1: [C1]})
    return r.load(NEW.fingerprint, rescaled=(NEW, rescale))


def test_a_live_handover_is_recorded_as_such_and_read_back() -> None:
    assert LIVE.operators["count"] == OperatorHandover(2, {0: 8, 1: 9}, 9, live=True)
    assert not SAVEPOINT.operators["count"].live
    assert Rescale.from_json(LIVE.to_json(), "here") == LIVE
    older = SAVEPOINT.to_json()
    del older["operators"]["count"]["live"]  # recorded before the mark existed
    assert Rescale.from_json(older, "here") == SAVEPOINT


def test_only_a_live_rescale_checks_the_marks() -> None:
    assert unmarked(LIVE, "count", {0: C0, 1: C1}) == Unmarked(1, "count", {1: 9})
    assert unmarked(LIVE, "count", {0: C0, 1: None}) == Unmarked(1, "count", {1: None})
    assert unmarked(LIVE, "count", {0: C0}) is None
    assert unmarked(LIVE, "src", {0: C1}) is None  # not rescaled
    # A savepoint's checkpoints are the stopped job's latest, never stop checkpoints of a
    # handover: nothing to check.
    assert unmarked(SAVEPOINT, "count", {0: C0, 1: C1}) is None


def test_a_new_subtask_continues_from_an_unmarked_owner_and_reports_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, "spillway.subtask"):
        got = restore(2, LIVE)
    # What it continues from is what it would be with the mark: the latest checkpoints.
    assert got.checkpoint == handover_checkpoint(NEW, sub("count", 2), 2, {0: C0, 1: C1}, 9)
    assert got.unmarked == Unmarked(1, "count", {1: 9})
    assert "previous subtasks [1] of rescale 1 died before their handed-over" in caplog.text
    assert restore(2, SAVEPOINT).unmarked is None
    assert restore(2, SAVEPOINT).checkpoint == got.checkpoint


def test_status_shows_each_unmarked_owner_once() -> None:
    doc = Unmarked(1, "count", {1: 9, 0: None}).to_json()
    events = [
        {"event": "started", "operator": "count", "index": 0, "handover_unmarked": doc},
        {"event": "started", "operator": "count", "index": 2, "handover_unmarked": doc},
        {"event": "started", "operator": "count", "index": 1, "handover_unmarked": None},
        {"event": "stopped", "handover_unmarked": {"rescale": 5}},
    ]
    assert describe_unmarked(events) == [
        "rescale 1: count[0] died before its handed-over checkpoint; its new owners started "
        "its partitions from their beginning (it had no checkpoint) (exactly-once: what it "
        "did after that was never committed)",
        "rescale 1: count[1] died before its handed-over checkpoint; its new owners continued "
        "from its latest checkpoint 9 (exactly-once: what it did after that was never "
        "committed)",
    ]
    assert describe_unmarked(events[2:]) == []
