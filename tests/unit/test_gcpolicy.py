"""spillway.recovery.runtime.gcpolicy: the collector settings while a subtask runs, and after."""

from __future__ import annotations

import gc

import pytest

from spillway.recovery.runtime.gcpolicy import YOUNG_THRESHOLD, streaming_collector


def test_settings_apply_inside_and_are_restored_after() -> None:
    before = gc.get_threshold()
    with streaming_collector():
        assert gc.get_threshold() == (YOUNG_THRESHOLD, before[1], before[2])
        assert gc.get_freeze_count() > 0  # what was alive at start-up is out of view
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_settings_are_restored_when_the_subtask_fails() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), streaming_collector():
        raise RuntimeError("subtask failed")
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_cycles_created_while_running_are_still_collected() -> None:
    class Node:
        def __init__(self) -> None:
            self.other: Node | None = None

    with streaming_collector():
        a, b = Node(), Node()
        a.other, b.other = b, a
        ids = {id(a), id(b)}
        del a, b
        gc.collect()
        assert not any(id(o) in ids for o in gc.get_objects() if isinstance(o, Node))
