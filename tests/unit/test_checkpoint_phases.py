"""Per-phase timing of global checkpoints: coordinator bookkeeping and the bench breakdown.

No broker: events are fed as the event log would deliver them.
"""

from __future__ import annotations

import json
from typing import Any, cast

from bench.checkpoints import slowest
from spillway.channels.kafka.consumer import AssignedConsumer
from spillway.recovery.control.globalckpt import GlobalProgress, feed


def _checkpointed(sub: str, n: int, reported: float, **timing: Any) -> dict[str, Any]:
    op, index = sub[:-1].split("[")
    event: dict[str, Any] = {
        "event": "checkpointed",
        "operator": op,
        "index": int(index),
        "global": n,
        "checkpoint": n + 1,
        "time": reported,
    }
    if timing:
        event["timing"] = timing
    return event


def test_phases_are_seconds_from_the_trigger_per_subtask() -> None:
    progress = GlobalProgress(frozenset({"a[0]", "b[0]"}))
    progress.observe(
        _checkpointed("a[0]", 4, 100.25, via="trigger", seen=100.01, start=100.02, committed=100.05)
    )
    progress.observe(
        _checkpointed("b[0]", 4, 100.08, via="barrier", seen=100.03, start=100.03, committed=100.07)
    )
    assert progress.phases(4, started=100.0) == {
        "a[0]": {
            "via": "trigger",
            "seen_s": 0.01,
            "start_s": 0.02,
            "committed_s": 0.05,
            "reported_s": 0.25,
        },
        "b[0]": {
            "via": "barrier",
            "seen_s": 0.03,
            "start_s": 0.03,
            "committed_s": 0.07,
            "reported_s": 0.08,
        },
    }
    # The duration stays the coordinator's view: the last report, not the last commit.
    assert progress.summary(4, started=100.0)["duration_s"] == 0.25


def test_events_without_timing_give_no_phases_but_still_complete() -> None:
    progress = GlobalProgress(frozenset({"a[0]"}))
    progress.observe(_checkpointed("a[0]", 2, 10.5))  # a restarted subtask re-announcing
    assert progress.complete(2)
    assert progress.phases(2, started=10.0) == {}
    assert progress.phases(3, started=10.0) == {}


def test_slowest_lists_the_slowest_checkpoints_at_the_target_with_their_phases() -> None:
    phases = {
        "trigger_acked_s": 0.002,
        "detected_s": 0.26,
        "subtasks": {
            "a[0]": {"via": "trigger", "seen_s": 0.01, "committed_s": 0.03, "reported_s": 0.25}
        },
    }
    run = {
        "mode": "unaligned",
        "target": 100000,
        "checkpoints": [
            {"id": 1, "phase": "fill", "duration_s": 9.0, "phases": {}},  # not at the target
            {"id": 2, "phase": "hold", "duration_s": 0.05, "phases": {}},
            {"id": 3, "phase": "hold", "duration_s": 0.25, "phases": phases},
        ],
    }
    assert slowest([run], k=1).splitlines() == [
        "  unaligned 100,000 #3: 0.250 s; trigger acked 0.002, completion detected 0.260",
        "      a[0]         seen 0.010 committed 0.030 reported 0.250 (via trigger)",
    ]
    assert slowest([run], k=2).splitlines()[-1] == (
        "  unaligned 100,000 #2: 0.050 s (no phase timings recorded)"
    )


class _Msg:
    def __init__(self, doc: dict[str, Any]) -> None:
        self._value = json.dumps(doc).encode()

    def value(self) -> bytes:
        return self._value


class _Events:
    """What ``feed`` reads: a queue of arrived events, and the calls made to read them."""

    def __init__(self, docs: list[dict[str, Any]]) -> None:
        self.queue = [_Msg(d) for d in docs]
        self.calls: list[tuple[int, float]] = []

    def consume(self, max_messages: int, timeout_s: float) -> list[_Msg]:
        self.calls.append((max_messages, timeout_s))
        out, self.queue = self.queue[:max_messages], self.queue[max_messages:]
        return out


def test_feed_waits_for_the_first_event_only_and_keeps_this_runs_events() -> None:
    docs = [
        {**_checkpointed("a[0]", 1, 5.0), "run": "r1"},
        {**_checkpointed("b[0]", 1, 5.1), "run": "old"},  # an earlier run of the job
        {**_checkpointed("b[0]", 1, 5.2), "run": "r1"},
    ]
    events = _Events(docs)
    progress = GlobalProgress(frozenset({"a[0]", "b[0]"}))
    feed(cast(AssignedConsumer, events), "r1", progress, 0.1)
    # One event is waited for (not a full batch, which would wait out the timeout);
    # the rest are taken without waiting.
    assert events.calls == [(1, 0.1), (500, 0)]
    assert progress.complete(1)
    assert progress.done[1]["b[0]"] == (2, 5.2)
