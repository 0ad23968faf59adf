"""The operator context of the window and keyed process tests, and its restore from the
state it checkpointed (no broker): test_operators, test_windows, test_process, test_joins,
test_coprocess and test_tombstones share them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spillway.channels.ids import JobId, OperatorName, SubtaskId, TopicPartition
from spillway.recovery.restore.state import ChangelogState

SUBTASK = SubtaskId(JobId("j"), OperatorName("op"), 0)


@dataclass
class Ctx:
    """An operator's context: :data:`SUBTASK`, its changelog state, its watermark."""

    subtask: Any = SUBTASK
    state: ChangelogState = field(default_factory=lambda: ChangelogState(TopicPartition("t", 0)))
    watermark: int | None = None


def restored(ctx: Ctx, wm: int | None) -> Ctx:
    """A new context holding ``ctx``'s state, as a restore from its changelog gives it,
    with watermark ``wm``."""
    state = ChangelogState(TopicPartition("t", 0))
    for k, v in ctx.state.items():
        state.put(k, v)
    return Ctx(state=state, watermark=wm)
