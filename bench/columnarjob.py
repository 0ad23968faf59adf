"""The columnar pipelines of ``make bench`` part B1c, for ``spillway run`` (set with ``--conf``).

``spillway run bench.columnarjob:keyed --conf input=T --conf output=T``: B1's keyed count
(:mod:`bench.workload`) written columnar — ``read_kafka(batches=True)`` (one
``pyarrow.json`` call per partition and poll), ``map_batches`` parsing the URL with Arrow
string kernels, ``key_by("page").aggregate_batches(count, emit="rows")`` (one update per
input record, as every B1 engine writes) and ``write_kafka(key="page")`` from the batches.
Its output is B1's, message for message. ``chaining=True``: the source and the parse run
in one subtask, the count and the sink in another, one channel between them (the shape
of B1s's ``spillway-run-chained``).

``spillway run bench.columnarjob:stateless --conf input=T --conf output=T
[--conf path=records]``: parse, filter and project through one channel — the source
decodes, a chained ``map_batches`` keeps the events of :data:`SECTIONS_KEPT` and projects
them to page, section and user, the sink writes JSON. ``path=records``: the same with
record operators (``read_kafka``, ``map``/``filter`` chained), for comparison.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from bench import peers, workload
from spillway.channels.errors import ConfigError
from spillway.channels.wire.arrowcodec import arrow_schema
from spillway.spark_jobs.api.pipeline import Pipeline, conf
from spillway.spark_jobs.operators.batchagg import Agg

_URL = r"^[a-z]+://[^/]+/(?P<section>[^/?]+)/(?P<page>[^?]*)"
SECTIONS_KEPT = ("news", "sport", "shop")  # the filter keeps about 3/5 of the events
PICKED = {
    "type": "record",
    "name": "Picked",
    "fields": [
        {"name": "page", "type": "string"},
        {"name": "section", "type": "string"},
        {"name": "user", "type": "long"},
    ],
}
_VIEW = arrow_schema(peers.VIEW_SCHEMA)
_PICKED = arrow_schema(PICKED)


def parse_batch(b: pa.RecordBatch) -> pa.RecordBatch:
    """:func:`bench.workload.parse` over a batch: page and section of each URL."""
    parts = pc.extract_regex(b.column("url"), _URL)
    section = pc.struct_field(parts, "section")
    page = pc.binary_join_element_wise("/", section, "/", pc.struct_field(parts, "page"), "")
    return pa.RecordBatch.from_arrays([page, section], schema=_VIEW)


def section_of(t: pa.Table) -> pa.ChunkedArray:
    """The section of each page (``/section/n``): what B1's output carries beside it."""
    return pc.list_element(pc.split_pattern(t["page"], "/", max_splits=2), 1)


def pick_batch(b: pa.RecordBatch) -> pa.RecordBatch:
    """Parse, keep :data:`SECTIONS_KEPT`, project to page, section and user."""
    parts = pc.extract_regex(b.column("url"), _URL)
    section = pc.struct_field(parts, "section")
    page = pc.binary_join_element_wise("/", section, "/", pc.struct_field(parts, "page"), "")
    out = pa.RecordBatch.from_arrays([page, section, b.column("user")], schema=_PICKED)
    return out.filter(pc.is_in(section, pa.array(SECTIONS_KEPT)))


def pick(event: dict[str, Any]) -> dict[str, Any]:
    """The record form of :func:`pick_batch` (before its filter)."""
    return {**workload.parse(event), "user": event["user"]}


def kept(view: dict[str, Any]) -> bool:
    """The record form of :func:`pick_batch`'s filter."""
    return view["section"] in SECTIONS_KEPT


def keyed() -> Pipeline:
    """B1's keyed count, columnar, over ``--conf input`` into ``--conf output``."""
    p = Pipeline("bench-columnar", chaining=True)  # source+parse, key_by, count+sink
    events = p.read_kafka(
        "source", conf("input"), schema=peers.EVENT_SCHEMA, bounded=True, batches=True
    )
    views = events.map_batches("parse", parse_batch, schema=peers.VIEW_SCHEMA)
    counts = views.key_by("page").aggregate_batches(
        "count", {"views": Agg("count")}, derive={"section": section_of}, emit="rows"
    )
    counts.write_kafka("sink", conf("output"), key="page")
    return p


def stateless() -> Pipeline:
    """Parse, filter, project over ``--conf input`` into ``--conf output``; one channel."""
    path = conf("path", "columnar")
    if path not in ("columnar", "records"):
        raise ConfigError(f"--conf path must be columnar or records, got {path!r}")
    p = Pipeline("bench-stateless", chaining=True)
    events = p.read_kafka(
        "source",
        conf("input"),
        schema=peers.EVENT_SCHEMA,
        bounded=True,
        batches=path == "columnar",
    )
    if path == "columnar":
        picked = events.map_batches("pick", pick_batch, schema=PICKED)
    else:
        picked = events.map("pick", pick, schema=PICKED).filter("keep", kept)
    picked.rebalance().write_kafka("sink", conf("output"))
    return p


def stateless_reference(records: int) -> list[bytes]:
    """The stateless pipeline's output values (JSON, keys sorted) for events ``0..records``."""
    from spillway.channels.wire import jsontext

    out = []
    for i in range(records):
        v = pick(workload.make_event(i))
        if kept(v):
            out.append(jsontext.dumps(v))
    return out
