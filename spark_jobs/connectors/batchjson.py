"""Kafka JSON values decoded a run at a time into one Arrow record batch.

The values of a run of messages are joined with newlines and parsed by ``pyarrow.json``
against the channel's Arrow schema in one call: no Python object per record. Only when
that call fails, or yields another number of rows than values, is the run bisected to
find the values that fail alone; those are rejected (dead-lettered with
``topic[partition]@offset``) and the rest becomes the batch, in offset order.

What is rejected, as the record path rejects it
(:func:`spillway.spark_jobs.records.lines.parse_json_value`
at the source, the Arrow channel codec at the writer): an empty or null value, bytes that
are not UTF-8, text that is not exactly one JSON object, NaN or infinite numbers, a value
that does not fit its field's type (``1.5`` or ``3000000000`` for an ``int``, a string for
a number, a ``null`` or missing non-nullable field). Fields the schema does not name are
ignored. One difference: the record path rejects a mistyped value when its channel
writer encodes it (stage ``emit``); here it is rejected at decode (stage ``decode``).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from spillway.recovery.job.origins import Runs, TopicOffset, topic_runs
from spillway.recovery.job.plan import Rejected


@dataclass(frozen=True)
class JsonRun:
    """The rows decoded from a run of values; ``kept[i]`` is the value row ``i`` came from
    (``None``: every value, in order), ``bad`` the values rejected, with the reason."""

    batch: pa.RecordBatch
    kept: list[int] | None
    bad: list[tuple[int, str]]


@dataclass(frozen=True)
class KafkaJsonBatch:
    """A decoded run of one partition: the batch, each row's origin, what was rejected."""

    batch: pa.RecordBatch
    origins: Runs
    rejected: list[Rejected]


class _RowCount(ValueError):
    """The values parsed into another number of rows than there are values."""


def _parse(values: Sequence[bytes], schema: pa.Schema) -> pa.Table:
    data = b"\n".join(values)
    # pyarrow.json does not check UTF-8; the record path refuses such a value whole.
    data.decode("utf-8")
    options = pj.ParseOptions(
        explicit_schema=schema,
        unexpected_field_behavior="ignore",
        # Only when a value holds a newline of its own (pretty-printed JSON): slower.
        newlines_in_values=data.count(b"\n") != len(values) - 1,
    )
    read = pj.ReadOptions(use_threads=False, block_size=max(1 << 20, len(data) + 1))
    table = pj.read_json(io.BytesIO(data), read_options=read, parse_options=options)
    if table.num_rows != len(values):
        raise _RowCount(f"{table.num_rows} JSON values, not one object")
    return table


def non_finite_rows(table: pa.Table) -> dict[int, str]:
    """Rows holding NaN or ±Infinity (Arrow reads them; records may not hold them), with why."""
    out: dict[int, str] = {}
    for f in table.schema:
        if pa.types.is_floating(f.type):
            col = table.column(f.name)
            bad = pc.and_(pc.is_valid(col), pc.invert(pc.is_finite(col)))
            for i in pc.indices_nonzero(pc.fill_null(bad, False)).to_pylist():
                out.setdefault(i, f"field {f.name!r}: NaN or infinite, not a finite number")
    return out


def _bisect(
    present: Sequence[bytes], schema: pa.Schema
) -> tuple[list[tuple[int, pa.Table]], list[tuple[int, str]]]:
    """The tables of the parts of ``present`` that parse (by first index, ascending) and
    the values that fail alone; one parse when every value is good."""
    parts: list[tuple[int, pa.Table]] = []
    failed: list[tuple[int, str]] = []
    stack = [(0, len(present))]
    while stack:
        lo, hi = stack.pop()
        if lo == hi:
            continue
        try:
            parts.append((lo, _parse(present[lo:hi], schema)))
        except (pa.ArrowException, ValueError) as e:  # ValueError: UnicodeDecodeError too
            if hi - lo == 1:
                failed.append((lo, f"not a JSON object of the schema: {e}"))
                continue
            mid = (lo + hi) // 2
            stack.extend([(mid, hi), (lo, mid)])  # the first half is taken first
    return parts, failed


def decode_json_values(values: Sequence[bytes | None], schema: pa.Schema) -> JsonRun:
    """``values`` (JSON objects) as one batch of ``schema``; pure.

    One ``pyarrow.json`` call for a clean run; a run with bad values is bisected, so
    ``k`` bad values among ``n`` cost about ``2k·log2(n)`` parses more.
    """
    bad: list[tuple[int, str]] = []
    idx: list[int] | None = None  # the values parsed, when some are empty
    if all(values):
        present = cast(Sequence[bytes], values)
    else:
        idx = [i for i, v in enumerate(values) if v]
        present = [v for v in values if v]
        bad = [
            (i, "no value (null)" if v is None else "empty value")
            for i, v in enumerate(values)
            if not v
        ]
    parts, failed = _bisect(present, schema)
    bad += [(p if idx is None else idx[p], why) for p, why in failed]
    table = pa.concat_tables([t for _, t in parts]) if parts else schema.empty_table()
    # rows[i]: the position in `present` of the table's row i (None: row i is present[i]).
    rows: list[int] | None = None
    if len(parts) != 1 or failed:
        rows = [lo + j for lo, t in parts for j in range(t.num_rows)]
    nonfinite = non_finite_rows(table)
    if nonfinite:
        rows = list(range(table.num_rows)) if rows is None else rows
        bad += [(rows[i] if idx is None else idx[rows[i]], why) for i, why in nonfinite.items()]
        keep = [i for i in range(table.num_rows) if i not in nonfinite]
        table, rows = table.take(pa.array(keep, pa.int64())), [rows[i] for i in keep]
    kept = rows
    if idx is not None:
        kept = [idx[p] for p in (range(len(present)) if rows is None else rows)]
    batch = table.cast(schema).combine_chunks()
    out = batch.to_batches()[0] if batch.num_rows else pa.RecordBatch.from_pylist([], schema=schema)
    return JsonRun(out, kept, sorted(bad))


def decode_kafka_json(
    topic: str,
    partition: int,
    offsets: Sequence[int],
    values: Sequence[bytes | None],
    schema: pa.Schema,
) -> KafkaJsonBatch:
    """The messages at ``offsets`` (ascending) of ``topic[partition]`` as one batch.

    Every row's origin is its message's ``topic[partition]@offset``; a rejected value is a
    :class:`~spillway.recovery.job.plan.Rejected` with that origin, the reason and its bytes.
    """
    run = decode_json_values(values, schema)
    origins = topic_runs(topic)
    kept = range(len(values)) if run.kept is None else run.kept
    if run.kept is None and offsets and offsets[-1] - offsets[0] == len(offsets) - 1:
        origins.add_run(partition, offsets[0], len(offsets))  # the usual case: no gaps
    else:
        for i in kept:
            origins.add(partition, offsets[i])
    rejected = [
        Rejected(TopicOffset(topic, partition, offsets[i]), why, values[i] or b"")
        for i, why in run.bad
    ]
    return KafkaJsonBatch(run.batch, origins, rejected)
