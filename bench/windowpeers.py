"""``make bench-windows-peers``: hopping and sliding windows, Spillway beside Quix Streams.

One throw-away local broker; per round, one pre-loaded one-partition input topic
(:mod:`bench.winengines` describes the workload and the engines) that every engine run of
the round reads in full. Per round and window kind, in a rotating order:

* **Spillway** through ``spillway run`` on Spark local mode (``local[N,4]``, one
  long-running Spark task per subtask: source, window+sink), exactly-once;
* **Quix Streams** (the ``bench`` extra), ``processing_guarantee="exactly-once"``.

Kinds: ``hopping`` (size 60 s, hop 20 s, both engines: the same windows) and ``sliding``
— each engine's own definition, which differ: Spillway's is Flink's (hopping with a
slide, here 60 s every 10 s); Quix's is record-aligned (Kafka Streams': one window
``[t - 60 s, t]`` per record). Sliding figures are therefore not a like-for-like ratio.

Measured from the moment both engines have finished set-up and wait at their first record
(the gate, see :mod:`bench.winengines`) to the moment the last window is committed:
wall time, CPU seconds of the engine's process tree (Spark's JVM and Python workers
included) plus the broker JVM's CPU over the same stretch; records per CPU-second =
input records / (engine + broker CPU seconds). Every engine's committed output is
checked exactly (key, start, end, sum, each once) against :mod:`bench.winref`.

Kind ``interval`` (:mod:`bench.joinengines`): an interval join of the round's input
(left) with a second topic of ``records / right_every`` page views (right, other pages
drawn from the same pages), ``l.ts - 1 s <= r.ts <= l.ts + 1 s`` per page: Spillway's
``interval_join`` beside Quix Streams' ``join_interval``, like for like; every pair once,
checked exactly against :mod:`bench.joinref`.

Results: ``bench/results/windowpeers-<UTC time>.json``; a table on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from bench import joinengines, joinref, procstat, winref, workload
from bench.stats import ratios, spread
from bench.suitebroker import start_broker
from bench.winengines import ENV_PREFIX, WinConfig, page_of
from bench.winmeasure import run_quix, run_spillway

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"
ENGINES = ("spillway", "quix")
KINDS = ("hopping", "sliding", "interval")  # windows (bench.winengines), a join
FLUSH_AFTER_MS = 120_000  # the per-key closing records lie this far past the last event


@dataclass(frozen=True)
class Settings:
    """Sizes and repetitions of one run."""

    rounds: int = 3
    records: int = 100_000
    step_ms: int = 1  # event time between consecutive events
    size_ms: int = 60_000
    hop_ms: int = 20_000  # hopping windows (both engines)
    slide_ms: int = 10_000  # Spillway's (Flink's) sliding windows
    join_backward_ms: int = 1_000  # interval join: l.ts - backward <= r.ts <= l.ts + forward
    join_forward_ms: int = 1_000
    right_every: int = 4  # one right record per this many left ones (same time span)
    timeout_s: float = 600.0
    kinds: tuple[str, ...] = KINDS
    engines: tuple[str, ...] = ENGINES


def _say(text: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {text}", file=sys.stderr, flush=True)


# -- input and references ---------------------------------------------------------------


def make_input(records: int, base_ms: int, step_ms: int) -> list[dict[str, Any]]:
    """Events 0..records-1 with ``ts = base + i*step``, then one closing event per page
    :data:`FLUSH_AFTER_MS` after the last (so Quix's per-key ``final()`` closes every
    window holding a measured event; Spillway fires all windows at the end of input)."""
    events = []
    for i in range(records):
        e = workload.make_event(i)
        e["ts"] = base_ms + i * step_ms
        events.append(e)
    flush_ts = base_ms + (records - 1) * step_ms + FLUSH_AFTER_MS
    for j, section in enumerate(workload.SECTIONS):
        for n in range(workload.PAGES_PER_SECTION):
            seq = records + j * workload.PAGES_PER_SECTION + n
            url = f"https://example.com/{section}/{n}?ref=0"
            events.append({"seq": seq, "user": n, "url": url, "ts": flush_ts, "agent": ""})
    return events


def entries(events: Sequence[dict[str, Any]]) -> list[winref.Entry]:
    """``(page, ts, user)`` of every event, in input order."""
    return [(page_of(e), int(e["ts"]), int(e["user"])) for e in events]


def expected(engine: str, kind: str, s: Settings, ents: list[winref.Entry]) -> Counter[Any]:
    """The exact output of ``engine`` for window ``kind`` over ``ents``."""
    if kind == "hopping":
        every = winref.hopping(ents, s.size_ms, s.hop_ms)
    elif engine == "spillway":
        every = winref.hopping(ents, s.size_ms, s.slide_ms)  # Flink's sliding = hopping
    else:
        every = winref.record_aligned(ents, s.size_ms)
    if engine == "spillway":
        return every  # the end of the bounded input fires every window
    latest = winref.latest_per_key(ents)
    return winref.closed_by_key(every, latest, grace=0, closed_end=kind == "sliding")


def preload(bootstrap: str, topic: str, events: Sequence[dict[str, Any]]) -> None:
    """Write ``events`` in order to partition 0 of ``topic``, each with its event time
    ``ts`` as the Kafka timestamp (Quix consumes co-partitioned topics in timestamp order,
    which its interval join needs).

    Idempotent: without it librdkafka may reorder a partition's messages when it retries
    a request (seen on the loaded machine), and the references assume input order.
    """
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "acks": "all",
            "enable.idempotence": True,
        }
    )
    for e in events:
        while True:
            try:
                producer.produce(topic, workload.encode(e), partition=0, timestamp=e["ts"])
                break
            except BufferError:
                producer.poll(0.1)
    left = producer.flush(60)
    del producer  # its connections close now, not when the broker is gone
    if left != 0:
        raise RuntimeError(f"could not write all {len(events)} input records to {topic}")


def _consume_all(bootstrap: str, topic: str, group: str) -> list[Any]:
    """Every committed message of every partition of ``topic``, in partition order."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        parts = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        done: set[int] = set()
        out: list[Any] = []
        while len(done) < len(parts):
            msgs = consumer.consume(5000, 10.0)
            if not msgs:
                raise RuntimeError(f"reading {topic}: no end of partition within 10 s")
            for m in msgs:
                err = m.error()
                if err is None:
                    out.append(m)
                elif err.code() == KafkaError._PARTITION_EOF:
                    done.add(m.partition() or 0)
                else:
                    raise RuntimeError(f"reading {topic}: {err}")
        return out
    finally:
        consumer.close()


def check_input(bootstrap: str, topic: str, events: Sequence[dict[str, Any]]) -> None:
    """Raise ``RuntimeError`` unless ``topic`` holds exactly ``events``, in order."""
    seqs = [
        int(json.loads(m.value() or b"{}")["seq"])
        for m in _consume_all(bootstrap, topic, topic + "-verify")
    ]
    want = [int(e["seq"]) for e in events]
    if seqs != want:
        first = next((i for i, (a, b) in enumerate(zip(seqs, want, strict=False)) if a != b), None)
        raise RuntimeError(
            f"input topic {topic} holds {len(seqs)} records, not the {len(want)} written in "
            f"order (first difference at offset {first})"
        )


def read_pairs(bootstrap: str, topic: str, group: str) -> list[joinref.Pair]:
    """Every committed output row of the interval join as a :class:`~bench.joinref.Pair`."""
    out = []
    for m in _consume_all(bootstrap, topic, group):
        row = json.loads(m.value() or b"{}")
        out.append(joinref.Pair((m.key() or b"").decode(), int(row["l"]), int(row["r"])))
    return out


def read_windows(bootstrap: str, topic: str, group: str) -> list[winref.Window]:
    """Every committed output row as a :class:`~bench.winref.Window` (key from the message
    key; Spillway also writes it in the value)."""
    out = []
    for m in _consume_all(bootstrap, topic, group):
        row = json.loads(m.value() or b"{}")
        key = (m.key() or b"").decode()
        out.append(winref.Window(key, int(row["start"]), int(row["end"]), int(row["value"])))
    return out


# -- rounds, summary, main --------------------------------------------------------------


def _create(admin: AdminClient, topic: str) -> None:
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)


def _delete_matching(admin: AdminClient, names: Sequence[str]) -> None:
    topics = [t for t in admin.list_topics(timeout=10).topics if any(n in t for n in names)]
    if topics:
        for f in admin.delete_topics(topics).values():
            with contextlib.suppress(Exception):  # tidying up, not a result
                f.result(30)


def engine_run(
    engine: str, kind: str, ents: list[winref.Entry], ctx: dict[str, Any], s: Settings
) -> dict[str, Any]:
    """One engine, one kind, over the round's input; figures and output check."""
    admin: AdminClient = ctx["admin"]
    name = f"bench-win-{engine}-{kind}-{uuid.uuid4().hex[:8]}"  # job id / consumer group
    output = name + "-out"
    _create(admin, output)
    gate = Path(tempfile.mkdtemp(prefix="winbench-gate-")) / "go"
    join = kind == "interval"
    size, hop = (
        (s.join_backward_ms, s.join_forward_ms)
        if join
        else (s.size_ms, s.hop_ms if kind == "hopping" else s.slide_ms)
    )
    cfg = WinConfig(kind, size, hop, ctx["input"], output, gate)
    want: Counter[Any] = ctx["pairs"] if join else expected(engine, kind, s, ents)
    try:
        args = (ctx["bootstrap"], ctx["broker_pid"], cfg, s.timeout_s, name, ctx["log"])
        if engine == "spillway" and join:
            more = {ENV_PREFIX + "RIGHT": ctx["right"]}
            m, info = run_spillway(*args, module="bench.joinengines", more_env=more)
        elif engine == "spillway":
            m, info = run_spillway(*args)
        elif join:
            extra = ("--right", ctx["right"])
            m, info = run_quix(
                *args, windows=sum(want.values()), module="bench.joinengines", more_args=extra
            )
        else:
            m, info = run_quix(*args, windows=sum(want.values()))
        check = read_pairs if join else read_windows
        verdict = winref.check(check(ctx["bootstrap"], output, output + "-check"), want)
    finally:
        shutil.rmtree(gate.parent, ignore_errors=True)
        _delete_matching(admin, [name])  # its output, channels, changelogs, repartition
    records = len(ents) + (len(ctx["right_events"]) if join else 0)
    return {
        "engine": engine,
        "kind": kind,
        "window": _window_text(engine, kind, s),
        "records": records,
        "name": name,
        "records_per_s": records / m.seconds,
        "per_cpu_s": m.per_cpu_second(records),
        **m.as_dict(),
        **info,
        "output": asdict(verdict),
    }


def _window_text(engine: str, kind: str, s: Settings) -> str:
    if kind == "interval":
        return f"interval join -{s.join_backward_ms} ms..+{s.join_forward_ms} ms"
    if kind == "hopping":
        return f"hopping {s.size_ms // 1000} s every {s.hop_ms // 1000} s"
    if engine == "spillway":
        return f"sliding (Flink: hopping) {s.size_ms // 1000} s every {s.slide_ms // 1000} s"
    return f"sliding (record-aligned) {s.size_ms // 1000} s"


def one_round(i: int, ctx: dict[str, Any], s: Settings) -> dict[str, Any]:
    """Pre-load a fresh input topic, then every kind × engine (order rotating by round)."""
    now_ms = int(time.time() * 1000)
    base = now_ms - now_ms % s.size_ms
    events = make_input(s.records, base, s.step_ms)
    ents = entries(events)
    topic = f"bench-win-in-{uuid.uuid4().hex[:8]}"
    right = topic + "-right"
    _create(ctx["admin"], topic)
    out: dict[str, Any] = {"base_ms": base, "runs": []}
    try:
        t0 = time.monotonic()
        preload(ctx["bootstrap"], topic, events)
        check_input(ctx["bootstrap"], topic, events)
        if "interval" in s.kinds:  # the join's right input, over the same time span
            rights = joinengines.right_events(
                s.records // s.right_every, base, s.step_ms * s.right_every
            )
            _create(ctx["admin"], right)
            preload(ctx["bootstrap"], right, rights)
            check_input(ctx["bootstrap"], right, rights)
            ctx.update(right=right, right_events=rights)
            ctx["pairs"] = joinref.interval(
                [(page_of(e), int(e["ts"]), int(e["seq"])) for e in events],
                [(page_of(e), int(e["ts"]), int(e["seq"])) for e in rights],
                s.join_backward_ms,
                s.join_forward_ms,
            )
        _say(f"round {i + 1}: {len(events):,} records pre-loaded in {time.monotonic() - t0:.1f} s")
        ctx["input"] = topic
        pairs = [(k, e) for k in s.kinds for e in s.engines]
        for kind, engine in pairs[i % len(pairs) :] + pairs[: i % len(pairs)]:
            _say(f"round {i + 1}: {engine} {kind} ...")
            r = engine_run(engine, kind, ents, ctx, s)
            _say(
                f"round {i + 1}: {engine} {kind}: {r['records_per_s']:,.0f} rec/s, "
                f"{r['per_cpu_s']:,.0f} rec/CPU-s, output exact={r['output']['ok']} "
                f"({r['output']['rows']:,} rows), load {r['load_before'][0]:.1f}"
            )
            out["runs"].append(r)
        return out
    finally:
        _delete_matching(ctx["admin"], [topic])  # the right topic too (a prefix match)


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per kind and engine: medians (min–max) over rounds; spillway/quix run by run."""
    out: dict[str, Any] = {}
    figures = ("records_per_s", "per_cpu_s", "seconds", "cpu_s", "broker_cpu_s")
    kinds = sorted({r["kind"] for rd in rounds for r in rd["runs"]})
    for kind in kinds:
        per: dict[str, list[dict[str, Any]]] = {}
        for rd in rounds:
            for r in rd["runs"]:
                if r["kind"] == kind:
                    per.setdefault(r["engine"], []).append(r)
        entry: dict[str, Any] = {
            e: {
                "window": rs[0]["window"],
                "exact": all(r["output"]["ok"] for r in rs),
                **{f: asdict(spread([r[f] for r in rs])) for f in figures},
            }
            for e, rs in per.items()
        }
        if {"spillway", "quix"} <= per.keys() and len(per["spillway"]) == len(per["quix"]):
            entry["spillway/quix"] = {
                f: asdict(
                    spread(ratios([r[f] for r in per["spillway"]], [r[f] for r in per["quix"]]))
                )
                for f in ("records_per_s", "per_cpu_s")
            }
            entry["like_for_like"] = kind in ("hopping", "interval")
        out[kind] = entry
    return out


def table(summary: dict[str, Any]) -> str:
    """The short Markdown table of a summary."""

    def mm(d: dict[str, Any], fmt: str = "{:,.0f}") -> str:
        return f"{fmt.format(d['median'])} ({fmt.format(d['low'])}–{fmt.format(d['high'])})"

    lines = [
        "| kind | engine | window | records/s | records/CPU-s (broker incl.) | exact |",
        "|---|---|---|---|---|---|",
    ]
    for kind, entry in summary.items():
        for engine in ENGINES:
            if engine in entry:
                e = entry[engine]
                lines.append(
                    f"| {kind} | {engine} | {e['window']} | {mm(e['records_per_s'])} | "
                    f"{mm(e['per_cpu_s'])} | {'yes' if e['exact'] else 'NO'} |"
                )
        if "spillway/quix" in entry:
            r = entry["spillway/quix"]
            note = "" if entry["like_for_like"] else " (different window definitions)"
            lines.append(
                f"| {kind} | spillway/quix{note} | | {mm(r['records_per_s'], '{:.2f}')} | "
                f"{mm(r['per_cpu_s'], '{:.2f}')} | |"
            )
    return "\n".join(lines)


def run(s: Settings, command: str) -> Path:
    """Every round on one throw-away broker; writes and returns the result JSON."""
    started = datetime.now(UTC)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stem = RESULTS_DIR / f"windowpeers-{started:%Y%m%dT%H%M%SZ}"
    versions = {}
    for dist in ("pyspark", "quixstreams", "confluent-kafka"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[dist] = importlib.metadata.version(dist)
    doc: dict[str, Any] = {
        "format": 1,
        "command": command,
        "started_utc": started.isoformat(),
        "settings": asdict(s),
        "versions": versions,
        "cpus": os.cpu_count(),
        "load_before": procstat.load_average(),
        "note": "smoke-level figures on a shared 2-core machine; see the load averages",
    }
    path = stem.with_suffix(".json")
    with contextlib.ExitStack() as stack:
        bootstrap, broker_pid, _log_dirs = start_broker(stack)
        log = stack.enter_context(open(stem.with_suffix(".log"), "w"))
        ctx: dict[str, Any] = {
            "bootstrap": bootstrap,
            "broker_pid": broker_pid,
            "admin": AdminClient({"bootstrap.servers": bootstrap}),
            "log": log,
        }
        doc["rounds"] = []
        for i in range(s.rounds):
            doc["rounds"].append(one_round(i, ctx, s))
            _write(path, doc)  # each finished round is kept if a later one fails
    doc["load_after"] = procstat.load_average()
    doc["summary"] = summarise(doc["rounds"])
    _write(path, doc)
    print(table(doc["summary"]))
    return path


def _write(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.replace(path)


def parse_args(argv: Sequence[str] | None) -> Settings:
    """Command-line options (defaults: the committed run)."""
    d = Settings()
    ap = argparse.ArgumentParser(prog="python -m bench.windowpeers", description=__doc__)
    ap.add_argument("--rounds", type=int, default=d.rounds)
    ap.add_argument("--records", type=int, default=d.records)
    ap.add_argument("--kinds", default=",".join(d.kinds), help="subset of " + ",".join(KINDS))
    ap.add_argument("--engines", default=",".join(d.engines), help="subset of " + ",".join(ENGINES))
    ap.add_argument("--timeout", type=float, default=d.timeout_s, help="per engine run (s)")
    a = ap.parse_args(argv)
    kinds = tuple(k for k in a.kinds.split(",") if k)
    engines = tuple(e for e in a.engines.split(",") if e)
    if bad := [k for k in kinds if k not in KINDS] + [e for e in engines if e not in ENGINES]:
        ap.error(f"unknown kind or engine {bad}")
    if a.rounds < 1 or a.records < 1:
        ap.error("--rounds and --records must be >= 1")
    return Settings(
        rounds=a.rounds, records=a.records, timeout_s=a.timeout, kinds=kinds, engines=engines
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m bench.windowpeers`` (``make bench-windows-peers``)."""
    s = parse_args(argv)
    command = "python -m bench.windowpeers " + " ".join(sys.argv[1:] if argv is None else argv)
    path = run(s, command.strip())
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
