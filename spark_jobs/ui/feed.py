"""Tails a job's topics into a :class:`spillway.recovery.observe.jobview.JobView` (a background
thread).

What ``spillway status`` reads, but followed instead of read once: the event log from the
start, the newest heartbeats (the tail status reads) and then every new one, the
per-operator checkpoint topics and the completed global checkpoints from their low
watermarks on, and the input partitions' ends about once a second. One consumer,
``read_committed``: a checkpoint record shows once its transaction committed.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import CheckpointFormatError, RetentionGapError
from spillway.channels.ids import JobId, Offset, TopicPartition
from spillway.channels.kafka.admin import Admin
from spillway.channels.kafka.consumer import AssignedConsumer
from spillway.offsets.checkpoint import Checkpoint
from spillway.recovery.control.globalckpt import checkpoints_topic
from spillway.recovery.observe.events import events_topic
from spillway.recovery.observe.heartbeat import TAIL_PER_SUBTASK, heartbeats_topic
from spillway.recovery.observe.jobview import JobView

log = logging.getLogger("spillway.spark_jobs.ui")


class UiFeed:
    """Keeps ``view`` current from Kafka; :meth:`snapshot` gives its newest JSON (thread-safe)."""

    def __init__(
        self,
        settings: KafkaSettings,
        job: JobId,
        view: JobView,
        every_s: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.job = job
        self.view = view
        self._settings = settings
        self._every_s = every_s
        self._clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._consumer = AssignedConsumer(settings, f"spillway.{job}.ui")
        self._next: dict[TopicPartition, int] = {}
        self._ckpt_topics = {op.checkpoint_topic for op in view.plan.operators}
        self._inputs = [
            (TopicPartition(c.topic, i), f"{c.topic}[{i}]")
            for op in view.plan.operators
            for i in range(op.parallelism)
            for c in op.inputs
        ]
        self._snapshot: dict[str, Any] = view.snapshot(clock())
        self._thread = threading.Thread(target=self._run, name=f"ui {job}", daemon=True)

    def start(self) -> None:
        """Assign the topics that exist and start tailing them."""
        existing = Admin(self._settings).partition_counts()
        starts: dict[TopicPartition, int] = {TopicPartition(events_topic(self.job), 0): 0}
        beats = TopicPartition(heartbeats_topic(self.job), 0)
        if beats.topic in existing:
            low, high = self._consumer.watermarks(beats)
            starts[beats] = max(
                low, high - TAIL_PER_SUBTASK * max(1, self.view.plan.subtask_count())
            )
        tps = [TopicPartition(checkpoints_topic(self.job), 0)]
        tps += [
            TopicPartition(op.checkpoint_topic, i)
            for op in self.view.plan.operators
            for i in range(op.parallelism)
        ]
        for tp in tps:
            if tp.topic in existing:
                starts[tp] = self._consumer.watermarks(tp)[0]
        self._next = starts
        self._consumer.assign({tp: Offset(o) for tp, o in starts.items()})
        self.update()
        self._thread.start()

    def stop(self) -> None:
        """Stop tailing and close the consumer."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self._every_s + 15)
        self._consumer.close()

    def snapshot(self) -> dict[str, Any]:
        """The newest snapshot (the page's JSON)."""
        with self._lock:
            return self._snapshot

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            try:
                self.update()
            except Exception:  # the page shows the last snapshot; the next round retries
                log.warning("reading job %s for the page failed", self.job, exc_info=True)

    def update(self) -> None:
        """Probe the inputs' ends (one batched query), read what is new, take a sample and a
        snapshot. The ends first: however long their query takes, the snapshot follows the
        read at once, so liveness is judged from fresh heartbeats
        (:meth:`~spillway.recovery.observe.metrics.JobMetrics.read_until`)."""
        names = dict(self._inputs)
        got = self._consumer.end_offsets(list(names))
        self.view.ends({names[tp]: n for tp, n in got.items()})
        self.view.read_until(self._drain())
        now = self._clock()
        self.view.sample(now)
        snap = self.view.snapshot(now)
        with self._lock:
            self._snapshot = snap

    def _drain(self) -> float:
        """Read until caught up; the wall time before the last (not full) read, up to which
        everything written has been read."""
        while True:
            asked = self._clock()
            try:
                msgs = self._consumer.consume(1000, 0.05)
            except RetentionGapError:
                # A checkpoint topic was pruned past our position while we were behind:
                # go on from each partition's low watermark (the pruned records are gone).
                self._reassign()
                continue
            for m in msgs:
                tp = TopicPartition(m.topic() or "", m.partition() or 0)
                self._next[tp] = (m.offset() or 0) + 1
                self._take(tp, m.value() or b"")
            if len(msgs) < 1000:
                return asked

    def _reassign(self) -> None:
        starts = {tp: max(o, self._consumer.watermarks(tp)[0]) for tp, o in self._next.items()}
        self._next = starts
        self._consumer.assign({tp: Offset(o) for tp, o in starts.items()})

    def _take(self, tp: TopicPartition, value: bytes) -> None:
        if tp.topic in self._ckpt_topics:
            try:
                c = Checkpoint.from_bytes(value, where=f"{tp}")
            except CheckpointFormatError as e:
                log.warning("skipping a checkpoint record the page cannot read: %s", e)
                return
            self.view.checkpoint(
                c.subtask.operator,
                c.subtask.index,
                int(c.checkpoint_id),
                c.meta.wall_time,
                c.meta.attempt,
                c.meta.finished,
                c.meta.global_id,
            )
            return
        try:
            doc = json.loads(value or b"{}")
        except ValueError:
            return  # not ours
        if not isinstance(doc, dict):
            return
        if tp.topic == events_topic(self.job):
            self.view.event(doc)
        elif tp.topic == heartbeats_topic(self.job):
            self.view.heartbeat(doc)
        else:
            self.view.global_checkpoint(doc)
