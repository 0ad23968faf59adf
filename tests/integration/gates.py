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
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from spillway.spark_jobs.api.pipeline import Pipeline, Stream
from spillway.spark_jobs.connectors.sources import GeneratorSource

GATES_ENV = "SPILLWAY_TEST_GATES"
HOLD_POLL_S = 0.05  # how long a held read sleeps: it must not spin on a shared machine


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


def held_generate(p: Pipeline, name: str, **generate: Any) -> Stream:
    """``p.generate(name, **generate)``, held at the gates of ``$SPILLWAY_TEST_GATES``."""
    stream = p.generate(name, **generate)
    gates = parse_gates(os.environ.get(GATES_ENV, ""))
    if gates:
        node = p._nodes[name]  # the declared source's factory: partial(GeneratorSource, ...)
        assert isinstance(node.factory, partial)
        assert node.factory.func is GeneratorSource
        node.factory = partial(HeldGenerator, gates, *node.factory.args)
    return stream


class Gates:
    """The test's side: gates at record indices ``at``, all closed, in ``root``."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch, at: list[int]) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.paths = [root / f"gate-{n}" for n in range(len(at))]
        spec = ",".join(f"{i}={path}" for i, path in zip(at, self.paths, strict=True))
        monkeypatch.setenv(GATES_ENV, spec)

    def open(self, n: int) -> None:
        """Open gate ``n`` (in the order given): the records it held run through."""
        self.paths[n].touch()

    def open_all(self) -> None:
        """Open every gate: what a test does when its operation failed, so the job still
        runs to its end and the test reports the failure instead of hanging."""
        for path in self.paths:
            path.touch()
