"""B4: how fast a subtask restores its state from a changelog, beside a raw consumer.

One changelog partition of N records (200 bytes of key + value each, every key distinct,
so all N are live state) is written once. Each round then reads it completely, twice,
each in a fresh process (``python -m bench.restore ROLE ...``):

``spillway``  :meth:`spillway.recovery.restore.state.ChangelogState.restore` up to the end offset,
through
              an :class:`~spillway.channels.kafka.consumer.AssignedConsumer` (what a restarting
              subtask does);
``raw``       a plain confluent-kafka read_committed ``Consumer`` that consumes the same
              partition in batches of 1000 (as ``restore`` does) and only counts; its
              fetch settings are AssignedConsumer's (``fetch.wait.max.ms``,
              ``fetch.queue.backoff.ms``), the rest librdkafka's defaults.

``dict``      (command line only, not in ``make bench``) the ``raw`` consumer storing each
              message's value in a dict under its key: what any in-memory restore must
              at least do, so the floor for ``spillway``.

Each role reports its own wall time and CPU time (``RUSAGE_SELF``: all its threads,
librdkafka's included) around the read; the broker's CPU time is read around the whole
process.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from bench import measure
from bench.stats import ratios, spread

TOPIC = "bench-b4-changelog"
ROLES = ("spillway", "raw")  # make bench's B4
CLI_ROLES = (*ROLES, "dict")
RECORD_BYTES = 200
BATCH = 1000


def _key(i: int) -> bytes:
    return json.dumps(f"key-{i:010d}").encode()


def _value(i: int) -> bytes:
    head = json.dumps(["news", i, ""], separators=(",", ":"))
    pad = RECORD_BYTES - len(_key(i)) - len(head)
    return json.dumps(["news", i, "p" * pad], separators=(",", ":")).encode()


def preload_changelog_once(bootstrap: str, admin: AdminClient, records: int) -> None:
    """Create :data:`TOPIC` (1 partition, no compaction) and write ``records`` records."""
    drop_changelog(admin)
    # Not compacted: every key is distinct anyway, and a cleaner pass in the middle of
    # the benchmark would be noise. Retention off for the same reason.
    spec = NewTopic(TOPIC, 1, 1, config={"cleanup.policy": "delete", "retention.ms": "-1"})
    admin.create_topics([spec])[TOPIC].result(30)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000, "acks": "all"}
    )
    for i in range(records):
        while True:
            try:
                producer.produce(TOPIC, _value(i), _key(i), partition=0)
                break
            except BufferError:
                producer.poll(0.1)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError(f"could not write {records} changelog records")


def drop_changelog(admin: AdminClient) -> None:
    """Delete :data:`TOPIC` if it exists (waits for the deletion)."""
    if TOPIC in admin.list_topics(timeout=10).topics:
        admin.delete_topics([TOPIC])[TOPIC].result(30)
        for _ in range(100):
            if TOPIC not in admin.list_topics(timeout=10).topics:
                return
            time.sleep(0.1)


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def restore_spillway(bootstrap: str, end: int, group: str) -> tuple[int, float, float]:
    """``ChangelogState.restore`` of the whole partition: (records, seconds, CPU seconds)."""
    from spillway.channels.config import KafkaSettings
    from spillway.channels.ids import Offset, TopicPartition
    from spillway.channels.kafka.consumer import AssignedConsumer
    from spillway.recovery.restore.state import ChangelogState

    consumer = AssignedConsumer(KafkaSettings(bootstrap), group)
    state = ChangelogState(TopicPartition(TOPIC, 0))
    c0, t0 = _cpu(), time.monotonic()
    n = state.restore(consumer, Offset(end))
    seconds, cpu = time.monotonic() - t0, _cpu() - c0
    if len(state) != end:
        raise RuntimeError(f"restored {len(state)} keys, expected {end}")
    return n, seconds, cpu


def read_raw(bootstrap: str, end: int, group: str) -> tuple[int, float, float]:
    """Consume the whole partition, counting: (records, seconds, CPU seconds)."""
    return _read(bootstrap, end, group, keep=False)


def read_into_dict(bootstrap: str, end: int, group: str) -> tuple[int, float, float]:
    """Consume the whole partition into a dict of key → value: (records, s, CPU s)."""
    return _read(bootstrap, end, group, keep=True)


def _read(bootstrap: str, end: int, group: str, keep: bool) -> tuple[int, float, float]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            # As AssignedConsumer: with librdkafka's default (1 s) this consumer too stalls
            # whenever its queue fills faster than it counts, and the ceiling is no ceiling.
            "fetch.queue.backoff.ms": 20,
        }
    )
    consumer.assign([CkTopicPartition(TOPIC, 0, 0)])
    tp = CkTopicPartition(TOPIC, 0)
    n, size = 0, 0
    kept: dict[bytes | None, bytes | None] = {}
    c0, t0 = _cpu(), time.monotonic()
    while True:
        msgs = consumer.consume(BATCH, 0.2)
        if keep:
            for m in msgs:
                n += 1
                kept[m.key()] = m.value()
        else:
            for m in msgs:  # unchanged since the B4 runs in docs/benchmarks.md
                n += 1
                size += len(m.value() or b"")
        pos = consumer.position([tp])[0].offset
        if pos >= end:
            break
    seconds, cpu = time.monotonic() - t0, _cpu() - c0
    consumer.close()
    if n != end or (keep and len(kept) != end):
        raise RuntimeError(f"read {n} records ({len(kept)} kept), expected {end}")
    return n, seconds, cpu


def b4_round(bootstrap: str, broker_pid: int, admin: AdminClient, records: int) -> dict[str, Any]:
    """Both roles once each over the pre-loaded changelog, each in a fresh process."""
    out: dict[str, Any] = {}
    for role in ROLES:
        command = [sys.executable, "-m", "bench.restore", role, bootstrap, str(records)]
        stdout, m = measure.run_tool(command, broker_pid, 600.0)
        n, seconds, cpu = json.loads(stdout.strip().splitlines()[-1])
        out[role] = {
            "records": n,
            "seconds": seconds,
            "cpu_s": cpu,
            "records_per_s": n / seconds,
            "process": m.as_dict(),  # the whole process, start-up included
        }
    out["ratio"] = out["spillway"]["records_per_s"] / out["raw"]["records_per_s"]
    return out


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians (min–max) of both rates and of the run-by-run ratio."""
    rates = {r: [x[r]["records_per_s"] for x in rounds] for r in ROLES}
    return {
        "records": rounds[0]["spillway"]["records"],
        **{r: asdict(spread(rates[r])) for r in ROLES},
        "ratio": asdict(spread(ratios(rates["spillway"], rates["raw"]))),
        "peak_rss_bytes": {
            r: asdict(spread([x[r]["process"]["peak_rss_bytes"] for x in rounds])) for r in ROLES
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.restore ROLE BOOTSTRAP RECORDS``: prints ``[records, s, cpu_s]``."""
    ap = argparse.ArgumentParser(prog="python -m bench.restore")
    ap.add_argument("role", choices=CLI_ROLES)
    ap.add_argument("bootstrap")
    ap.add_argument("records", type=int)
    a = ap.parse_args(argv)
    group = f"bench-b4-{a.role}-{time.time_ns()}"
    reader = {"spillway": restore_spillway, "raw": read_raw, "dict": read_into_dict}[a.role]
    print(json.dumps(list(reader(a.bootstrap, a.records, group))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
