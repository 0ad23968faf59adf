"""The attempt observer: what a subtask's attempt records (phases, events, result), from
what the runner tells it, with a list standing in for the event topic."""

from __future__ import annotations

from typing import Any

import pytest

from spillway.channels.errors import TransactionAbortedError
from spillway.channels.ids import (
    CheckpointId,
    JobId,
    Offset,
    OperatorName,
    SubtaskId,
    TopicPartition,
)
from spillway.offsets.checkpoint import Checkpoint, CheckpointMeta
from spillway.recovery.observe.phases import PhaseClock
from spillway.recovery.restore.progress import Replay, SourceReplay
from spillway.recovery.restore.restorer import Restored
from spillway.recovery.runtime.eventtime import SetAsides
from spillway.recovery.runtime.observer import AttemptObserver

SUB = SubtaskId(JobId("j"), OperatorName("count"), 1)
TP = TopicPartition("spillway.j.ch.a.count", 1)


class Events:
    """The event topic: what was emitted, in order."""

    def __init__(self) -> None:
        self.emitted: list[tuple[str, dict[str, Any]]] = []

    def emit(self, kind: str, **fields: Any) -> None:
        self.emitted.append((kind, fields))

    def kinds(self) -> list[str]:
        return [k for k, _ in self.emitted]

    def last(self, kind: str) -> dict[str, Any]:
        return [f for k, f in self.emitted if k == kind][-1]


class Spark:
    """Spark's driver-side phases of retried attempts."""

    def __init__(self) -> None:
        self.asked: list[tuple[SubtaskId, int]] = []

    def spark_phases(self, subtask: SubtaskId, attempt: int) -> dict[str, float] | None:
        self.asked.append((subtask, attempt))
        return {"failure_seen": 1.0, "scheduled": 2.0}


def _ckpt(cid: int, finished: bool = False) -> Checkpoint:
    return Checkpoint(
        SUB, CheckpointId(cid), CheckpointMeta(topology="t", attempt=0, finished=finished)
    )


def observer(attempt: int, spark: Spark | None = None) -> tuple[AttemptObserver, Events]:
    events = Events()
    return AttemptObserver(SUB, attempt, events, PhaseClock(), spark), events


def test_a_fresh_start_announces_fencing_then_started_with_nothing_to_replay() -> None:
    obs, events = observer(0)
    obs.restoring()
    obs.fenced()
    obs.found(None)
    obs.started(Restored(None, None), Replay({}, {}, None), SourceReplay(None, None), {})
    assert events.kinds() == ["fencing", "started"]
    started = events.last("started")
    assert started["restored_from"] is None
    assert started["replay"] == {}
    assert started["resumed_mid_message"] == {}
    assert started["handover_unmarked"] is None
    assert obs.result.catchup_s is None  # nothing was restored, so nothing to catch up
    assert obs.result.restore_s >= 0
    assert {"fenced", "restored"} <= set(obs.phases.times)
    assert "caught_up" not in obs.phases.times


def test_a_restart_with_nothing_to_replay_is_caught_up_when_it_restores() -> None:
    obs, events = observer(2, Spark())
    obs.restoring()
    obs.fenced()
    obs.found(_ckpt(7, finished=False))
    restored = Restored(_ckpt(7, finished=False), None, global_taken=(3, 7))
    obs.started(restored, Replay({}, {}, None), SourceReplay(None, None), {})
    # The global checkpoint the previous attempt took is announced again.
    assert events.kinds() == ["fencing", "started", "checkpointed"]
    assert events.last("checkpointed") == {"global": 3, "checkpoint": 7}
    assert events.last("started")["restored_from"] == 7
    assert obs.result.restored_from == 7
    assert obs.result.catchup_s == 0.0
    assert obs.phases.times["caught_up"] == obs.phases.times["restored"]
    # Spark's phases of the retried attempt are merged in.
    assert events.last("started")["phases"]["scheduled"] == 2.0


def test_a_replay_is_reported_once_caught_up_and_the_end_carries_the_counters() -> None:
    obs, events = observer(1)
    obs.restoring()
    obs.fenced()
    obs.found(_ckpt(4))
    replay = Replay({TP: Offset(10)}, {TP: 12}, "read")
    obs.started(Restored(_ckpt(4), None), replay, SourceReplay(None, None), {str(TP): [10, 3]})
    assert events.last("started")["replay"] == {str(TP): [10, 12, 0]}
    assert events.last("started")["resumed_mid_message"] == {str(TP): [10, 3]}
    assert obs.result.catchup_s is None  # the replay is still pending
    replay.count(TP, 10, 5)
    obs.caught_up()
    assert events.last("caught-up")["replay"] == {str(TP): [10, 12, 5]}
    assert obs.result.catchup_s is not None
    obs.result.records_in, obs.result.records_out = 9, 8
    aside = SetAsides(SUB, None)
    aside.restore({"late": 2})
    obs.finished(5, aside, replay, SourceReplay(None, None))
    finished = events.last("finished")
    assert (finished["checkpoint"], finished["records_in"], finished["records_out"]) == (5, 9, 8)
    assert finished["set_aside"] == {"late": 2}
    assert obs.result.status == "finished"
    # caught-up was already recorded: finishing does not record it again.
    assert events.kinds().count("caught-up") == 1


def test_stopping_skipping_and_failing_each_record_their_event_and_status() -> None:
    obs, events = observer(0)
    obs.stopped(3, SetAsides(SUB, None))
    assert (events.kinds()[-1], obs.result.status) == ("stopped", "stopped")
    assert events.last("stopped") == {"checkpoint": 3, "set_aside": {}}

    obs, events = observer(0)
    obs.skipped(_ckpt(9, finished=True))
    assert (events.emitted, obs.result.status) == ([("skipped", {"checkpoint": 9})], "skipped")

    obs, events = observer(0)
    obs.failed(ValueError("bad record"))
    assert obs.result.status == "failed"
    assert events.last("failed")["error"] == "ValueError: bad record"


def test_a_failure_event_that_cannot_be_written_does_not_hide_the_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken(Events):
        def emit(self, kind: str, **fields: Any) -> None:
            raise OSError("broker gone")

    obs = AttemptObserver(SUB, 0, Broken(), PhaseClock(), None)
    obs.failed(ValueError("bad record"))  # does not raise
    assert obs.result.status == "failed"
    assert "could not record the failure" in caplog.text


def test_a_redo_is_announced_before_fencing_and_keeps_the_attempt() -> None:
    obs, events = observer(2)
    obs.redoing(1, TransactionAbortedError("leaders moved"), 3.25, "redo 1")
    obs.restoring()
    obs.fenced()
    assert events.kinds() == ["redo", "fencing"]
    redo = events.last("redo")
    assert redo["redo"] == 1
    assert redo["stall_s"] == 3.25
    assert redo["error"] == "TransactionAbortedError: leaders moved"
    assert obs.result.attempt == 2
