"""CheckpointStore.settle: wait until no transaction on a checkpoint partition is undecided
(its last stable offset reached its high watermark), with fakes for the two readers."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, cast

import pytest

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import Scope, UndecidedTransactionError
from spillway.channels.ids import JobId, OperatorName, TopicPartition
from spillway.offsets import store as store_module
from spillway.offsets.store import CheckpointStore


class Marks:
    """A reader fake whose high watermark follows a script (the last value repeats)."""

    def __init__(self, highs: list[int]) -> None:
        self._highs: Iterator[int] = iter(highs)
        self._last = highs[0]
        self.asked: list[TopicPartition] = []

    def watermarks(self, tp: TopicPartition) -> tuple[int, int]:
        self.asked.append(tp)
        self._last = next(self._highs, self._last)
        return 0, self._last


def store_with(stable: list[int], high: list[int]) -> tuple[CheckpointStore, Marks, Marks]:
    s = CheckpointStore(KafkaSettings("127.0.0.1:1"), JobId("j"), OperatorName("op"), 2)
    committed, raw = Marks(stable), Marks(high)
    s._consumer, s._raw = cast(Any, committed), cast(Any, raw)
    return s, committed, raw


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(store_module.time, "sleep", slept.append)
    return slept


def test_a_partition_without_open_transactions_is_settled_at_once(no_sleep: list[float]) -> None:
    s, committed, raw = store_with([12], [12])
    s.settle(1)
    assert committed.asked == raw.asked == [TopicPartition("spillway.j.ckpt.op", 1)]
    assert no_sleep == []


def test_it_waits_until_the_commit_markers_are_written(
    no_sleep: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    # Stable at 10 while the high watermark is 12 (an undecided transaction), twice; then
    # the markers land and both reach 13.
    s, committed, _ = store_with([10, 10, 13], [12, 12, 13])
    with caplog.at_level(logging.WARNING, logger="spillway.checkpoints"):
        s.settle(0)
    assert len(committed.asked) == 3
    assert no_sleep == [0.05, 0.1]  # backs off between looks
    assert sum("undecided transaction" in r.getMessage() for r in caplog.records) == 2


def test_an_undecided_transaction_past_the_wait_fails_the_subtask_for_a_retry() -> None:
    s, _, _ = store_with([10], [12])
    with pytest.raises(UndecidedTransactionError, match=r"ckpt\.op\[1\].*offset 10.*12") as e:
        s.settle(1, timeout_s=0.0)
    assert e.value.scope is Scope.SUBTASK
