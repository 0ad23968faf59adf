"""The soak's bookkeeping: samples of processes and topics in, per-kind series and the
summary out (growth after warm-up, topic sizes, file descriptors).

Pure: reading ``/proc``, the broker's data directory and offsets is :mod:`chaos.soak`.
"""

from __future__ import annotations

import enum
import itertools
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from spillway.channels.ids import JobId, OperatorName
from spillway.channels.naming import PREFIX, changelog_topic, channel_topic, checkpoint_topic


class ProcessKind(enum.StrEnum):
    """What a sampled process is, from its command line and its parent's."""

    DRIVER_PYTHON = "driver-python"  # `spillway run`
    DRIVER_JVM = "driver-jvm"  # Spark in local mode: driver and executors in one JVM
    PYTHON_DAEMON = "python-daemon"  # Spark's Python daemon, which forks the workers
    PYTHON_WORKER = "python-worker"  # a forked worker: runs one subtask at a time
    BROKER_JVM = "broker-jvm"
    OTHER = "other"


class TopicGroup(enum.StrEnum):
    """A topic's role, by the project's naming (:mod:`spillway.channels.naming`)."""

    CHECKPOINT = "checkpoint"
    CHANGELOG = "changelog"
    CHANNELS = "channels"
    OTHER = "other"  # events, heartbeats, the output, Kafka's internal topics


def _kind_token(name: str) -> str:
    # The third dot-separated part names the kind: take it from the naming functions
    # themselves, so a renamed kind cannot go unnoticed here.
    return name.split(".")[2]


_J, _A, _B = JobId("j"), OperatorName("a"), OperatorName("b")
_GROUPS = {
    _kind_token(checkpoint_topic(_J, _A)): TopicGroup.CHECKPOINT,
    _kind_token(changelog_topic(_J, _A)): TopicGroup.CHANGELOG,
    _kind_token(channel_topic(_J, _A, _B)): TopicGroup.CHANNELS,
}


def topic_group(topic: str) -> TopicGroup:
    """The group of ``topic``: a job's checkpoint, changelog or channel topic, else other."""
    parts = topic.split(".")
    if len(parts) < 4 or parts[0] != PREFIX:
        return TopicGroup.OTHER
    return _GROUPS.get(parts[2], TopicGroup.OTHER)


def partition_dir_topic(dirname: str) -> str | None:
    """The topic of a broker log directory ``<topic>-<partition>``; ``None`` for any other
    directory (a deleted partition's ``...-delete``, the metadata log's own)."""
    topic, sep, part = dirname.rpartition("-")
    return topic if sep and topic and part.isdigit() else None


def classify(cmdline: Sequence[str], parent_cmdline: Sequence[str], broker: bool) -> ProcessKind:
    """The kind of a process with ``cmdline`` whose parent has ``parent_cmdline``;
    ``broker``: it is the broker's process (or one of its descendants)."""
    exe = cmdline[0].rsplit("/", 1)[-1] if cmdline else ""
    if broker:
        return ProcessKind.BROKER_JVM if exe == "java" else ProcessKind.OTHER
    if exe == "java":
        return ProcessKind.DRIVER_JVM
    if not exe.startswith("python"):
        return ProcessKind.OTHER
    if "spillway.cli" in cmdline:
        return ProcessKind.DRIVER_PYTHON
    if _daemon(cmdline):
        # The daemon's forks keep its command line: a worker's parent is the daemon.
        return ProcessKind.PYTHON_WORKER if _daemon(parent_cmdline) else ProcessKind.PYTHON_DAEMON
    return ProcessKind.PYTHON_WORKER  # a worker started directly (no daemon)


def _daemon(cmdline: Sequence[str]) -> bool:
    """Runs Spark's Python daemon module: ``pyspark.daemon`` or the project's own
    (``spark.python.daemon.module``, spillway.spark_jobs.spark.daemon)."""
    return any(a == "-m" and m.endswith(".daemon") for a, m in itertools.pairwise(cmdline))


@dataclass(frozen=True)
class TopicSize:
    """One topic group at one instant."""

    disk_bytes: int = 0  # segment files (.log) on the broker's disk
    retained: int = 0  # offsets from log start to log end, all partitions
    max_partition_retained: int = 0  # the most any one partition retains
    min_log_start: int = 0  # the lowest log-start offset of its partitions (0: unpruned)
    partitions: int = 0


@dataclass(frozen=True)
class Sample:
    """Processes and topics at ``t`` seconds into the run."""

    t: float
    rss: Mapping[str, int]  # bytes per process kind (sum over its processes)
    procs: Mapping[str, int]  # processes per kind
    fds: Mapping[str, int]  # open file descriptors per kind
    topics: Mapping[str, TopicSize] = field(default_factory=dict)  # per topic group


def add_partition(size: TopicSize, disk_bytes: int, log_start: int, log_end: int) -> TopicSize:
    """``size`` with one more partition (its bytes on disk and its offsets) counted."""
    retained = log_end - log_start
    return TopicSize(
        size.disk_bytes + disk_bytes,
        size.retained + retained,
        max(size.max_partition_retained, retained),
        log_start if size.partitions == 0 else min(size.min_log_start, log_start),
        size.partitions + 1,
    )


@dataclass(frozen=True)
class Growth:
    """One process kind's RSS over the run after warm-up."""

    start_bytes: int  # mean over the first window after warm-up
    end_bytes: int  # mean over the last window
    max_bytes: int  # the largest sample after warm-up

    @property
    def ratio(self) -> float:
        """End over start, minus one (0.05: grew by 5 %)."""
        return self.end_bytes / self.start_bytes - 1 if self.start_bytes else 0.0


def _mean(values: Sequence[int]) -> int:
    return int(statistics.fmean(values)) if values else 0


def rss_growth(samples: Sequence[Sample], warmup_s: float, window_s: float) -> dict[str, Growth]:
    """Per process kind seen after ``warmup_s``: its RSS over the first ``window_s``
    after warm-up against its RSS over the last ``window_s`` of the run (means, so one
    sample taken while a killed worker is replaced does not decide it)."""
    after = [s for s in samples if s.t >= warmup_s]
    if not after:
        return {}
    first = [s for s in after if s.t < after[0].t + window_s]
    last = [s for s in after if s.t > after[-1].t - window_s]
    kinds = sorted({k for s in after for k in s.rss})
    return {
        k: Growth(
            _mean([s.rss.get(k, 0) for s in first]),
            _mean([s.rss.get(k, 0) for s in last]),
            max(s.rss.get(k, 0) for s in after),
        )
        for k in kinds
    }


def max_fds(samples: Sequence[Sample]) -> dict[str, int]:
    """Per process kind, the most file descriptors it held open in any sample."""
    out: dict[str, int] = {}
    for s in samples:
        for k, n in s.fds.items():
            out[k] = max(out.get(k, 0), n)
    return out


def topics_at(samples: Sequence[Sample], warmup_s: float) -> tuple[dict[str, TopicSize], ...]:
    """Topic groups in the first sample after warm-up that has any, and in the last
    sample that has any (empty dicts when none has)."""
    with_topics = [s for s in samples if s.topics]
    if not with_topics:
        return {}, {}
    after = [s for s in with_topics if s.t >= warmup_s] or with_topics
    return dict(after[0].topics), dict(with_topics[-1].topics)


def unbounded_checkpoints(
    samples: Sequence[Sample], bound_per_partition: int, warmup_s: float
) -> list[str]:
    """Where the checkpoint topics were not pruned and bounded (empty: they were).

    Bounded: no checkpoint partition ever retained more than ``bound_per_partition``
    offsets. Pruned: at the end, every checkpoint partition's log start is past 0.
    """
    seen = [
        (s.topics[TopicGroup.CHECKPOINT].max_partition_retained, s.t)
        for s in samples
        if TopicGroup.CHECKPOINT in s.topics
    ]
    if not seen:
        return ["no sample saw a checkpoint topic"]
    problems = []
    worst = max(seen)
    if worst[0] > bound_per_partition:
        problems.append(
            f"a checkpoint partition retained {worst[0]} offsets at {worst[1]:.0f}s "
            f"(bound {bound_per_partition})"
        )
    _, end = topics_at(samples, warmup_s)
    ckpt = end.get(TopicGroup.CHECKPOINT)
    if ckpt is None or ckpt.min_log_start == 0:
        problems.append("a checkpoint partition was never pruned (log start 0 at the end)")
    return problems


@dataclass(frozen=True)
class Summary:
    """What the samples of one run show."""

    seconds: float
    samples: int
    warmup_s: float
    rss: dict[str, Growth]
    procs_end: dict[str, int]
    max_fds: dict[str, int]
    topics_start: dict[str, TopicSize]
    topics_end: dict[str, TopicSize]

    def growth_over(self, limit: float) -> dict[str, float]:
        """The process kinds whose RSS grew by more than ``limit`` (0.10: 10 %) after warm-up."""
        return {k: g.ratio for k, g in self.rss.items() if g.ratio > limit}


def summarize(samples: Sequence[Sample], warmup_s: float, window_s: float) -> Summary:
    """The summary of ``samples`` (in time order)."""
    first_topics, last_topics = topics_at(samples, warmup_s)
    return Summary(
        seconds=samples[-1].t if samples else 0.0,
        samples=len(samples),
        warmup_s=warmup_s,
        rss=rss_growth(samples, warmup_s, window_s),
        procs_end=dict(samples[-1].procs) if samples else {},
        max_fds=max_fds(samples),
        topics_start=first_topics,
        topics_end=last_topics,
    )


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def render(summary: Summary, lost: int, duplicated: int, restarts: int) -> list[str]:
    """The printed summary: duration, RSS per kind, fds, topic sizes, exactness."""
    lines = [
        f"duration {summary.seconds:.0f}s, {summary.samples} samples, "
        f"warm-up {summary.warmup_s:.0f}s"
    ]
    for k, g in summary.rss.items():
        lines.append(
            f"rss {k:14} {_mib(g.start_bytes):>11} -> {_mib(g.end_bytes):>11} "
            f"({g.ratio:+.1%}; max {_mib(g.max_bytes)}; {summary.procs_end.get(k, 0)} procs)"
        )
    lines.append("max fds " + ", ".join(f"{k} {n}" for k, n in summary.max_fds.items()))
    for group in TopicGroup:
        a = summary.topics_start.get(group, TopicSize())
        b = summary.topics_end.get(group, TopicSize())
        lines.append(
            f"topics {group:10} disk {_mib(a.disk_bytes)} -> {_mib(b.disk_bytes)}, "
            f"retained {a.retained} -> {b.retained} offsets "
            f"(max/partition {b.max_partition_retained}, min log start {b.min_log_start})"
        )
    lines.append(f"restarts {restarts}, lost {lost}, duplicated {duplicated}")
    return lines
