"""The soak's measurements: a job's processes from ``/proc`` (RSS, open file
descriptors, kind) and its broker's topics (bytes on disk, offsets retained).

I/O only; what the numbers mean is :mod:`chaos.soakstats`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    OffsetSpec,
)

from chaos.soakstats import (
    Sample,
    TopicSize,
    add_partition,
    classify,
    partition_dir_topic,
    topic_group,
)
from spillway.channels.config import KafkaSettings


@dataclass(frozen=True)
class Proc:
    """One process as ``/proc`` shows it."""

    pid: int
    ppid: int
    session: int
    cmdline: tuple[str, ...]


def _read_proc(pid: int) -> Proc | None:
    """``None`` when the process is gone (or never readable)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    cmd = tuple(a.decode(errors="replace") for a in raw.split(b"\0") if a)
    return Proc(pid, int(fields[1]), int(fields[3]), cmd)


def _all_procs() -> Iterator[Proc]:
    for name in os.listdir("/proc"):
        if name.isdigit():
            p = _read_proc(int(name))
            if p is not None:
                yield p


def _rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0  # gone, or a kernel thread


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def sample_processes(
    session: int, broker_pid: int | None
) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """RSS bytes, process count and open file descriptors per process kind, over every
    process of the driver's ``session`` and the broker's process ``broker_pid``."""
    procs = {p.pid: p for p in _all_procs()}
    rss: dict[str, int] = {}
    count: dict[str, int] = {}
    fds: dict[str, int] = {}
    for p in procs.values():
        broker = p.pid == broker_pid
        if not broker and p.session != session:
            continue
        parent = procs.get(p.ppid)
        kind = classify(p.cmdline, parent.cmdline if parent else (), broker)
        rss[kind] = rss.get(kind, 0) + _rss_bytes(p.pid)
        count[kind] = count.get(kind, 0) + 1
        fds[kind] = fds.get(kind, 0) + _fds(p.pid)
    return rss, count, fds


def disk_bytes(log_dirs: Path) -> dict[str, int]:
    """Per topic, the bytes of its segment files (``*.log``) in the broker's data directory."""
    out: dict[str, int] = {}
    for d in log_dirs.iterdir() if log_dirs.is_dir() else ():
        topic = partition_dir_topic(d.name)
        if topic is None or not d.is_dir():
            continue
        size = 0
        for f in d.glob("*.log"):
            with contextlib.suppress(OSError):  # a segment deleted while we looked
                size += f.stat().st_size
        out[topic] = out.get(topic, 0) + size
    return out


class TopicProbe:
    """Offsets and disk usage of every topic on one broker, grouped by topic role."""

    def __init__(self, settings: KafkaSettings, log_dirs: Path) -> None:
        self._admin = AdminClient(settings.base())
        self._log_dirs = log_dirs

    def sizes(self) -> dict[str, TopicSize]:
        """Per :class:`~chaos.soakstats.TopicGroup`: bytes on disk and offsets retained."""
        meta = self._admin.list_topics(timeout=30).topics
        tps = [CkTopicPartition(t, p) for t in meta for p in meta[t].partitions]
        start = self._offsets(tps, OffsetSpec.earliest())  # type: ignore[no-untyped-call]
        end = self._offsets(tps, OffsetSpec.latest())  # type: ignore[no-untyped-call]
        disk = disk_bytes(self._log_dirs)
        out: dict[str, TopicSize] = {}
        counted: set[str] = set()
        for (topic, part), lo in sorted(start.items()):
            g = topic_group(topic)
            # A topic's bytes on disk count once, with its first partition.
            on_disk = disk.get(topic, 0) if topic not in counted else 0
            counted.add(topic)
            out[g] = add_partition(out.get(g, TopicSize()), on_disk, lo, end[(topic, part)])
        return out

    def _offsets(self, tps: list[CkTopicPartition], spec: OffsetSpec) -> dict[tuple[str, int], int]:
        futs = self._admin.list_offsets({tp: spec for tp in tps}, request_timeout=30)
        return {(k.topic, k.partition): int(f.result().offset) for k, f in futs.items()}


def sample(t: float, session: int, broker_pid: int | None, topics: TopicProbe | None) -> Sample:
    """Everything measured at ``t`` seconds into the run (topics only with a probe)."""
    rss, count, fds = sample_processes(session, broker_pid)
    return Sample(t, rss, count, fds, topics.sizes() if topics is not None else {})
