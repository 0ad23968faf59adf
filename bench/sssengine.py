"""The Structured Streaming engines of :mod:`bench.peers` (``sss``, ``sss-python``).

Kafka → from_json → page and section by regexp → count per page → Kafka, on ``local[2]``,
RocksDB state store with changelog checkpointing, at most :data:`SSS_MAX_OFFSETS` records
per micro-batch. ``sss`` counts with SQL (update mode: one row per page and micro-batch);
``sss-python`` (``Job.pandas_state``) counts in Python with ``applyInPandasWithState``,
one update per input record. READY is printed once the first micro-batch with input has
completed, with its record count.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from bench.peerjob import Job, say, wait_for_release

# Structured Streaming's maxOffsetsPerTrigger: a 5M-record run spans 100 micro-batches.
SSS_MAX_OFFSETS = 50_000
SSS_STATE_CONF: dict[str, Any] = {
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
}


def _count_in_pandas(key: tuple[Any, ...], pdfs: Any, state: Any) -> Any:
    """``applyInPandasWithState``: one ``(page, section, views)`` row per input row."""
    import pandas as pd

    views = int(state.get[0]) if state.exists else 0
    sections: list[str] = []
    for pdf in pdfs:
        sections.extend(pdf["section"])
    counts = list(range(views + 1, views + len(sections) + 1))
    state.update((views + len(sections),))
    yield pd.DataFrame({"page": [key[0]] * len(sections), "section": sections, "views": counts})


def _first_batch_listener() -> Any:
    from pyspark.sql.streaming.listener import StreamingQueryListener

    class FirstBatch(StreamingQueryListener):
        """Prints READY after the first micro-batch with input, with its record count."""

        def __init__(self) -> None:
            self.seen = False

        # pyspark's method names
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            rows = int(event.progress.numInputRows)
            if rows > 0 and not self.seen:
                self.seen = True
                say("READY", rows)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    return FirstBatch()


def kafka_events(spark: Any, bootstrap: str, topic: str) -> Any:
    """The B1 events of ``topic`` as a stream of one struct column ``e`` (read_committed,
    from the earliest offset, at most :data:`SSS_MAX_OFFSETS` per micro-batch)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType(
        [
            StructField("seq", LongType()),
            StructField("user", LongType()),
            StructField("url", StringType()),
            StructField("ts", LongType()),
            StructField("agent", StringType()),
        ]
    )
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(SSS_MAX_OFFSETS))
        .option("kafka.isolation.level", "read_committed")
        .load()
        .select(F.from_json(F.col("value").cast("string"), schema).alias("e"))
    )


def run_sss(job: Job) -> None:
    """Kafka → from_json → regexp page/section → groupBy count → Kafka, update mode."""
    import pyspark
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Python workers unpickle _count_in_pandas by reference: bench must import there.
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (repo, os.environ.get("PYTHONPATH", "")) if p
    )
    builder = SparkSession.builder.master("local[2]").appName(job.name)
    if job.connector.endswith(".jar") or "," in job.connector:
        builder = builder.config("spark.jars", job.connector)  # resolved by bench.sparkkafka
    else:
        version = job.connector or pyspark.__version__
        connector = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{version}"
        builder = builder.config("spark.jars.packages", connector)
    spark = (
        builder.config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.shuffle.partitions", "2")
        .config(map=SSS_STATE_CONF)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    events = kafka_events(spark, job.bootstrap, job.input)
    path = F.regexp_extract(F.col("e.url"), r"^[a-z]+://[^/]+(/[^?]*)", 1)
    views = events.select(
        path.alias("page"), F.regexp_extract(path, r"^/([^/]+)/", 1).alias("section")
    )
    if job.pandas_state:
        from pyspark.sql.streaming.state import GroupStateTimeout

        counts = views.groupBy("page").applyInPandasWithState(
            _count_in_pandas,
            outputStructType="page string, section string, views long",
            stateStructType="views long",
            outputMode="update",
            timeoutConf=GroupStateTimeout.NoTimeout,
        )
    else:
        counts = views.groupBy("page", "section").agg(F.count("*").alias("views"))
    out = counts.select(
        F.col("page").alias("key"),
        F.to_json(F.struct("page", "section", "views")).alias("value"),
    )
    query = (
        out.writeStream.format("kafka")
        .outputMode("update")
        .option("kafka.bootstrap.servers", job.bootstrap)
        .option("topic", job.output)
        .option("checkpointLocation", os.path.join(job.workdir, "sss-checkpoint"))
    )  # default trigger: the next micro-batch as soon as one ends (maxOffsetsPerTrigger)
    # The window opens once the first micro-batch has completed (planning, the first
    # batch's warm-up and start-up stay out); READY says how many records it held.
    spark.streams.addListener(_first_batch_listener())
    running = query.start()
    running.processAllAvailable()
    say("DONE")
    wait_for_release()
    running.stop()
    gateway = spark.sparkContext._gateway
    spark.stop()
    # Reap the JVM ourselves, so its CPU time is in our children's time when we exit.
    proc = getattr(gateway, "proc", None)
    if proc is not None and proc.stdin is not None:
        proc.stdin.close()
        proc.wait(60)
