"""``make bench-codecs``: channel codecs side by side, per record, in one process.

For each record shape of the B1 pipeline (the 5-field ``Event`` a source emits, the
2-field ``View`` parse emits, the 3-field ``PageViews`` count emits) it times, on blocks of
``--block`` records: Avro (fastavro, :class:`spillway.channels.wire.envelope.RecordCodec`) and Arrow
IPC
(:class:`spillway.channels.wire.envelope.ArrowBlockCodec`) encoding a block and decoding a framed
message; and JSON text (stdlib vs :func:`spillway.channels.wire.jsontext.loads`) for the source's
input. Each cell is the median of ``--runs`` timings of ``--reps`` repetitions, in µs per
record, with min–max; ratios are taken run by run. No broker, no I/O: this is the
per-record CPU cost of the channel codecs, not a throughput.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench import peers, workload
from bench.stats import ratios, spread
from spillway.channels.wire import jsontext
from spillway.channels.wire.envelope import BlockCodec, RecordCodec, writer_codec


def _per_record(fn: Callable[[], Any], records: int, reps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps / records * 1e6


def _shapes(block: int) -> list[tuple[str, dict[str, Any], list[dict[str, Any]]]]:
    events = [workload.make_event(i) for i in range(block)]
    views = [workload.parse(e) for e in events]
    counts = [{**v, "views": i} for i, v in enumerate(views)]
    return [
        ("Event", peers.EVENT_SCHEMA, events),
        ("View", peers.VIEW_SCHEMA, views),
        ("PageViews", peers.COUNT_SCHEMA, counts),
    ]


def measure(block: int, runs: int, reps: int) -> dict[str, Any]:
    """Timings per shape and operation: ``{shape: {op: {avro|arrow: [µs, ...]}}}`` + JSON."""
    out: dict[str, Any] = {}
    for name, schema, records in _shapes(block):
        codecs: dict[str, BlockCodec] = {
            "avro": RecordCodec(schema),
            "arrow": writer_codec(schema, "arrow"),
        }
        assert codecs["arrow"].version != codecs["avro"].version, f"{name} is not flat"
        values = {k: c.frame([c.encode_block(records)]) for k, c in codecs.items()}
        for k, c in codecs.items():
            assert c.decode_batch(values[k]) == records, f"{name}: {k} does not round-trip"
        cells: dict[str, dict[str, list[float]]] = {
            "encode": {"avro": [], "arrow": []},
            "decode": {"avro": [], "arrow": []},
        }
        for _ in range(runs):  # interleaved, so drift hits both codecs alike
            for k, c in codecs.items():
                encode = functools.partial(c.encode_block, records)
                decode = functools.partial(c.decode_batch, values[k])
                cells["encode"][k].append(_per_record(encode, block, reps))
                cells["decode"][k].append(_per_record(decode, block, reps))
        out[name] = {
            "bytes_per_record": {k: len(v) / block for k, v in values.items()},
            **cells,
        }
    raw = [workload.encode(e) for e in _shapes(block)[0][2]]
    stdlib: list[float] = []
    fast: list[float] = []
    for _ in range(runs):
        stdlib.append(_per_record(lambda: [json.loads(r.decode()) for r in raw], block, reps))
        fast.append(_per_record(lambda: [jsontext.loads(r) for r in raw], block, reps))
    out["json_loads"] = {"stdlib": stdlib, "jsontext": fast}
    return out


def table(result: dict[str, Any]) -> list[str]:
    """Markdown: µs per record (median, min–max) and Avro/Arrow ratios run by run."""

    def cell(xs: Sequence[float]) -> str:
        s = spread(xs)
        return f"{s.median:.2f} ({s.low:.2f}–{s.high:.2f})"

    lines = [
        "| record | operation | Avro (fastavro) µs/record | Arrow IPC µs/record | "
        "Avro / Arrow | bytes/record Avro / Arrow |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, r in result.items():
        if name == "json_loads":
            continue
        size = r["bytes_per_record"]
        for op in ("encode", "decode"):
            x = spread(ratios(r[op]["avro"], r[op]["arrow"]))
            lines.append(
                f"| {name} | {op} a block | {cell(r[op]['avro'])} | {cell(r[op]['arrow'])} | "
                f"{x.median:.1f}× ({x.low:.1f}–{x.high:.1f}) | "
                f"{size['avro']:.0f} / {size['arrow']:.0f} |"
            )
    j = result["json_loads"]
    x = spread(ratios(j["stdlib"], j["jsontext"]))
    lines += [
        "",
        "| source input (200-byte JSON event) | stdlib `json` µs/record | `jsontext.loads` "
        "(orjson) µs/record | stdlib / jsontext |",
        "|---|---:|---:|---:|",
        f"| decode | {cell(j['stdlib'])} | {cell(j['jsontext'])} | "
        f"{x.median:.1f}× ({x.low:.1f}–{x.high:.1f}) |",
    ]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m bench.codecs``: the tables to stdout, raw timings to stderr."""
    ap = argparse.ArgumentParser(prog="python -m bench.codecs", description=__doc__)
    ap.add_argument("--block", type=int, default=1000, help="records per block")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--reps", type=int, default=30, help="blocks per timing")
    a = ap.parse_args(argv)
    if min(a.block, a.runs, a.reps) < 1:
        ap.error("--block, --runs and --reps must be >= 1")
    result = measure(a.block, a.runs, a.reps)
    print("\n".join(table(result)))
    print(json.dumps(result), file=sys.stderr)  # raw timings, µs per record
    return 0


if __name__ == "__main__":
    sys.exit(main())
