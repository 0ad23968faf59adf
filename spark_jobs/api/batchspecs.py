"""How the stream API's batch operators are defined: checked schemas, the
logic factories and the plan descriptions of ``map_batches``, ``filter_batches`` and
``aggregate_batches`` (:mod:`spillway.spark_jobs.api.streams` adds them to the graph)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow as pa

from spillway.channels.errors import PipelineDefinitionError
from spillway.channels.routing.batchkey import BatchKey
from spillway.channels.wire.arrowcodec import arrow_schema
from spillway.spark_jobs.modes import BatchEmit
from spillway.spark_jobs.operators.batchagg import Agg, BatchAggregate, BatchAggregateLogic, Derive
from spillway.spark_jobs.operators.batchops import FilterBatchesLogic, MapBatchesLogic
from spillway.spark_jobs.records.schemas import avro_schema

Schema = dict[str, Any]  # an Avro record schema


@dataclass(frozen=True)
class BatchSpec:
    """A batch operator as the graph takes it: logic factory, output schema, description."""

    factory: Callable[[], Any]
    schema: Schema
    description: dict[str, Any]


def batch_input(schema: Schema | None, where: str, what: str = "input ") -> pa.Schema:
    """The Arrow schema of a batch operator's flat ``schema``; a definition error if none."""
    flat = arrow_schema(schema) if schema is not None else None
    if flat is None:
        raise PipelineDefinitionError(
            f"{where}: a batch operator's {what}schema must be flat (a record of boolean, int, "
            f"long, float, double, string or bytes fields, each optionally nullable), got "
            f"{schema!r}; use record operators (map, filter), or flatten the records first"
        )
    return flat


def describe_of(of: Any) -> str | None:
    """An aggregate's column, or its expression function's qualified name (plan text)."""
    if of is None or isinstance(of, str):
        return of
    return f"{getattr(of, '__module__', '?')}.{getattr(of, '__qualname__', repr(of))}"


def map_batches(
    name: str, fn: Callable[[Any], Any], schema: Any, frame: str, input_schema: Schema | None
) -> BatchSpec:
    """``map_batches``: input and output schemas flat, the output as ``schema`` says."""
    where = f"operator {name!r}"
    batch_input(input_schema, where)
    avro = avro_schema(schema, where=where, name=name)
    out = batch_input(avro, where, "output ")
    description = {"op": "map_batches", "batch": True, "frame": frame}
    return BatchSpec(partial(MapBatchesLogic, name, fn, out, frame), avro, description)


def filter_batches(
    name: str, fn: Callable[[Any], Any], frame: str, input_schema: Schema | None
) -> BatchSpec:
    """``filter_batches``: the input's (flat) schema is the output's."""
    batch_input(input_schema, f"operator {name!r}")
    assert input_schema is not None
    description = {"op": "filter_batches", "batch": True, "frame": frame}
    return BatchSpec(partial(FilterBatchesLogic, name, fn, frame), input_schema, description)


def aggregate_batches(
    name: str,
    key: str | BatchKey,
    aggs: Mapping[str, Agg],
    derive: Mapping[str, Derive] | None,
    emit: BatchEmit,
    input_schema: Schema | None,
) -> BatchSpec:
    """``aggregate_batches`` keyed by column ``key``, or by a key function over batches
    (:class:`spillway.channels.routing.batchkey.BatchKey`, its keys the column ``key.name``): the
    definition
    checked against the input's Arrow schema now; the aggregates in the description
    (restored slots are positional, so a changed definition must change the plan
    fingerprint)."""
    where = f"operator {name!r}"
    flat = batch_input(input_schema, where)
    column = key if isinstance(key, str) else key.name
    if isinstance(key, BatchKey):  # the aggregate sees each batch with its keys added
        flat = keyed_schema(flat, key)
    spec = partial(BatchAggregate, name, column, aggs, flat, derive=derive, emit=emit)
    agg = spec()
    avro = avro_schema(agg.output_schema, where=where, name=name)
    description = {
        "op": "aggregate_batches", "batch": True, "key": column, "emit": emit,
        "aggs": {out: [a.kind, describe_of(a.of)] for out, a in agg.aggs.items()},
        "derive": {out: describe_of(fn) for out, fn in agg.derive.items()},
    }  # fmt: skip
    if isinstance(key, BatchKey):
        description["key_fn"] = describe_of(key.fn)
        batch_key = key
        return BatchSpec(lambda: KeyedBatchAggregateLogic(spec(), batch_key), avro, description)
    return BatchSpec(lambda: BatchAggregateLogic(spec()), avro, description)


def keyed_schema(schema: pa.Schema, key: BatchKey) -> pa.Schema:
    """``schema`` with ``key``'s column (its function's type) replacing or appended."""
    fld = pa.field(key.name, key.key_type)
    index = schema.get_field_index(key.name)
    return schema.set(index, fld) if index >= 0 else schema.append(fld)


class KeyedBatchAggregateLogic(BatchAggregateLogic):
    """:class:`BatchAggregateLogic` keyed by a function over batches: each batch gets its
    keys as a column first (so a row whose key fails is bisected out and dead-lettered
    like a row whose aggregate fails)."""

    def __init__(self, agg: BatchAggregate, key: BatchKey) -> None:
        super().__init__(agg)
        self.key = key

    def process_batch(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        """Fold ``batch`` keyed by the key function; the updates to emit."""
        return super().process_batch(self.key.with_key(batch))
