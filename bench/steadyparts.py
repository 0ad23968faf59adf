"""The suite's parts for the run of record, wired to its broker: B0s (:mod:`bench.ceiling`),
B1s (:mod:`bench.steadyrun`) and B3k (:mod:`bench.kstreamsb3`), one callable per part that
runs round ``i``."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TextIO

from confluent_kafka.admin import AdminClient

from bench import ceiling, columnarrun, kstreamsb3, steadyrun, workload
from bench.suitesettings import PARTITIONS, Settings


@dataclass(frozen=True)
class Broker:
    """The suite's broker: where to connect, whose CPU to count, where its logs are."""

    bootstrap: str
    pid: int
    log_dirs: Path
    admin: AdminClient


def topics_with(admin: AdminClient, name: str) -> list[str]:
    """Every topic whose name holds ``name``."""
    return [t for t in admin.list_topics(timeout=10).topics if name in t]


def b1s_preload(
    broker: Broker,
    sizes: tuple[int, ...],
    create: Callable[[str], None],
    say: Callable[[str], None],
) -> dict[int, str]:
    """One input topic per B1s size, written once for every round: size → topic."""
    topics = {}
    for n in sizes:
        topic = f"bench-b1s-{n}-{uuid.uuid4().hex[:8]}"
        create(topic)
        t0 = time.monotonic()
        workload.preload(broker.bootstrap, topic, n, PARTITIONS)
        say(f"B1s: {n:,} records pre-loaded in {time.monotonic() - t0:.1f} s")
        topics[n] = topic
    return topics


def rounds(
    broker: Broker,
    s: Settings,
    log: TextIO,
    stack: contextlib.ExitStack,
    create: Callable[[str], None],
    delete: Callable[[list[str]], None],
    say: Callable[[str], None],
) -> dict[str, Callable[[int], dict[str, Any]]]:
    """``{"b0s": round, "b3k": round, "b1s": round, "b1c": round}``; B1s's and B1c's input
    topics are written here (if they run) and deleted when ``stack`` closes."""
    out: dict[str, Callable[[int], dict[str, Any]]] = {
        "b0s": lambda i: ceiling.b0s_round(
            broker.bootstrap, broker.pid, s.b0s_sizes, s.b1s_timeout_s, log, create, delete, say
        ),
        "b3k": lambda i: kstreamsb3.b3k_round(
            broker.bootstrap, broker.admin, kstreamsb3.Settings()
        ),
    }
    part = partial(steady_part, broker, s, log, stack, create, delete, say)
    if "b1c" in s.parts:
        out["b1c"] = part(s.b1c_sizes, s.b1c_engines, columnarrun.run_options)
    if "b1s" in s.parts:
        out["b1s"] = part(s.b1s_sizes, s.b1s_engines, lambda e: {"log_dirs": broker.log_dirs})
    return out


def steady_part(
    broker: Broker,
    s: Settings,
    log: TextIO,
    stack: contextlib.ExitStack,
    create: Callable[[str], None],
    delete: Callable[[list[str]], None],
    say: Callable[[str], None],
    sizes: tuple[int, ...],
    engines: tuple[str, ...],
    options: Callable[[str], dict[str, Any]],
) -> Callable[[int], dict[str, Any]]:
    """A round of whole runs of ``engines`` at ``sizes``, :attr:`Settings.slow_engines` at
    :attr:`Settings.slow_sizes` (:func:`bench.steadyrun.b1s_round`, each run
    :func:`bench.steadyrun.run_once` with ``options(engine)`` added); the input topics are
    written here and deleted when ``stack`` closes."""
    sizes_of = {e: s.slow_sizes if e in s.slow_engines else sizes for e in engines}
    topics = b1s_preload(broker, tuple(sorted(set().union(*sizes_of.values()))), create, say)
    stack.callback(delete, list(topics.values()))

    def run(engine: str, topic: str, records: int) -> dict[str, Any]:
        return steadyrun.run_once(
            engine,
            broker.bootstrap,
            broker.pid,
            topic,
            records,
            s.commit_interval_s,
            s.b1s_timeout_s,
            log,
            create,
            lambda name: delete(topics_with(broker.admin, name)),
            **options(engine),
        )

    return lambda i: steadyrun.b1s_round(engines, topics, i, run, say, sizes_of)
