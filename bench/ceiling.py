"""B0s, the ceiling in steady state: what the broker and a client can do per CPU-second.

Four tools, each run from start to exit at two input sizes (as B1s), so a line through
``(records, CPU)`` gives the per-record cost apart from the fixed cost — for the perf
tools that leaves JVM start-up and warm-up out of the figure:

``perf-produce``  Kafka's ``ProducerPerformance``, tuned (``linger.ms``, ``batch.size``:
                  :data:`bench.kafkatools.TUNED_PRODUCER`), acks=all, 200-byte records;
``perf-consume``  ``ConsumerPerformance`` reading them back;
``raw-produce``   a plain confluent-kafka producer loop (the client every Python engine
                  here uses), same settings, same 200-byte B1 events;
``raw-consume``   a plain confluent-kafka consumer loop reading them back.

CPU is the tool's process tree plus the broker (:func:`bench.measure.run_whole`).
``python -m bench.ceiling produce|consume`` are the two raw loops.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any, TextIO

from bench import kafkatools, measure, steady, workload
from bench.stats import spread

TOOLS = ("perf-produce", "perf-consume", "raw-produce", "raw-consume")


def fit_tool(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per-record and fixed CPU (tool + broker) of one tool's runs of one round. Pure."""
    cpu = steady.fit([(r["records"], r["cpu_s"] + r["broker_cpu_s"]) for r in runs])
    return {
        "cpu_us_per_record": cpu.per_record * 1e6,
        "per_cpu_s": cpu.per_unit,
        "fixed_cpu_s": cpu.fixed,
    }


def summarise(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Median (min–max) per tool and figure over the rounds (None figures left out). Pure."""
    out: dict[str, Any] = {}
    for tool in TOOLS:
        if not all(tool in r["fits"] for r in rounds):
            continue
        figs: dict[str, Any] = {}
        for k in ("cpu_us_per_record", "per_cpu_s", "fixed_cpu_s"):
            values = [r["fits"][tool][k] for r in rounds]
            if all(v is not None for v in values):
                figs[k] = asdict(spread(values))
        out[tool] = figs
    return out


def commands(bootstrap: str, topic: str, records: int, group: str) -> dict[str, list[str]]:
    """The command line of every tool over ``topic`` (producers write it, consumers read)."""
    lib = kafkatools.resolve_tools()
    raw = [sys.executable, "-m", "bench.ceiling"]
    common = ["--bootstrap", bootstrap, "--topic", topic, "--records", str(records)]
    return {
        "perf-produce": kafkatools.producer_command(
            lib, bootstrap, topic, records, workload.RECORD_BYTES, kafkatools.TUNED_PRODUCER
        ),
        "perf-consume": kafkatools.consumer_command(lib, bootstrap, topic, records, group),
        "raw-produce": [*raw, "produce", *common],
        "raw-consume": [*raw, "consume", *common, "--group", group + "-raw"],
    }


def b0s_round(
    bootstrap: str,
    broker_pid: int,
    sizes: Sequence[int],
    timeout_s: float,
    log: TextIO,
    create: Callable[[str], None],
    drop: Callable[[list[str]], None],
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Every tool at every size; producers write a fresh topic that the consumers read."""
    runs: dict[str, list[dict[str, Any]]] = {t: [] for t in TOOLS}
    for n in sizes:
        for producer, consumer in (
            ("perf-produce", "perf-consume"),
            ("raw-produce", "raw-consume"),
        ):
            topic = f"bench-b0s-{n}-{uuid.uuid4().hex[:8]}"
            create(topic)
            try:
                cmds = commands(bootstrap, topic, n, topic + "-g")
                for tool in (producer, consumer):
                    m = measure.run_whole(cmds[tool], broker_pid, timeout_s, log)
                    runs[tool].append({"records": n, **m.as_dict()})
                    say(f"B0s: {tool} {n:,}: CPU {m.cpu_s:.1f} s + broker {m.broker_cpu_s:.1f} s")
            finally:
                drop([topic])
    return {"runs": runs, "fits": {t: fit_tool(r) for t, r in runs.items()}}


def produce(bootstrap: str, topic: str, records: int) -> None:
    """Write B1 events ``0 .. records-1`` round-robin over the topic's partitions."""
    from confluent_kafka import Producer

    events = [workload.encode(workload.make_event(i)) for i in range(min(records, 10_000))]
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 10,
            "batch.size": 262_144,
        }
    )
    for i in range(records):
        while True:
            try:
                p.produce(topic, events[i % len(events)])
                break
            except BufferError:
                p.poll(0.05)
    if p.flush(60) != 0:
        raise SystemExit(f"raw-produce: could not write all {records} records to {topic}")


def consume(bootstrap: str, topic: str, records: int, group: str) -> None:
    """Read ``records`` messages of ``topic`` from the start."""
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    seen = 0
    idle = 0
    while seen < records:
        msgs = c.consume(10_000, 1.0)
        idle = 0 if msgs else idle + 1
        if idle > 60:
            raise SystemExit(f"raw-consume: {seen} of {records} records after 60 s idle")
        for m in msgs:
            if m.error() is None:
                seen += 1
    c.close()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.ceiling produce|consume --bootstrap B --topic T --records N``."""
    ap = argparse.ArgumentParser(prog="python -m bench.ceiling", description=__doc__)
    ap.add_argument("what", choices=("produce", "consume"))
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--records", type=int, required=True)
    ap.add_argument("--group", default="bench-ceiling")
    a = ap.parse_args(argv)
    if a.what == "produce":
        produce(a.bootstrap, a.topic, a.records)
    else:
        consume(a.bootstrap, a.topic, a.records, a.group)
    return 0


if __name__ == "__main__":
    sys.exit(main())
