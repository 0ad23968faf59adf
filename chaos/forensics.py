"""After a failed chaos run: which stage committed a record twice, and what the broker's
log says about the transactions around it.

``python -m chaos.forensics RUNDIR`` restarts the run's broker on its own directory and
ports (RUNDIR holds ``broker/``; the run's test keeps it while pytest keeps the tmp dir),
then prints, for the output topic and each channel of the chaos job, the records seen
more than once by a ``read_committed`` reader (where each copy sits and which writer
wrote it). ``python -m chaos.forensics --batches SEGMENT.log FIRST LAST`` prints the record
batches of one stopped broker's log segment between two offsets: producer id and epoch,
transactional or not, and each control record's type (COMMIT or ABORT); that tells a
transaction left open on a partition (no marker after its data) from one aborted late.
``python -m chaos.forensics --txn-state DATA_DIR ID`` prints, from a stopped broker's
``__transaction_state`` logs, every state the coordinator recorded for the transactional ids
containing ``ID``: producer id and epoch, state, and the partitions of the transaction
(which partitions a PrepareAbort or PrepareCommit promised markers to).
"""

from __future__ import annotations

import argparse
import json
import re
import struct
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from confluent_kafka import Consumer, Message
from confluent_kafka import TopicPartition as CkTopicPartition

from chaos.pipeline import RECORD, UPDATE, WEIGHED
from spillway.channels.wire.envelope import Kind, decode_data, read_kind, writer_of
from spillway.devtools.localbroker import BrokerConfig, LocalBroker

_LISTENERS = re.compile(r"listeners=PLAINTEXT://127\.0\.0\.1:(\d+),CONTROLLER://127\.0\.0\.1:(\d+)")
_CONTROL = {0: "ABORT", 1: "COMMIT"}
_TXN_STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
               "CompleteAbort", "Dead", "PrepareEpochFence")  # fmt: skip


@dataclass(frozen=True)
class Batch:
    """One record batch of a log segment (Kafka's on-disk format, magic 2)."""

    first: int
    last: int
    producer_id: int
    epoch: int
    transactional: bool
    control: str  # "COMMIT", "ABORT", or "" for data
    leader_epoch: int


def batches(segment: bytes) -> Iterator[Batch]:
    """The record batches of a log segment's bytes, in offset order."""
    for b, base in _raw_batches(segment):
        leader_epoch = struct.unpack(">i", b[12:16])[0]
        attrs = struct.unpack(">h", b[21:23])[0]
        last_delta = struct.unpack(">i", b[23:27])[0]
        pid, epoch = struct.unpack(">qh", b[43:53])
        control = ""
        if attrs & 0x20:  # a control batch: its one record's key is (version, type)
            _, j = _varint(b, 61)  # record length
            _, j = _varint(b, j + 1)  # past the attributes byte: timestamp delta
            _, j = _varint(b, j)  # offset delta
            _, j = _varint(b, j)  # key length
            control = _CONTROL.get(struct.unpack(">hh", b[j : j + 4])[1], "?")
        yield Batch(base, base + last_delta, pid, epoch, bool(attrs & 0x10), control, leader_epoch)


@dataclass(frozen=True)
class TxnState:
    """One record of the transaction coordinator's log (``__transaction_state``)."""

    offset: int
    time_ms: int
    transactional_id: str
    producer_id: int
    epoch: int
    state: str
    partitions: tuple[tuple[str, tuple[int, ...]], ...]


def _varint(b: bytes, i: int, zigzag: bool = True) -> tuple[int, int]:
    shift = result = 0
    while True:
        x = b[i]
        i += 1
        result |= (x & 0x7F) << shift
        if not x & 0x80:
            break
        shift += 7
    return ((result >> 1) ^ -(result & 1) if zigzag else result), i


def txn_states(segment: bytes, want: str) -> Iterator[TxnState]:
    """The records of a ``__transaction_state`` log segment whose transactional id
    contains ``want`` (value versions 0 and 1; uncompressed batches)."""
    for b, base in _raw_batches(segment):
        if struct.unpack(">h", b[21:23])[0] & 0x07:  # compressed: its records are not read
            continue
        time_ms = struct.unpack(">q", b[27:35])[0]
        count = struct.unpack(">i", b[57:61])[0]
        j = 61
        for _ in range(count):
            length, j = _varint(b, j)
            end = j + length
            j += 1  # attributes
            _, j = _varint(b, j)  # timestamp delta
            delta, j = _varint(b, j)
            klen, j = _varint(b, j)
            key = b[j : j + klen]
            j += klen
            vlen, j = _varint(b, j)
            value = b[j : j + vlen] if vlen >= 0 else None
            j = end
            tid = key[4 : 4 + struct.unpack(">h", key[2:4])[0]].decode()
            if want in tid and value is not None:
                yield _txn_state(base + delta, time_ms, tid, value)


def _raw_batches(segment: bytes) -> Iterator[tuple[bytes, int]]:
    """Each batch's bytes (from its base offset field on) and its base offset."""
    i = 0
    while i + 61 <= len(segment):
        base, length = struct.unpack(">qi", segment[i : i + 12])
        if length <= 0:
            return
        yield segment[i : i + 12 + length], base
        i += 12 + length


def _txn_state(offset: int, time_ms: int, tid: str, v: bytes) -> TxnState:
    version = struct.unpack(">h", v[:2])[0]
    pid, epoch, _timeout, state = struct.unpack(">qhib", v[2:17])
    k = 17
    parts: list[tuple[str, tuple[int, ...]]] = []
    if version == 0:
        n = struct.unpack(">i", v[k : k + 4])[0]
        k += 4
    else:  # flexible: compact arrays and strings (length + 1), tagged fields
        n, k = _varint(v, k, zigzag=False)
        n -= 1
    for _ in range(max(n, 0)):
        if version == 0:
            tlen = struct.unpack(">h", v[k : k + 2])[0]
            k += 2
        else:
            tlen, k = _varint(v, k, zigzag=False)
            tlen -= 1
        topic = v[k : k + tlen].decode()
        k += tlen
        if version == 0:
            m = struct.unpack(">i", v[k : k + 4])[0]
            k += 4
        else:
            m, k = _varint(v, k, zigzag=False)
            m -= 1
        ids = struct.unpack(f">{m}i", v[k : k + 4 * m])
        k += 4 * m
        if version != 0:
            _, k = _varint(v, k, zigzag=False)  # tagged fields
        parts.append((topic, tuple(sorted(ids))))
    name = _TXN_STATES[state] if 0 <= state < len(_TXN_STATES) else str(state)
    return TxnState(offset, time_ms, tid, pid, epoch, name, tuple(parts))


def _read_all(consumer: Consumer, topic: str, partitions: list[int]) -> Iterator[Message]:
    for p in partitions:
        low, high = consumer.get_watermark_offsets(CkTopicPartition(topic, p), timeout=10)
        if high <= low:
            continue
        consumer.assign([CkTopicPartition(topic, p, low)])
        while True:
            got = consumer.consume(500, 2.0)
            if not got:
                break
            yield from (m for m in got if m.error() is None)
            if (got[-1].offset() or 0) >= high - 1:
                break


def repeats(bootstrap: str) -> dict[str, dict[Any, list[tuple[int, int, int]]]]:
    """Per topic of the chaos job (output and channels), the records read more than once
    (``read_committed``), each with its copies' (partition, offset, writer)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "chaos-forensics",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        topics = consumer.list_topics(timeout=10).topics
        out_topic = next(t for t in topics if t.endswith(".out"))
        job = out_topic.removesuffix(".out")
        found: dict[str, dict[Any, list[tuple[int, int, int]]]] = {}
        seen: dict[Any, list[tuple[int, int, int]]] = defaultdict(list)
        for m in _read_all(consumer, out_topic, list(topics[out_topic].partitions)):
            r = json.loads(m.value() or b"{}")
            seen[(r["key"], r["seq"], r["n"])].append((m.partition() or 0, m.offset() or 0, -1))
        found[out_topic] = {k: v for k, v in seen.items() if len(v) > 1}
        for edge, schema in (("gen.weigh", RECORD), ("weigh.fold", WEIGHED), ("fold.sink", UPDATE)):
            topic = f"spillway.{job}.ch.{edge}"
            seen = defaultdict(list)
            for m in _read_all(consumer, topic, list(topics[topic].partitions)):
                headers = cast(list[tuple[str, bytes | None]], m.headers() or [])
                if read_kind(headers) is not Kind.DATA:
                    continue
                for r in decode_data(headers, m.value() or b"", schema):
                    key = (r["key"], r["seq"], r.get("n"))
                    seen[key].append((m.partition() or 0, m.offset() or 0, writer_of(m.key())))
            found[topic] = {k: v for k, v in seen.items() if len(v) > 1}
        return found
    finally:
        consumer.close()


def _restart(rundir: Path) -> LocalBroker:
    props = (rundir / "broker" / "server.properties").read_text()
    match = _LISTENERS.search(props)
    if match is None:
        raise SystemExit(f"no listeners in {rundir / 'broker' / 'server.properties'}")
    port, controller = (int(g) for g in match.groups())
    broker = LocalBroker(BrokerConfig(rundir / "broker", port, controller), start_timeout=300)
    broker.start()
    time.sleep(8.0)  # leaders elected, transaction state loaded
    return broker


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m chaos.forensics", description=__doc__)
    ap.add_argument("rundir", nargs="?", type=Path)
    ap.add_argument("--batches", nargs=3, metavar=("SEGMENT", "FIRST", "LAST"))
    ap.add_argument("--txn-state", nargs=2, metavar=("DATA_DIR", "ID"))
    args = ap.parse_args(argv)
    if args.txn_state:
        data_dir, want = Path(args.txn_state[0]), args.txn_state[1]
        for log in sorted(data_dir.glob("__transaction_state-*/*.log")):
            for t in txn_states(log.read_bytes(), want):
                when = time.strftime("%H:%M:%S", time.gmtime(t.time_ms / 1000))
                who = f"{t.transactional_id} producer {t.producer_id} epoch {t.epoch}"
                print(f"{log.parent.name}@{t.offset} {when} {who} {t.state} {t.partitions}")
        return 0
    if args.batches:
        path, first, last = Path(args.batches[0]), int(args.batches[1]), int(args.batches[2])
        for b in batches(path.read_bytes()):
            if b.last >= first and b.first <= last:
                print(b)
        return 0
    if args.rundir is None:
        ap.error("give RUNDIR or --batches")
    broker = _restart(args.rundir)
    try:
        for topic, dups in repeats(broker.bootstrap).items():
            print(f"{topic}: {len(dups)} records more than once")
            for key, copies in sorted(dups.items())[:12]:
                print(f"  {key}: {copies}")
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
