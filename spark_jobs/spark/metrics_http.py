"""The driver's side of metrics: read what subtasks report, serve it to Prometheus.

:class:`MetricsFeed` is a background thread of the driver that tails the job's event
log, heartbeats and completed global checkpoints and feeds
:class:`spillway.recovery.observe.metrics.JobMetrics` (pure). The end offsets of the input
partitions are probed about once a second, in one batched query on a consumer and thread
of their own (:class:`EndsProbe`), so a slow query never ages the heartbeats that
liveness is judged by. No subtask does anything extra for it beyond its heartbeats
(:mod:`spillway.recovery.runtime.livestats`).

:func:`serve` exposes a snapshot in Prometheus' text format with ``prometheus_client``
(a custom collector: values are computed when scraped, from the newest snapshot).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import ConfigError
from spillway.channels.ids import JobId, Offset, TopicPartition
from spillway.channels.kafka.consumer import AssignedConsumer
from spillway.recovery.control.globalckpt import checkpoints_topic
from spillway.recovery.job.plandoc import PlanDoc
from spillway.recovery.observe.events import events_topic
from spillway.recovery.observe.heartbeat import heartbeats_topic
from spillway.recovery.observe.metrics import JobMetrics, Snapshot, as_of

log = logging.getLogger("spillway.spark_jobs.metrics")

# Buckets of the global checkpoint duration histogram (seconds).
GLOBAL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class Reader(Protocol):
    """What :class:`MetricsFeed` reads the event, heartbeat and checkpoint topics with (an
    :class:`~spillway.channels.kafka.consumer.AssignedConsumer`)."""

    def assign(self, starts: Mapping[TopicPartition, Offset]) -> None: ...
    def consume(self, max_messages: int, timeout_s: float) -> list[Any]: ...
    def watermarks(self, tp: TopicPartition, timeout_s: float = ...) -> tuple[int, int]: ...
    def close(self) -> None: ...


class EndsProbe:
    """The input partitions' end offsets, queried on a thread of its own.

    ``query`` (one batched request: :meth:`AssignedConsumer.end_offsets`) runs about every
    ``every_s`` seconds; :meth:`latest` returns the newest answer without waiting, so a
    slow query delays only the lag and replay-debt figures, never the reading of
    heartbeats (liveness). A failed query is logged at DEBUG and retried next round.
    """

    def __init__(
        self, query: Callable[[], Mapping[str, int]], every_s: float = 1.0, name: str = "ends"
    ) -> None:
        self._query = query
        self._every_s = every_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._latest: dict[str, int] = {}
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Start probing (the first query runs at once)."""
        self._thread.start()

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop probing; waits up to ``timeout_s`` for a query under way."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def latest(self) -> dict[str, int]:
        """The newest ends (``topic[partition]`` → offset); empty before the first answer."""
        with self._lock:
            return dict(self._latest)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                ends = dict(self._query())
            except Exception:  # figures only: the next round retries
                log.debug("probing the input partitions' ends failed", exc_info=True)
            else:
                with self._lock:
                    self._latest.update(ends)
            self._stop.wait(self._every_s)


class MetricsFeed:
    """Keeps a :class:`JobMetrics` of run ``run_id`` current; :meth:`snapshot` is thread-safe.

    Each round reads what is new on the event, heartbeat and checkpoint topics until it
    has caught up, tells the metrics the time it caught up (:meth:`JobMetrics.read_until`,
    so liveness is judged from fresh data) and takes a snapshot with the newest end offsets
    of :class:`EndsProbe`, which queries them on its own consumer and thread.
    ``reader``, ``ends`` and ``clock`` replace the Kafka consumers and the wall clock
    (tests).
    """

    def __init__(
        self,
        settings: KafkaSettings,
        job: JobId,
        plan: PlanDoc,
        run_id: str,
        every_s: float = 1.0,
        *,
        reader: Reader | None = None,
        ends: Callable[[], Mapping[str, int]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.job = job
        self._metrics = JobMetrics(plan, run_id)
        self._every_s = every_s
        self._clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._consumer: Reader = reader or AssignedConsumer(settings, f"spillway.{job}.metrics")
        self._names = {
            tp: f"{tp.topic}[{tp.partition}]"
            for op in plan.operators
            for i in range(op.parallelism)
            for tp in op.owned_inputs(i)
        }
        self._ends_consumer: AssignedConsumer | None = None
        if ends is None:
            self._ends_consumer = AssignedConsumer(settings, f"spillway.{job}.metrics-ends")
        self._ends = EndsProbe(ends or self._query_ends, every_s, f"metrics ends {job}")
        self._thread = threading.Thread(target=self._run, name=f"metrics {job}", daemon=True)
        self._snapshot = self._metrics.snapshot(clock())

    def start(self) -> None:
        """Start tailing: events from the start, heartbeats and checkpoints from now on."""
        starts = {TopicPartition(events_topic(self.job), 0): Offset(0)}
        for topic in (heartbeats_topic(self.job), checkpoints_topic(self.job)):
            tp = TopicPartition(topic, 0)
            starts[tp] = Offset(self._consumer.watermarks(tp)[1])
        self._consumer.assign(starts)
        self._ends.start()
        self._thread.start()

    def stop(self) -> None:
        """Take a last snapshot and stop (the consumers are closed)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self._every_s + 15)
        self._ends.stop()
        self._consumer.close()
        if self._ends_consumer is not None:
            self._ends_consumer.close()

    def snapshot(self) -> Snapshot:
        """The newest snapshot."""
        with self._lock:
            return self._snapshot

    def _query_ends(self) -> dict[str, int]:
        assert self._ends_consumer is not None
        got = self._ends_consumer.end_offsets(list(self._names))
        return {self._names[tp]: n for tp, n in got.items()}

    def _run(self) -> None:
        while True:
            try:
                self.update()
            except Exception:  # metrics must never take the job down
                log.warning("reading metrics of %s failed", self.job, exc_info=True)
            if self._stop.wait(self._every_s):
                self.update()  # the last words (finished events) into the last snapshot
                return

    def update(self) -> None:
        """One round: read until caught up, then take a snapshot (never waits for the
        end offsets' query)."""
        events, beats = events_topic(self.job), heartbeats_topic(self.job)
        while True:
            # Taken before the call: a call that returns less than a full batch has
            # delivered everything written before it started.
            asked = self._clock()
            msgs = self._consumer.consume(1000, 0.05)
            for m in msgs:
                try:
                    doc = json.loads(m.value() or b"{}")
                except ValueError:
                    continue
                if not isinstance(doc, dict):
                    continue
                if m.topic() == events:
                    self._metrics.event(doc)
                elif m.topic() == beats:
                    self._metrics.heartbeat(doc)
                else:
                    self._metrics.global_checkpoint(doc)
            if len(msgs) < 1000:
                self._metrics.read_until(asked)
                break
        self._metrics.ends(self._ends.latest())
        snap = self._metrics.snapshot(self._clock())
        with self._lock:
            self._snapshot = snap


class SnapshotCollector(Collector):
    """A ``prometheus_client`` collector over a snapshot source (called at each scrape)."""

    def __init__(self, job: str, snapshot: Callable[[], Snapshot]) -> None:
        self._job = job
        self._snapshot = snapshot

    def collect(self) -> Iterator[Any]:
        """The metric families of the newest snapshot, as of now (stale data: no liveness
        verdict, :func:`~spillway.recovery.observe.metrics.as_of`)."""
        return iter(families(self._job, as_of(self._snapshot(), time.time())))


def families(job: str, snap: Snapshot) -> list[Any]:
    """Prometheus metric families of ``snap`` (pure; docs/operating.md lists the names)."""
    lab = ["job_id", "operator", "index"]
    part = [*lab, "partition"]

    def fam(kind: type, name: str, doc: str, labels: list[str]) -> Any:
        return kind(f"spillway_{name}", doc, labels=labels)

    c_in = fam(CounterMetricFamily, "subtask_records_in", "Records read, replays included", lab)
    c_out = fam(CounterMetricFamily, "subtask_records_out", "Records written", lab)
    c_ck = fam(CounterMetricFamily, "subtask_checkpoints", "Checkpoints committed", lab)
    c_busy = fam(CounterMetricFamily, "subtask_busy_seconds", "Time spent processing records", lab)
    c_rs = fam(CounterMetricFamily, "subtask_restarts", "Restarts in this run", lab)
    g_up = fam(GaugeMetricFamily, "subtask_state", "1 for the subtask's state", [*lab, "state"])
    g_id = fam(GaugeMetricFamily, "subtask_checkpoint_id", "Last checkpoint's id", lab)
    g_age = fam(GaugeMetricFamily, "subtask_checkpoint_age_seconds", "Since last checkpoint", lab)
    g_dur = fam(GaugeMetricFamily, "subtask_checkpoint_duration_seconds", "Last one's", lab)
    g_com = fam(GaugeMetricFamily, "subtask_commit_latency_seconds", "Last commit's", lab)
    g_st = fam(GaugeMetricFamily, "subtask_state_keys", "Keys in keyed state", lab)
    g_debt = fam(GaugeMetricFamily, "subtask_replay_debt_offsets", "A restart re-reads", part)
    g_lag = fam(GaugeMetricFamily, "subtask_lag_offsets", "Not yet read", part)
    c_rp = fam(CounterMetricFamily, "subtask_replayed_records", "Replayed after restarts", part)
    for s in snap.subtasks:
        v = [job, s.operator, str(s.index)]
        c_in.add_metric(v, s.records_in)
        c_out.add_metric(v, s.records_out)
        c_ck.add_metric(v, s.checkpoints)
        c_busy.add_metric(v, s.busy_s)
        c_rs.add_metric(v, s.restarts)
        g_up.add_metric([*v, s.state], 1)
        _opt(g_id, v, s.checkpoint)
        _opt(g_age, v, s.checkpoint_age_s)
        _opt(g_dur, v, s.checkpoint_s)
        _opt(g_com, v, s.commit_s)
        _opt(g_st, v, s.state_keys)
        for tp, n in s.replay_debt.items():
            g_debt.add_metric([*v, tp], n)
        for tp, n in s.lag.items():
            g_lag.add_metric([*v, tp], n)
        for tp, n in s.replayed.items():
            c_rp.add_metric([*v, tp], n)
    h = HistogramMetricFamily(
        "spillway_global_checkpoint_duration_seconds",
        "Completed global checkpoints of this run, trigger to last subtask's commit",
        labels=["job_id"],
    )
    h.add_metric([job], _buckets(snap.global_durations_s), sum(snap.global_durations_s))
    gauges = [g_up, g_id, g_age, g_dur, g_com, g_st, g_debt, g_lag]
    return [c_in, c_out, c_ck, c_busy, c_rs, *gauges, c_rp, h]


def _opt(f: GaugeMetricFamily, labels: list[str], v: float | None) -> None:
    if v is not None:
        f.add_metric(labels, v)


def _buckets(values: Iterable[float]) -> list[tuple[str, float]]:
    vs = list(values)
    out = [(str(b), float(sum(1 for x in vs if x <= b))) for b in GLOBAL_BUCKETS]
    return [*out, ("+Inf", float(len(vs)))]


def serve(feed: Callable[[], Snapshot], job: str, host: str, port: int) -> Callable[[], None]:
    """Serve ``/metrics`` on ``host:port`` (a thread); returns the function that stops it."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(job, feed))
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as e:  # in use, or not an address of this machine
        raise ConfigError(
            f"--metrics-port {port}: cannot serve metrics on {host}:{port} ({e.strerror or e}); "
            "choose a free port (or --metrics-host)"
        ) from None
    log.info("metrics of %s on http://%s:%d/metrics", job, host, server.server_port)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(5)

    return stop
