"""``python -m bench.avrodecode``: Kafka Avro values into one Arrow batch, three ways.

The values are B1-like events (``seq`` long, ``user`` string, ``url`` string, ``ts``
long, ``score`` nullable double), each one datum as ``fastavro.schemaless_writer`` writes
it, decoded a run of ``--block`` values at a time (a batch source's read per partition):

- ``dicts``: ``fastavro.schemaless_reader`` per value, then ``pa.RecordBatch.from_pylist``
  (what a batch source would do with fastavro alone);
- ``columns``: ``fastavro.schemaless_reader`` per value, appended field by field into
  lists, then one ``pa.array`` per column (fastavro into columns);
- ``vectorised``: :class:`spillway.spark_jobs.connectors.batchavro.AvroDecoder`, every field decoded
  for all
  rows at once with numpy (the columnar source's decoder).

CPU time (``time.process_time``), µs per record, median of ``--runs``; every way's batch is
checked equal to the others' before anything is printed; the load average is printed too.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

import fastavro
import pyarrow as pa

from spillway.spark_jobs.connectors.batchavro import AvroDecoder

EVENT = {
    "type": "record",
    "name": "Event",
    "fields": [
        {"name": "seq", "type": "long"},
        {"name": "user", "type": "string"},
        {"name": "url", "type": "string"},
        {"name": "ts", "type": "long"},
        {"name": "score", "type": ["null", "double"], "default": None},
    ],
}


def values(n: int) -> list[bytes]:
    """``n`` encoded events (deterministic)."""
    parsed = fastavro.parse_schema(EVENT)
    out = []
    for i in range(n):
        buf = io.BytesIO()
        record = {
            "seq": i,
            "user": f"user-{i % 5000}",
            "url": f"https://shop.example/section-{i % 20}/page-{i % 2000}?ref={i % 7}",
            "ts": 1_700_000_000_000 + i * 3,
            "score": None if i % 4 == 0 else i / 7,
        }
        fastavro.schemaless_writer(buf, parsed, record)
        out.append(buf.getvalue())
    return out


def via_dicts(block: Sequence[bytes]) -> pa.RecordBatch:
    """fastavro per value, then from_pylist."""
    parsed, schema = _PARSED, _ARROW
    rows = [fastavro.schemaless_reader(io.BytesIO(v), parsed, None) for v in block]
    return pa.RecordBatch.from_pylist(rows, schema=schema)


def via_columns(block: Sequence[bytes]) -> pa.RecordBatch:
    """fastavro per value, appended into one list per field, one pa.array per column."""
    parsed, schema = _PARSED, _ARROW
    names = schema.names
    cols: list[list[Any]] = [[] for _ in names]
    appends = [c.append for c in cols]
    for v in block:
        r = cast(dict[str, Any], fastavro.schemaless_reader(io.BytesIO(v), parsed, None))
        for name, append in zip(names, appends, strict=True):
            append(r[name])
    return pa.RecordBatch.from_arrays(
        [pa.array(c, f.type) for c, f in zip(cols, schema, strict=True)], schema=schema
    )


_DECODER = AvroDecoder(EVENT)
_PARSED = fastavro.parse_schema(EVENT)
_ARROW = _DECODER.arrow


def via_numpy(block: Sequence[bytes]) -> pa.RecordBatch:
    """The columnar source's decoder."""
    return _DECODER.decode(block).batch


WAYS: dict[str, Callable[[Sequence[bytes]], pa.RecordBatch]] = {
    "dicts": via_dicts,
    "columns": via_columns,
    "vectorised": via_numpy,
}


def measure(data: list[bytes], block: int, runs: int) -> dict[str, float]:
    """µs of CPU per record of each way, median of ``runs``; outputs checked equal."""
    blocks = [data[i : i + block] for i in range(0, len(data), block)]
    first = {name: [way(b) for b in blocks[:3]] for name, way in WAYS.items()}
    for name, got in first.items():
        assert all(g.equals(e) for g, e in zip(got, first["dicts"], strict=True)), name
    out: dict[str, float] = {}
    for name, way in WAYS.items():
        times = []
        for _ in range(runs):
            t0 = time.process_time()
            for b in blocks:
                way(b)
            times.append((time.process_time() - t0) / len(data) * 1e6)
        out[name] = statistics.median(times)
    return out


def main(argv: list[str] | None = None) -> None:
    """Print µs per record per way and block size, with the load average."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--blocks", default="1000,10000")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    data = values(args.records)
    load = os.getloadavg()[0]
    for block in (int(b) for b in args.blocks.split(",")):
        figures = measure(data, block, args.runs)
        print(json.dumps({"block": block, "us_per_record": figures, "load1": round(load, 1)}))
    print(json.dumps({"load1_after": round(os.getloadavg()[0], 1)}))


if __name__ == "__main__":
    main()
