"""Pipelines the Spark tests submit by reference (executors import this module).

Configured through ``SPILLWAY_TEST_*`` environment variables, which the driver forwards
to every task; ``env_configured`` and ``configured`` (status and ``--conf``/``--env``
tests) are configured otherwise, see there.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

from spillway.spark_jobs.api.pipeline import Pipeline, Stream, conf
from tests.integration.gates import held_generate

ORDER = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "amount", "type": "long"},
    ],
}


def taxed(order: dict[str, Any]) -> dict[str, Any]:
    """The order with 20% added, in cents."""
    return {**order, "amount": order["amount"] * 12 // 10}


def taxed_batch(b: Any) -> Any:
    """:func:`taxed` over an Arrow batch (amounts are positive: ``divide`` truncates as //)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    amount = pc.divide(pc.multiply(b.column("amount"), 12), 10)
    return pa.RecordBatch.from_arrays(
        [b.column("id"), b.column("customer"), amount], names=b.schema.names
    )


def kafka_to_kafka() -> Pipeline:
    """A bounded Kafka topic → map → Kafka topic job (the source reads Arrow batches with
    ``SPILLWAY_TEST_BATCHES=1``; with ``chained``, the map is ``map_batches`` chained
    into the source's subtask and the sink writes from the batches)."""
    mode = os.environ.get("SPILLWAY_TEST_BATCHES")
    p = Pipeline("kafka-to-kafka", chaining=mode == "chained")
    orders = p.read_kafka(
        "orders",
        os.environ["SPILLWAY_TEST_IN"],
        schema=ORDER,
        parallelism=2,
        bounded=True,
        batches=mode in ("1", "chained"),
    )
    if mode == "chained":
        tax = orders.map_batches("tax", taxed_batch, schema=ORDER)
    else:
        tax = orders.map("tax", taxed, schema=ORDER)
    tax.write_kafka("sink", os.environ["SPILLWAY_TEST_OUT"])
    return p


NOTE = {
    "type": "record",
    "name": "Note",
    "fields": [{"name": "id", "type": "long"}, {"name": "text", "type": "string"}],
}


def kafka_straight_to_kafka() -> Pipeline:
    """A bounded Kafka topic written as it is to a Kafka topic (``SPILLWAY_TEST_IN`` →
    ``SPILLWAY_TEST_OUT``). With ``SPILLWAY_TEST_BATCHES=chained`` the sink is chained
    into the source's subtask (its records' origins are the input's offsets); else it is
    alone in its own subtask, reading its channel as Arrow batches."""
    chained = os.environ.get("SPILLWAY_TEST_BATCHES") == "chained"
    p = Pipeline("kafka-straight-to-kafka", chaining=chained)
    notes = p.read_kafka(
        "notes", os.environ["SPILLWAY_TEST_IN"], schema=NOTE, parallelism=2, bounded=True
    )
    notes.write_kafka("sink", os.environ["SPILLWAY_TEST_OUT"], parallelism=2)
    return p


EVENT = {
    "type": "record",
    "name": "Event",
    "fields": [{"name": "seq", "type": "long"}, {"name": "key", "type": "string"}],
}
SCORED = {
    "type": "record",
    "name": "Scored",
    "fields": [{"name": "key", "type": "string"}, {"name": "score", "type": "long"}],
}
COUNT = {
    "type": "record",
    "name": "KeyCount",
    "fields": [{"name": "key", "type": "string"}, {"name": "n", "type": "long"}],
}


def make_event(i: int) -> dict[str, Any]:
    """Event ``i``; every 97th makes ``parse`` raise, every 89th (+1) breaks ``Scored``."""
    return {"seq": i, "key": f"k{i % 13}"}


def parse(e: dict[str, Any]) -> dict[str, Any]:
    """Raises on the poison events, like a user function meeting data it does not expect."""
    if e["seq"] % 97 == 0:
        raise ValueError(f"cannot parse event {e['seq']}")
    # Every 89th (+1) record does not fit the output schema: score must be a long.
    score: Any = "NaN" if e["seq"] % 89 == 1 else e["seq"] % 10
    return {"key": e["key"], "score": score}


def count_add(n: int, _r: dict[str, Any]) -> int:
    """Count records."""
    return n + 1


def count_to_files(stream: Stream) -> None:
    """Count records per key (p=2) and write the counts as files to $SPILLWAY_TEST_OUT."""
    stream.key_by(lambda r: r["key"]).aggregate(
        "count",
        init=lambda: 0,
        add=count_add,
        result=lambda k, n: {"key": k, "n": n},
        schema=COUNT,
        parallelism=2,
    ).write_jsonl("out", os.environ["SPILLWAY_TEST_OUT"])


def fragile() -> Pipeline:
    """generate → parse (raises on some, emits bad records on others) → count per key → files."""
    p = Pipeline("fragile")
    events = p.generate(
        "events",
        make=make_event,
        schema=EVENT,
        count=int(os.environ["SPILLWAY_TEST_RECORDS"]),
        parallelism=2,
    )
    scored = events.rebalance().map("parse", parse, schema=SCORED, parallelism=2)
    count_to_files(scored)
    return p


def slow_step(e: dict[str, Any]) -> dict[str, Any]:
    """Pass ``e`` on, sleeping 2 ms every 40 records: ~20k records/s, so processing one
    channel message (a few thousand records) takes long enough for a checkpoint trigger
    to arrive in the middle of it."""
    if e["seq"] % 40 == 0:
        time.sleep(0.002)
    return e


def slow_count() -> Pipeline:
    """generate → slow (p=1) → count per key (p=2) → files: unaligned checkpoints mid-message."""
    p = Pipeline("slow-count")
    events = p.generate(
        "events", make=make_event, schema=EVENT, count=int(os.environ["SPILLWAY_TEST_RECORDS"])
    )
    slow = events.map("slow", slow_step, schema=EVENT)
    count_to_files(slow)
    return p


READING = {
    "type": "record",
    "name": "Reading",
    "fields": [
        {"name": "key", "type": "string"},
        {"name": "n", "type": "long"},
        {"name": "x", "type": "double"},
    ],
}
KEY_SUM = {
    "type": "record",
    "name": "KeySum",
    "fields": [
        {"name": "key", "type": "string"},
        {"name": "count", "type": "long"},
        {"name": "total", "type": "long"},
    ],
}


def add_reading(acc: list[int], r: dict[str, Any]) -> list[int]:
    """Count and sum ``n``."""
    return [acc[0] + 1, acc[1] + r["n"]]


def file_sums() -> Pipeline:
    """files (``SPILLWAY_TEST_FORMAT``; as Arrow batches with ``SPILLWAY_TEST_BATCHES=1``)
    → count and sum per key → files."""
    p = Pipeline("file-sums")
    rows = p.read_files(
        "rows",
        os.environ["SPILLWAY_TEST_IN"],
        format=os.environ["SPILLWAY_TEST_FORMAT"],
        schema=READING,
        parallelism=2,
        batches=os.environ.get("SPILLWAY_TEST_BATCHES") == "1",
    )
    rows.key_by(lambda r: r["key"]).aggregate(
        "sum",
        init=lambda: [0, 0],
        add=add_reading,
        result=lambda k, acc: {"key": k, "count": acc[0], "total": acc[1]},
        schema=KEY_SUM,
        parallelism=2,
    ).write_jsonl("out", os.environ["SPILLWAY_TEST_OUT"])
    return p


def tag(e: dict[str, Any]) -> dict[str, Any]:
    """A stateless step of the chained pipeline."""
    return {"key": e["key"], "score": e["seq"] % 10}


def chained_etl() -> Pipeline:
    """generate(p=2) → tag → keep score > 2 → files, all fused into one chain (no channel)."""
    p = Pipeline("chained-etl", chaining=True)
    events = held_generate(  # held at the test's gates (tests/integration/gates.py)
        p,
        "events",
        make=make_event,
        schema=EVENT,
        count=int(os.environ["SPILLWAY_TEST_RECORDS"]),
        parallelism=2,
    )
    tagged = events.map("tag", tag, schema=SCORED).filter("keep", lambda r: r["score"] > 2)
    tagged.write_jsonl("out", os.environ["SPILLWAY_TEST_OUT"])
    return p


def env_configured() -> Pipeline:
    """An endless paced generator (p=1) → files (p=$STATUS_TEST_WIDTH, to $STATUS_TEST_OUT).

    Configured only by its environment: built without STATUS_TEST_WIDTH it raises
    KeyError, as a user's pipeline reading ``os.environ[...]`` does.
    """
    p = Pipeline("env-configured")
    events = p.generate("events", make=make_event, schema=EVENT, count=None, rate=200.0)
    width = int(os.environ["STATUS_TEST_WIDTH"])
    events.write_jsonl("out", os.environ["STATUS_TEST_OUT"], parallelism=width)
    return p


LABELLED = {
    "type": "record",
    "name": "Labelled",
    "fields": [{"name": "seq", "type": "long"}, {"name": "label", "type": "string"}],
}


def label(greeting: str, e: dict[str, Any]) -> dict[str, Any]:
    """``e``'s seq labelled with ``greeting`` and $STATUS_TEST_SUFFIX (read in the task)."""
    return {"seq": e["seq"], "label": f"{greeting}{os.environ['STATUS_TEST_SUFFIX']}"}


def configured() -> Pipeline:
    """generate → label → files, configured by --conf (records, greeting, out.dir) and by
    the forwarded variable STATUS_TEST_SUFFIX."""
    p = Pipeline("configured")
    events = p.generate("events", make=make_event, schema=EVENT, count=int(conf("records")))
    labelled = events.map("label", partial(label, conf("greeting")), schema=LABELLED)
    labelled.write_jsonl("out", conf("out.dir"))
    return p


def check_reading(r: dict[str, Any]) -> dict[str, Any]:
    """Pass a reading on; raise on a poisoned one, like a user function meeting bad data."""
    if r["key"] == "poison":
        raise ValueError(f"poisoned reading {r['n']}")
    return r


def kafka_sums() -> Pipeline:
    """A bounded Kafka topic of JSON readings → check (raises on poison) → count and sum per
    key → files."""
    p = Pipeline("kafka-sums")
    rows = p.read_kafka(
        "readings", os.environ["SPILLWAY_TEST_IN"], schema=READING, parallelism=2, bounded=True
    )
    checked = rows.map("check", check_reading, schema=READING, parallelism=2)
    checked.key_by(lambda r: r["key"]).aggregate(
        "sum",
        init=lambda: [0, 0],
        add=add_reading,
        result=lambda k, acc: {"key": k, "count": acc[0], "total": acc[1]},
        schema=KEY_SUM,
        parallelism=2,
    ).write_jsonl("out", os.environ["SPILLWAY_TEST_OUT"])
    return p


@dataclass(slots=True)
class Visit:
    """A typed record (the schema comes from this class)."""

    seq: int
    page: str
    section: str
    user: int | None


VISIT_SECTIONS = ("news", "sport", "shop & more", "help/faq")


def make_visit(i: int) -> Visit:
    """Visit ``i``: a fixed function of ``i``; every 7th has no user."""
    return Visit(
        seq=i,
        page=f"/p{i % 101}",
        section=VISIT_SECTIONS[i % len(VISIT_SECTIONS)],
        user=None if i % 7 == 0 else i % 1000,
    )


def visits_to_parquet() -> Pipeline:
    """generate (p=2) → rebalance → Parquet files (or, with ``SPILLWAY_TEST_SINK=delta``, a
    Delta table) partitioned by section (p=2)."""
    p = Pipeline("visits-parquet")
    visits = held_generate(  # held at the test's gates (tests/integration/gates.py)
        p,
        "visits",
        make=make_visit,
        count=int(os.environ["SPILLWAY_TEST_RECORDS"]),
        parallelism=2,
    )
    sink = visits.rebalance()
    write = (
        sink.write_delta if os.environ.get("SPILLWAY_TEST_SINK") == "delta" else sink.write_parquet
    )
    write(
        "out",
        os.environ["SPILLWAY_TEST_OUT"],
        partition_by="section",
        max_file_bytes=int(os.environ.get("SPILLWAY_TEST_FILE_BYTES", str(128 << 20))),
        parallelism=2,
    )
    return p
