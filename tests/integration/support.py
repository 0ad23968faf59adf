"""Helpers the integration tests share, so that no test module imports another.

- the click-stream example's output and events (``spillway.examples.clicks``),
- the processes of a local standalone cluster,
- channel writers of the channel tests (also imported by their writer subprocess),
- a topic's committed messages, read to its end,
- ``spillway`` run as a command in a child process.
"""

from __future__ import annotations

import glob
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition
from prometheus_client.parser import text_string_to_metric_families

from spillway.channels.config import ChannelSettings, KafkaSettings
from spillway.channels.ids import JobId, OperatorName, SubtaskId
from spillway.channels.kafka.producer import TransactionalProducer
from spillway.channels.routing.partitioners import KeyHash
from spillway.channels.writer import ChannelWriter, OutputChannel
from spillway.recovery.observe.events import read_events

# --- the click-stream example -------------------------------------------------------------


def read_output(out: Path) -> dict[str, tuple[str, int]]:
    """The clicks job's JSONL output under ``out/out``: page -> (section, views)."""
    rows: dict[str, tuple[str, int]] = {}
    for f in sorted(glob.glob(str(out / "out" / "*.jsonl"))):
        for line in Path(f).read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            assert r["page"] not in rows, f"duplicate output row for {r['page']}"
            rows[r["page"]] = (r["section"], r["views"])
    return rows


def output_files(out: Path) -> dict[str, str]:
    """Every file the clicks job published under ``out/out``: name -> content."""
    return {Path(f).name: Path(f).read_text() for f in glob.glob(str(out / "out" / "*"))}


def starts(bootstrap: str, job: str) -> list[dict[str, Any]]:
    """Every ``started`` event of ``job``, in order."""
    return [
        e for e in read_events(KafkaSettings(bootstrap), JobId(job)) if e.get("event") == "started"
    ]


def paced_clicks(monkeypatch: pytest.MonkeyPatch, out: Path, records: int, seconds: float) -> None:
    """Configure the clicks example: ``records`` records in about ``seconds`` s, into ``out``."""
    monkeypatch.setenv("CLICKS_RECORDS", str(records))
    monkeypatch.setenv("CLICKS_OUT", str(out))
    monkeypatch.setenv("CLICKS_PARALLELISM", "2")
    monkeypatch.setenv("CLICKS_RATE", str(records / 2 / seconds))


# --- processes of a local cluster ---------------------------------------------------------


def live_processes() -> dict[int, tuple[int, list[str]]]:
    """Every live, non-zombie process: pid -> (session id, argv)."""
    found: dict[int, tuple[int, list[str]]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
            raw = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if fields[0] != "Z":
            argv = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
            found[int(entry.name)] = (int(fields[3]), argv)
    return found


def leftovers(root: Path, pids: set[int], sessions: set[int]) -> list[str]:
    """Processes that belong to the cluster in ``root``: by PID, by session, or by path."""
    marker = str(root)
    return [
        f"{pid} (session {sid}): {' '.join(argv)[:200]}"
        for pid, (sid, argv) in live_processes().items()
        if pid in pids or sid in sessions or any(marker in arg for arg in argv)
    ]


# --- channel writers (test_channels.py) ---------------------------------------------------

CHANNEL_SCHEMA = {
    "type": "record",
    "name": "Event",
    "fields": [
        {"name": "key", "type": "string"},
        {"name": "writer", "type": "int"},
        {"name": "seq", "type": "long"},
    ],
}
UP, DOWN = 3, 2  # writers (subtasks of "up") and partitions (subtasks of "down")


def writer_for(
    settings: KafkaSettings, job: str, topic: str, index: int, codec: str = "arrow"
) -> tuple[TransactionalProducer, ChannelWriter]:
    """Writer ``index`` of the channel up -> down, with its started transactional producer."""
    sub = SubtaskId(JobId(job), OperatorName("up"), index)
    producer = TransactionalProducer(settings, sub.transactional_id, transaction_timeout_ms=20_000)
    producer.start()
    out = OutputChannel(topic, CHANNEL_SCHEMA, KeyHash(lambda r: r["key"], DOWN), DOWN)
    channel_settings = ChannelSettings(max_batch_bytes=4096, max_record_bytes=8192, codec=codec)
    return producer, ChannelWriter(producer, out, index, channel_settings)


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
"""Prometheus samples: (metric name, sorted labels) -> value."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 just now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> Samples | None:
    """Every sample of ``/metrics`` on ``port`` (None while the endpoint does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return None
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def states_of(samples: Samples) -> dict[str, str]:
    """``operator[index]`` → the state of ``spillway_subtask_state``."""
    out = {}
    for (name, labels), v in samples.items():
        if name == "spillway_subtask_state" and v == 1:
            d = dict(labels)
            out[f"{d['operator']}[{d['index']}]"] = d["state"]
    return out


# --- a topic's committed messages ---------------------------------------------------------


def read_committed(
    bootstrap: str, topic: str, partitions: int, timeout_s: float = 60.0
) -> list[tuple[int, int, bytes]]:
    """``(partition, offset, value)`` of every committed message of ``topic``, read
    read_committed to each partition's end; fails if an end is not reached in time."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-check",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    tps = [CkTopicPartition(topic, p, 0) for p in range(partitions)]
    consumer.assign(tps)
    ends = {
        p: consumer.get_watermark_offsets(CkTopicPartition(topic, p))[1] for p in range(partitions)
    }
    out: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + timeout_s
    while any(
        (consumer.position([CkTopicPartition(topic, p)])[0].offset or 0) < end
        for p, end in ends.items()
        if end
    ):
        assert time.monotonic() < deadline, f"{topic} not read to its end {ends}"
        for m in consumer.consume(1000, 0.2):
            if not m.error():
                out.append((m.partition() or 0, m.offset() or 0, m.value() or b""))
    consumer.close()
    return out


# --- the command line ----------------------------------------------------------------------


def spillway(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``spillway ARGV`` in a child process (``env`` added to this one's), capturing what
    it prints."""
    return subprocess.run(
        [sys.executable, "-m", "spillway.cli", *argv],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
