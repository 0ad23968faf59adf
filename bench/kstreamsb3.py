"""B3 for Kafka Streams: two instances, one SIGKILLed, with 0 and with 1 standby replica.

The traced Kafka Streams application (:mod:`bench.kstreams`, every output carries ``seq``
and ``ts`` of the record counted last) runs as two instances of one application id over
an input topic of 2 partitions fed at a fixed rate; a read_committed observer notes when
each output arrives. After :attr:`Settings.warmup_s` one instance's JVM is SIGKILLed;
the survivor takes its tasks over (restoring their state from the changelogs, or from a
standby replica it already holds). Measured per standby setting:

* seconds from the kill until the end-to-end latency (output arrival − event ``ts``) is
  back within 10 % of its 0.9-quantile over the :attr:`Settings.base_s` seconds before the
  kill, for good (1-second windows; :func:`bench.recoverystats.back_within`);
* the highest latency after the kill;
* the output checked: every input record's update exactly once (``seq`` once each, each
  page's views 1..n once each).

Not measured: records re-processed (the killed instance's open transaction is aborted and
invisible to a read_committed observer). Part ``b3k`` of ``make bench``; ``python -m
bench.kstreamsb3`` runs one round on a throw-away broker and prints JSON.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from bench import kstreams, procstat, workload
from bench.checkpoints import percentile
from bench.recoverystats import back_within
from bench.stats import spread
from bench.suitebroker import start_broker

PARTITIONS = 2
QUANTILE = 0.9
TOLERANCE = 0.1


@dataclass(frozen=True)
class Settings:
    """Pace and timeline of one B3 round (seconds)."""

    rate: float = 500.0  # records/s into the input topic
    warmup_s: float = 25.0  # both instances running before the kill
    base_s: float = 10.0  # the baseline latency: this long before the kill
    after_s: float = 40.0  # measured after the kill
    commit_interval_s: float = 1.0


class Pacer(threading.Thread):
    """Writes B1 events with ``ts`` = send time (ms) at ``rate`` until stopped."""

    def __init__(self, bootstrap: str, topic: str, rate: float) -> None:
        super().__init__(name="b3-pacer", daemon=True)
        self.topic, self.rate = topic, rate
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
        self.sent = 0
        self.times: dict[int, float] = {}  # seq → wall time of its produce call
        self.stop = threading.Event()

    def run(self) -> None:
        t0 = time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - t0) * self.rate)
            while self.sent < due:
                event = workload.make_event(self.sent)
                self.times[self.sent] = now = time.time()
                event["ts"] = int(now * 1000)
                value = workload.encode(event)
                self.producer.produce(self.topic, value, partition=self.sent % PARTITIONS)
                self.sent += 1
            self.producer.poll(0)
            time.sleep(0.002)
        self.producer.flush(30)


class Observer(threading.Thread):
    """Reads the output (read_committed): ``(arrival, seq, ts_ms, page, views)`` per message."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(name="b3-observer", daemon=True)
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"b3-observer-{uuid.uuid4().hex[:8]}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        self.seen: list[tuple[float, int, int, str, int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for m in self.consumer.consume(1000, 0.1):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise RuntimeError(f"observer: {err}")
                row = json.loads(m.value() or b"{}")
                self.seen.append((time.time(), row["seq"], row["ts"], row["page"], row["views"]))
        self.consumer.close()


def figures(
    seen: list[tuple[float, int, int, str, int]], sent: int, kill: float, s: Settings
) -> dict[str, Any]:
    """Recovery time, latencies and the output check from what the observer saw. Pure."""
    points = [(arrival, arrival - ts / 1000) for arrival, _, ts, _, _ in seen]
    base = [lat for t, lat in points if kill - s.base_s <= t < kill]
    baseline = percentile(base, QUANTILE) if base else None
    end = kill + s.after_s
    back = (
        back_within(points, kill, end, baseline, TOLERANCE, width=1.0, q=QUANTILE)
        if baseline is not None
        else None
    )
    after = [lat for t, lat in points if t >= kill]
    seqs = Counter(seq for _, seq, _, _, _ in seen)
    views: dict[str, list[int]] = {}
    for _, _, _, page, v in seen:
        views.setdefault(page, []).append(v)
    every_update_once = all(sorted(v) == list(range(1, len(v) + 1)) for v in views.values())
    return {
        "baseline_latency_q90_s": baseline,
        "back_within_10pct_s": back,
        "max_latency_after_kill_s": max(after) if after else None,
        "sent": sent,
        "outputs": len(seen),
        "duplicates": sum(n - 1 for n in seqs.values() if n > 1),
        "missing": sent - len(seqs),
        "every_update_once": every_update_once,
    }


def run_round(bootstrap: str, admin: AdminClient, standbys: int, s: Settings) -> dict[str, Any]:
    """One round: two instances, the second SIGKILLed after the warm-up."""
    name = f"bench-ks-b3-{standbys}-{uuid.uuid4().hex[:8]}"
    src, out = name + "-in", name + "-out"
    for t in (src, out):
        admin.create_topics([NewTopic(t, PARTITIONS, 1)])[t].result(30)
    home = kstreams.build()
    workdir = tempfile.mkdtemp(prefix=name + "-")
    observer, pacer = Observer(bootstrap, out), Pacer(bootstrap, src, s.rate)
    observer.start()
    pacer.start()
    instances: list[subprocess.Popen[str]] = []
    try:
        for k in range(2):
            cmd = kstreams.command(
                home,
                bootstrap,
                src,
                out,
                0,
                s.commit_interval_s,
                os.path.join(workdir, f"state-{k}"),
                name,
                standbys,
                traced=True,
            )
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            instances.append(proc)
        for proc in instances:
            assert proc.stdout is not None
            if not proc.stdout.readline().startswith("READY "):
                raise RuntimeError(f"a Kafka Streams instance exited {proc.wait()} before READY")
        time.sleep(s.warmup_s)
        kill = time.time()
        instances[1].kill()  # our own child, by PID
        instances[1].wait()
        time.sleep(s.after_s)
        pacer.stop.set()
        pacer.join()
        deadline = time.monotonic() + 60
        while len({seq for _, seq, _, _, _ in observer.seen}) < pacer.sent:
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        pacer.stop.set()
        observer.stop.set()
        for proc in instances:
            if proc.poll() is None:
                assert proc.stdin is not None
                proc.stdin.close()
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait()
        observer.join()
        topics = [t for t in admin.list_topics(timeout=10).topics if name in t]
        for f in admin.delete_topics(topics).values():
            with contextlib.suppress(Exception):  # tidying up, not a result
                f.result(30)
    return {"standby_replicas": standbys, **figures(observer.seen, pacer.sent, kill, s)}


def b3k_round(bootstrap: str, admin: AdminClient, s: Settings) -> dict[str, Any]:
    """One suite round: 0 standbys, then 1, each with the load average around it."""
    out: dict[str, Any] = {}
    for n in (0, 1):
        load0 = procstat.load_average()
        r = run_round(bootstrap, admin, n, s)
        out[f"standby-{n}"] = {**r, "load_before": load0, "load_after": procstat.load_average()}
    return out


FIGURES = ("back_within_10pct_s", "max_latency_after_kill_s", "baseline_latency_q90_s")


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per standby setting: median (min–max) of each figure over the rounds where it was
    measured, rounds not back within the run, and whether every output was exact. Pure."""
    out: dict[str, Any] = {}
    for key in ("standby-0", "standby-1"):
        rs = [r[key] for r in rounds if key in r]
        if not rs:
            continue
        figs: dict[str, Any] = {}
        for f in FIGURES:
            values = [r[f] for r in rs if r[f] is not None]
            if values:
                figs[f] = asdict(spread(values))
        figs["not_back"] = sum(1 for r in rs if r["back_within_10pct_s"] is None)
        figs["output_exact"] = all(
            r["every_update_once"] and r["duplicates"] == 0 and r["missing"] == 0 for r in rs
        )
        out[key] = figs
    return out


def main() -> int:
    """Both standby settings on a throw-away broker; prints the figures as JSON."""
    s = Settings()
    with contextlib.ExitStack() as stack:
        bootstrap, _, _ = start_broker(stack)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        result = b3k_round(bootstrap, admin, s)
    print(json.dumps({"settings": asdict(s), "round": result}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
