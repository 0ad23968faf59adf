"""CPU time and memory of process trees, read from ``/proc`` (Linux only).

Parsing is pure (:func:`parse_stat`, :func:`tree_of`); the readers below it do the I/O.
CPU time of a tree is the sum, over every live process in it, of its own user+system time
*and* the user+system time of its children that it has already reaped (``cutime`` and
``cstime``). A worker that finished between two samples and was waited for by its parent
is thus still counted, and nothing is counted twice: a process's time moves into its
parent's ``cutime`` only once the process is gone.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Stat:
    """What we need from one ``/proc/<pid>/stat`` line (times in clock ticks)."""

    pid: int
    ppid: int
    utime: int
    stime: int
    cutime: int
    cstime: int
    rss_pages: int

    @property
    def cpu_ticks(self) -> int:
        """Own user+system time plus that of reaped children, in clock ticks."""
        return self.utime + self.stime + self.cutime + self.cstime


def parse_stat(line: str) -> Stat:
    """Parse one ``/proc/<pid>/stat`` line.

    The command name (field 2) is in parentheses and may itself hold spaces and
    parentheses, so fields are counted from the *last* ``)``. Raises ``ValueError`` on
    a line that does not have the fields of proc(5).
    """
    head, sep, tail = line.rpartition(")")
    if not sep or "(" not in head:
        raise ValueError(f"not a /proc/<pid>/stat line: {line[:80]!r}")
    pid = int(head.split("(", 1)[0])
    fields = tail.split()
    # tail starts at field 3 (state); proc(5) numbers: ppid 4, utime 14, stime 15,
    # cutime 16, cstime 17, rss 24.
    if len(fields) < 22:
        raise ValueError(f"/proc/{pid}/stat has {len(fields) + 2} fields, expected >= 24")

    def field(n: int) -> int:
        return int(fields[n - 3])

    return Stat(pid, field(4), field(14), field(15), field(16), field(17), field(24))


def tree_of(root: int, parents: Mapping[int, int]) -> set[int]:
    """``root`` and all its descendants, given ``pid -> ppid`` of the live processes."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in out:
            continue
        out.add(pid)
        todo.extend(children.get(pid, ()))
    return out


def cpu_seconds(stats: Iterable[Stat]) -> float:
    """Total CPU seconds (own + reaped children) of ``stats``."""
    return sum(s.cpu_ticks for s in stats) / CLOCK_TICKS


def rss_bytes(stats: Iterable[Stat]) -> int:
    """Total resident memory of ``stats`` (shared pages counted once per process)."""
    return sum(s.rss_pages for s in stats) * PAGE_BYTES


def read_stat(pid: int) -> Stat | None:
    """The current stat of ``pid``; ``None`` if it is gone."""
    try:
        return parse_stat((PROC / str(pid) / "stat").read_text())
    except (FileNotFoundError, ProcessLookupError):
        return None


def read_all() -> dict[int, Stat]:
    """Stat of every live process (skipping ones that vanish while we read)."""
    out: dict[int, Stat] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (s := read_stat(int(entry.name))) is not None:
            out[s.pid] = s
    return out


def read_tree(root: int) -> list[Stat]:
    """Stats of ``root`` and every live descendant."""
    every = read_all()
    pids = tree_of(root, {pid: s.ppid for pid, s in every.items()})
    return [every[p] for p in pids if p in every]


class PeakRss:
    """Samples the summed RSS of a process tree every ``every_s`` seconds until stopped."""

    def __init__(self, root: int, every_s: float = 0.25) -> None:
        self.root, self.every_s = root, every_s
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-rss", daemon=True)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            self.peak = max(self.peak, rss_bytes(read_tree(self.root)))
            if self._stop.wait(self.every_s):
                return


def load_average() -> tuple[float, float, float]:
    """The 1, 5 and 15 minute load averages."""
    one, five, fifteen = os.getloadavg()
    return one, five, fifteen


def merge_latest(latest: dict[int, int], stats: Iterable[Stat]) -> None:
    """Keep, per PID, the highest own CPU ticks seen (user+system, children left out). Pure.

    Own ticks only: a reaped child's time also shows up in its parent's ``cutime``, and
    the child was sampled itself, so counting both would count it twice.
    """
    for s in stats:
        own = s.utime + s.stime
        if own > latest.get(s.pid, -1):
            latest[s.pid] = own


class TreeSampler:
    """Samples a process tree's CPU and RSS every ``every_s`` seconds, for its whole life.

    ``cpu_s`` is the sum over every process ever seen in the tree of its last sampled own
    CPU time. What a process spent after its last sample before it exited (at most
    ``every_s``), and processes that lived shorter than ``every_s``, are missed: a
    start-up/shut-down cost that does not grow with the records processed.
    """

    def __init__(self, root: int, every_s: float = 0.2) -> None:
        self.root, self.every_s = root, every_s
        self.peak_rss = 0
        self.latest: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tree-sampler", daemon=True)

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def cpu_s(self) -> float:
        """CPU seconds of the tree so far (see the class docstring for what is missed)."""
        return sum(self.latest.values()) / CLOCK_TICKS

    def sample(self) -> None:
        """Take one sample now."""
        stats = read_tree(self.root)
        merge_latest(self.latest, stats)
        self.peak_rss = max(self.peak_rss, rss_bytes(stats))

    def _run(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.every_s):
                return
