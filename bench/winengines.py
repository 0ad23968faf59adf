"""The windows workload in each engine (:mod:`bench.windowpeers` measures them).

Workload: JSON page-view events (:func:`bench.workload.make_event`, with event time ``ts``
taken from the benchmark's clock) on a one-partition topic; key = page (2,000 keys),
value = ``user``; per key and window, the *sum* of the values, emitted once per window
when it closes (``final``), exactly-once, written as JSON to an output topic keyed by page.

``spillway``  :func:`pipeline`, run by ``spillway run bench.winengines:pipeline`` on Spark
              local mode (one long-running task per subtask): read_kafka (bounded, event
              time ``ts``, monotonic watermarks) → key_by(page) → ``window(Hopping(size, hop))``
              (for "sliding" too: Flink's sliding windows are hopping) → write_kafka, chained
              (source | window+sink: two subtasks joined by the keyed channel).
``quix``      Quix Streams: ``group_by(page)`` (a repartition topic, as Spillway's keyed
              channel) → ``hopping_window(size, hop)`` or ``sliding_window(size)``
              (record-aligned) ``.sum().final()`` → ``to_topic``, ``exactly-once``.
              ``python -m bench.winengines quix ...`` prints ``READY`` when its first
              record arrives and waits for the gate file; ``DONE`` after the expected
              number of windows is out and committed.

Both engines wait at their first record until the benchmark creates the *gate* file:
everything before (JVMs, Spark tasks, consumer assignment, state stores, topics) is
set-up, outside the measured stretch.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from bench import workload
from bench.peers import EVENT_SCHEMA

ENV_PREFIX = "SPILLWAY_WINBENCH_"  # spillway run forwards SPILLWAY_* to every task
KINDS = ("hopping", "sliding")
ROW_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "WindowSum",
    "fields": [
        {"name": "key", "type": "string"},
        {"name": "start", "type": "long"},
        {"name": "end", "type": "long"},
        {"name": "value", "type": "long"},
    ],
}


@dataclass(frozen=True)
class WinConfig:
    """One engine run's windows and topics (``SPILLWAY_WINBENCH_*`` for Spillway)."""

    kind: str
    size_ms: int
    hop_ms: int  # the hop of hopping windows, the slide of Spillway's sliding windows
    input: str
    output: str
    gate: Path

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WinConfig:
        """Read the settings; a missing one is a clear error."""
        env = os.environ if env is None else env
        try:
            return cls(
                env[ENV_PREFIX + "KIND"],
                int(env[ENV_PREFIX + "SIZE_MS"]),
                int(env[ENV_PREFIX + "HOP_MS"]),
                env[ENV_PREFIX + "INPUT"],
                env[ENV_PREFIX + "OUTPUT"],
                Path(env[ENV_PREFIX + "GATE"]),
            )
        except KeyError as e:
            raise ValueError(f"bench.winengines needs the environment variable {e.args[0]}") from e

    def env(self) -> dict[str, str]:
        """The environment variables that describe this configuration."""
        return {
            ENV_PREFIX + "KIND": self.kind,
            ENV_PREFIX + "SIZE_MS": str(self.size_ms),
            ENV_PREFIX + "HOP_MS": str(self.hop_ms),
            ENV_PREFIX + "INPUT": self.input,
            ENV_PREFIX + "OUTPUT": self.output,
            ENV_PREFIX + "GATE": str(self.gate),
        }


def page_of(event: Mapping[str, Any]) -> str:
    """The key: the page of an event's URL (as :func:`bench.workload.parse`)."""
    return str(workload.parse(dict(event))["page"])


def _ts(event: Mapping[str, Any]) -> int:
    return int(event["ts"])


def _zero() -> int:
    return 0


def _add_user(acc: int, event: Mapping[str, Any]) -> int:
    return acc + int(event["user"])


def _row(key: str, start: int, end: int, acc: int) -> dict[str, Any]:
    return {"key": key, "start": start, "end": end, "value": acc}


def _row_key(row: Mapping[str, Any]) -> str:
    return str(row["key"])


def wait_for(gate: Path, poll_s: float = 0.01) -> None:
    """Block until the file ``gate`` exists."""
    while not gate.exists():
        time.sleep(poll_s)


# -- Spillway ---------------------------------------------------------------------------


class GatedSource:
    """A source that returns no records until the gate file exists, then is ``inner``."""

    def __init__(self, make_inner: Any, gate: Path) -> None:
        self.inner = make_inner()
        self.gate = gate
        self._open = False

    def read(self, max_records: int) -> Any:
        """[] (after a short nap) until the gate opens; then the inner source's records."""
        if not self._open:
            if not self.gate.exists():
                time.sleep(0.01)
                return []
            self._open = True
        return self.inner.read(max_records)

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)  # open, position, watermark, idle, ...


@dataclass(frozen=True)
class _Gated:
    """A pipeline whose source operator ``name`` waits for ``gate`` (see GatedSource)."""

    pipeline: Any
    name: str
    gate: Path

    def plan(self, job: str) -> Any:
        plan = self.pipeline.plan(job)
        ops = tuple(
            replace(op, make_source=partial(GatedSource, op.make_source, self.gate))
            if op.name == self.name
            else op
            for op in plan.operators
        )
        return replace(plan, operators=ops)


def pipeline() -> Any:
    """The Spillway job of the configuration in the environment (``spillway run``)."""
    from spillway.spark_jobs.api.pipeline import Pipeline
    from spillway.spark_jobs.api.windowspec import Hopping

    cfg = WinConfig.from_env()
    p = Pipeline("bench-windows", chaining=True)
    events = p.read_kafka(
        "source", cfg.input, schema=EVENT_SCHEMA, bounded=True, timestamp=_ts, parallelism=1
    )
    keyed = events.key_by(page_of)
    if cfg.kind not in ("hopping", "sliding"):
        raise ValueError(f"{ENV_PREFIX}KIND must be one of {KINDS}, got {cfg.kind!r}")
    # Spillway's "sliding" is Flink's: hopping windows; the event time is the source's.
    windows = keyed.window("window", Hopping(cfg.size_ms, cfg.hop_ms)).aggregate(
        init=_zero, add=_add_user, result=_row, schema=ROW_SCHEMA, parallelism=1
    )
    windows.write_kafka("sink", cfg.output, key=_row_key, parallelism=1)
    return _Gated(p, "source", cfg.gate)


# -- Quix Streams -----------------------------------------------------------------------


def _say(word: str) -> None:
    print(f"{word} {time.time():.6f}", flush=True)


def quix_app(bootstrap: str, name: str, workdir: str) -> Any:
    """A Quix Streams application as every Quix run of the benchmarks sets it up."""
    from quixstreams import Application

    return Application(
        broker_address=bootstrap,
        consumer_group=name,
        auto_offset_reset="earliest",
        commit_interval=1.0,
        processing_guarantee="exactly-once",
        state_dir=os.path.join(workdir, "quix-state"),
        loglevel="WARNING",
    )


def quix_input(app: Any, topic: str, gate: Any) -> Any:
    """A dataframe of JSON ``topic`` (event time: ``ts``), each record through ``gate``."""

    def event_time(value: Any, _headers: Any, _ts_kafka: int, _kind: Any) -> int:
        return int(value["ts"])

    t = app.topic(topic, value_deserializer="json", timestamp_extractor=event_time)
    return app.dataframe(t).apply(gate)


def quix_gate(gate_file: Path) -> Any:
    """A function passing records through that, at the first record of any input, says
    READY and waits for ``gate_file`` (set-up is over)."""
    first = [True]

    def gate(event: dict[str, Any]) -> dict[str, Any]:
        if first[0]:
            first[0] = False
            _say("READY")
            wait_for(gate_file)
        return event

    return gate


def run_quix(cfg: WinConfig, bootstrap: str, name: str, workdir: str, windows: int) -> None:
    """Quix Streams over the input; returns once ``windows`` results are out and committed."""
    app = quix_app(bootstrap, name, workdir)
    sink = app.topic(cfg.output, value_serializer="json", key_serializer="str")
    sdf = quix_input(app, cfg.input, quix_gate(cfg.gate))
    sdf = sdf.group_by(page_of, name="page").apply(lambda e: int(e["user"]))
    if cfg.kind == "hopping":
        win: Any = sdf.hopping_window(duration_ms=cfg.size_ms, step_ms=cfg.hop_ms, grace_ms=0)
    else:
        win = sdf.sliding_window(duration_ms=cfg.size_ms, grace_ms=0)
    win.sum().final().to_topic(sink)
    app.run(count=windows, collect=False)
    _say("DONE")
    sys.stdin.read()  # the benchmark closes our stdin once it has sampled us


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.winengines quix ...`` (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m bench.winengines", description=__doc__)
    ap.add_argument("engine", choices=("quix",))
    ap.add_argument("--kind", choices=KINDS, required=True)
    ap.add_argument("--size-ms", type=int, required=True)
    ap.add_argument("--hop-ms", type=int, required=True)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--gate", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--windows", type=int, required=True, help="results to wait for")
    a = ap.parse_args(argv)
    cfg = WinConfig(a.kind, a.size_ms, a.hop_ms, a.input, a.output, Path(a.gate))
    run_quix(cfg, a.bootstrap, a.name, a.workdir, a.windows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
