"""Stages of a record's CPU in ``spillway run`` from py-spy's samples. Pure: no I/O.

A py-spy ``--format raw`` line is ``process A;process B;...;frame;frame;... COUNT`` (root
first). A sample of a subtask (a PySpark worker) is put in the stage of its innermost
frame that matches one of :data:`STAGES` (so pyarrow or orjson called by the channel codec
count as the codec); samples whose innermost frame is a wait are left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

# (stage, pattern over one frame "function (file:line)"), tried in this order per frame.
STAGES: tuple[tuple[str, str], ...] = (
    ("start-up (imports)", r"<frozen importlib|_compile_bytecode"),
    ("consume (client)", r"channels/kafka/(consumer|runs)\.py"),
    ("parse the input JSON", r"spark_jobs/lines\.py|^loads \(channels/jsontext\.py"),
    ("user functions", r"\(bench/"),
    ("decode channel messages", r"decode|Decoders\.|read_header|ArrowRows"),
    (
        "encode channel messages / output",
        r"encode|ArrowCodec\.|arrowcodec\.py|jsontext\.py|"
        r"arrowjson\.py|spark_jobs/sinks\.py",
    ),
    ("route (key groups)", r"partitioners\.py|keygroups\.py|batchroute\.py"),
    ("produce (client)", r"producerbase\.py|kafka/producer\.py:\d+\)$|produce"),
    ("keyed state and changelog", r"recovery/state\.py|changelog|aggregate|KeyedAggregateLogic"),
    ("checkpoint and commit", r"checkpointer\.py|offsets/|_commit|commit_transaction|cadence"),
    ("subtask loop (reader, processor)", r"recovery/|channels/reader\.py|spark_jobs/"),
)
WAITS = re.compile(
    r"^(Condition\.wait|Event\.wait|_wait_for_tstate_lock|select|_PollLikeSelector\.select|"
    r"SocketIO\.readinto|sleep|accept) "
)
_COMPILED = tuple((name, re.compile(p)) for name, p in STAGES)
OTHER = "other (Spark worker, py4j, heartbeats)"
STARTUP = STAGES[0][0]


def role_of(cmdline: str) -> str:
    """A process of a ``spillway run`` tree by its command line: ``worker`` (a PySpark
    worker: the subtasks), ``jvm`` (Spark), ``driver`` (the ``spillway run`` Python) or
    ``other``."""
    program = cmdline.split(" ", 1)[0]
    if program.endswith("/java") or program == "java":  # first: its options name the daemon
        return "jvm"
    daemons = ("pyspark.worker", "pyspark.daemon", "spillway.spark_jobs.spark.daemon")
    if any(d in cmdline for d in daemons):
        return "worker"
    if "spillway run" in cmdline or "/spillway run" in cmdline:
        return "driver"
    return "other"


def stage_of(frames: list[str]) -> str | None:
    """The stage of one sample's frames (root first); ``None`` for a wait."""
    if frames and WAITS.match(frames[-1]):
        return None
    for frame in reversed(frames):
        for name, pattern in _COMPILED:
            if pattern.search(frame):
                return name
    return OTHER


def _worker_samples(lines: Iterable[str]) -> Iterator[tuple[list[str], int]]:
    """(frames root first, count) of each sample of a worker process in py-spy raw ``lines``."""
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        parts = stack.split(";")
        procs = [p for p in parts if p.startswith("process ")]
        if procs and role_of(procs[-1]) == "worker":
            yield [p for p in parts if not p.startswith("process ")], int(count)


def stage_samples(lines: Iterable[str]) -> dict[str, int]:
    """Samples per stage over the worker processes of py-spy raw ``lines``."""
    out: dict[str, int] = {}
    for frames, count in _worker_samples(lines):
        stage = stage_of(frames)
        if stage is not None:
            out[stage] = out.get(stage, 0) + count
    return out


_LINE = re.compile(r":\d+\)$")


def function_samples(lines: Iterable[str]) -> dict[str, int]:
    """Samples per innermost frame, ``"function (file)"`` (line numbers dropped), over the
    worker processes of py-spy raw ``lines``; waits and start-up (imports) left out. Native
    code is not sampled, so a C call (pyarrow, librdkafka) counts for its Python caller."""
    out: dict[str, int] = {}
    for frames, count in _worker_samples(lines):
        if frames and stage_of(frames) not in (None, STARTUP):
            name = _LINE.sub(")", frames[-1])
            out[name] = out.get(name, 0) + count
    return out


def top_functions(worker_us: float, samples: Mapping[str, int], top: int) -> dict[str, float]:
    """The ``top`` functions by samples, each with its share of ``worker_us`` (µs/record)."""
    counted = sum(samples.values())
    ranked = sorted(samples.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return {name: worker_us * n / counted for name, n in ranked} if counted else {}


def slope(small: Mapping[str, Any], big: Mapping[str, Any], records: int) -> dict[str, Any]:
    """The CPU the bigger run spent beyond the smaller one, per role and the broker's: the
    cost of ``records`` more records, the fixed start-up of both cancelled out."""
    roles = set(small["cpu_s"]) | set(big["cpu_s"])
    return {
        "cpu_s": {r: big["cpu_s"].get(r, 0.0) - small["cpu_s"].get(r, 0.0) for r in roles},
        "broker_cpu_s": big["broker_cpu_s"] - small["broker_cpu_s"],
    }


def budget(measured: Mapping[str, Any], samples: Mapping[str, int], records: int) -> dict[str, Any]:
    """µs of CPU per record from ``measured`` CPU over ``records`` (e.g. a :func:`slope`):
    per process role and the broker, and the workers' share out over the stages by sample
    count, start-up samples left out (a fixed cost, which a slope has cancelled)."""
    us = {role: v / records * 1e6 for role, v in measured["cpu_s"].items()}
    us["broker"] = measured["broker_cpu_s"] / records * 1e6
    per_record = {k: n for k, n in samples.items() if k != STARTUP}
    counted = sum(per_record.values())
    worker = us.get("worker", 0.0)
    stages = {k: worker * n / counted for k, n in sorted(per_record.items(), key=lambda kv: -kv[1])}
    return {
        "us_per_record": us,
        "total_us": sum(us.values()),
        "worker_stages_us": stages,
        "worker_samples": counted,
        "startup_samples": samples.get(STARTUP, 0),
    }


def render(b: Mapping[str, Any]) -> list[str]:
    """The budget as lines for people."""
    lines = [f"µs of CPU per record (slope between the sizes), all processes: {b['total_us']:.2f}"]
    lines += [f"  {role:8} {v:6.2f}" for role, v in sorted(b["us_per_record"].items())]
    lines.append(
        f"the workers (subtasks) by stage, from {b['worker_samples']} py-spy samples "
        f"({b['startup_samples']} more of imports left out):"
    )
    lines += [f"  {k:36} {v:6.2f}" for k, v in b["worker_stages_us"].items()]
    return lines
