"""``make bench-columnar``: the columnar building blocks beside the record path, no broker.

Both paths run the B1 workload's keyed count (:mod:`bench.workload`) on the same 200-byte
JSON events, a run of ``--block`` Kafka values at a time, in one process:

- **decode**: JSON values → rows. Record path: ``parse_json_value`` (orjson) per value.
  Columnar: :func:`spillway.spark_jobs.connectors.batchjson.decode_kafka_json`, one ``pyarrow.json``
  call.
- **parse**: page and section out of the URL. Record path: ``MapLogic(workload.parse)``.
  Columnar: ``MapBatchesLogic`` over ``pyarrow.compute`` string kernels.
- **route**: key group of each row, ``max_parallelism`` groups. Record path: ``KeyHash``
  per record. Columnar: :func:`spillway.channels.routing.batchroute.split_by_key_group`.
- **channel**: each key group's rows through the Arrow channel codec and back (encode at
  the writer, decode at the reader). Record path: ``ArrowCodec`` from and to dicts.
  Columnar: the slice's IPC bytes and ``pyarrow.ipc`` back.
- **count**: running count per page in :class:`spillway.recovery.restore.state.ChangelogState`, an
  update
  per record emitted. Record path: ``KeyedAggregateLogic``. Columnar:
  :class:`spillway.spark_jobs.operators.batchagg.BatchAggregate` with ``emit="rows"``.
- **sink**: each update as the Kafka sink's (key, JSON value). Record path:
  ``key_bytes`` and ``jsontext.dumps`` per update. Columnar:
  :func:`spillway.channels.wire.arrowjson.json_values` and ``key_values`` over the batch.

Each stage is timed in CPU time (``time.process_time``) over all blocks; a run's figures
are the median of ``--runs``. Both paths' final counts are checked against
:func:`bench.workload.reference`, and their sink messages against each other, before
anything is reported. The load average is
printed beside the figures: the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from bench import peers, workload
from bench.columnarjob import section_of
from spillway.channels.ids import JobId, OperatorName, SubtaskId, TopicPartition
from spillway.channels.routing.batchroute import split_by_key_group
from spillway.channels.routing.partitioners import KeyHash, key_bytes
from spillway.channels.wire import jsontext
from spillway.channels.wire.arrowcodec import ArrowCodec, arrow_schema
from spillway.channels.wire.arrowjson import json_values, key_values
from spillway.channels.wire.batchread import one_batch
from spillway.recovery.restore.state import ChangelogState
from spillway.spark_jobs.connectors.batchjson import decode_kafka_json
from spillway.spark_jobs.operators.batchagg import Agg, BatchAggregate
from spillway.spark_jobs.operators.batchops import MapBatchesLogic
from spillway.spark_jobs.operators.operators import KeyedAggregateLogic, MapLogic
from spillway.spark_jobs.records.lines import field_types, parse_json_value

STAGES = ("decode", "parse", "route", "channel", "count", "sink")
_URL = r"^[a-z]+://[^/]+/(?P<section>[^/?]+)/(?P<page>[^?]*)"
_EVENT = arrow_schema(peers.EVENT_SCHEMA)
_VIEW = arrow_schema(peers.VIEW_SCHEMA)


class _Ctx:
    def __init__(self) -> None:
        self.subtask = SubtaskId(JobId("bench"), OperatorName("count"), 0)
        self.state = ChangelogState(TopicPartition("bench-changelog", 0))
        self.watermark: int | None = None


def _parse_batch(b: pa.RecordBatch) -> pa.RecordBatch:
    parts = pc.extract_regex(b.column("url"), _URL)
    section = pc.struct_field(parts, "section")
    page = pc.binary_join_element_wise("/", section, "/", pc.struct_field(parts, "page"), "")
    return pa.RecordBatch.from_arrays([page, section], schema=_VIEW)


Messages = Counter[tuple[bytes, bytes]]


def _record_path(
    blocks: list[list[bytes]], groups: int
) -> tuple[dict[str, float], Counter[str], Messages]:
    assert _VIEW is not None
    fields = field_types(peers.EVENT_SCHEMA)
    parse = MapLogic(workload.parse)
    route = KeyHash(lambda r: r["page"], groups)
    codec = ArrowCodec(peers.VIEW_SCHEMA, _VIEW)
    ctx = _Ctx()
    count = KeyedAggregateLogic(
        lambda r: r["page"],
        lambda: [None, 0],
        lambda acc, r: [r["section"], acc[1] + 1],
        lambda k, acc: {"page": k, "section": acc[0], "views": acc[1]},
        "updates",
    )
    count.open(ctx)  # type: ignore[arg-type]
    t = dict.fromkeys(STAGES, 0.0)
    sent: Messages = Counter()
    for values in blocks:
        t0 = time.process_time()
        events = [parse_json_value(v, fields) for v in values]
        t1 = time.process_time()
        views = parse.process(events)
        t2 = time.process_time()
        by_group: dict[int, list[dict[str, Any]]] = {}
        for v in views:
            by_group.setdefault(route.targets(v)[0], []).append(v)
        t3 = time.process_time()
        received = []
        for recs in by_group.values():
            received.append(codec.decode_batch(codec.frame([codec.encode_block(recs)])))
        t4 = time.process_time()
        updates = [u for recs in received for u in count.process(recs)]
        t5 = time.process_time()
        messages = [(key_bytes(u["page"]), jsontext.dumps(u)) for u in updates]
        t6 = time.process_time()
        sent.update(messages)
        marks = (t0, t1, t2, t3, t4, t5, t6)
        for stage, a, b in zip(STAGES, marks[:-1], marks[1:], strict=True):
            t[stage] += b - a
    return t, Counter({k: v[1] for k, v in ctx.state.items()}), sent


def _columnar(
    blocks: list[list[bytes]], groups: int, per_message: bool = False
) -> tuple[dict[str, float], Counter[str], Messages]:
    assert _EVENT is not None
    assert _VIEW is not None
    parse = MapBatchesLogic("parse", _parse_batch, _VIEW)
    agg = BatchAggregate(
        "count", "page", {"views": Agg("count")}, _VIEW, derive={"section": section_of}, emit="rows"
    )
    ctx = _Ctx()
    t = dict.fromkeys(STAGES, 0.0)
    sent: Messages = Counter()
    offset = 0
    for values in blocks:
        t0 = time.process_time()
        run = decode_kafka_json("events", 0, range(offset, offset + len(values)), values, _EVENT)
        offset += len(values)
        t1 = time.process_time()
        (views,) = parse.process_batch(run.batch)
        t2 = time.process_time()
        slices = split_by_key_group(views, "page", groups)
        t3 = time.process_time()
        received = []
        for s in slices:
            data = s.batch.serialize().to_pybytes()
            received.append(pa.ipc.read_record_batch(pa.py_buffer(data), _VIEW))
        t4 = time.process_time()
        # A subtask folds what one poll returned (all its key groups' messages) at once
        # (spillway.recovery.runtime.pollfold): a group_by call costs tens of µs, whatever its size.
        # --fold message: one fold per channel message, as before.
        polls = [[r] for r in received] if per_message else [received]
        outs = [o for p in polls if (o := agg.fold(one_batch(p, _VIEW), ctx.state)) is not None]
        out = one_batch(outs, outs[0].schema)
        t5 = time.process_time()
        vals = json_values(out)
        keys = key_values(out.column("page"))
        assert vals is not None
        assert keys is not None
        messages = list(zip(keys, vals, strict=True))
        t6 = time.process_time()
        sent.update(messages)
        marks = (t0, t1, t2, t3, t4, t5, t6)
        for stage, a, b in zip(STAGES, marks[:-1], marks[1:], strict=True):
            t[stage] += b - a
    return t, Counter({k: acc[0] for k, acc in ctx.state.items()}), sent


def measure(records: int, block: int, groups: int, runs: int, fold: str = "poll") -> dict[str, Any]:
    """µs per record, per stage and path: the median of ``runs``, each over ``records``;
    ``fold``: the columnar count folds per ``"poll"`` (the runtime) or per ``"message"``."""
    values = [workload.encode(workload.make_event(i)) for i in range(records)]
    blocks = [values[i : i + block] for i in range(0, records, block)]
    expected = workload.reference(records)
    paths: dict[
        str, Callable[[list[list[bytes]], int], tuple[dict[str, float], Counter[str], Messages]]
    ]
    paths = {
        "record": _record_path,
        "columnar": lambda b, g: _columnar(b, g, per_message=fold == "message"),
    }
    timings: dict[str, list[dict[str, float]]] = {p: [] for p in paths}
    for fn in paths.values():
        fn(blocks[:1], groups)  # warm-up: lazy imports and kernel lookups are not per record
    for _ in range(runs):  # interleaved: drift in the machine's load hits both alike
        sent: list[Messages] = []
        for name, fn in paths.items():
            t, counts, messages = fn(blocks, groups)
            if counts != expected:
                raise SystemExit(f"{name} path: final counts differ from the reference")
            timings[name].append(t)
            sent.append(messages)
        if sent[0] != sent[1]:
            raise SystemExit("the two paths' sink messages differ")
    out: dict[str, Any] = {
        "records": records, "block": block, "groups": groups, "runs": runs, "fold": fold,
    }  # fmt: skip
    for name, ts in timings.items():
        per_stage = {s: statistics.median(t[s] for t in ts) / records * 1e6 for s in STAGES}
        total = statistics.median(sum(t.values()) for t in ts) / records * 1e6
        out[name] = {
            "us_per_record": per_stage,
            "total_us": total,
            "records_per_cpu_s": 1e6 / total,
        }
    out["loadavg"] = os.getloadavg()
    return out


def table(r: dict[str, Any]) -> list[str]:
    """Markdown: µs per record per stage, both paths, and the ratio."""
    rec, col = r["record"], r["columnar"]
    lines = [
        f"{r['records']} events of 200 bytes, blocks of {r['block']}, {r['groups']} key groups, "
        f"count folded per {r['fold']}, "
        f"median of {r['runs']} runs, CPU time; load average "
        + " / ".join(f"{x:.2f}" for x in r["loadavg"]),
        "",
        "| stage | record path µs/record | columnar µs/record | record / columnar |",
        "|---|---:|---:|---:|",
    ]
    for s in STAGES:
        a, b = rec["us_per_record"][s], col["us_per_record"][s]
        lines.append(f"| {s} | {a:.3f} | {b:.3f} | {a / b:.1f}× |")
    lines.append(
        f"| **total** | **{rec['total_us']:.3f}** | **{col['total_us']:.3f}** | "
        f"**{rec['total_us'] / col['total_us']:.1f}×** |"
    )
    lines += [
        "",
        f"records per CPU-second: record path {rec['records_per_cpu_s']:,.0f}, "
        f"columnar {col['records_per_cpu_s']:,.0f}",
    ]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m bench.columnar``: the table to stdout, raw JSON to stderr."""
    ap = argparse.ArgumentParser(prog="python -m bench.columnar", description=__doc__)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--block", type=int, default=5000, help="Kafka values per decoded run")
    ap.add_argument("--groups", type=int, default=128, help="max_parallelism (key groups)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument(
        "--fold", choices=("poll", "message"), default="poll",
        help="the columnar count folds each poll's messages at once (the runtime) or each "
        "channel message alone (before spillway.recovery.runtime.pollfold)",
    )  # fmt: skip
    a = ap.parse_args(argv)
    if min(a.records, a.block, a.groups, a.runs) < 1:
        ap.error("--records, --block, --groups and --runs must be >= 1")
    result = measure(a.records, a.block, a.groups, a.runs, a.fold)
    print("\n".join(table(result)))
    print(json.dumps(result), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
