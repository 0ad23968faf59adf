"""The autoscaler's loop: measure a running job, let the policy decide, apply by live rescale.

It reads only what the job writes to Kafka (as ``spillway status`` and ``spillway ui``
do) and changes the job only through the live rescale's public request path
(:func:`spillway.recovery.control.liverescale.request_rescale`), so it runs beside the
driver, anywhere the broker is reachable.

Each round (every ``every_s``): a :class:`~spillway.spark_jobs.spark.metrics_http.MetricsFeed`
snapshot of the job's current shape is kept; the operators are measured over the last
``window_s`` (:func:`spillway.recovery.control.autorates.measure`) and each measurement
goes to the :class:`~spillway.recovery.control.autopolicy.AutoscalePolicy`. A decision is
requested as a live rescale and recorded as an ``autoscale-decided`` event (its inputs,
reason and the request id; the driver's ``rescaled`` or ``rescale-failed`` answer carries
the same id), then the loop waits for the answer and measures the new shape afresh.

A feed reads heartbeats from when it starts; subtasks beat once a second, so snapshots
of a feed's first :data:`WARMUP_S` seconds are not used (a subtask not yet heard from
would count all its records as processed within the window).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId
from spillway.recovery.control.autopolicy import AutoscalePolicy, Decision, Measurement
from spillway.recovery.control.autorates import measure
from spillway.recovery.control.liverescale import await_answer, latest_shape, request_rescale
from spillway.recovery.job.plandoc import PlanDoc
from spillway.recovery.observe.events import read_events, record_job_event
from spillway.recovery.observe.heartbeat import INTERVAL_S
from spillway.recovery.observe.metrics import Snapshot
from spillway.recovery.observe.status import plan_of
from spillway.spark_jobs.spark.metrics_http import MetricsFeed

log = logging.getLogger("spillway.autoscale")

WARMUP_S = 2 * INTERVAL_S + 1.0
# States in which a subtask will do nothing more in this run.
_DONE = frozenset({"finished", "stopped", "failed"})


@dataclass(frozen=True)
class _Shape:
    run: str
    plan: PlanDoc


class Autoscaler:
    """Scales the operators ``policy`` has bounds for, in the newest run of ``job``.

    ``on_decision``: called with each decision and its request id (the command prints it);
    ``on_measure``: with each measurement, before the policy sees it.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        job: JobId,
        policy: AutoscalePolicy,
        *,
        window_s: float = 10.0,
        every_s: float = 1.0,
        answer_timeout_s: float = 300.0,
        on_decision: Callable[[Decision, str], None] | None = None,
        on_measure: Callable[[Measurement], None] | None = None,
    ) -> None:
        if window_s <= 0 or every_s <= 0:
            raise ValueError("the window and the interval must be positive")
        self.settings = settings
        self.job = job
        self.policy = policy
        self.window_s = window_s
        self.every_s = every_s
        self.answer_timeout_s = answer_timeout_s
        self._on_decision = on_decision
        self._on_measure = on_measure
        self.decisions: list[Decision] = []

    def run(self, stop: threading.Event) -> None:
        """Measure and decide until ``stop`` is set or every subtask of the run is done."""
        while not stop.is_set():
            shape = self._shape()
            feed = MetricsFeed(self.settings, self.job, shape.plan, shape.run, self.every_s)
            feed.start()
            try:
                decision = self._watch(feed, shape, stop)
            finally:
                feed.stop()
            if decision is None:
                return
            self._apply(decision, shape.run)

    def _shape(self) -> _Shape:
        events = list(read_events(self.settings, self.job))
        submitted = [e for e in events if e.get("event") == "submitted"]
        if not submitted:
            raise ValueError(f"job {self.job} was never submitted")
        shape: Mapping[str, Any] = latest_shape(events) or submitted[-1]
        return _Shape(str(submitted[-1]["run"]), plan_of(self.job, shape))

    def _watch(self, feed: MetricsFeed, shape: _Shape, stop: threading.Event) -> Decision | None:
        """Sample ``feed`` until the policy decides (the decision) or the run is done (None)."""
        started = time.monotonic()
        samples: deque[Snapshot] = deque()
        while not stop.wait(self.every_s):
            snap = feed.snapshot()
            if snap.subtasks and all(s.state in _DONE for s in snap.subtasks):
                return None
            if time.monotonic() - started < WARMUP_S:
                continue
            samples.append(snap)
            while len(samples) > 1 and samples[1].time <= snap.time - self.window_s:
                samples.popleft()
            if snap.time - samples[0].time < self.window_s:
                continue
            for m in measure(str(self.job), shape.plan, samples[0], snap).values():
                log.debug("measured %s", m)
                if self._on_measure is not None:
                    self._on_measure(m)
                decision = self.policy.observe(m)
                if decision is not None:
                    return decision
        return None

    def _apply(self, d: Decision, run: str) -> None:
        request = request_rescale(self.settings, self.job, d.operator, d.parallelism)
        record_job_event(
            self.settings, self.job, "autoscale-decided", run=run, request=request, **d.to_event()
        )
        self.decisions.append(d)
        log.info("autoscale %s: %d -> %d (%s)", d.operator, d.previous, d.parallelism, d.reason)
        if self._on_decision is not None:
            self._on_decision(d, request)
        answer = await_answer(self.settings, self.job, request, self.answer_timeout_s)
        if answer is None or answer.get("event") != "rescaled":
            # The cooldown holds either way: a failing rescale is not retried at once.
            log.warning("autoscale %s: the rescale was not applied: %s", d.operator, answer)
