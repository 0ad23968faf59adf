"""The B1 workload (``bench.workload``) in each engine, one engine per process.

``python -m bench.peers ENGINE --bootstrap ... --input ... --output ... --records N``
sets the engine up, prints ``READY`` when it starts to process, ``DONE`` once all N
input records are processed and committed, then waits for its stdin to close and tears
down. The benchmark (``bench.suite``) measures CPU and memory of this process tree between
the two lines. Engines:

``spillway``    the pipeline below, each subtask (source, parse, count, sink) in its own
                process running :class:`spillway.recovery.runtime.runner.SubtaskRunner` — what a
                Spark
                task runs, without Spark's JVM around it. Parallelism 1.
``spillway-chained`` the same pipeline with ``Pipeline(chaining=True)``: source+parse
                and count+sink are two chains (two processes) joined by the one keyed
                channel.
``handwritten`` one confluent-kafka consumer + transactional producer loop doing the
                same decode → parse → count → encode, with the dirty counts written to a
                compacted changelog topic and the input offsets sent in each transaction.
                JSON with the standard library, as such a loop is usually written.
``handwritten-orjson`` the same loop with orjson for JSON in and out, as Spillway's
                source and sinks use: the baseline of record (ratios and targets are
                taken against it).
``quix``        Quix Streams, ``processing_guarantee="exactly-once"``, ``group_by`` page
                (a repartition topic) and a stateful count (RocksDB + changelog). READY
                at its first record: its set-up runs inside ``app.run()``.
``kstreams``    Kafka Streams (the Java application in ``bench/kstreams``, see
                :mod:`bench.kstreams`), ``exactly_once_v2``, re-keyed by page through a
                repartition topic, count in a Processor API processor over a cached RocksDB
                store with a changelog (changed keys written once per commit), every update
                forwarded (one output per record, as the others); configured as its experts
                would (docs/benchmarks.md, "Kafka Streams peer configuration"). One stream
                thread; its JVM is a child of this process, so its CPU is in the measured
                tree.
``sss``         PySpark Structured Streaming Kafka→Kafka, ``local[2]``, built-in SQL
                functions, update mode, RocksDB state store with changelog checkpointing,
                at most :data:`bench.sssengine.SSS_MAX_OFFSETS` records per micro-batch.
                At-least-once to the Kafka sink (Spark's own guarantee); one row per page
                and micro-batch, not per record. READY once its first micro-batch with
                input has completed, with that batch's record count (``READY <time> <n>``:
                the benchmark leaves those n records out of the measured window).
``sss-python``  the same with the count in Python (``applyInPandasWithState``), what a
                PySpark user with custom state would write: one update per input record,
                as the other engines.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import multiprocessing.synchronize
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from bench import sssengine, workload
from bench.peerjob import Job, say, wait_for_release

ENGINES = (
    "spillway",
    "spillway-chained",
    "handwritten",
    "handwritten-orjson",
    "quix",
    "kstreams",
    "sss",
    "sss-python",
)
# Set to a directory: each Spillway subtask writes its cProfile stats there (profiling).
PROFILE_ENV = "SPILLWAY_BENCH_PROFILE"
CHANGELOG_SUFFIX = "-changelog"


# -- Spillway ---------------------------------------------------------------------------

EVENT_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Event",
    "fields": [
        {"name": "seq", "type": "long"},
        {"name": "user", "type": "long"},
        {"name": "url", "type": "string"},
        {"name": "ts", "type": "long"},
        {"name": "agent", "type": "string"},
    ],
}
VIEW_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "View",
    "fields": [{"name": "page", "type": "string"}, {"name": "section", "type": "string"}],
}
COUNT_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "PageViews",
    "fields": [
        {"name": "page", "type": "string"},
        {"name": "section", "type": "string"},
        {"name": "views", "type": "long"},
    ],
}


def _page(view: dict[str, Any]) -> str:
    return str(view["page"])


def _add(acc: list[Any], view: dict[str, Any]) -> list[Any]:
    return [view["section"], acc[1] + 1]


def _result(page: str, acc: list[Any]) -> dict[str, Any]:
    return {"page": page, "section": acc[0], "views": acc[1]}


def _init() -> list[Any]:
    return ["", 0]


# B2 (bench.latency) follows each record through every hop: seq and ts ride along.
_TRACE_FIELDS = [{"name": "seq", "type": "long"}, {"name": "ts", "type": "long"}]
TRACED_VIEW_SCHEMA = {**VIEW_SCHEMA, "fields": VIEW_SCHEMA["fields"] + _TRACE_FIELDS}
TRACED_COUNT_SCHEMA = {**COUNT_SCHEMA, "fields": COUNT_SCHEMA["fields"] + _TRACE_FIELDS}


def _traced_parse(event: dict[str, Any]) -> dict[str, Any]:
    return {**workload.parse(event), "seq": event["seq"], "ts": event["ts"]}


def _traced_add(acc: list[Any], view: dict[str, Any]) -> list[Any]:
    return [view["section"], acc[1] + 1, view["seq"], view["ts"]]


def _traced_result(page: str, acc: list[Any]) -> dict[str, Any]:
    return {"page": page, "section": acc[0], "views": acc[1], "seq": acc[2], "ts": acc[3]}


def _traced_init() -> list[Any]:
    return ["", 0, 0, 0]


def spillway_pipeline(
    input_topic: str,
    output_topic: str,
    traced: bool = False,
    parallelism: int = 1,
    chaining: bool = False,
) -> Any:
    """source → parse → count per page (updates) → Kafka, ``parallelism`` subtasks each.

    Bounded input for B1; ``traced`` (B2, B3): unbounded, and every hop carries seq and ts.
    """
    from spillway.spark_jobs.api.pipeline import Pipeline

    p = Pipeline("bench-throughput", chaining=chaining)
    events = p.read_kafka(
        "source", input_topic, schema=EVENT_SCHEMA, bounded=not traced, parallelism=parallelism
    )
    if traced:
        views = events.map("parse", _traced_parse, schema=TRACED_VIEW_SCHEMA)
        counts = views.key_by(_page).aggregate(
            "count",
            init=_traced_init,
            add=_traced_add,
            result=_traced_result,
            schema=TRACED_COUNT_SCHEMA,
            emit="updates",
        )
    else:
        views = events.map("parse", workload.parse, schema=VIEW_SCHEMA)
        counts = views.key_by(_page).aggregate(
            "count", init=_init, add=_add, result=_result, schema=COUNT_SCHEMA, emit="updates"
        )
    counts.write_kafka("sink", output_topic, key=_page)
    return p


def run_options(job: Job) -> Any:
    """RunOptions of the job; ``guarantee`` only where the runner has it (branch chaos)."""
    from dataclasses import fields

    from spillway.recovery.runtime.runner import RunOptions

    extra: dict[str, Any] = {}
    if "guarantee" in {f.name for f in fields(RunOptions)}:
        extra["guarantee"] = job.guarantee
    elif job.guarantee != "exactly-once":
        raise SystemExit("this Spillway's RunOptions has no 'guarantee': exactly-once only")
    return RunOptions(checkpoint_interval_s=job.commit_interval_s, **extra)


def _plan(job: Job) -> Any:
    pipeline = spillway_pipeline(job.input, job.output, job.traced, chaining=job.chaining)
    return pipeline.plan(job.name)


def _spillway_subtask(
    job: Job, index: int, ready: Any, go: multiprocessing.synchronize.Event
) -> None:
    from spillway.channels.config import KafkaSettings
    from spillway.recovery.runtime.runner import SubtaskRunner

    plan = _plan(job)
    subtask = plan.subtasks()[index]
    runner = SubtaskRunner(plan, subtask, KafkaSettings(job.bootstrap), run_options(job), 0)
    ready.put(index)
    go.wait()
    profile_dir = os.environ.get(PROFILE_ENV)
    if not profile_dir:
        runner.run()
        return
    import cProfile

    with cProfile.Profile() as prof:
        runner.run()
    prof.dump_stats(os.path.join(profile_dir, f"{subtask.operator}-{subtask.index}.prof"))


def run_spillway(job: Job) -> None:
    """Every subtask in its own (spawned) process; DONE when all of them have finished."""
    from spillway.channels.config import KafkaSettings
    from spillway.spark_jobs.spark.submit import prepare_topics

    plan = _plan(job)
    prepare_topics(plan, KafkaSettings(job.bootstrap))
    ctx = multiprocessing.get_context("spawn")
    go, ready = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=_spillway_subtask, args=(job, i, ready, go), name=f"subtask-{i}")
        for i in range(len(plan.subtasks()))
    ]
    for proc in procs:
        proc.start()
    for _ in procs:  # imports and runner set-up happen before `go`: not part of the figure
        ready.get(timeout=120)
    say("READY")
    go.set()
    if job.traced:  # unbounded: runs until the benchmark closes our stdin
        wait_for_release()
        for proc in procs:
            proc.kill()  # our own children, by PID; the topics are thrown away
            proc.join()
        return
    for proc in procs:
        proc.join()
    failed = [p.name for p in procs if p.exitcode != 0]
    if failed:
        raise SystemExit(f"spillway subtasks failed: {failed}")
    say("DONE")
    wait_for_release()


# -- hand-written loop ------------------------------------------------------------------


def run_handwritten(job: Job) -> None:
    """Consume → parse → count → produce, one transaction per commit interval."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    changelog = job.name + CHANGELOG_SUFFIX
    admin = AdminClient({"bootstrap.servers": job.bootstrap})
    topic = NewTopic(changelog, 1, 1, config={"cleanup.policy": "compact"})
    admin.create_topics([topic])[changelog].result(30)
    consumer = Consumer(
        {
            "bootstrap.servers": job.bootstrap,
            "group.id": job.name,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": job.bootstrap,
            "transactional.id": job.name,
            "linger.ms": 5,
            "transaction.timeout.ms": 60_000,
        }
    )
    parts = sorted(consumer.list_topics(job.input, timeout=10).topics[job.input].partitions)
    ends = {p: consumer.get_watermark_offsets(TopicPartition(job.input, p))[1] for p in parts}
    consumer.assign([TopicPartition(job.input, p, 0) for p in parts])
    producer.init_transactions()
    exactly_once = job.guarantee == "exactly-once"
    loads: Callable[[bytes], Any] = json.loads
    encode: Callable[[Any], bytes] = workload.encode
    if job.orjson:
        import orjson

        loads, encode = orjson.loads, orjson.dumps  # the same compact text as encode
    counts: dict[str, list[Any]] = {}
    dirty: set[str] = set()
    nexts = dict.fromkeys(parts, 0)
    say("READY")
    producer.begin_transaction()
    deadline = time.monotonic() + job.commit_interval_s

    def commit() -> None:
        for page in dirty:
            producer.produce(changelog, encode({"v": counts[page]}), page.encode())
        dirty.clear()
        offsets = [TopicPartition(job.input, p, o) for p, o in nexts.items()]
        if exactly_once:
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata())
            producer.commit_transaction()
            producer.begin_transaction()
        else:
            producer.flush()
            consumer.commit(offsets=offsets, asynchronous=False)

    while any(nexts[p] < ends[p] for p in parts):
        for m in consumer.consume(1000, 0.1):
            if m.error():
                raise RuntimeError(f"consume: {m.error()}")
            view = workload.parse(loads(m.value() or b"{}"))
            page = view["page"]
            acc = counts.get(page)
            if acc is None:
                acc = counts[page] = [view["section"], 0]
            acc[1] += 1
            dirty.add(page)
            out = {"page": page, "section": acc[0], "views": acc[1]}
            while True:
                try:
                    producer.produce(job.output, encode(out), page.encode())
                    break
                except BufferError:
                    producer.poll(0.05)
            nexts[m.partition() or 0] = (m.offset() or 0) + 1
        producer.poll(0)
        for p in parts:  # a partition may end in transaction markers that consume() skips
            pos = consumer.position([TopicPartition(job.input, p)])[0].offset
            if pos >= 0:
                nexts[p] = max(nexts[p], pos)
        if time.monotonic() >= deadline:
            commit()
            deadline = time.monotonic() + job.commit_interval_s
    commit()
    if exactly_once:
        producer.abort_transaction()  # the empty one commit() began
    say("DONE")
    wait_for_release()
    consumer.close()


# -- Quix Streams -----------------------------------------------------------------------


def run_quix(job: Job) -> None:
    """The workload as a Quix Streams app; stops after all input messages are processed."""
    from quixstreams import Application, State

    app = Application(
        broker_address=job.bootstrap,
        consumer_group=job.name,
        auto_offset_reset="earliest",
        commit_interval=job.commit_interval_s,
        processing_guarantee="exactly-once" if job.guarantee == "exactly-once" else "at-least-once",
        state_dir=os.path.join(job.workdir, "quix-state"),
        loglevel="WARNING",
    )
    source = app.topic(job.input, value_deserializer="json")
    sink = app.topic(job.output, value_serializer="json", key_serializer="str")

    def count(view: dict[str, Any], state: State[Any, Any]) -> dict[str, Any]:
        views = int(state.get("views", 0)) + 1
        state.set("views", views)
        return {"page": view["page"], "section": view["section"], "views": views}

    first = [True]

    def ready_at_first_record(event: dict[str, Any]) -> None:
        # Set-up (topic creation, group join, state store) happens inside app.run(): the
        # window opens at the first record, as the other engines' open after their set-up.
        if first[0]:
            first[0] = False
            say("READY")

    sdf = app.dataframe(source)
    sdf = sdf.update(ready_at_first_record)
    sdf = sdf.apply(workload.parse)
    sdf = sdf.group_by("page")
    sdf = sdf.apply(count, stateful=True)
    sdf.to_topic(sink)
    # count: outputs of the dataframe, one per input record; the final checkpoint commits.
    app.run(count=job.records, collect=False)
    say("DONE")
    wait_for_release()


# -- Spark Structured Streaming (bench.sssengine) --------------------------------------


def run_sss(job: Job) -> None:
    """Structured Streaming, SQL count (:func:`bench.sssengine.run_sss`)."""
    sssengine.run_sss(job)


def run_sss_python(job: Job) -> None:
    """Structured Streaming, count in Python (``applyInPandasWithState``)."""
    sssengine.run_sss(replace(job, pandas_state=True))


# -- Kafka Streams ----------------------------------------------------------------------


def run_kstreams(job: Job) -> None:
    """The Kafka Streams application as a child JVM; its READY and DONE lines passed on."""
    import subprocess

    from bench import kstreams

    home = kstreams.build()  # built by the suite before the rounds: a cache hit here
    command = kstreams.command(
        home,
        job.bootstrap,
        job.input,
        job.output,
        job.records,
        job.commit_interval_s,
        os.path.join(job.workdir, "kstreams-state"),
        job.name,
    )
    if job.guarantee != "exactly-once":
        raise SystemExit("the kstreams engine runs exactly_once_v2 only")
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None
    assert proc.stdout is not None
    for word in ("READY", "DONE"):
        line = proc.stdout.readline()
        if not line.startswith(word + " "):
            proc.kill()  # our own child, by PID
            raise SystemExit(f"kstreams exited {proc.wait()} before {word} (got {line!r})")
        print(line.strip(), flush=True)
    wait_for_release()
    proc.stdin.close()
    if proc.wait(120) != 0:
        raise SystemExit(f"kstreams exited {proc.returncode} on shutdown")


def run_spillway_chained(job: Job) -> None:
    """:func:`run_spillway` with forward edges chained (one process per chain)."""
    run_spillway(replace(job, chaining=True))


def run_handwritten_orjson(job: Job) -> None:
    """:func:`run_handwritten` with orjson for JSON in and out."""
    run_handwritten(replace(job, orjson=True))


RUNNERS: dict[str, Callable[[Job], None]] = {
    "spillway": run_spillway,
    "spillway-chained": run_spillway_chained,
    "handwritten": run_handwritten,
    "handwritten-orjson": run_handwritten_orjson,
    "quix": run_quix,
    "kstreams": run_kstreams,
    "sss": run_sss,
    "sss-python": run_sss_python,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run one engine on one job (see the module docstring for the protocol)."""
    ap = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__)
    ap.add_argument("engine", choices=ENGINES)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--records", type=int, required=True)
    ap.add_argument("--commit-interval", type=float, default=1.0)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument(
        "--guarantee", choices=("exactly-once", "at-least-once"), default="exactly-once"
    )
    ap.add_argument("--connector", default="", help="spark-sql-kafka-0-10 version (sss)")
    ap.add_argument("--traced", action="store_true", help="spillway: the B2 variant")
    a = ap.parse_args(argv)
    job = Job(
        a.bootstrap,
        a.input,
        a.output,
        a.records,
        a.commit_interval,
        a.workdir,
        a.name,
        a.guarantee,
        a.connector,
        a.traced,
    )
    RUNNERS[a.engine](job)
    return 0


if __name__ == "__main__":
    sys.exit(main())
