"""Argument checks and logic factories behind the keyed operators of the pipeline API
(``KeyedStream.window``, ``.agg`` and ``.process``); ``spillway.spark_jobs.api.streams``
only delegates here.

Each function returns an :class:`OperatorSpec`: the logic factory, the output schema and
the description the plan fingerprints.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from spillway.channels.errors import PipelineDefinitionError
from spillway.recovery.job.plan import Record
from spillway.spark_jobs.modes import Emit
from spillway.spark_jobs.operators.operators import KeyedAggregateLogic
from spillway.spark_jobs.operators.process import ProcessContext, ProcessLogic
from spillway.spark_jobs.operators.windows import (
    CountWindowLogic,
    FixedWindowLogic,
    SessionWindowLogic,
)
from spillway.spark_jobs.records.aggregations import (
    Agg,
    RecordAggs,
    check_aggs,
    output_fields,
)
from spillway.spark_jobs.records.records import adapt, output_schema
from spillway.spark_jobs.records.schemas import avro_name

# Operators that fire on watermarks (Pipeline checks a watermark can reach them).
EVENT_TIME_OPS = frozenset({"tumbling_window", "hopping_window", "session_window", "asof_join"})


@dataclass(frozen=True)
class OperatorSpec:
    """What ``Stream._then`` needs for a keyed operator."""

    factory: Callable[[], Any]
    schema: dict[str, Any] | None
    description: dict[str, Any]
    # The record key a state key belongs to (its changelog partition is that key's
    # group); None: the state key is the record key.
    key_of_state: Callable[[Any], Any] | None = None


def _first(state_key: tuple[Any, ...]) -> Any:
    """Record key of a fixed window's state key ``(key, start)``."""
    return state_key[0]


def _second(state_key: tuple[Any, ...]) -> Any:
    """Record key of a process function's state key ``(kind, key, ...)``."""
    return state_key[1]


_LABELS = {"size": "window size", "gap": "session gap"}


def _check(name: str, **positive: int) -> None:
    for arg, v in positive.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise PipelineDefinitionError(
                f"operator {name!r}: {_LABELS.get(arg, arg)} must be >= 1, got {v!r}"
            )


def _check_common(name: str, allowed_lateness_ms: int) -> None:
    if (
        isinstance(allowed_lateness_ms, bool)
        or not isinstance(allowed_lateness_ms, int)
        or allowed_lateness_ms < 0
    ):
        raise PipelineDefinitionError(
            f"operator {name!r}: allowed_lateness_ms must be an integer >= 0, "
            f"got {allowed_lateness_ms!r}"
        )


def fixed_window(
    op: str,
    name: str,
    key_fn: Callable[[Record], Any],
    *,
    size: int,
    hop: int,
    event_time: Callable[[Record], int],
    init: Callable[[], Any],
    add: Callable[[Any, Record], Any],
    result: Callable[[Any, int, int, Any], Record],
    schema: Any,
    allowed_lateness_ms: int,
    emit: Emit,
) -> OperatorSpec:
    """Tumbling (``hop == size``) or hopping/sliding windows."""
    _check(name, size=size, hop=hop)
    _check_common(name, allowed_lateness_ms)
    if hop > size:
        raise PipelineDefinitionError(
            f"operator {name!r}: hop {hop} is larger than size {size}, so records between "
            "windows would belong to none; use hop <= size"
        )
    avro, out = output_schema(schema, result, f"operator {name!r}", name)
    factory = partial(
        FixedWindowLogic,
        key_fn,
        adapt(event_time),
        size,
        hop,
        init,
        adapt(add, (1,)),
        adapt(result, (), out),
        allowed_lateness_ms,
        emit,
    )
    desc: dict[str, Any] = {"op": op, "size": size}
    # Only what differs from a plain tumbling window: its plan fingerprint (and so the
    # checkpoints of jobs that ran before lateness and hops existed) stays as it was.
    if hop != size:
        desc["hop"] = hop
    if allowed_lateness_ms or emit != "final":
        desc.update(lateness=allowed_lateness_ms, mode=emit)
    return OperatorSpec(factory, avro, desc, _first)


def session_window(
    name: str,
    key_fn: Callable[[Record], Any],
    *,
    gap: int,
    event_time: Callable[[Record], int],
    init: Callable[[], Any],
    add: Callable[[Any, Record], Any],
    merge: Callable[[Any, Any], Any],
    result: Callable[[Any, int, int, Any], Record],
    schema: Any,
    allowed_lateness_ms: int,
    emit: Emit,
) -> OperatorSpec:
    """Gap-based merging session windows."""
    _check(name, gap=gap)
    _check_common(name, allowed_lateness_ms)
    avro, out = output_schema(schema, result, f"operator {name!r}", name)
    factory = partial(
        SessionWindowLogic,
        key_fn,
        adapt(event_time),
        gap,
        init,
        adapt(add, (1,)),
        merge,
        adapt(result, (), out),
        allowed_lateness_ms,
        emit,
    )
    desc = {"op": "session_window", "gap": gap, "lateness": allowed_lateness_ms, "mode": emit}
    return OperatorSpec(factory, avro, desc)


def count_window(
    name: str,
    key_fn: Callable[[Record], Any],
    *,
    size: int,
    init: Callable[[], Any],
    add: Callable[[Any, Record], Any],
    result: Callable[[Any, int, int, Any], Record],
    schema: Any,
    emit: Emit,
) -> OperatorSpec:
    """Tumbling windows of ``size`` records per key."""
    _check(name, size=size)
    _check_common(name, 0)
    avro, out = output_schema(schema, result, f"operator {name!r}", name)
    factory = partial(
        CountWindowLogic, key_fn, size, init, adapt(add, (1,)), adapt(result, (), out), emit
    )
    return OperatorSpec(factory, avro, {"op": "count_window", "size": size, "mode": emit})


def describe_aggs(aggs: Mapping[str, Agg]) -> dict[str, list[Any]]:
    """Built-in aggregations as the plan description keeps them (output → [kind, field]):
    accumulators are positional slots, so a changed definition changes the fingerprint."""
    return {out: [a.kind, a.of if isinstance(a.of, str) or a.of is None else repr(a.of)]
            for out, a in aggs.items()}  # fmt: skip


def _agg_schema(
    name: str, key: tuple[str, Any], extra: list[dict[str, Any]], aggs: Mapping[str, Agg],
    input_schema: Mapping[str, Any], where: str,
) -> tuple[RecordAggs, dict[str, Any]]:  # fmt: skip
    checked = check_aggs(aggs, where)
    taken = {key[0], *(f["name"] for f in extra)}
    for out in checked:
        if out in taken:
            raise PipelineDefinitionError(
                f"{where}: output field {out!r} is also the "
                f"{'key' if out == key[0] else 'window'} field; name the aggregation otherwise"
            )
    fields = [{"name": key[0], "type": key[1]}, *extra]
    fields += output_fields(checked, input_schema, where)
    schema = {"type": "record", "name": avro_name(name), "fields": fields}
    return RecordAggs(checked, key[0]), schema


def window_aggs(
    name: str, key: tuple[str, Any], aggs: Mapping[str, Agg], input_schema: Mapping[str, Any]
) -> tuple[RecordAggs, dict[str, Any]]:
    """The fold of built-in aggregations ``aggs`` of window operator ``name`` and its
    output schema: ``key`` (name, Avro type), ``start``, ``end`` (long) and one field per
    aggregation; :class:`PipelineDefinitionError` naming the operator if one cannot be."""
    window = [{"name": "start", "type": "long"}, {"name": "end", "type": "long"}]
    return _agg_schema(name, key, window, aggs, input_schema, f"operator {name!r}")


def builtin_aggregate(
    name: str,
    key_fn: Callable[[Record], Any],
    key: tuple[str, Any],
    aggs: Mapping[str, Agg],
    input_schema: Mapping[str, Any],
    emit: Emit,
) -> OperatorSpec:
    """``KeyedStream.agg``: built-in aggregations per key (a :class:`KeyedAggregateLogic`
    over their fold), the output schema derived (``key``: the key field's name and type)."""
    where = f"operator {name!r}"
    _check_common(name, 0)
    fold, schema = _agg_schema(name, key, [], aggs, input_schema, where)
    factory = partial(KeyedAggregateLogic, key_fn, fold.init, fold.add, fold.keyed_result, emit)
    desc = {"op": "aggregate", "emit": emit, "aggs": describe_aggs(fold.aggs)}
    return OperatorSpec(factory, schema, desc)


def process(
    name: str,
    key_fn: Callable[[Record], Any],
    fn: Callable[[Record, ProcessContext], Iterable[Record] | None],
    *,
    on_timer: Callable[[int, ProcessContext], Iterable[Record] | None] | None,
    event_time: Callable[[Record], int | None] | None,
    ttl_ms: Mapping[str, int] | None,
    schema: Any,
) -> OperatorSpec:
    """A keyed process function (spillway.spark_jobs.operators.process)."""
    for state, ms in (ttl_ms or {}).items():
        _check(name, **{f"ttl_ms[{state!r}]": ms})
    avro, out = output_schema(schema, fn, f"operator {name!r}", name, many=True)
    factory = partial(
        ProcessLogic,
        key_fn,
        adapt(_or_empty(fn), (0,), out, many=True),
        adapt(_or_empty(on_timer), (), out, many=True) if on_timer is not None else None,
        adapt(event_time) if event_time is not None else None,
        dict(ttl_ms or {}),
    )
    return OperatorSpec(factory, avro, {"op": "process", "ttl_ms": dict(ttl_ms or {})}, _second)


def _or_empty(fn: Callable[..., Iterable[Record] | None]) -> Callable[..., Iterable[Record]]:
    """``fn`` returning ``[]`` where it returned ``None`` (a function that emits nothing)."""

    @functools.wraps(fn)  # keeps the annotations that typed records are built from
    def call(*args: Any) -> Iterable[Record]:
        got = fn(*args)
        return [] if got is None else got

    return call
