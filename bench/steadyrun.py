"""B1s, B1 as users run it: whole runs at two input sizes, fixed cost apart from per record.

Every engine runs the B1 workload (:mod:`bench.workload`) from start to exit, once per
input size, over topics pre-loaded once for all rounds:

``spillway-run``          ``spillway run bench.b1job:pipeline`` on Spark local mode (the
                          driver, Spark's JVM, the PySpark daemon and its workers: four
                          subtasks as four Spark tasks), as a user submits it;
``spillway-run-chained``  the same with ``--conf chaining=true`` (two chains);
``spillway-run-avro``     unchained with ``--channel-codec avro`` (Arrow IPC is the default);
``handwritten-orjson``    the hand-written confluent-kafka loop with orjson (the baseline of
                          record: ratios are taken against it);
``kstreams``              Kafka Streams (:mod:`bench.kstreams`);
``quix``                  Quix Streams;
``sss-python``            Structured Streaming with the count in Python
                          (``applyInPandasWithState``), RocksDB state store with changelog
                          checkpointing, many micro-batches (``maxOffsetsPerTrigger``).

The peers run as ``python -m bench.peers ENGINE`` with stdin closed, so they exit as soon
as they are done. CPU is that of the engine's whole process tree, sampled from ``/proc``
for its whole life (:func:`bench.measure.run_whole`), plus the broker's over the same
stretch. Per round and engine, a line through ``(records, CPU)`` gives the per-record cost
(slope) apart from the fixed cost (intercept; :mod:`bench.steady`); the same through
``(records, wall seconds)`` gives the steady-state records/s. Every engine writes one
update per input record, and every run's output is checked exactly
(:func:`bench.workload.check_rows`). For Spillway, the bytes its channel topics hold on
the broker after the run (:func:`wire_bytes`, record batches as sent: compression is off)
are divided by the records: wire bytes per record per channel.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

from bench import measure, steady, workload
from bench.stats import ratios, spread

ENGINES = (
    "spillway-run",
    "spillway-run-chained",
    "spillway-run-avro",
    "handwritten-orjson",
    "kstreams",
    "quix",
    "sss-python",
)
BASELINE = "handwritten-orjson"
REPO = Path(__file__).resolve().parent.parent


def spillway_command(
    bootstrap: str,
    input_topic: str,
    output: str,
    name: str,
    interval_s: float,
    chaining: bool,
    codec: str = "arrow",
) -> list[str]:
    """``spillway run`` of the B1 pipeline, the installed command next to this Python."""
    return [
        str(Path(sys.executable).parent / "spillway"),
        "run",
        "bench.b1job:pipeline",
        "--job-id",
        name,
        "--bootstrap",
        bootstrap,
        "--checkpoint-interval",
        repr(interval_s),
        "--progress",
        "off",
        "--channel-codec",
        codec,
        "--conf",
        f"input={input_topic}",
        "--conf",
        f"output={output}",
        "--conf",
        f"chaining={'true' if chaining else 'false'}",
    ]


def peer_command(
    engine: str,
    bootstrap: str,
    input_topic: str,
    output: str,
    records: int,
    name: str,
    interval_s: float,
    workdir: str,
) -> list[str]:
    """``python -m bench.peers ENGINE ...`` for one run (Structured Streaming: + connector)."""
    extra: list[str] = []
    if engine.startswith("sss"):
        from bench import sparkkafka

        extra = ["--connector", ",".join(str(p) for p in sparkkafka.connector_jars())]
    return [
        sys.executable,
        "-m",
        "bench.peers",
        engine,
        "--bootstrap",
        bootstrap,
        "--input",
        input_topic,
        "--output",
        output,
        "--records",
        str(records),
        "--commit-interval",
        repr(interval_s),
        "--workdir",
        workdir,
        "--name",
        name,
        *extra,
    ]


def command(
    engine: str,
    bootstrap: str,
    input_topic: str,
    output: str,
    records: int,
    name: str,
    interval_s: float,
    workdir: str,
) -> list[str]:
    """The command line of one run of ``engine`` (one of :data:`ENGINES`)."""
    if engine.startswith("spillway-run"):
        chaining = engine == "spillway-run-chained"
        codec = "avro" if engine == "spillway-run-avro" else "arrow"
        return spillway_command(bootstrap, input_topic, output, name, interval_s, chaining, codec)
    if engine not in ENGINES:
        raise ValueError(f"unknown B1s engine {engine!r}; one of {ENGINES}")
    return peer_command(engine, bootstrap, input_topic, output, records, name, interval_s, workdir)


def run_once(
    engine: str,
    bootstrap: str,
    broker_pid: int,
    input_topic: str,
    records: int,
    interval_s: float,
    timeout_s: float,
    log: TextIO,
    create: Callable[[str], None],
    drop: Callable[[str], None],
    log_dirs: Path | None = None,
    make_command: Callable[..., list[str]] | None = None,
    judge: Callable[[list[tuple[bytes | None, bytes | None]], int], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One whole run of ``engine`` over ``input_topic``: measured figures and output check.

    ``create(topic)`` makes the output topic; ``drop(name)`` deletes every topic whose
    name holds ``name`` (the output, and what the engine made for itself). ``log_dirs``:
    the broker's, to weigh Spillway's channel topics (:func:`wire_bytes`).
    ``make_command`` (default :func:`command`, same arguments) and ``judge(rows,
    records)`` (default B1's :func:`bench.workload.check_rows`) let other parts reuse it.
    """
    name = f"bench-{engine}-{uuid.uuid4().hex[:8]}"
    output = name + "-out"
    create(output)
    workdir = tempfile.mkdtemp(prefix=name + "-")
    make = make_command or command
    try:
        cmd = make(engine, bootstrap, input_topic, output, records, name, interval_s, workdir)
        print(f"== {engine} {records} records: {' '.join(cmd)}", file=log, flush=True)
        m = measure.run_whole(cmd, broker_pid, timeout_s, log, cwd=str(REPO))
        rows = workload.read_rows(bootstrap, output, name + "-check")
        check = (
            judge(rows, records)
            if judge is not None
            else asdict(workload.check_rows(rows, workload.reference(records)))
        )
        wire: dict[str, int] = {}
        if log_dirs is not None and engine.startswith("spillway"):
            wire = wire_bytes(log_dirs, f"{CHANNEL_PREFIX}{name}.ch.")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        drop(name)
    out = {"engine": engine, "records": records, **m.as_dict(), "output": check}
    if wire:
        out["channel_bytes"] = wire
        out["channel_bytes_per_record"] = sum(wire.values()) / records
    return out


CHANNEL_PREFIX = "spillway."


def wire_bytes(log_dirs: Path, prefix: str) -> dict[str, int]:
    """Bytes of the log segments of every topic named ``prefix…`` in the broker's log.dirs.

    A partition's directory is ``<topic>-<partition>``; its ``*.log`` segments hold the
    record batches as the producers sent them (with batch headers and transaction
    markers). Returns topic → bytes over all its partitions.
    """
    out: dict[str, int] = {}
    for part in log_dirs.glob(prefix + "*"):
        topic, sep, index = part.name.rpartition("-")
        if not (part.is_dir() and sep and index.isdigit()):
            continue
        out[topic] = out.get(topic, 0) + sum(f.stat().st_size for f in part.glob("*.log"))
    return out


def fit_round(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Fixed and per-record cost of one engine's runs of one round (>= 2 sizes). Pure.

    CPU is the engine's tree plus the broker. ``per_cpu_s`` = records per CPU-second in
    steady state, ``records_per_s`` = records per second of wall time in steady state.
    """
    cpu = steady.fit([(r["records"], r["cpu_s"] + r["broker_cpu_s"]) for r in runs])
    wall = steady.fit([(r["records"], r["seconds"]) for r in runs])
    largest = max(runs, key=lambda r: r["records"])
    return {
        "channel_bytes_per_record": largest.get("channel_bytes_per_record"),
        "fixed_cpu_s": cpu.fixed,
        "cpu_us_per_record": cpu.per_record * 1e6,
        "per_cpu_s": cpu.per_unit,
        "fixed_s": wall.fixed,
        "records_per_s": wall.per_unit,
        "peak_rss_bytes": max(r["peak_rss_bytes"] for r in runs),
        "output_ok": all(
            r["output"]["every_update_once"] and r["output"]["fields_ok"] for r in runs
        ),
    }


FIGURES = (
    "channel_bytes_per_record",
    "per_cpu_s",
    "cpu_us_per_record",
    "fixed_cpu_s",
    "records_per_s",
    "fixed_s",
    "peak_rss_bytes",
)


def summarise(
    rounds: Sequence[dict[str, Any]],
    all_engines: Sequence[str] = ENGINES,
    pairs: Sequence[tuple[str, str]] | None = None,
) -> dict[str, Any]:
    """Median (min–max) per engine and figure; per-round ratios of records per CPU-second
    of ``pairs`` (default: every Spillway engine against every peer, the baseline first).
    Pure.

    A figure that is None in some round (a non-positive slope: a broken measurement) is
    left out of the summary rather than shown as a number.
    """
    engines = [e for e in all_engines if all(e in r["fits"] for r in rounds)]
    out: dict[str, Any] = {"engines": {}, "ratios": {}}
    for e in engines:
        figs: dict[str, Any] = {}
        for k in FIGURES:
            values = [r["fits"][e][k] for r in rounds]
            if all(v is not None for v in values):
                figs[k] = asdict(spread(values))
        figs["output_ok"] = all(r["fits"][e]["output_ok"] for r in rounds)
        out["engines"][e] = figs
    if pairs is None:
        mine = [e for e in engines if e.startswith("spillway")]
        peers = sorted((e for e in engines if e not in mine), key=lambda e: e != BASELINE)
        pairs = [(m, p) for m in mine for p in peers]
    for m, p in pairs:
        if m not in engines or p not in engines:
            continue
        num = [r["fits"][m]["per_cpu_s"] for r in rounds]
        den = [r["fits"][p]["per_cpu_s"] for r in rounds]
        if all(v is not None for v in num + den):
            out["ratios"][f"{m}/{p}"] = asdict(spread(ratios(num, den)))
    return out


def sizes_text(
    settings: Mapping[str, Any],
    key: str,
    engines: Iterable[str],
    label: Callable[[str], str] = str,
    note: str = "",
) -> str:
    """``settings[key]``'s sizes as text, and the slow engines' own sizes where ``engines``
    has any (``"1,000,000 and 5,000,000 (quix: 300,000 and 1,500,000<note>)"``). Pure."""

    def joined(sizes: Iterable[int]) -> str:
        return " and ".join(f"{n:,}" for n in sizes)

    text = joined(settings[key])
    slow = [label(e) for e in settings.get("slow_engines", ()) if e in engines]
    if slow and "slow_sizes" in settings:
        text += f" ({', '.join(slow)}: {joined(settings['slow_sizes'])}{note})"
    return text


def b1s_round(
    engines: Sequence[str],
    topics: dict[int, str],
    i: int,
    run: Callable[[str, str, int], dict[str, Any]],
    say: Callable[[str], None],
    sizes_of: Mapping[str, Sequence[int]],
) -> dict[str, Any]:
    """Every engine at its sizes (``sizes_of``; ``topics``: size → pre-loaded topic); order
    rotates by round.

    ``run(engine, topic, records)`` is :func:`run_once` with the rest bound.
    """
    k = i % len(engines)
    order = list(engines[k:]) + list(engines[:k])
    runs: dict[str, list[dict[str, Any]]] = {e: [] for e in order}
    for engine in order:
        for records in sorted(sizes_of[engine]):
            r = run(engine, topics[records], records)
            runs[engine].append(r)
            o = r["output"]
            say(
                f"B1s: {engine} {records:,}: {r['seconds']:.1f} s, CPU {r['cpu_s']:.1f} s"
                f" + broker {r['broker_cpu_s']:.1f} s, output exact="
                f"{o['every_update_once'] and o['fields_ok']} {o['problem']}"
            )
    fits = {e: fit_round(rs) for e, rs in runs.items()}
    for e, f in fits.items():
        say(
            f"B1s: {e}: {f['cpu_us_per_record']:.1f} µs CPU per record, fixed"
            f" {f['fixed_cpu_s']:.1f} CPU-s, {f['records_per_s'] or 0:,.0f} rec/s steady"
        )
    return {"runs": runs, "fits": fits}
