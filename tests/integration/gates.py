"""Held generators: a test's source runs at full speed up to a record index, then holds there
until the test opens a gate, instead of pacing its records over wall time.

A test that must kill, rescale or upgrade while the job is mid-stream used to slow its
source down (``rate=``) so the job was still running when its operation came, and so
waited for the clock either way. Here the source emits records ``0..at-1`` at once and
then reads nothing (it stays live: it checkpoints, forwards barriers and stops when asked)
until the gate of ``at`` is opened; the test opens it once the event it waited for was
seen (a checkpoint taken, a subtask restarted, a rescale answered)::

    gates = Gates(tmp_path / "gates", monkeypatch, [2_000])   # hold at record 2000
    ... wait for the event ...
    gates.open(0)                                              # the rest runs through

A gate is a file: the pipeline's tasks run on this machine (Spark local mode, a local
cluster) and see the test's files, and a file outlives any one attempt of a subtask, so a
restarted subtask finds an opened gate open. ``SPILLWAY_TEST_GATES`` carries the gates to
the tasks as ``INDEX=PATH`` items separated by commas; a pipeline built without it
generates as :meth:`Pipeline.generate` does.

A bounded Kafka source (``read_kafka(bounded=True)``, records or batches) can be held too
(:func:`hold`): there a gate's index counts the offsets each subtask has read of its own
partitions, so each source subtask stops reading once it has read that many (a read may
pass the index by one read's worth of messages: up to 1,000 records, or one batch).

The test waits for its events and opens the gates from a thread of its own
(:meth:`Gates.start`): each step waits for one event (:func:`started`, :func:`committed`)
and then opens the next gate.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, OperatorName
from spillway.examples import clicks
from spillway.offsets.store import CheckpointStore
from spillway.recovery.observe.events import read_events
from spillway.spark_jobs.api.pipeline import Pipeline, Stream
from spillway.spark_jobs.connectors.batchsources import BatchKafkaSource
from spillway.spark_jobs.connectors.sources import GeneratorSource, KafkaTopicSource

GATES_ENV = "SPILLWAY_TEST_GATES"
HOLD_POLL_S = 0.05  # how long a held read sleeps: it must not spin on a shared machine
WAIT_POLL_S = 0.3  # how often the test's thread looks for its event (each look reads a topic)


@dataclass(frozen=True)
class Gate:
    """Records with an index at or above ``at`` wait until the file ``path`` exists."""

    at: int
    path: Path

    def is_open(self) -> bool:
        """True once the test opened the gate (for good)."""
        return self.path.exists()


def parse_gates(spec: str) -> tuple[Gate, ...]:
    """The gates of a ``SPILLWAY_TEST_GATES`` value, lowest index first."""
    gates = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        at, sep, path = item.partition("=")
        if not sep or not path:
            raise ValueError(f"{GATES_ENV} item {item!r} must look like INDEX=PATH")
        gates.append(Gate(int(at), Path(path)))
    return tuple(sorted(gates, key=lambda g: g.at))


class HeldGenerator(GeneratorSource):
    """A :class:`GeneratorSource` that emits no record at or above a closed gate's index.

    While held, :meth:`read` sleeps briefly and returns no records, as a paced generator
    does between its records, so the subtask keeps checkpointing and answers a stop.
    """

    def __init__(self, gates: tuple[Gate, ...], *args: Any) -> None:
        super().__init__(*args)
        self._closed = list(gates)

    def limit(self) -> int | None:
        """The index of the lowest closed gate (None: every gate is open)."""
        while self._closed and self._closed[0].is_open():
            self._closed.pop(0)
        return self._closed[0].at if self._closed else None

    def read(self, max_records: int) -> list[dict[str, Any]] | None:
        """Up to ``max_records`` records below the lowest closed gate; ``[]`` while held."""
        nxt = int(self.position()["next"])
        limit = self.limit()
        if limit is not None and (self.count is None or nxt < self.count):
            free = len(range(nxt, limit, self.p))
            if free == 0:
                time.sleep(HOLD_POLL_S)
                return []
            max_records = min(max_records, free)
        return super().read(max_records)


def _holding(closed: list[Gate], progress: tuple[int, int] | None) -> bool:
    """True while a bounded source that has read ``progress`` = (done, total) of its
    offsets is at or past the lowest closed gate of ``closed`` (opened gates are dropped)."""
    while closed and closed[0].is_open():
        closed.pop(0)
    if not closed or progress is None:
        return False
    done, total = progress
    return closed[0].at <= done < total


class HeldKafkaSource(KafkaTopicSource):
    """A bounded :class:`KafkaTopicSource` that reads nothing once it has read as many of
    its offsets as the lowest closed gate's index, until that gate opens; while held,
    :meth:`read` sleeps briefly and returns no records (the subtask stays live)."""

    def __init__(self, gates: tuple[Gate, ...], *args: Any) -> None:
        super().__init__(*args)
        self._closed = list(gates)

    def read(self, max_records: int) -> list[dict[str, Any]] | None:
        """As :meth:`KafkaTopicSource.read`; ``[]`` while held (and nothing rejected: the
        runtime dead-letters what :meth:`rejected` reports after every read)."""
        if _holding(self._closed, self.progress()):
            self._rejected = []
            time.sleep(HOLD_POLL_S)
            return []
        return super().read(max_records)


class HeldBatchKafkaSource(BatchKafkaSource):
    """:class:`HeldKafkaSource` for the columnar Kafka source (Arrow batches)."""

    def __init__(self, gates: tuple[Gate, ...], *args: Any) -> None:
        super().__init__(*args)
        self._closed = list(gates)

    def read(self, max_records: int) -> Any:
        """As :meth:`BatchKafkaSource.read`; ``[]`` while held, nothing rejected."""
        if _holding(self._closed, self.progress()):
            self._rejected = []
            time.sleep(HOLD_POLL_S)
            return []
        return super().read(max_records)


# The built-in sources a test can hold, by the class their factory builds.
HELD: dict[Callable[..., Any], type] = {
    GeneratorSource: HeldGenerator,
    KafkaTopicSource: HeldKafkaSource,
    BatchKafkaSource: HeldBatchKafkaSource,
}


def hold(p: Pipeline, name: str) -> None:
    """Hold ``p``'s declared source ``name`` at the gates of ``$SPILLWAY_TEST_GATES`` (none
    set: ``p`` is left as it is). The source must be a generator or a Kafka source."""
    gates = parse_gates(os.environ.get(GATES_ENV, ""))
    if gates:
        node = p._nodes[name]  # the declared source's factory: partial(SourceClass, ...)
        assert isinstance(node.factory, partial)
        assert not node.factory.keywords
        node.factory = partial(HELD[node.factory.func], gates, *node.factory.args)


def held_generate(p: Pipeline, name: str, **generate: Any) -> Stream:
    """``p.generate(name, **generate)``, held at the gates of ``$SPILLWAY_TEST_GATES``."""
    stream = p.generate(name, **generate)
    hold(p, name)
    return stream


def full_speed_clicks(monkeypatch: pytest.MonkeyPatch, out: Path, records: int) -> None:
    """Configure the clicks example (two source subtasks, no rate: as fast as it runs) for
    :func:`held_clicks`: ``records`` records, output into ``out``."""
    monkeypatch.setenv("CLICKS_RECORDS", str(records))
    monkeypatch.setenv("CLICKS_OUT", str(out))
    monkeypatch.setenv("CLICKS_PARALLELISM", "2")
    monkeypatch.delenv("CLICKS_RATE", raising=False)


def held_clicks() -> Pipeline:
    """The click-stream example (``spillway.examples.clicks:pipeline``, configured by its
    ``CLICKS_*`` settings), its source held at the gates of ``$SPILLWAY_TEST_GATES``."""
    p = clicks.pipeline()
    hold(p, "clicks")
    return p


def started(settings: KafkaSettings, job: JobId, subtasks: Iterable[str], attempt: int) -> bool:
    """True once attempt ``attempt`` (or a later one) of each of ``subtasks`` (named
    ``operator[index]``) started."""
    seen = {
        f"{e['operator']}[{e['index']}]"
        for e in read_events(settings, job)
        if e.get("event") == "started" and int(e.get("attempt", -1)) >= attempt
    }
    return set(subtasks) <= seen


def committed(
    settings: KafkaSettings, job: JobId, subtasks: Iterable[str], attempt: int, width: int
) -> bool:
    """True once each of ``subtasks`` (named ``operator[index]``, of operators with
    ``width`` subtasks) committed a checkpoint in attempt ``attempt`` or a later one."""
    for name in subtasks:
        operator, _, index = name.rstrip("]").partition("[")
        store = CheckpointStore(settings, job, OperatorName(operator), width)
        try:
            latest = store.latest(int(index))
        finally:
            store.close()
        if latest is None or latest.meta.attempt < attempt:
            return False
    return True


Step = tuple[str, Callable[[], bool]]
"""What a gate waits for: its name (for the failure) and the condition, polled."""


class Gates:
    """The test's side: gates at record indices ``at``, all closed, in ``root``."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch, at: list[int]) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.paths = [root / f"gate-{n}" for n in range(len(at))]
        spec = ",".join(f"{i}={path}" for i, path in zip(at, self.paths, strict=True))
        monkeypatch.setenv(GATES_ENV, spec)
        self.missed: list[str] = []  # what :meth:`start` waited for in vain

    def open(self, n: int) -> None:
        """Open gate ``n`` (in the order given): the records it held run through."""
        self.paths[n].touch()

    def open_all(self) -> None:
        """Open every gate: what a test does when its operation failed, so the job still
        runs to its end and the test reports the failure instead of hanging."""
        for path in self.paths:
            path.touch()

    def start(self, *steps: Step, timeout_s: float = 180) -> None:
        """From a thread of its own, wait for ``steps[n]`` and then open gate ``n``, in
        order; afterwards (or once a step did not come within ``timeout_s``, or its
        condition raised) open every gate, so the job runs to its end. What went wrong is
        kept in :attr:`missed`, which the test asserts empty once the job has ended."""

        def body() -> None:
            try:
                for n, (what, ready) in enumerate(steps):
                    deadline = time.monotonic() + timeout_s
                    while not ready():
                        if time.monotonic() > deadline:
                            self.missed.append(f"not within {timeout_s} s: {what}")
                            return
                        time.sleep(WAIT_POLL_S)
                    self.open(n)
            except Exception as e:  # reported by the test's thread, through missed
                self.missed.append(f"{type(e).__name__}: {e}")
            finally:
                self.open_all()

        threading.Thread(target=body, daemon=True).start()

    def on_running(self, *steps: Step, timeout_s: float = 180) -> Callable[[object], None]:
        """``run_on_spark``'s ``on_running``: :meth:`start` once the job's operators run."""
        return lambda _runs: self.start(*steps, timeout_s=timeout_s)
