"""B2: end-to-end latency per hop of the Spillway pipeline, at several commit intervals.

The B1 pipeline in its traced variant (``bench.peers.spillway_pipeline(traced=True)``:
unbounded source, every record carries its ``seq`` and its event time ``ts``) runs in its
own processes while the benchmark

* writes events at a fixed rate (well below capacity) with ``ts`` = the wall-clock time of
  the ``produce`` call (the input producer does not linger);
* follows every channel topic (source→parse, parse→count, count→sink) and the output
  topic with its own read_committed consumer, noting when each ``seq`` first became
  visible there.

So per record: hop 1 = source reads, encodes, commits (visible in channel 1) − ``ts``;
hop 2 / 3 = parse / count likewise, from the previous channel; hop 4 = the sink's
commit to the output topic. With exactly-once, a record becomes visible only when the
transaction it was written in commits, so every hop waits for its subtask's next commit
(about half an interval on average). Records of the first :data:`WARMUP_S` seconds are
left out (consumers joining, first transactions).
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict
from typing import IO, Any

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition

from bench import peers, workload
from bench.checkpoints import percentile
from bench.stats import spread
from spillway.channels.wire.envelope import Decoders, Kind, read_header

WARMUP_S = 3.0
HOPS = ("source", "parse", "count", "sink")


def hop_latencies(
    sent: dict[int, float], seen: Sequence[dict[int, float]], after: float
) -> dict[str, list[float]]:
    """Per hop, the seconds each record spent there (records sent after ``after``). Pure.

    ``seen[k][seq]`` is when ``seq`` became visible after hop ``k``; a record counts only
    if it reached the end (the last hop).
    """
    out: dict[str, list[float]] = {h: [] for h in HOPS}
    out["end-to-end"] = []
    for seq, t_sent in sent.items():
        times = [t_sent] + [s[seq] for s in seen if seq in s]
        if t_sent < after or len(times) != len(seen) + 1:
            continue
        for hop, (a, b) in zip(HOPS, itertools.pairwise(times), strict=True):
            out[hop].append(b - a)
        out["end-to-end"].append(times[-1] - t_sent)
    return out


class Observer(threading.Thread):
    """Notes when each seq first becomes visible (read_committed) in one topic, and where."""

    def __init__(self, bootstrap: str, topic: str, decode: Any, group: str) -> None:
        super().__init__(name=f"observe-{topic}", daemon=True)
        self.seen: dict[int, float] = {}
        self.partition: dict[int, int] = {}  # seq → partition it first appeared in
        self._decode = decode
        self._halt = threading.Event()
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 10,
            }
        )
        parts = self._consumer.list_topics(topic, timeout=10).topics[topic].partitions
        self._consumer.assign([CkTopicPartition(topic, p, 0) for p in parts])

    def run(self) -> None:
        while not self._halt.is_set():
            msgs = self._consumer.consume(500, 0.02)
            now = time.time()
            for m in msgs:
                if m.error() is None:
                    for seq in self._decode(m):
                        if seq not in self.seen:
                            self.seen[seq] = now
                            self.partition[seq] = m.partition() or 0
        self._consumer.close()

    def stop(self) -> None:
        self._halt.set()
        self.join(10)


def channel_decoder(schema: dict[str, Any]) -> Any:
    """The seqs of one channel message (none for barriers and other control messages)."""
    decoders = Decoders(schema)

    def decode(m: Any) -> list[int]:
        kind, version = read_header(m.headers())
        if kind is not Kind.DATA:
            return []
        return [int(r["seq"]) for r in decoders.decode(version, m.value())]

    return decode


def output_decoder(m: Any) -> list[int]:
    """The seq of one output message (JSON)."""
    return [int(json.loads(m.value())["seq"])]


def observe_hops(bootstrap: str, plan: Any, output: str, group: str) -> list[Observer]:
    """Started observers of every hop's output of the traced pipeline ``plan``, in order:
    the source→parse, parse→count and count→sink channels, then ``output``."""
    edges = {(str(e.upstream), str(e.downstream)): plan.topic_of(e) for e in plan.edges}
    channels = [
        (edges[("source", "parse")], peers.EVENT_SCHEMA),
        (edges[("parse", "count")], peers.TRACED_VIEW_SCHEMA),
        (edges[("count", "sink")], peers.TRACED_COUNT_SCHEMA),
    ]
    observers = [Observer(bootstrap, t, channel_decoder(s), group) for t, s in channels]
    observers.append(Observer(bootstrap, output, output_decoder, group))
    for o in observers:
        o.start()
    return observers


def b2_run(
    bootstrap: str,
    admin: Any,
    interval_s: float,
    guarantee: str,
    rate: float,
    seconds: float,
    log: IO[str],
) -> dict[str, Any]:
    """One paced run at one commit interval; per-hop latency figures."""
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    name = f"bench-b2-{uuid.uuid4().hex[:8]}"
    source_topic, output = name + "-in", name + "-out"
    for t in (source_topic, output):
        admin.create_topics([NewTopic(t, 2, 1)])[t].result(30)
    plan = peers.spillway_pipeline(source_topic, output, traced=True).plan(name)
    workdir = tempfile.mkdtemp(prefix=name)
    args = [sys.executable, "-m", "bench.peers", "spillway", "--traced", "--bootstrap"]
    args += [bootstrap, "--input", source_topic, "--output", output, "--records", "0"]
    args += ["--commit-interval", str(interval_s), "--workdir", workdir, "--name", name]
    args += ["--guarantee", guarantee]
    proc = subprocess.Popen(
        args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
    )
    assert proc.stdout is not None
    assert proc.stdin is not None
    observers: list[Observer] = []
    try:
        line = proc.stdout.readline()
        if not line.startswith("READY"):
            raise RuntimeError(f"traced spillway did not start (exit {proc.wait()})")
        observers = observe_hops(bootstrap, plan, output, name + "-o")
        sent = produce_paced(bootstrap, source_topic, rate, seconds)
        deadline = time.monotonic() + 4 * interval_s + 20
        while len(observers[-1].seen) < len(sent) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        for o in observers:
            o.stop()
        proc.stdin.close()
        proc.wait(60)
    start = min(sent.values()) + WARMUP_S
    lat = hop_latencies(sent, [o.seen for o in observers], start)
    return {
        "commit_interval_s": interval_s,
        "guarantee": guarantee,
        "rate": rate,
        "seconds": seconds,
        "sent": len(sent),
        "arrived": len(observers[-1].seen),
        "measured": len(lat["end-to-end"]),
        "hops": {
            hop: {
                "p50_ms": 1000 * percentile(v, 0.5),
                "p99_ms": 1000 * percentile(v, 0.99),
                "range_ms": [1000 * spread(v).low, 1000 * spread(v).high],
            }
            for hop, v in lat.items()
            if v
        },
    }


def produce_paced(bootstrap: str, topic: str, rate: float, seconds: float) -> dict[int, float]:
    """Events at ``rate``/s for ``seconds``; seq → send time (also the event's ``ts``)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    sent: dict[int, float] = {}
    t0 = time.time()
    i = 0
    while (now := time.time()) < t0 + seconds:
        due = int((now - t0) * rate)
        while i < due:
            event = workload.make_event(i)
            t = time.time()
            event["ts"] = int(t * 1000)
            producer.produce(topic, workload.encode(event), partition=i % 2)
            sent[i] = t
            i += 1
        producer.poll(0)
        time.sleep(0.005)
    producer.flush(30)
    return sent


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (guarantee, interval): median (min–max) over runs of each hop's p50 and p99."""
    keys = sorted({(r["guarantee"], r["commit_interval_s"]) for r in runs})
    out = []
    for guarantee, interval in keys:
        mine = [
            r for r in runs if (r["guarantee"], r["commit_interval_s"]) == (guarantee, interval)
        ]
        hops = [h for h in (*HOPS, "end-to-end") if all(h in r["hops"] for r in mine)]
        out.append(
            {
                "guarantee": guarantee,
                "commit_interval_s": interval,
                "runs": len(mine),
                "measured": sum(r["measured"] for r in mine),
                "sent": sum(r["sent"] for r in mine),
                "hops": {
                    h: {
                        q: asdict(spread([r["hops"][h][q] for r in mine]))
                        for q in ("p50_ms", "p99_ms")
                    }
                    for h in hops
                },
            }
        )
    return out
