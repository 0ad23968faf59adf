"""``make bench``: Spillway beside its peers, in one run, on one throw-away local broker.

* **B0 ceiling** — Kafka's ``ProducerPerformance`` / ``ConsumerPerformance`` (kafka-tools
  3.9.1), 200-byte records (:mod:`bench.kafkatools`).
* **B1 throughput** — the workload of :mod:`bench.workload` in Spillway, a hand-written
  confluent-kafka loop, Quix Streams, Kafka Streams and Spark Structured Streaming
  (:mod:`bench.peers`), all reading the same pre-loaded input topic, round by round.
* **B4 restore** — :mod:`bench.restore`.
* **B3 localized recovery** — :mod:`bench.localized` (one subtask SIGKILLed vs the whole
  job killed and restarted from its checkpoints, on Spark local mode).
* **B1c columnar** — :mod:`bench.columnarrun` (the columnar path on Spark beside
  the record path and the peers, and a stateless pipeline through one channel).
* **B6 rescale** — :mod:`bench.rescale` (a live rescale of a keyed count beside a whole-job
  savepoint restart; opt-in: ``--parts b6``, or ``python -m bench.rescale`` on its own).
* **B5** is ``make bench-checkpoints`` (:mod:`bench.checkpoints`), run on its own.

Every figure is the median of ``--runs`` runs with min–max; ratios are taken run by run
(same round, same machine state) and then summarised. Results go to
``bench/results/suite-<UTC time>.json`` (+ PNG plots when matplotlib is importable) and
the Markdown tables into ``docs/benchmarks.md`` between the suite's markers.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from bench import (
    ceiling,
    columnarrun,
    kafkatools,
    kstreams,
    kstreamsb3,
    latency,
    localized,
    measure,
    peers,
    procstat,
    report,
    rescale,
    rescalestats,
    restore,
    sparkkafka,
    sssb3,
    steadyparts,
    steadyrun,
    workload,
)
from bench.channels import machine
from bench.stats import ratios, spread
from bench.suitebroker import start_broker
from bench.suitesettings import PARTITIONS, Settings
from spillway.devtools.localbroker.jars import kafka_version

RESULTS_DIR = Path(__file__).resolve().parent / "results"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
# Environment variables recorded with the machine (a fixed list: the environment may hold
# credentials, which have no business in a committed result).
ENV_RECORDED = ("JAVA_HOME", "LANG", "LC_ALL", "PYTHONHASHSEED", "SPARK_HOME", "SPARK_LOCAL_IP")


def _create(admin: AdminClient, topic: str, partitions: int = PARTITIONS) -> None:
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def _delete(admin: AdminClient, topics: Sequence[str]) -> None:
    if topics:
        for f in admin.delete_topics(list(topics)).values():
            with contextlib.suppress(Exception):  # deleting is tidying up, not a result
                f.result(30)


def _say(text: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {text}", file=sys.stderr, flush=True)


# -- B0 ---------------------------------------------------------------------------------


def b0_round(bootstrap: str, broker_pid: int, admin: AdminClient, s: Settings) -> dict[str, Any]:
    """One producer perf test into a fresh topic, then one consumer perf test reading it."""
    lib = kafkatools.resolve_tools()
    topic = f"bench-b0-{uuid.uuid4().hex[:8]}"
    _create(admin, topic)
    try:
        out, pm = measure.run_tool(
            kafkatools.producer_command(lib, bootstrap, topic, s.b0_records, workload.RECORD_BYTES),
            broker_pid,
            s.engine_timeout_s,
        )
        prod = kafkatools.parse_producer(out)
        out, cm = measure.run_tool(
            kafkatools.consumer_command(lib, bootstrap, topic, s.b0_records, topic + "-g"),
            broker_pid,
            s.engine_timeout_s,
        )
        cons = kafkatools.parse_consumer(out)
    finally:
        _delete(admin, [topic])
    return {
        "producer": {**asdict(prod), **pm.as_dict(), "per_cpu_s": pm.per_cpu_second(prod.records)},
        "consumer": {**asdict(cons), **cm.as_dict(), "per_cpu_s": cm.per_cpu_second(cons.records)},
    }


# -- B1 ---------------------------------------------------------------------------------


def b1_engine(
    engine: str,
    bootstrap: str,
    broker_pid: int,
    admin: AdminClient,
    input_topic: str,
    s: Settings,
    log: TextIO,
    guarantee: str = "exactly-once",
    commit_interval_s: float | None = None,
) -> dict[str, Any]:
    """One engine over the whole input topic into a fresh output topic; figures + check."""
    name = f"bench-{engine}-{uuid.uuid4().hex[:8]}"
    output = name + "-out"
    _create(admin, output)
    workdir = tempfile.mkdtemp(prefix=name + "-")
    interval = s.commit_interval_s if commit_interval_s is None else commit_interval_s
    args = [
        engine,
        "--bootstrap",
        bootstrap,
        "--input",
        input_topic,
        "--output",
        output,
        "--records",
        str(s.b1_records),
        "--commit-interval",
        str(interval),
        "--workdir",
        workdir,
        "--name",
        name,
        "--guarantee",
        guarantee,
    ]
    if engine.startswith("sss"):
        args += ["--connector", ",".join(str(p) for p in sparkkafka.connector_jars())]
    try:
        run = measure.run_engine(args, broker_pid, s.engine_timeout_s, log)
        check = workload.check_rows(
            workload.read_rows(bootstrap, output, name + "-check"),
            workload.reference(s.b1_records),
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        _delete(admin, [output, *_topics_of(admin, name)])
    m = run.measured
    measured = s.b1_records - run.before_ready  # Structured Streaming: after its 1st batch
    if measured <= 0:
        raise measure.MeasureError(f"{engine}: all {s.b1_records} records were in its first batch")
    return {
        "engine": engine,
        "guarantee": guarantee,
        "commit_interval_s": interval,
        "records": s.b1_records,
        "records_measured": measured,
        "records_per_s": measured / m.seconds,
        "per_cpu_s": m.per_cpu_second(measured),
        **m.as_dict(),
        "output": asdict(check),
    }


def _topics_of(admin: AdminClient, name: str) -> list[str]:
    """Topics an engine run created for itself (changelogs, repartition, channels)."""
    return [t for t in admin.list_topics(timeout=10).topics if name in t and t != name + "-out"]


def b1_round(
    bootstrap: str, broker_pid: int, admin: AdminClient, s: Settings, log: TextIO, i: int
) -> dict[str, Any]:
    """Pre-load one input topic and run every engine over it (the order rotates by round)."""
    order = s.engines[i % len(s.engines) :] + s.engines[: i % len(s.engines)]
    topic = f"bench-b1-{uuid.uuid4().hex[:8]}"
    _create(admin, topic)
    try:
        t0 = time.monotonic()
        workload.preload(bootstrap, topic, s.b1_records, PARTITIONS)
        _say(f"B1: {s.b1_records:,} records pre-loaded in {time.monotonic() - t0:.1f} s")
        out: dict[str, Any] = {}
        for engine in order:
            _say(f"B1: {engine} ...")
            out[engine] = b1_engine(engine, bootstrap, broker_pid, admin, topic, s, log)
            r = out[engine]
            _say(
                f"B1: {engine}: {r['records_per_s']:,.0f} rec/s, {r['per_cpu_s']:,.0f} rec/CPU-s,"
                f" output ok={r['output']['final_counts_ok']}"
                f" once={r['output']['every_update_once']} fields={r['output']['fields_ok']}"
            )
        return out
    finally:
        _delete(admin, [topic])


# -- summaries --------------------------------------------------------------------------


def summarise(doc: dict[str, Any]) -> dict[str, Any]:
    """Medians (min–max) of every figure, and run-by-run ratios, of the rounds in ``doc``."""
    out: dict[str, Any] = {}
    if b0 := doc.get("b0"):
        out["b0"] = {
            side: {
                k: asdict(spread([r[side][k] for r in b0]))
                for k in ("records_per_s", "per_cpu_s", "peak_rss_bytes")
            }
            for side in ("producer", "consumer")
        }
        out["b0"]["consumer"]["fetch_records_per_s"] = asdict(
            spread([r["consumer"]["fetch_records_per_s"] for r in b0])
        )
    if b1 := doc.get("b1"):
        engines = [e for e in peers.ENGINES if all(e in r for r in b1)]
        figures = ("records_per_s", "per_cpu_s", "peak_rss_bytes", "cpu_s", "broker_cpu_s")
        out["b1"] = {
            e: {k: asdict(spread([r[e][k] for r in b1])) for k in figures} for e in engines
        }
        mine = [e for e in ("spillway", "spillway-chained") if e in engines]
        if mine:
            out["b1_ratios"] = {
                f"{s}/{e}": {
                    k: asdict(spread(ratios([r[s][k] for r in b1], [r[e][k] for r in b1])))
                    for k in ("records_per_s", "per_cpu_s")
                }
                for s in mine
                for e in engines
                if not e.startswith("spillway")
            }
    if b0s := doc.get("b0s"):
        out["b0s"] = ceiling.summarise(b0s)
    if b1s := doc.get("b1s"):
        out["b1s"] = steadyrun.summarise(b1s)
    if b1c := doc.get("b1c"):
        out["b1c"] = columnarrun.summarise(b1c)
    if b3k := doc.get("b3k"):
        out["b3k"] = kstreamsb3.summarise(b3k)
    if b3s := doc.get("b3s"):
        out["b3s"] = sssb3.summarise(b3s)
    if b4 := doc.get("b4"):
        out["b4"] = restore.summarise(b4)
    if b2 := doc.get("b2"):
        out["b2"] = latency.summarise(b2)
    if b2t := doc.get("b2_throughput"):
        out["b2_throughput"] = b2_overhead(b2t)
    if b3 := doc.get("b3"):
        out["b3"] = localized.summarise(b3)
    if b6 := doc.get("b6"):
        out["b6"] = rescalestats.summarise(b6)
    return out


def b2_overhead(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per setting: records/s and per CPU-second; per interval: exactly-once/at-least-once."""
    settings = [k for k in rounds[0] if k not in ("load_before", "load_after")]
    out: dict[str, Any] = {
        k: {f: asdict(spread([r[k][f] for r in rounds])) for f in ("records_per_s", "per_cpu_s")}
        for k in settings
    }
    for k in settings:
        guarantee, interval = k.split("@")
        other = f"at-least-once@{interval}"
        if guarantee == "exactly-once" and other in rounds[0]:
            out[f"ratio@{interval}"] = {
                f: asdict(spread(ratios([r[k][f] for r in rounds], [r[other][f] for r in rounds])))
                for f in ("records_per_s", "per_cpu_s")
            }
    return out


def describe_machine(broker_pid: int) -> dict[str, Any]:
    """``bench.channels.machine()`` plus Java, the peers' versions and selected env vars."""
    info = machine()
    versions = {}
    for dist in ("pyspark", "quixstreams", "matplotlib"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[dist] = importlib.metadata.version(dist)
    info["versions"] = versions
    info["kafka"] = kafkatools.VERSION  # the perf tools' release (B0)
    info["broker_kafka"] = kafka_version()  # the broker's, and Kafka Streams'
    info["spark_kafka_connector"] = sparkkafka.CONNECTOR
    info["env"] = {k: os.environ[k] for k in ENV_RECORDED if k in os.environ}
    info["broker_pid"] = broker_pid
    with contextlib.suppress(OSError, IndexError):
        java = subprocess_text(["java", "-version"])
        info["java"] = java.splitlines()[0]
    return info


def subprocess_text(command: list[str]) -> str:
    """stdout+stderr of a short command."""
    import subprocess

    r = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    return r.stdout + r.stderr


# -- main -------------------------------------------------------------------------------


PARTS: dict[str, str] = {
    "b0": "B0 ceiling",
    "b0s": "B0s ceiling in steady state",
    "b1": "B1 throughput",
    "b1s": "B1s steady state, as users run it",
    "b1c": "B1c the columnar path on Spark",
    "b4": "B4 restore",
    "b2": "B2 latency per hop",
    "b3": "B3 localized recovery",
    "b3k": "B3k Kafka Streams, one of two instances SIGKILLed",
    "b3s": "B3s Structured Streaming, one executor of a standalone cluster SIGKILLed",
    "b6": "B6 rescale, live vs whole job",
}


def b2_guarantees() -> list[str]:
    """exactly-once, and at-least-once where the runner offers it (``RunOptions.guarantee``)."""
    from dataclasses import fields

    from spillway.recovery.runtime.runner import RunOptions

    has = "guarantee" in {f.name for f in fields(RunOptions)}
    return ["exactly-once", "at-least-once"] if has else ["exactly-once"]


def b2_throughput(
    bootstrap: str, broker_pid: int, admin: AdminClient, s: Settings, log: TextIO, i: int
) -> dict[str, Any]:
    """Spillway over one pre-loaded topic per guarantee and commit interval (B1 figures)."""
    topic = f"bench-b2-{uuid.uuid4().hex[:8]}"
    _create(admin, topic)
    sized = replace(s, b1_records=s.b2_records)
    out: dict[str, Any] = {}
    try:
        workload.preload(bootstrap, topic, s.b2_records, PARTITIONS)
        settings = [(g, iv) for g in b2_guarantees() for iv in s.b2_intervals]
        k = i % len(settings)
        for guarantee, interval in settings[k:] + settings[:k]:
            _say(f"B2: round {i + 1}: spillway {guarantee}, commits every {interval} s")
            r = b1_engine(
                "spillway", bootstrap, broker_pid, admin, topic, sized, log, guarantee, interval
            )
            out[f"{guarantee}@{interval:g}"] = r
        return out
    finally:
        _delete(admin, [topic])


def b2_latency(
    bootstrap: str, admin: AdminClient, s: Settings, log: TextIO
) -> list[dict[str, Any]]:
    """``s.runs`` paced runs per guarantee and commit interval, settings interleaved."""
    out = []
    for i in range(s.runs):
        for guarantee in b2_guarantees():
            for interval in s.b2_intervals:
                _say(f"B2: round {i + 1} of {s.runs}: {guarantee}, commits every {interval} s")
                load0 = procstat.load_average()
                r = latency.b2_run(
                    bootstrap, admin, interval, guarantee, s.b2_rate, s.b2_seconds, log
                )
                r["load_before"], r["load_after"] = load0, procstat.load_average()
                out.append(r)
    return out


def run(s: Settings, command: str, smoke_dir: Path | None = None) -> Path:
    """Every part of the suite, ``s.runs`` rounds each; returns the JSON written.

    ``smoke_dir``: a trial run: its JSON and plots go there and docs/benchmarks.md is left
    as it is (its figures come from full runs only).
    """
    started = datetime.now(UTC)
    t_start = time.monotonic()
    out_dir = smoke_dir or RESULTS_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"suite-{started:%Y%m%dT%H%M%SZ}"
    doc: dict[str, Any] = {
        "format": 1,
        "command": command,
        "started_utc": started.isoformat(),
        "settings": asdict(s),
    }
    with contextlib.ExitStack() as stack:
        bootstrap, broker_pid, log_dirs = start_broker(stack)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        doc["machine"] = describe_machine(broker_pid)
        log = stack.enter_context(open(stem.with_suffix(".log"), "w"))
        rounds: dict[str, Callable[[int], dict[str, Any]]] = {
            "b0": lambda i: b0_round(bootstrap, broker_pid, admin, s),
            "b1": lambda i: b1_round(bootstrap, broker_pid, admin, s, log, i),
            "b4": lambda i: restore.b4_round(bootstrap, broker_pid, admin, s.b4_records),
            "b3s": lambda i: sssb3.round_on(bootstrap, admin, sssb3.Settings(), log),
            "b3": lambda i: localized.b3_round(
                bootstrap, admin, localized.Settings(rate=s.b3_rate, kills=s.b3_kills), log
            ),
            "b6": lambda i: rescale.one_round(
                bootstrap,
                rescale.records_for(s.b6_keys, s.b6_rate),
                s.b6_keys,
                s.b6_rate,
                Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="spillway-b6-"))),
            ),
        }
        if (
            ("b1" in s.parts and "kstreams" in s.engines)
            or ("b1s" in s.parts and "kstreams" in s.b1s_engines)
            or ("b1c" in s.parts and "kstreams" in s.b1c_engines)
            or "b3k" in s.parts
        ):
            kstreams.build()  # Maven, the first time: before any round, not in one
        rounds.update(
            steadyparts.rounds(
                steadyparts.Broker(bootstrap, broker_pid, log_dirs, admin),
                s,
                log,
                stack,
                lambda topic: _create(admin, topic),
                lambda topics: _delete(admin, topics),
                _say,
            )
        )
        for part in s.parts:
            if part == "b2":  # paced latency runs: their own loop (see b2_latency)
                doc["b2_load_before"] = procstat.load_average()
                doc["b2"] = b2_latency(bootstrap, admin, s, log)
                doc["b2_throughput"] = []
                for i in range(s.runs):
                    load0 = procstat.load_average()
                    result = b2_throughput(bootstrap, broker_pid, admin, s, log, i)
                    result["load_before"], result["load_after"] = load0, procstat.load_average()
                    doc["b2_throughput"].append(result)
                continue
            if part == "b4":
                restore.preload_changelog_once(bootstrap, admin, s.b4_records)
            doc[part] = []
            for i in range(s.runs):
                _say(f"{PARTS[part]}: round {i + 1} of {s.runs}")
                load0 = procstat.load_average()
                result = rounds[part](i)
                result["load_before"], result["load_after"] = load0, procstat.load_average()
                doc[part].append(result)
        restore.drop_changelog(admin)
    doc["seconds"] = time.monotonic() - t_start
    doc["summary"] = summarise(doc)
    path = stem.with_suffix(".json")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.replace(path)
    plots = report.plot(doc, stem)
    if smoke_dir is None:
        report.update_docs(DOCS, doc, path, plots)
    return path


def _sizes(text: str) -> tuple[int, ...]:
    """The distinct sizes of a comma-separated list, ascending."""
    return tuple(sorted({int(n) for n in text.split(",") if n}))


def _names(text: str) -> tuple[str, ...]:
    """The names of a comma-separated list, in order."""
    return tuple(e for e in text.split(",") if e)


def parse_args(argv: Sequence[str] | None) -> Settings:
    """Command-line options (defaults: the committed ``make bench`` run)."""
    d = Settings()
    ap = argparse.ArgumentParser(prog="python -m bench.suite", description=__doc__)
    ap.add_argument("--runs", type=int, default=d.runs, help="rounds per part (>= 1)")
    ap.add_argument("--b0-records", type=int, default=d.b0_records)
    ap.add_argument("--b1-records", type=int, default=d.b1_records)
    ap.add_argument("--b4-records", type=int, default=d.b4_records)
    ap.add_argument("--b2-records", type=int, default=d.b2_records)
    ap.add_argument("--b2-seconds", type=float, default=d.b2_seconds)
    ap.add_argument("--b3-rate", type=float, default=d.b3_rate, help="B3 input records/s")
    ap.add_argument(
        "--b3-kills", type=int, default=d.b3_kills, help="B3 kills swept over the checkpoint cycle"
    )
    ap.add_argument(
        "--engines", default=",".join(d.engines), help="subset of " + ",".join(peers.ENGINES)
    )
    ap.add_argument("--parts", default=",".join(d.parts), help="subset of " + ",".join(PARTS))
    ap.add_argument(
        "--b1s-sizes",
        default=",".join(str(n) for n in d.b1s_sizes),
        help="B1s input sizes (>= 2 distinct)",
    )
    ap.add_argument(
        "--b0s-sizes",
        default=",".join(str(n) for n in d.b0s_sizes),
        help="B0s input sizes (>= 2 distinct)",
    )
    ap.add_argument(
        "--b1s-engines",
        default=",".join(d.b1s_engines),
        help="subset of " + ",".join(steadyrun.ENGINES),
    )
    ap.add_argument(
        "--slow-sizes",
        default=",".join(str(n) for n in d.slow_sizes),
        help="B1s and B1c input sizes of the slow engines (>= 2 distinct)",
    )
    ap.add_argument(
        "--slow-engines",
        default=",".join(d.slow_engines),
        help="the engines run at --slow-sizes in B1s and B1c",
    )
    ap.add_argument(
        "--b1c-sizes",
        default=",".join(str(n) for n in d.b1c_sizes),
        help="B1c input sizes (>= 2 distinct)",
    )
    ap.add_argument(
        "--b1c-engines",
        default=",".join(d.b1c_engines),
        help="subset of " + ",".join(columnarrun.ENGINES),
    )
    ap.add_argument(
        "--smoke",
        metavar="DIR",
        help="a trial run: results into DIR, docs/benchmarks.md left as it is",
    )
    ap.add_argument("--timeout", type=float, default=d.engine_timeout_s, help="per engine run (s)")
    a = ap.parse_args(argv)
    engines = _names(a.engines)
    parts = _names(a.parts)
    if bad := [e for e in engines if e not in peers.ENGINES] + [p for p in parts if p not in PARTS]:
        ap.error(f"unknown engine or part {bad}; engines: {peers.ENGINES}, parts: {tuple(PARTS)}")
    if a.runs < 1 or min(a.b0_records, a.b1_records, a.b4_records) < 1:
        ap.error("--runs and the record counts must be >= 1")
    b1s_sizes = _sizes(a.b1s_sizes)
    b0s_sizes = _sizes(a.b0s_sizes)
    b1s_engines = _names(a.b1s_engines)
    if len(b1s_sizes) < 2 or b1s_sizes[0] < 1 or len(b0s_sizes) < 2 or b0s_sizes[0] < 1:
        ap.error("--b1s-sizes and --b0s-sizes need two distinct sizes >= 1 each")
    if bad := [e for e in b1s_engines if e not in steadyrun.ENGINES]:
        ap.error(f"unknown B1s engine {bad}; B1s engines: {steadyrun.ENGINES}")
    b1c_sizes = _sizes(a.b1c_sizes)
    b1c_engines = _names(a.b1c_engines)
    slow_sizes = _sizes(a.slow_sizes)
    if len(b1c_sizes) < 2 or b1c_sizes[0] < 1 or len(slow_sizes) < 2 or slow_sizes[0] < 1:
        ap.error("--b1c-sizes and --slow-sizes need two distinct sizes >= 1 each")
    if bad := [e for e in b1c_engines if e not in columnarrun.ENGINES]:
        ap.error(f"unknown B1c engine {bad}; B1c engines: {columnarrun.ENGINES}")
    return Settings(
        runs=a.runs,
        b0_records=a.b0_records,
        b1_records=a.b1_records,
        engines=engines,
        b4_records=a.b4_records,
        b2_records=a.b2_records,
        b2_seconds=a.b2_seconds,
        b3_rate=a.b3_rate,
        b3_kills=a.b3_kills,
        engine_timeout_s=a.timeout,
        parts=parts,
        b1s_sizes=b1s_sizes,
        b1s_engines=b1s_engines,
        b0s_sizes=b0s_sizes,
        b1c_sizes=b1c_sizes,
        b1c_engines=b1c_engines,
        slow_engines=_names(a.slow_engines),
        slow_sizes=slow_sizes,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m bench.suite`` (``make bench``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    smoke: Path | None = None
    if "--smoke" in args:  # taken out here: Settings are the sizes, not where results go
        i = args.index("--smoke")
        if i + 1 >= len(args):
            raise SystemExit("--smoke needs a directory (a trial run's results go there)")
        smoke = Path(args[i + 1])
        del args[i : i + 2]
    s = parse_args(args)
    command = "python -m bench.suite " + " ".join(args)
    path = run(s, command.strip(), smoke)
    print(f"wrote {path}" + ("" if smoke else f" and {DOCS}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
