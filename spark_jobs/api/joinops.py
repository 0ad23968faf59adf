"""Argument checks and logic factories of the joins (spillway.spark_jobs.operators.joins) behind
``ConnectedKeyedStreams.interval_join`` / ``asof_join`` / ``lookup_join``.

Each function returns an :class:`~spillway.spark_jobs.api.keyedops.OperatorSpec` (factory, output
schema, the description the plan fingerprints) for the two-input co-process wiring.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from spillway.channels.errors import PipelineDefinitionError
from spillway.recovery.job.plan import Record
from spillway.spark_jobs.api.keyedops import OperatorSpec, _second
from spillway.spark_jobs.operators.joinbook import LEFT, RIGHT
from spillway.spark_jobs.operators.joins import (
    STREAM,
    TABLE,
    AsOfJoinLogic,
    IntervalJoinLogic,
    KeyFn,
    LookupJoinLogic,
    TimeFn,
)
from spillway.spark_jobs.records.records import adapt, output_schema

Sides = Mapping[str, tuple[str, KeyFn, TimeFn | None]]
Inputs = tuple[tuple[str, ...], KeyFn, tuple[str, ...], KeyFn]  # a's names, key, b's, key


def _int(name: str, arg: str, v: Any, *, low: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or (low is not None and v < low):
        at_least = f" >= {low}" if low is not None else ""
        raise PipelineDefinitionError(
            f"join {name!r}: {arg} must be an integer{at_least} (ms), got {v!r}"
        )
    return v


def _how(name: str, how: str) -> str:
    if how not in ("inner", "left"):
        raise PipelineDefinitionError(f"join {name!r}: how must be 'inner' or 'left', got {how!r}")
    return how


def _time(name: str, arg: str, fn: Any) -> TimeFn:
    if not callable(fn):
        raise PipelineDefinitionError(
            f"join {name!r}: {arg} must be a function of the record returning its event "
            f"time in ms, got {fn!r}"
        )
    return adapt(fn)


def _sides(inputs: Inputs, first: str, second: str, times: tuple[Any, Any]) -> Sides:
    names_a, key_a, names_b, key_b = inputs
    sides: dict[str, tuple[str, KeyFn, TimeFn | None]] = {}
    sides.update((n, (first, key_a, times[0])) for n in names_a)
    sides.update((n, (second, key_b, times[1])) for n in names_b)
    return sides


def _desc(op: str, inputs: Inputs, **more: Any) -> dict[str, Any]:
    return {"op": op, "inputs": {"a": list(inputs[0]), "b": list(inputs[2])}, **more}


def interval_join(
    name: str,
    inputs: Inputs,
    *,
    lower: int,
    upper: int,
    left_time: Callable[[Record], int],
    right_time: Callable[[Record], int],
    result: Callable[[Any, Any], Record],
    allowed_lateness_ms: int,
    schema: Any,
) -> OperatorSpec:
    """An interval join: pairs with ``left.ts + lower <= right.ts <= left.ts + upper``."""
    lower, upper = _int(name, "lower", lower), _int(name, "upper", upper)
    if lower > upper:
        raise PipelineDefinitionError(
            f"join {name!r}: lower bound {lower} is above upper bound {upper}, so no pair "
            "could match; use lower <= upper"
        )
    lateness = _int(name, "allowed_lateness_ms", allowed_lateness_ms, low=0)
    times = (_time(name, "left_time", left_time), _time(name, "right_time", right_time))
    avro, out = output_schema(schema, result, f"join {name!r}", name)
    sides = _sides(inputs, LEFT, RIGHT, times)
    factory = partial(
        IntervalJoinLogic, name, sides, lower, upper, lateness, adapt(result, (0, 1), out)
    )
    desc = _desc("interval_join", inputs, lower=lower, upper=upper, lateness=lateness)
    return OperatorSpec(factory, avro, desc, _second)


def asof_join(
    name: str,
    inputs: Inputs,
    *,
    left_time: Callable[[Record], int],
    right_time: Callable[[Record], int],
    result: Callable[[Any, Any], Record],
    allowed_lateness_ms: int,
    retention_ms: int | None,
    how: str,
    schema: Any,
) -> OperatorSpec:
    """An as-of join: each left record with the latest right one at or before its time."""
    lateness = _int(name, "allowed_lateness_ms", allowed_lateness_ms, low=0)
    if retention_ms is not None:
        _int(name, "retention_ms", retention_ms, low=0)
    times = (_time(name, "left_time", left_time), _time(name, "right_time", right_time))
    avro, out = output_schema(schema, result, f"join {name!r}", name)
    sides = _sides(inputs, LEFT, RIGHT, times)
    # The right record may be None: only the left one is built as a dataclass.
    fn = adapt(result, (0,), out)
    factory = partial(AsOfJoinLogic, name, sides, lateness, retention_ms, _how(name, how), fn)
    desc = _desc("asof_join", inputs, lateness=lateness, retention=retention_ms, how=how)
    return OperatorSpec(factory, avro, desc, _second)


def lookup_join(
    name: str,
    inputs: Inputs,
    *,
    result: Callable[[Any, Any], Record],
    how: str,
    schema: Any,
) -> OperatorSpec:
    """A lookup join: each stream record with its key's current table row."""
    avro, out = output_schema(schema, result, f"join {name!r}", name)
    sides = _sides(inputs, STREAM, TABLE, (None, None))
    fn = adapt(result, (0,), out)
    factory = partial(LookupJoinLogic, name, sides, _how(name, how), fn)
    return OperatorSpec(factory, avro, _desc("lookup_join", inputs, how=how), _second)
