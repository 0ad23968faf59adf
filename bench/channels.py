"""Throughput of a Spillway channel against a hand-written transactional Kafka loop.

``python -m bench.channels`` (``make bench-channels``) moves N records of ~200 bytes from
one writer to one reader, exactly-once, committing a Kafka transaction every second of
wall time, in two ways:

* **spillway** — :class:`~spillway.channels.writer.ChannelWriter` (keyed edge, default
  :class:`~spillway.channels.config.ChannelSettings`) over a
  :class:`~spillway.channels.kafka.producer.TransactionalProducer`, read back with a
  :class:`~spillway.channels.reader.ChannelReader` over a read_committed
  :class:`~spillway.channels.kafka.consumer.AssignedConsumer` until end-of-stream;
* **hand-written** — a confluent-kafka ``Producer`` in a begin/produce/commit loop with
  one Kafka message per record (the same Avro record as value, its key as key), read
  back by a plain read_committed ``Consumer``.

Each pass of each variant runs in freshly spawned processes on a fresh topic, which is
deleted afterwards. Per run the benchmark measures the write phase, then the read phase
of the complete topic, then writer and reader concurrently in two processes. It prints
the median and min–max over the runs, and the Spillway/hand-written ratio taken run by
run, and stores the raw figures as JSON under ``bench/results/``.

The broker is ``--bootstrap``, else ``$SPILLWAY_BOOTSTRAP``, else a throw-away local
broker (``spillway.devtools.localbroker``) in a temporary directory, stopped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import importlib.metadata
import io
import json
import multiprocessing
import multiprocessing.process
import multiprocessing.queues
import multiprocessing.synchronize
import os
import platform
import pstats
import queue
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import confluent_kafka
import fastavro
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition

from bench.stats import Spread, rate, ratios, spread
from spillway.channels.config import ChannelSettings, KafkaSettings
from spillway.channels.errors import SpillwayError, TopologyMismatchError
from spillway.channels.ids import JobId, OperatorName, SubtaskId
from spillway.channels.kafka.admin import Admin, TopicSpec
from spillway.channels.kafka.consumer import AssignedConsumer
from spillway.channels.kafka.producer import TransactionalProducer
from spillway.channels.naming import channel_topic
from spillway.channels.reader import ChannelReader, InputChannel
from spillway.channels.routing.partitioners import KeyHash
from spillway.channels.writer import ChannelWriter, OutputChannel

SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "BenchRecord",
    "fields": [
        {"name": "key", "type": "string"},
        {"name": "seq", "type": "long"},
        {"name": "payload", "type": "bytes"},
    ],
}
KEYS = 1024  # distinct keys: enough to spread over partitions, few enough to repeat
RESULTS_DIR = Path(__file__).resolve().parent / "results"
BOOTSTRAP_ENV = "SPILLWAY_BOOTSTRAP"

# Both loops look at the clock (and serve callbacks) once per this many records: often
# enough for a 1 s commit cadence at any plausible rate, rare enough not to be measured.
_CHECK_EVERY = 256
# Both readers poll like the subtask runtime (recovery/runtime/runner.py, RunOptions defaults):
# up to 2000 Kafka messages per call, waiting at most 50 ms.
_MAX_MESSAGES = 2000
_POLL_TIMEOUT_S = 0.05
# Producer settings of the hand-written loop: what TransactionalProducer sets, so the
# comparison is about one message per record versus batches, not about tuning.
_TXN_TIMEOUT_MS = 60_000
_LINGER_MS = 5


class BenchError(Exception):
    """The benchmark could not produce a trustworthy figure (the message says why)."""


Gate = Callable[[], object]
"""Called by a role after its set-up, right before its clock starts."""


@dataclass(frozen=True)
class Workload:
    """One pass: what to move, where, and how often to commit."""

    bootstrap: str
    job: str
    topic: str
    partitions: int
    records: int
    record_bytes: int
    commit_interval_s: float
    timeout_s: float


@dataclass(frozen=True)
class Span:
    """What one role did between two readings of the system-wide monotonic clock.

    ``time.monotonic`` is CLOCK_MONOTONIC on Linux, shared by all processes, so spans
    from a writer process and a reader process can be subtracted from each other.
    """

    start: float
    end: float
    records: int
    transactions: int = 0
    messages: int = 0
    # CPU seconds of the role's process over the span (all its threads, librdkafka's
    # included; the broker's are not counted).
    cpu: float = 0.0

    @property
    def seconds(self) -> float:
        """Elapsed wall time."""
        return self.end - self.start


Role = Callable[[Workload, Gate], Span]


def _no_gate() -> None:
    return None


# -- records ---------------------------------------------------------------------------


def _avro_long_size(value: int) -> int:
    """Bytes of ``value`` as an Avro long (zig-zag varint)."""
    z = (value << 1) ^ (value >> 63)
    size = 1
    while z > 0x7F:
        z >>= 7
        size += 1
    return size


def _payload_size(room: int) -> int:
    """The largest payload length whose Avro ``bytes`` encoding (length + data) fits ``room``."""
    for n in range(room, -1, -1):
        if n + _avro_long_size(n) <= room:
            return n
    raise BenchError(f"no room for a payload in {room} bytes")


def make_records(count: int, record_bytes: int) -> tuple[list[dict[str, Any]], int]:
    """``count`` records of :data:`SCHEMA`, each encoding to ``record_bytes`` bytes of Avro.

    The payload length compensates for the varint width of ``seq`` so that every record
    has the target size (off by one only where no payload length fits exactly). Returns
    the records and their total encoded size. Payloads are random, so compression would
    gain nothing; equal lengths share one bytes object to keep the list small.
    """
    noise = random.Random(0).randbytes(record_bytes)
    payloads: dict[int, bytes] = {}
    records: list[dict[str, Any]] = []
    total = 0
    for seq in range(count):
        key = f"key-{seq % KEYS:04d}"
        head = _avro_long_size(len(key)) + len(key) + _avro_long_size(seq)
        size = _payload_size(record_bytes - head)
        payload = payloads.setdefault(size, noise[:size])
        records.append({"key": key, "seq": seq, "payload": payload})
        total += head + size + _avro_long_size(size)
    return records, total


def _key_of(record: dict[str, Any]) -> str:
    return str(record["key"])


class _Verifier:
    """Checks exactly-once delivery: every seq once, in order within each partition."""

    def __init__(self, expected: int, partitions: int) -> None:
        self.expected = expected
        self.last = [-1] * partitions
        self.count = 0
        self.total = 0

    def fail(self, partition: int, seq: int) -> BenchError:
        return BenchError(
            f"partition {partition}: seq {seq} after seq {self.last[partition]} "
            "(duplicate or out of order): exactly-once violated"
        )

    def finish(self) -> None:
        n = self.expected
        if self.count != n or self.total != n * (n - 1) // 2:
            raise BenchError(
                f"read {self.count} records (seq sum {self.total}), expected {n} "
                f"(seq sum {n * (n - 1) // 2}): records lost or duplicated"
            )


# -- Spillway ----------------------------------------------------------------------------


def spillway_write(w: Workload, gate: Gate) -> Span:
    """Write ``w.records`` through a ChannelWriter, committing every ``commit_interval_s``."""
    records, _ = make_records(w.records, w.record_bytes)
    settings = KafkaSettings(w.bootstrap)
    sub = SubtaskId(JobId(w.job), OperatorName("up"), 0)
    producer = TransactionalProducer(
        settings, sub.transactional_id, transaction_timeout_ms=_TXN_TIMEOUT_MS
    )
    producer.start()
    channel = OutputChannel(w.topic, SCHEMA, KeyHash(_key_of, w.partitions), w.partitions)
    writer = ChannelWriter(producer, channel, 0, ChannelSettings())
    gate()
    start = time.monotonic()
    cpu0 = time.process_time()
    next_commit = start + w.commit_interval_s
    transactions = 0
    producer.begin()
    # The subtask runtime hands a writer what one input batch produced; so does this loop.
    for i in range(_CHECK_EVERY, len(records) + _CHECK_EVERY, _CHECK_EVERY):
        writer.write_many(records[i - _CHECK_EVERY : i])
        # What a subtask loop does between input batches: write lingering batches and
        # serve delivery reports.
        writer.tick()
        producer.poll(0)
        now = time.monotonic()
        if now >= next_commit:
            writer.flush_batches()
            producer.commit()
            transactions += 1
            producer.begin()
            next_commit = now + w.commit_interval_s
    writer.end_of_stream()
    producer.commit()
    end = time.monotonic()
    cpu = time.process_time() - cpu0
    producer.close()
    return Span(start, end, w.records, transactions + 1, cpu=cpu)


def spillway_read(w: Workload, gate: Gate) -> Span:
    """Read the channel with a ChannelReader until every writer has sent end-of-stream."""
    settings = KafkaSettings(w.bootstrap)
    sub = SubtaskId(JobId(w.job), OperatorName("down"), 0)
    reader = ChannelReader(
        AssignedConsumer(settings, sub.group_id),
        [InputChannel(w.topic, j, SCHEMA, 1) for j in range(w.partitions)],
    )
    check = _Verifier(w.records, w.partitions)
    messages = 0
    gate()
    start = time.monotonic()
    cpu0 = time.process_time()
    deadline = start + w.timeout_s
    reader.start()
    while not reader.finished():
        if time.monotonic() > deadline:
            raise BenchError(f"Spillway reader saw no end-of-stream within {w.timeout_s:.0f} s")
        for delivery in reader.poll(_MAX_MESSAGES, _POLL_TIMEOUT_S):
            messages += 1
            p = delivery.tp.partition
            last = check.last[p]
            for r in delivery.records:
                seq = r["seq"]
                if seq <= last:
                    raise check.fail(p, seq)
                last = seq
                check.total += seq
            check.last[p] = last
            check.count += len(delivery.records)
    end = time.monotonic()
    cpu = time.process_time() - cpu0
    reader.close()
    check.finish()
    return Span(start, end, check.count, messages=messages, cpu=cpu)


# -- hand-written ------------------------------------------------------------------------


def handwritten_write(w: Workload, gate: Gate) -> Span:
    """One Kafka message per record in a plain begin/produce/commit loop."""
    records, _ = make_records(w.records, w.record_bytes)
    schema = fastavro.parse_schema(SCHEMA)
    producer = Producer(
        {
            "bootstrap.servers": w.bootstrap,
            "transactional.id": f"{w.job}.handwritten",
            "enable.idempotence": True,
            "transaction.timeout.ms": _TXN_TIMEOUT_MS,
            "linger.ms": _LINGER_MS,
        }
    )
    producer.init_transactions(60)
    gate()
    start = time.monotonic()
    cpu0 = time.process_time()
    next_commit = start + w.commit_interval_s
    transactions = 0
    producer.begin_transaction()
    for i, record in enumerate(records, 1):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, schema, record)
        key = record["key"].encode()
        while True:
            try:
                # No delivery callback: commit_transaction() fails if any message did.
                producer.produce(w.topic, buf.getvalue(), key)
                break
            except BufferError:
                producer.poll(0.05)  # local queue full: let librdkafka drain it
        if i % _CHECK_EVERY == 0:
            producer.poll(0)
            now = time.monotonic()
            if now >= next_commit:
                producer.commit_transaction(60)
                transactions += 1
                producer.begin_transaction()
                next_commit = now + w.commit_interval_s
    producer.commit_transaction(60)
    end = time.monotonic()
    cpu = time.process_time() - cpu0
    producer.flush(5)
    return Span(start, end, w.records, transactions + 1, cpu=cpu)


def handwritten_read(w: Workload, gate: Gate) -> Span:
    """A plain read_committed consumer decoding each message, until it has every record.

    It knows how many records to expect instead of waiting for an end marker, which
    gives it a slight edge over Spillway's reader (that needs end-of-stream).
    """
    schema = fastavro.parse_schema(SCHEMA)
    consumer = Consumer(
        {
            # The settings AssignedConsumer uses, minus Spillway's envelope.
            "bootstrap.servers": w.bootstrap,
            "group.id": f"{w.job}.handwritten",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            "enable.partition.eof": False,
            "fetch.wait.max.ms": 100,
        }
    )
    check = _Verifier(w.records, w.partitions)
    messages = 0
    gate()
    start = time.monotonic()
    cpu0 = time.process_time()
    deadline = start + w.timeout_s
    consumer.assign([CkTopicPartition(w.topic, j, 0) for j in range(w.partitions)])
    while check.count < w.records:
        if time.monotonic() > deadline:
            raise BenchError(
                f"hand-written reader got {check.count} of {w.records} records "
                f"within {w.timeout_s:.0f} s"
            )
        for m in consumer.consume(_MAX_MESSAGES, _POLL_TIMEOUT_S):
            err = m.error()
            if err is not None:
                raise BenchError(f"hand-written reader: {err.name()}: {err.str()}")
            value = m.value()
            assert isinstance(value, bytes)
            decoded: Any = fastavro.schemaless_reader(io.BytesIO(value), schema, None)
            seq = decoded["seq"]
            p = m.partition() or 0
            if seq <= check.last[p]:
                raise check.fail(p, seq)
            check.last[p] = seq
            check.total += seq
            check.count += 1
            messages += 1
    end = time.monotonic()
    cpu = time.process_time() - cpu0
    consumer.close()
    check.finish()
    return Span(start, end, check.count, messages=messages, cpu=cpu)


@dataclass(frozen=True)
class Variant:
    """One way of moving records from a writer to a reader."""

    name: str
    tag: str  # short form for job ids
    write: Role
    read: Role


SPILLWAY = Variant("Spillway", "spw", spillway_write, spillway_read)
HANDWRITTEN = Variant("hand-written", "hand", handwritten_write, handwritten_read)
VARIANTS = (SPILLWAY, HANDWRITTEN)


# -- processes ---------------------------------------------------------------------------


def _child(
    index: int,
    role: Role,
    w: Workload,
    barrier: multiprocessing.synchronize.Barrier | None,
    results: multiprocessing.queues.Queue[tuple[int, str, Any]],
) -> None:
    """Run one role in a spawned process and report its span (as a dict) or its traceback."""
    try:
        gate: Gate = (lambda: barrier.wait(60)) if barrier is not None else _no_gate
        # A plain dict crosses the process boundary: under ``python -m`` the child's
        # copy of this module is ``__mp_main__``, whose classes the parent cannot unpickle.
        results.put((index, "ok", asdict(role(w, gate))))
    except BaseException:
        results.put((index, "error", traceback.format_exc()))


def run_roles(roles: Sequence[Role], w: Workload, *, concurrent: bool) -> list[Span]:
    """Run each role in its own spawned process; concurrently (released together) or in turn.

    Processes are spawned, not forked: forking a process that already runs librdkafka
    threads is unsafe, and a fresh interpreter per pass means no pass inherits the heap
    of an earlier one.
    """
    ctx = multiprocessing.get_context("spawn")
    results: multiprocessing.queues.Queue[tuple[int, str, Any]] = ctx.Queue()
    barrier = ctx.Barrier(len(roles)) if concurrent else None
    procs = [
        ctx.Process(target=_child, args=(i, role, w, barrier, results), daemon=True)
        for i, role in enumerate(roles)
    ]
    spans: dict[int, Span] = {}
    try:
        if concurrent:
            for p in procs:
                p.start()
            spans.update(_collect(procs, results, len(procs), w.timeout_s + 120))
        else:
            for p in procs:
                p.start()
                spans.update(_collect([p], results, 1, w.timeout_s + 120))
                p.join(30)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
            p.join(10)
    return [spans[i] for i in range(len(roles))]


def _collect(
    procs: Sequence[multiprocessing.process.BaseProcess],
    results: multiprocessing.queues.Queue[tuple[int, str, Any]],
    count: int,
    timeout_s: float,
) -> dict[int, Span]:
    spans: dict[int, Span] = {}
    deadline = time.monotonic() + timeout_s
    while len(spans) < count:
        try:
            index, status, payload = results.get(timeout=1.0)
        except queue.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise BenchError(
                    f"benchmark process died with exit code {dead[0].exitcode}"
                ) from None
            if time.monotonic() > deadline:
                raise BenchError(f"benchmark pass did not finish in {timeout_s:.0f} s") from None
            continue
        if status != "ok":
            raise BenchError(f"benchmark process failed:\n{payload}")
        spans[index] = Span(**payload)
    return spans


# -- one run -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """The command line, validated."""

    bootstrap: str
    runs: int
    records: int
    record_bytes: int
    partitions: int
    commit_interval_s: float
    warmup_records: int
    concurrent: bool
    timeout_s: float
    profile: bool


def _workload(s: Settings, job: str, records: int) -> Workload:
    return Workload(
        bootstrap=s.bootstrap,
        job=job,
        topic=channel_topic(JobId(job), OperatorName("up"), OperatorName("down")),
        partitions=s.partitions,
        records=records,
        record_bytes=s.record_bytes,
        commit_interval_s=s.commit_interval_s,
        timeout_s=s.timeout_s,
    )


@contextlib.contextmanager
def _fresh_topic(admin: Admin, w: Workload) -> Iterator[None]:
    """Create the pass's topic; delete every topic of its job afterwards, also on failure."""
    _create_topic(admin, TopicSpec(w.topic, w.partitions))
    try:
        yield
    finally:
        admin.delete_job_topics(JobId(w.job))


def _create_topic(admin: Admin, spec: TopicSpec, wait_s: float = 15.0) -> None:
    """``ensure_topics``, tolerating a broker whose metadata does not list a new topic yet.

    ``Admin.ensure_topics`` checks the partition count right after creating the topic,
    and the broker can answer that metadata request before the topic is in it
    ("has None partitions"). A real mismatch is still raised.
    """
    try:
        admin.ensure_topics([spec])
        return
    except TopologyMismatchError:
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            count = admin.partition_counts().get(spec.name)
            if count == spec.partitions:
                return
            if count is not None:
                raise
            time.sleep(0.1)
        raise


def measure_variant(
    admin: Admin, s: Settings, variant: Variant, job: str, records: int
) -> dict[str, Any]:
    """Write phase, read phase and (optionally) concurrent end-to-end of one variant."""
    seq = _workload(s, f"{job}-s", records)
    with _fresh_topic(admin, seq):
        (write,) = run_roles([variant.write], seq, concurrent=False)
        (read,) = run_roles([variant.read], seq, concurrent=False)
    out: dict[str, Any] = {"write": asdict(write), "read": asdict(read)}
    if s.concurrent:
        conc = _workload(s, f"{job}-c", records)
        with _fresh_topic(admin, conc):
            cw, cr = run_roles([variant.write, variant.read], conc, concurrent=True)
        out["concurrent_write"] = asdict(cw)
        out["concurrent_read"] = asdict(cr)
    return out


def figures(result: dict[str, Any], payload_bytes: int) -> dict[str, float]:
    """Records/s and MB/s (10^6 bytes of encoded records) of each phase of one pass."""
    write = Span(**result["write"])
    read = Span(**result["read"])
    seconds = {
        "write": write.seconds,
        "read": read.seconds,
        # A batch hand-off: the reader starts once the writer is done.
        "e2e sequential": write.seconds + read.seconds,
    }
    if "concurrent_read" in result:
        cw = Span(**result["concurrent_write"])
        cr = Span(**result["concurrent_read"])
        seconds["e2e concurrent"] = cr.end - cw.start
    out: dict[str, float] = {}
    for phase, secs in seconds.items():
        out[f"{phase} rec/s"] = rate(write.records, secs)
        out[f"{phase} MB/s"] = rate(payload_bytes / 1e6, secs)
    # Records per CPU-second of the client processes (writer + reader); absent in results
    # written before the spans carried CPU time.
    if write.cpu and read.cpu:
        out["write rec/CPU-s"] = rate(write.records, write.cpu)
        out["read rec/CPU-s"] = rate(write.records, read.cpu)
    if "concurrent_read" in result and cw.cpu and cr.cpu:
        out["e2e concurrent rec/CPU-s"] = rate(write.records, cw.cpu + cr.cpu)
    return out


# -- report ------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    """What the figures depend on besides the code: CPUs, memory, versions, commit."""
    cpu = "unknown"
    mem_kib = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    commit = "unknown"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        root = Path(__file__).resolve().parent.parent
        git = ["git", "-C", str(root)]
        commit = subprocess.run(
            [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--", "channels"], capture_output=True, text=True
        ).stdout.strip()
        commit += " (channels/ modified)" if dirty else ""
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu,
        "mem_gib": round(mem_kib / 2**20, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "confluent_kafka": importlib.metadata.version("confluent-kafka"),
        "librdkafka": confluent_kafka.libversion()[0],
        "fastavro": fastavro.__version__,
        "git": commit,
        # Other work on the machine skews every figure; the load shows whether there was any.
        "loadavg_1m_5m_15m": [round(x, 2) for x in os.getloadavg()],
    }


def _fmt(value: float, unit: str) -> str:
    if unit in ("rec/s", "rec/CPU-s"):
        return f"{value:,.0f}"
    if unit == "ratio":
        return f"{value:.2f}×"
    return f"{value:.2f}"


def _cell(sp: Spread, unit: str) -> str:
    return f"{_fmt(sp.median, unit)} [{_fmt(sp.low, unit)}–{_fmt(sp.high, unit)}]"


def summarise(runs: list[dict[str, Any]], payload_bytes: int) -> dict[str, dict[str, Spread]]:
    """Per figure: the spread of each variant and of the per-run Spillway/hand-written ratio."""
    per_run = [{v.name: figures(run[v.name], payload_bytes) for v in VARIANTS} for run in runs]
    out: dict[str, dict[str, Spread]] = {}
    for name in per_run[0][SPILLWAY.name]:
        spw = [r[SPILLWAY.name][name] for r in per_run]
        hand = [r[HANDWRITTEN.name][name] for r in per_run]
        out[name] = {
            SPILLWAY.name: spread(spw),
            HANDWRITTEN.name: spread(hand),
            "ratio": spread(ratios(spw, hand)),
        }
    return out


def table(summary: dict[str, dict[str, Spread]]) -> str:
    """The summary as a fixed-width table: median [min–max] per cell."""
    head = ["phase", "unit", SPILLWAY.name, HANDWRITTEN.name, "Spillway/hand-written"]
    rows = [head]
    for name, cells in summary.items():
        phase, unit = name.rsplit(" ", 1)
        rows.append(
            [
                phase,
                unit,
                _cell(cells[SPILLWAY.name], unit),
                _cell(cells[HANDWRITTEN.name], unit),
                _cell(cells["ratio"], "ratio"),
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = []
    for n, r in enumerate(rows):
        left = [c.ljust(w) for c, w in zip(r[:2], widths[:2], strict=True)]
        right = [c.rjust(w) for c, w in zip(r[2:], widths[2:], strict=True)]
        lines.append("  ".join(left + right))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def header(s: Settings, info: dict[str, Any], broker_source: str, payload_bytes: int) -> str:
    """What was measured, where, and how."""
    warm = (
        f" (+1 warm-up pass of {s.warmup_records:,} records per variant, discarded)"
        if s.warmup_records
        else ""
    )
    return "\n".join(
        [
            "Spillway channel vs hand-written transactional loop — "
            + datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
            f"machine : nproc {info['nproc']} ({info['cpu_model']}), {info['mem_gib']} GiB RAM, "
            f"Linux {info['kernel']}, load average {info['loadavg_1m_5m_15m']} at start",
            f"software: Python {info['python']}, confluent-kafka {info['confluent_kafka']}, "
            f"librdkafka {info['librdkafka']}, fastavro {info['fastavro']}, git {info['git']}",
            f"broker  : {s.bootstrap} ({broker_source})",
            f"workload: {s.records:,} records × {payload_bytes / s.records:.1f} B Avro "
            f"{{key: string, seq: long, payload: bytes}} = {payload_bytes / 1e6:.1f} MB per pass; "
            f"1 writer → {s.partitions} partition(s) → 1 reader; exactly-once, "
            f"commit every {s.commit_interval_s:g} s",
            f"runs    : {s.runs}{warm}; variants alternate order from run to run; median [min–max]",
        ]
    )


NOTES = """\
How it was measured:
  Spillway        ChannelWriter (keyed edge, ChannelSettings defaults: 256 KiB batches,
                  50 ms linger) over TransactionalProducer; ChannelReader over
                  AssignedConsumer (read_committed), read until end-of-stream.
  hand-written    confluent-kafka Producer, one Kafka message per record: value = the same
                  Avro record (fastavro, encoded as Spillway encodes it), key = record key;
                  idempotent, linger.ms=5 like TransactionalProducer. Plain read_committed
                  Consumer decoding every value; it stops after N records (no end marker).
  both            commit when >= 1 s has passed (clock checked every 256 records); readers
                  poll up to 2000 messages / 50 ms, like the subtask runtime.
  write           first record → last commit_transaction returned (commits included).
  read            assign → last record, on the complete topic of the write phase.
  e2e sequential  N / (write + read): a batch hand-off.
  e2e concurrent  writer and reader in two processes released together → reader has the
                  last record. They share the CPUs with each other and with the broker.
  Every pass runs in fresh processes on a fresh topic (deleted afterwards); every read
  verifies exactly-once (N records, seq strictly increasing per partition, seq sum).
  MB = 10^6 bytes of Avro-encoded records (Kafka framing and Spillway's envelope excluded)."""


def profile(admin: Admin, s: Settings, job: str) -> str:
    """cProfile of the Spillway writer's and reader's measured loops (top 10 by own time)."""
    w = _workload(s, job, s.records)
    parts = []
    with _fresh_topic(admin, w):
        for label, role in (("writer", SPILLWAY.write), ("reader", SPILLWAY.read)):
            prof = cProfile.Profile()
            # The gate starts the profiler, so set-up (records, producer init) is left out.
            span = role(w, prof.enable)
            prof.disable()
            parts.append(_top(prof, f"Spillway {label}", span))
    return "\n\n".join(parts)


def _top(prof: cProfile.Profile, label: str, span: Span, n: int = 10) -> str:
    stats = pstats.Stats(prof)
    entries: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]  # untyped in typeshed
    rows = sorted(entries.items(), key=lambda kv: kv[1][2], reverse=True)[:n]
    total = sum(v[2] for v in entries.values())
    lines = [
        f"{label}: {span.records:,} records in {span.seconds:.2f} s under cProfile "
        f"(profiled: {total:.2f} s); top {n} by own time",
        f"{'own s':>7} {'own %':>6} {'cum s':>7} {'calls':>10}  function",
    ]
    for (file, line, func), (_cc, calls, tottime, cumtime, _callers) in rows:
        where = func if file == "~" else f"{func} ({_short_path(file)}:{line})"
        lines.append(
            f"{tottime:7.2f} {100 * tottime / total:5.1f}% {cumtime:7.2f} {calls:10,}  {where}"
        )
    return "\n".join(lines)


def _short_path(file: str) -> str:
    for marker in ("site-packages/", f"{Path(__file__).resolve().parents[1]}/", "lib/python3"):
        if marker in file:
            return file.split(marker, 1)[1]
    return Path(file).name


# -- command line ------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> tuple[Settings, str | None]:
    """Validated settings, and the explicit broker address if one was given."""
    p = argparse.ArgumentParser(prog="python -m bench.channels", description=__doc__.split("\n")[0])
    p.add_argument(
        "--bootstrap",
        help=f"broker HOST:PORT (default: ${BOOTSTRAP_ENV}, else start a throw-away local broker)",
    )
    p.add_argument("--runs", type=int, default=5, help="measured runs (default 5)")
    p.add_argument("--records", type=int, default=300_000, help="records per pass (300000)")
    p.add_argument("--record-bytes", type=int, default=200, help="Avro size of a record (200)")
    p.add_argument("--partitions", type=int, default=1, help="channel partitions (1)")
    p.add_argument("--commit-interval", type=float, default=1.0, help="seconds (1.0)")
    p.add_argument(
        "--warmup-records",
        type=int,
        default=None,
        help="records of the discarded warm-up pass (default records/10; 0: none)",
    )
    p.add_argument(
        "--no-concurrent", action="store_true", help="skip the concurrent end-to-end pass"
    )
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per role (120)")
    p.add_argument(
        "--profile",
        action="store_true",
        help="also cProfile the Spillway writer and reader and print the top 10",
    )
    a = p.parse_args(argv)
    if a.runs < 1 or a.records < 1 or a.partitions < 1:
        p.error("--runs, --records and --partitions must be at least 1")
    if not 32 <= a.record_bytes <= 100_000:
        p.error("--record-bytes must be between 32 and 100000")
    if not 0 < a.commit_interval <= 30:
        p.error("--commit-interval must be in (0, 30] seconds (transaction timeout is 60 s)")
    explicit = a.bootstrap or os.environ.get(BOOTSTRAP_ENV) or None
    settings = Settings(
        bootstrap=explicit or "",
        runs=a.runs,
        records=a.records,
        record_bytes=a.record_bytes,
        partitions=a.partitions,
        commit_interval_s=a.commit_interval,
        warmup_records=a.records // 10 if a.warmup_records is None else a.warmup_records,
        concurrent=not a.no_concurrent,
        timeout_s=a.timeout,
        profile=a.profile,
    )
    source = "--bootstrap" if a.bootstrap else (f"${BOOTSTRAP_ENV}" if explicit else None)
    return settings, source


def start_local_broker(stack: contextlib.ExitStack) -> str:
    """Start a throw-away broker in a temporary directory; ``stack`` stops and removes it.

    Its own directory and free ports: it never touches a developer's broker
    (``.spillway/broker``) or anything else listening on this machine.
    """
    try:
        from spillway.devtools.localbroker import BrokerConfig, LocalBroker, free_ports
    except ImportError as e:
        raise BenchError(
            f"cannot start a local broker ({e}); pass --bootstrap HOST:PORT or set {BOOTSTRAP_ENV}"
        ) from e
    data_dir = Path(tempfile.mkdtemp(prefix="spillway-bench-broker-"))
    stack.callback(shutil.rmtree, data_dir, ignore_errors=True)
    port, controller_port = free_ports(2)
    broker = LocalBroker(BrokerConfig(data_dir, port=port, controller_port=controller_port))
    print(f"starting a local broker in {data_dir} ...", file=sys.stderr, flush=True)
    broker.start()
    stack.callback(broker.stop)
    return broker.bootstrap


def run(s: Settings, broker_source: str) -> int:
    """Warm up, measure, print the table, write the JSON. Returns the exit code."""
    admin = Admin(KafkaSettings(s.bootstrap))
    admin.check_reachable()
    records, payload_bytes = make_records(s.records, s.record_bytes)
    _check_sizes(records, s.record_bytes)
    del records  # each pass builds its own, in its own process
    info = machine()
    started = datetime.now(UTC)
    prefix = f"bench-{started:%Y%m%dT%H%M%SZ}-{secrets.token_hex(2)}"
    print(header(s, info, broker_source, payload_bytes), flush=True)

    if s.warmup_records:
        for v in VARIANTS:
            measure_variant(admin, s, v, f"{prefix}-w-{v.tag}", s.warmup_records)
    runs: list[dict[str, Any]] = []
    for i in range(s.runs):
        # Alternate the order so neither variant always runs on a broker the other warmed.
        order = VARIANTS if i % 2 == 0 else VARIANTS[::-1]
        t0 = time.monotonic()
        result: dict[str, Any] = {
            v.name: measure_variant(admin, s, v, f"{prefix}-r{i}-{v.tag}", s.records) for v in order
        }
        result["order"] = [v.name for v in order]
        runs.append(result)
        print(f"  run {i + 1}/{s.runs} done in {time.monotonic() - t0:.1f} s", file=sys.stderr)

    summary = summarise(runs, payload_bytes)
    print()
    print(table(summary))
    print()
    print(NOTES)
    path = _write_json(s, info, broker_source, started, payload_bytes, runs, summary)
    print(f"\nraw results: {path}")
    if s.profile:
        print()
        print(profile(admin, s, f"{prefix}-prof"))
    return 0


def _check_sizes(records: list[dict[str, Any]], record_bytes: int) -> None:
    # The size arithmetic in make_records must agree with fastavro, or MB/s is wrong.
    schema = fastavro.parse_schema(SCHEMA)
    # Indices where the varint of seq changes width.
    for i in sorted({0, 63, 64, 8191, 8192, len(records) - 1}):
        if i >= len(records):
            continue
        r = records[i]
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, schema, r)
        if abs(len(buf.getvalue()) - record_bytes) > 1:
            raise BenchError(
                f"record seq {r['seq']} encodes to {len(buf.getvalue())} bytes, "
                f"expected {record_bytes}"
            )


def _write_json(
    s: Settings,
    info: dict[str, Any],
    broker_source: str,
    started: datetime,
    payload_bytes: int,
    runs: list[dict[str, Any]],
    summary: dict[str, dict[str, Spread]],
) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"channels-{started:%Y%m%dT%H%M%SZ}.json"
    doc = {
        "format": 1,
        "started_utc": started.isoformat(),
        "machine": info,
        "broker": {"bootstrap": s.bootstrap, "source": broker_source},
        "settings": asdict(s),
        "payload_bytes": payload_bytes,
        "runs": [
            {**run, "figures": {v.name: figures(run[v.name], payload_bytes) for v in VARIANTS}}
            for run in runs
        ],
        "summary": {
            name: {k: asdict(sp) for k, sp in cells.items()} for name, cells in summary.items()
        },
    }
    # Written to a temporary name first, so an interrupted run leaves no truncated result.
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.replace(path)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m bench.channels``."""
    settings, source = parse_args(argv)
    try:
        with contextlib.ExitStack() as stack:
            if source is None:
                bootstrap = start_local_broker(stack)
                settings = replace(settings, bootstrap=bootstrap)
                source = "local broker started by this benchmark, stopped at the end"
            return run(settings, source)
    except (BenchError, SpillwayError) as e:
        print(f"bench.channels: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
