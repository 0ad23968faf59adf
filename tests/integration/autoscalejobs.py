"""The pipeline of test_autoscale.py: a source whose rate steps up 3x and back down, into
a keyed count that costs a fixed time per record (the bottleneck), into one file sink.

``events`` (p=1) emits record ``i`` as :func:`keygroupjobs.make_event` does, at the rate of
the step ``i`` falls in (:data:`STEPS`); ``count`` (max_parallelism 8, p=1 at start)
sleeps :data:`COST_S` per record, so one subtask processes at most about 1 / COST_S
records per second whatever the machine's load, and its parallelism is what the
autoscaler changes; ``out`` (p=1, behind a round-robin edge so that count's width may
change while the job runs) writes one row per key at the end. The output must equal
:func:`keygroupjobs.reference`.
"""

from __future__ import annotations

import os
import time
from functools import partial
from typing import Any

from spillway.spark_jobs.api.pipeline import Pipeline
from spillway.spark_jobs.connectors.sources import GeneratorSource
from tests.integration.keygroupjobs import COUNT, EVENT, add, make_event

COST_S = 0.002  # per record in count: at most ~500 records per busy second per subtask
LOW, HIGH = 220.0, 660.0  # records per second: 3x
# (first index after the step, rate): 15 s low, 40 s high, 35 s low. The high step holds
# the scale-up (about 4 s into it) and its cooldown; the last low step holds the scale-down
# (cooldown, then down-after and a window: about 15 s into it) and the backlog's return
# under the lag target after it (about 8 s), with some 10 s to spare.
STEPS = ((3_300, LOW), (3_300 + 26_400, HIGH), (3_300 + 26_400 + 7_700, LOW))
RECORDS = STEPS[-1][0]


class SteppedGenerator(GeneratorSource):
    """A :class:`GeneratorSource` (one subtask) whose rate is that of the step the next
    record falls in; each step is paced from when its first record is read."""

    def __init__(self, steps: tuple[tuple[int, float], ...], *args: Any) -> None:
        super().__init__(*args)
        self._steps = steps
        self._step = -1

    def read(self, max_records: int) -> list[dict[str, Any]] | None:
        """Up to ``max_records`` records of the current step, at its rate."""
        nxt = int(self.position()["next"])
        step = next((k for k, (end, _) in enumerate(self._steps) if nxt < end), None)
        if step is None:
            return super().read(max_records)  # at the count: None
        if step != self._step:
            self._step, self.rate = step, self._steps[step][1]
            self._t0, self._emitted = time.monotonic(), 0
        return super().read(min(max_records, self._steps[step][0] - nxt))


def adds_slowly(acc: list[int], r: dict[str, Any]) -> list[int]:
    """:func:`keygroupjobs.add`, taking :data:`COST_S` (a sleep: no CPU taken from others)."""
    time.sleep(COST_S)
    return add(acc, r)


def stepped_count() -> Pipeline:
    """events (stepped rate) → key_by(max_parallelism=8) → count (p=1, slow) → rebalance →
    out (p=1).

    count → out is round-robin, not left to default to forward (both start at p=1): a
    forward edge ties count's width to out's, and a live rescale refuses it. Round-robin
    makes out's input slotted, so count's writers may come and go while out reads on (as
    in :func:`keygroupjobs.keyed_count`)."""
    p = Pipeline("autoscale")
    events = p.generate("events", make=make_event, schema=EVENT, count=RECORDS, parallelism=1)
    node = p._nodes["events"]  # the declared source's factory: partial(GeneratorSource, ...)
    assert isinstance(node.factory, partial)
    assert node.factory.func is GeneratorSource
    node.factory = partial(SteppedGenerator, STEPS, *node.factory.args)
    events.key_by(lambda r: r["key"], max_parallelism=8).aggregate(
        "count",
        init=lambda: [0, 0],
        add=adds_slowly,
        result=lambda k, acc: {"key": k, "n": acc[0], "seqs": acc[1]},
        schema=COUNT,
        parallelism=1,
    ).rebalance().write_jsonl("out", os.environ["SPILLWAY_TEST_OUT"], parallelism=1)
    return p
