"""``python -m bench.parquetsink``: what the Parquet sink costs per record, without Spark.

Times :class:`spillway.spark_jobs.connectors.parquetsink.ParquetFileSink` writing ``--block``
records of the
clicks example's output shape in one write call and sealing the file (``from_pylist``
with the record checks, Parquet encoding, fsync), with and without ``partition_by``; and,
for scale, decoding the same records from an Arrow channel message into dicts (what the
runtime does before a sink sees them). Median of ``--runs`` runs, µs per record.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from typing import cast

from spillway.channels.ids import JobId, OperatorName, SubtaskId
from spillway.channels.wire.envelope import Decoders, writer_codec
from spillway.examples import clicks
from spillway.recovery.job.plan import Context
from spillway.spark_jobs.connectors.parquetsink import ParquetFileSink
from spillway.spark_jobs.records.schemas import arrow_schema_of


@dataclass
class _Ctx:
    subtask: SubtaskId


def measure(block: int, runs: int) -> dict[str, list[float]]:
    """µs per record for each case."""
    avro = clicks.PAGE_COUNT
    records = [{"page": f"/s{i % 5}/{i}", "section": f"s{i % 5}", "views": i} for i in range(block)]
    ctx = _Ctx(SubtaskId(JobId("bench"), OperatorName("out"), 0))
    out: dict[str, list[float]] = {}
    for partition in (None, "section"):
        times = []
        for _ in range(runs):
            with tempfile.TemporaryDirectory() as d:
                sink = ParquetFileSink(
                    d, "out", arrow_schema_of(avro, where="bench"), avro, partition
                )
                sink.open(cast(Context, ctx), {}, None)  # a file sink reads ctx.subtask only
                t0 = time.perf_counter()
                sink.write(records)
                sink.prepare(0)
                times.append((time.perf_counter() - t0) / block * 1e6)
        out[f"write + seal, partition_by={partition}"] = times
    codec = writer_codec(avro, "arrow")
    value = codec.frame([codec.encode_block(records)])
    decoders = Decoders(avro)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        decoders.decode(codec.version, value)
        times.append((time.perf_counter() - t0) / block * 1e6)
    out["Arrow channel message -> dicts"] = times
    return out


def main(argv: list[str] | None = None) -> None:
    """Print the timings with the load average."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--block", type=int, default=20_000)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args(argv)
    result = measure(args.block, args.runs)
    load = os.getloadavg()[0]
    print(f"µs per record, median of {args.runs} runs of {args.block} (load average {load:.2f})")
    for name, times in result.items():
        print(f"  {name:36} {statistics.median(times):6.3f}  ({min(times):.3f}–{max(times):.3f})")


if __name__ == "__main__":
    main()
