"""Pipelines the benchmarks submit by reference (every Spark task imports this module).

Configured through ``SPILLWAY_BENCH_*`` environment variables, which the driver forwards
to every task (``JobConfig.env_prefixes`` includes ``SPILLWAY_``):

``SPILLWAY_BENCH_DIR``         working directory of one run: progress logs, sink output
``SPILLWAY_BENCH_RATE``        R, the generator's rate while it builds the backlog (rec/s)
``SPILLWAY_BENCH_SLOW_RATE``   S, what ``slow`` processes per second (default R/10)
``SPILLWAY_BENCH_BACKLOG``     B, the backlog to build and then hold (records)
``SPILLWAY_BENCH_PAYLOAD``     characters of filler per record (default 180: ~190 B of Avro)

:func:`backlog` is ``generate`` (parallelism 1) → ``slow`` (map, parallelism 1) →
``write_jsonl``. The generator's budget at ``t`` seconds after it opened is
``min(R·t, B + S·t)``: it runs ahead at R until it is B records ahead of what a consumer
at S would have taken, then continues at S. ``slow`` passes records on at S at most (it
sleeps per chunk of records, in proportion to the chunk). So the backlog — records in the
generate→slow channel that ``slow`` has not processed yet — grows at R−S to about B and
then stays there, and each global checkpoint can be measured at about the same backlog.

Both operators append ``<unix time> <records>`` lines (at most every 50 ms) to
``progress-generate.log`` / ``progress-slow.log`` in ``SPILLWAY_BENCH_DIR``; the benchmark
reads them to know the backlog at any moment. The generator adds ``hold`` to its lines
once it has reached the hold line (``B + S·t``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, TextIO

from spillway.recovery.job.origins import UNKNOWN, Origins
from spillway.recovery.job.plan import Context, JobPlan, Record, Rejected, Source
from spillway.spark_jobs.api.pipeline import Pipeline

ENV_PREFIX = "SPILLWAY_BENCH_"
PROGRESS_EVERY_S = 0.05

RECORD: dict[str, Any] = {
    "type": "record",
    "name": "BenchEvent",
    "fields": [{"name": "seq", "type": "long"}, {"name": "payload", "type": "string"}],
}
SEQ: dict[str, Any] = {
    "type": "record",
    "name": "BenchSeq",
    "fields": [{"name": "seq", "type": "long"}],
}


@dataclass(frozen=True)
class BacklogConfig:
    """The ``SPILLWAY_BENCH_*`` settings of one run."""

    directory: Path
    rate: float
    slow_rate: float
    backlog: int
    payload: int = 180

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> BacklogConfig:
        """Read and check the settings; a missing or bad one is a clear error."""
        env = os.environ if env is None else env
        try:
            directory = Path(env[ENV_PREFIX + "DIR"])
            rate = float(env[ENV_PREFIX + "RATE"])
            slow_rate = float(env.get(ENV_PREFIX + "SLOW_RATE") or rate / 10)
            backlog = int(env[ENV_PREFIX + "BACKLOG"])
            payload = int(env.get(ENV_PREFIX + "PAYLOAD") or 180)
        except KeyError as e:
            raise ValueError(f"bench.pipelines needs the environment variable {e.args[0]}") from e
        if not 0 < slow_rate < rate:
            raise ValueError(f"need 0 < slow rate ({slow_rate}) < rate ({rate})")
        if backlog < 0 or payload < 0:
            raise ValueError(f"backlog ({backlog}) and payload ({payload}) must be >= 0")
        return cls(directory, rate, slow_rate, backlog, payload)

    def env(self) -> dict[str, str]:
        """The environment variables that describe this configuration."""
        return {
            ENV_PREFIX + "DIR": str(self.directory),
            ENV_PREFIX + "RATE": repr(self.rate),
            ENV_PREFIX + "SLOW_RATE": repr(self.slow_rate),
            ENV_PREFIX + "BACKLOG": str(self.backlog),
            ENV_PREFIX + "PAYLOAD": str(self.payload),
        }


class ProgressLog:
    """Appends ``<unix time> <count> [hold]`` lines, at most every ``every_s`` seconds."""

    def __init__(self, path: Path, every_s: float = PROGRESS_EVERY_S) -> None:
        self.path = path
        self.every_s = every_s
        self._fh: TextIO | None = None
        self._last = 0.0

    def note(self, count: int, flag: str = "", *, force: bool = False) -> None:
        """Record ``count`` now, unless the last line is younger than ``every_s``."""
        now = time.monotonic()
        if not force and now - self._last < self.every_s:
            return
        self._last = now
        if self._fh is None:
            self._fh = open(self.path, "a", encoding="ascii", buffering=1)  # noqa: SIM115
        self._fh.write(f"{time.time():.4f} {count}{' ' + flag if flag else ''}\n")


def read_progress(path: Path) -> list[tuple[float, int, bool]]:
    """The lines of a progress log as ``(unix time, count, hold)``; [] if there is none yet.

    A line still being written (no newline yet) is left out.
    """
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        return []
    out: list[tuple[float, int, bool]] = []
    for line in text.splitlines(keepends=True):
        parts = line.split()
        if not line.endswith("\n") or len(parts) < 2:
            continue
        out.append((float(parts[0]), int(parts[1]), len(parts) > 2 and parts[2] == "hold"))
    return out


class FillThenHoldSource:
    """Record ``make(i)`` for i = 0, 1, …, paced to a budget of ``min(R·t, B + S·t)``.

    Unbounded. Position: the next i (as
    :class:`~spillway.spark_jobs.connectors.sources.GeneratorSource`).
    A restarted incarnation starts a new schedule from its checkpointed position.
    """

    def __init__(self, make: Callable[[int], Record], config: BacklogConfig) -> None:
        self.make = make
        self.rate, self.slow_rate, self.backlog = config.rate, config.slow_rate, config.backlog
        self.progress = ProgressLog(config.directory / "progress-generate.log")
        self._next = 0
        self._base = 0
        self._t0 = 0.0
        self._hold = False

    def open(self, ctx: Context, position: Mapping[str, Any]) -> None:
        """Continue after the last checkpointed record."""
        self._next = self._base = int(position.get("next", 0))
        self._t0 = time.monotonic()
        self._hold = False
        self.progress.note(self._next, force=True)

    def due(self, elapsed_s: float) -> int:
        """Records the schedule allows after ``elapsed_s`` seconds."""
        return self._base + int(
            min(self.rate * elapsed_s, self.backlog + self.slow_rate * elapsed_s)
        )

    def read(self, max_records: int) -> list[Record]:
        """What the schedule allows now (up to ``max_records``); [] after a short nap."""
        elapsed = time.monotonic() - self._t0
        hold_line = self._base + self.backlog + int(self.slow_rate * elapsed)
        if not self._hold and self._next >= hold_line - self.slow_rate * PROGRESS_EVERY_S:
            self._hold = True
            self.progress.note(self._next, "hold", force=True)
        allowed = self.due(elapsed) - self._next
        if allowed <= 0:
            self.progress.note(self._next, "hold" if self._hold else "")
            time.sleep(0.01)
            return []
        stop = self._next + min(allowed, max_records)
        out = [self.make(i) for i in range(self._next, stop)]
        self._next = stop
        self.progress.note(self._next, "hold" if self._hold else "")
        return out

    def position(self) -> dict[str, Any]:
        """The next index."""
        return {"next": self._next}

    def watermark(self) -> int | None:
        """No event time."""
        return None

    def idle(self) -> bool:
        """No event time, so never idle."""
        return False

    def rejected(self) -> list[Rejected]:
        """Generated records are never unreadable."""
        return []

    def origins(self) -> Origins:
        """Generated records come from no file or topic."""
        return UNKNOWN


class Throttle:
    """The ``slow`` map function: ``{"seq"}`` of each record, at most ``rate`` records/s.

    Every ``chunk`` records it sleeps until ``chunk / rate`` seconds after the previous
    chunk's deadline, so its rate is ``rate`` whatever the per-record cost (as long as that
    is below ``1 / rate``). Time lost while it waited for input or for a checkpoint is
    made up for at most ``credit_s`` seconds' worth, so it never bursts far above ``rate``.
    """

    def __init__(self, rate: float, progress: Path, chunk: int = 50, credit_s: float = 0.5) -> None:
        self.rate, self.chunk, self.credit_s = rate, chunk, credit_s
        self.progress = ProgressLog(progress)
        self._n = 0
        self._deadline: float | None = None

    def __call__(self, record: Record) -> Record:
        self._n += 1
        if self._n % self.chunk == 0:
            now = time.monotonic()
            start = now if self._deadline is None else max(self._deadline, now - self.credit_s)
            self._deadline = start + self.chunk / self.rate
            if self._deadline > now:
                time.sleep(self._deadline - now)
            self.progress.note(self._n)
        return {"seq": record["seq"]}


_FILLER: dict[int, str] = {}


def make_event(i: int, payload: int = 180) -> Record:
    """Event ``i`` with ``payload`` characters of filler (shared, so cheap to make)."""
    filler = _FILLER.get(payload)
    if filler is None:
        filler = _FILLER[payload] = "x" * payload
    return {"seq": i, "payload": filler}


@dataclass(frozen=True)
class _WithSource:
    """A pipeline whose source operator ``name`` is built by ``make_source`` instead."""

    pipeline: Pipeline
    name: str
    make_source: Callable[[], Source]

    def plan(self, job: str) -> JobPlan:
        plan = self.pipeline.plan(job)
        ops = tuple(
            replace(op, make_source=self.make_source) if op.name == self.name else op
            for op in plan.operators
        )
        return replace(plan, operators=ops)


def backlog() -> _WithSource:
    """generate (paced: fill to B, then hold) → slow (at S) → JSONL files."""
    config = BacklogConfig.from_env()
    make = partial(make_event, payload=config.payload)
    p = Pipeline("checkpoint-backlog")
    # The generator's pacing comes from FillThenHoldSource (below); generate() declares
    # the operator (unbounded, parallelism 1) and its output schema.
    events = p.generate("generate", make=make, schema=RECORD, count=None, parallelism=1)
    slow = Throttle(config.slow_rate, config.directory / "progress-slow.log")
    events.map("slow", slow, schema=SEQ, parallelism=1).write_jsonl(
        "out", str(config.directory / "out")
    )
    return _WithSource(p, "generate", partial(FillThenHoldSource, make, config))
