"""The traced keyed count in Structured Streaming on a standalone cluster: the B3s driver.

``python -m bench.sssb3job --master spark://... --bootstrap ... --input ... --output ...
--workdir ... --jars a.jar,b.jar`` runs the B1/B2 query of :func:`bench.sssengine.run_sss`
(Kafka → from_json → page and section by regexp → count per page → Kafka, update mode,
RocksDB state store with changelog checkpointing, ``maxOffsetsPerTrigger``) on the given
master, traced: each output row also carries ``seq`` and ``ts`` of the last record (the
highest seq) counted for its page in that micro-batch. Trigger: processing time
:data:`TRIGGER`. Executors: 1 core and :data:`EXECUTOR_MEMORY` each, at most
:data:`MAX_CORES` cores in all (one per worker of a ``workers=2, worker_cores=1``
cluster). Prints ``READY <time> <n>`` once a micro-batch with input has completed, then
runs until its stdin closes (or prints ``FAILED <time>`` if the query stops by itself).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from typing import Any

from bench.peerjob import say, wait_for_release
from bench.sssengine import SSS_STATE_CONF, _first_batch_listener, kafka_events

TRIGGER = "500 milliseconds"
EXECUTOR_MEMORY = "512m"
MAX_CORES = 2


def traced_counts(events: Any) -> Any:
    """Per page: section, views (running count), and ``seq``/``ts`` of the highest-seq record.

    ``max`` of the struct ``(seq, ts)`` orders by seq first: across micro-batches the
    state keeps the highest seq counted so far, which in an updated row is the last
    record of that page in the current micro-batch (the pacer's seqs only grow, and each
    input partition is read in order).
    """
    from pyspark.sql import functions as F

    path = F.regexp_extract(F.col("e.url"), r"^[a-z]+://[^/]+(/[^?]*)", 1)
    views = events.select(
        path.alias("page"),
        F.regexp_extract(path, r"^/([^/]+)/", 1).alias("section"),
        F.struct(F.col("e.seq").alias("seq"), F.col("e.ts").alias("ts")).alias("last"),
    )
    counts = views.groupBy("page", "section").agg(
        F.count("*").alias("views"), F.max("last").alias("last")
    )
    return counts.select(
        F.col("page").alias("key"),
        F.to_json(
            F.struct("page", "section", "views", F.col("last.seq").alias("seq"), "last.ts")
        ).alias("value"),
    )


def main(argv: list[str] | None = None) -> int:
    """Run the traced query on ``--master`` until stdin closes."""
    ap = argparse.ArgumentParser(prog="python -m bench.sssb3job", description=__doc__)
    for name in ("--master", "--bootstrap", "--input", "--output", "--workdir", "--jars"):
        ap.add_argument(name, required=True)
    a = ap.parse_args(argv)
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        SparkSession.builder.master(a.master)
        .appName("bench-sss-b3")
        .config("spark.jars", a.jars)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")  # no progress bars in the log
        .config("spark.driver.memory", "1g")
        .config("spark.executor.memory", EXECUTOR_MEMORY)
        .config("spark.executor.cores", "1")
        .config("spark.cores.max", str(MAX_CORES))
        .config("spark.sql.shuffle.partitions", "2")
        .config(map=SSS_STATE_CONF)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    events = kafka_events(spark, a.bootstrap, a.input)
    query = (
        traced_counts(events)
        .writeStream.format("kafka")
        .outputMode("update")
        .trigger(processingTime=TRIGGER)
        .option("kafka.bootstrap.servers", a.bootstrap)
        .option("topic", a.output)
        .option("checkpointLocation", os.path.join(a.workdir, "sss-checkpoint"))
    )
    spark.streams.addListener(_first_batch_listener())
    running = query.start()
    released = threading.Event()

    def release() -> None:
        wait_for_release()
        released.set()

    threading.Thread(target=release, daemon=True).start()
    while not released.is_set():
        if not running.isActive:
            # The query gave up (e.g. a task failed too often): say so, the round fails.
            say("FAILED")
            print(f"{running.exception()}", file=sys.stderr, flush=True)
            break
        released.wait(1.0)
    else:
        running.stop()
    gateway = spark.sparkContext._gateway
    spark.stop()
    proc = getattr(gateway, "proc", None)  # reap the JVM ourselves
    if proc is not None and proc.stdin is not None:
        proc.stdin.close()
        proc.wait(60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
