"""Built-in aggregations: ``count()``, ``sum(field)``, ``min``, ``max``, ``mean``.

An aggregation is a value, :class:`Agg` (a frozen dataclass: its kind and what it runs
over). The same values serve both paths:

* the record path (``KeyedStream.agg``, ``KeyedStream.window(...).agg``) folds records
  with :class:`RecordAggs` (``init`` / ``add`` / ``merge`` / ``values``), its accumulator
  a JSON list of *slots* (one per aggregation, two — sum and count — per ``mean``), so it
  checkpoints through the changelog like any ``aggregate``'s;
* the batch path (``KeyedStream.aggregate_batches``,
  :mod:`spillway.spark_jobs.operators.batchagg`) computes them with Arrow kernels.

Semantics are SQL's, on both paths: over non-null values; ``count()`` counts records,
``count(field)`` the non-null values of ``field``; ``sum``/``min``/``max``/``mean`` of a
group with no non-null value are null; ``mean`` is ``sum / count`` as a double.

Result types (:func:`result_type`, Avro): ``count`` → ``long``; ``sum`` of an integer
field → ``long``, of a floating one → ``double``; ``mean`` → ``double``; ``min``/``max``
→ the field's own type. A result is nullable when its field is (a group always holds at
least one record, so a non-nullable field gives a non-null result).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from spillway.channels.errors import PipelineDefinitionError

AggKind = Literal["count", "sum", "min", "max", "mean"]
KINDS: tuple[str, ...] = get_args(AggKind)
# What a batch-path aggregation may run over besides a column: an expression of the batch.
Expr = Callable[[Any], Any]

_INTEGER = ("int", "long")
_FLOATING = ("float", "double")


@dataclass(frozen=True)
class Agg:
    """One aggregation: ``kind`` over the field ``of`` (``None``: ``count`` of records).

    On the batch path ``of`` may also be an expression of the batch (a function of a
    ``pyarrow.RecordBatch`` returning an array); the record path takes field names only.
    Construct with :func:`count`, :func:`sum`, :func:`min`, :func:`max`, :func:`mean`.
    """

    kind: AggKind
    of: str | Expr | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise PipelineDefinitionError(
                f"aggregation kind must be one of {', '.join(KINDS)}, got {self.kind!r}"
            )
        if self.of is None and self.kind != "count":
            raise PipelineDefinitionError(
                f'{self.kind}() needs the field it aggregates, e.g. {self.kind}("cents")'
            )
        if self.of is not None and not isinstance(self.of, str) and not callable(self.of):
            raise PipelineDefinitionError(
                f"{self.kind}(): the field must be a field name (or, on the batch path, a "
                f"function of the batch), got {self.of!r}"
            )


def count(field: str | None = None) -> Agg:
    """The number of records (``count()``), or of non-null values of ``field``; a long."""
    return Agg("count", field)


def sum(field: str | Expr) -> Agg:
    """The sum of ``field``'s non-null values (null if none): long for integer fields,
    double for floating ones."""
    return Agg("sum", field)


def min(field: str | Expr) -> Agg:
    """The least non-null value of ``field`` (null if none), of the field's type."""
    return Agg("min", field)


def max(field: str | Expr) -> Agg:
    """The greatest non-null value of ``field`` (null if none), of the field's type."""
    return Agg("max", field)


def mean(field: str | Expr) -> Agg:
    """The mean of ``field``'s non-null values as a double (null if none)."""
    return Agg("mean", field)


def check_aggs(aggs: Mapping[str, Any], where: str) -> dict[str, Agg]:
    """``aggs`` (output field → :class:`Agg`) checked: at least one, each an :class:`Agg`.

    :class:`PipelineDefinitionError` naming ``where`` (the operator) otherwise.
    """
    if not aggs:
        raise PipelineDefinitionError(
            f"{where}: no aggregations given; name each output, e.g. "
            'agg(n=count(), total=sum("cents"))'
        )
    for out, a in aggs.items():
        if not isinstance(a, Agg):
            raise PipelineDefinitionError(
                f"{where}: {out}={a!r} is not an aggregation; use count(), sum(field), "
                "min(field), max(field) or mean(field)"
            )
    return dict(aggs)


def _fields(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {f["name"]: f["type"] for f in schema.get("fields", [])}


def _base(avro_type: Any) -> tuple[str | None, bool]:
    """(primitive name, nullable) of an Avro field type; name ``None`` if not primitive."""
    nullable = False
    t = avro_type
    if isinstance(t, list):
        rest = [x for x in t if x != "null"]
        nullable = len(rest) < len(t)
        if len(rest) != 1:
            return None, nullable
        t = rest[0]
    if isinstance(t, dict):
        t = t.get("type") if t.get("type") not in ("record", "array", "map", "enum") else None
    return (t if isinstance(t, str) else None), nullable


def result_type(agg: Agg, input_schema: Mapping[str, Any], where: str) -> Any:
    """The Avro type of ``agg``'s result over records of ``input_schema`` (see the module
    docstring); :class:`PipelineDefinitionError` naming ``where`` when the field is
    missing or of a type the aggregation does not take."""
    if agg.of is None:
        return "long"
    if not isinstance(agg.of, str):
        raise PipelineDefinitionError(
            f"{where}: {agg.kind}() on the record path takes a field name, not {agg.of!r} "
            "(expressions of a batch belong to aggregate_batches); map the value into a "
            "field first"
        )
    fields = _fields(input_schema)
    if agg.of not in fields:
        raise PipelineDefinitionError(
            f"{where}: {agg.kind}({agg.of!r}): the input has no field {agg.of!r}; its "
            f"fields are {list(fields)}"
        )
    ftype = fields[agg.of]
    base, nullable = _base(ftype)
    if agg.kind == "count":
        return "long"
    numeric = base in _INTEGER or base in _FLOATING
    if agg.kind in ("sum", "mean") and not numeric:
        raise PipelineDefinitionError(
            f"{where}: {agg.kind}({agg.of!r}) needs a numeric field (int, long, float, "
            f"double), but {agg.of!r} is {ftype!r}"
        )
    if agg.kind in ("min", "max"):
        if base is None or base in ("null", "bytes"):
            raise PipelineDefinitionError(
                f"{where}: {agg.kind}({agg.of!r}) needs a field of an ordered primitive type "
                f"(number, string or boolean), but {agg.of!r} is {ftype!r}"
            )
        return ftype
    out = "double" if agg.kind == "mean" or base in _FLOATING else "long"
    return ["null", out] if nullable else out


def output_fields(
    aggs: Mapping[str, Agg], input_schema: Mapping[str, Any], where: str
) -> list[dict[str, Any]]:
    """The Avro fields of ``aggs``' results (output name → result type), in order."""
    return [{"name": out, "type": result_type(a, input_schema, where)} for out, a in aggs.items()]


def slots_of(aggs: Mapping[str, Agg]) -> int:
    """How many accumulator slots ``aggs`` take (``mean``: two)."""
    return builtins.sum(2 if a.kind == "mean" else 1 for a in aggs.values())


class RecordAggs:
    """The record path's fold of ``aggs`` (output field → :class:`Agg`, field names only).

    The accumulator is a list of slots (JSON-able): ``count`` an int; ``sum``/``min``/
    ``max`` the value so far or ``None``; ``mean`` two slots, sum and count.
    """

    def __init__(self, aggs: Mapping[str, Agg], key_field: str = "key") -> None:
        self.aggs, self.key_field = dict(aggs), key_field
        self._plan: list[tuple[str, str | None]] = [(a.kind, _field(a)) for a in aggs.values()]
        self._names = list(self.aggs)

    def init(self) -> list[Any]:
        """An empty accumulator."""
        acc: list[Any] = []
        for kind, _f in self._plan:
            acc.extend([None, 0] if kind == "mean" else [0] if kind == "count" else [None])
        return acc

    def add(self, acc: list[Any], record: Mapping[str, Any]) -> list[Any]:
        """``acc`` with ``record`` folded in (changed in place and returned)."""
        i = 0
        for kind, f in self._plan:
            v = None if f is None else record[f]
            if kind == "count":
                if f is None or v is not None:
                    acc[i] += 1
            elif v is not None:
                old = acc[i]
                if kind == "sum" or kind == "mean":
                    acc[i] = v if old is None else old + v
                    if kind == "mean":
                        acc[i + 1] += 1
                elif kind == "min":
                    acc[i] = v if old is None or v < old else old
                else:
                    acc[i] = v if old is None or v > old else old
            i += 2 if kind == "mean" else 1
        return acc

    def merge(self, a: list[Any], b: list[Any]) -> list[Any]:
        """Two accumulators as one (session windows merge when a record bridges them)."""
        out = list(a)
        i = 0
        for kind, _f in self._plan:
            for j in range(2 if kind == "mean" else 1):
                x, y = a[i + j], b[i + j]
                if x is None or y is None:
                    out[i + j] = y if x is None else x
                elif kind in ("count", "sum", "mean"):
                    out[i + j] = x + y
                else:
                    out[i + j] = builtins.min(x, y) if kind == "min" else builtins.max(x, y)
            i += 2 if kind == "mean" else 1
        return out

    def values(self, acc: Sequence[Any]) -> dict[str, Any]:
        """Output field → result, from an accumulator."""
        out: dict[str, Any] = {}
        i = 0
        for name, (kind, _f) in zip(self._names, self._plan, strict=True):
            if kind == "mean":
                total, n = acc[i], acc[i + 1]
                out[name] = None if not n else total / n
                i += 2
            else:
                out[name] = acc[i]
                i += 1
        return out

    def keyed_result(self, key: Any, acc: Sequence[Any]) -> dict[str, Any]:
        """The output record of a key: its key field and the results."""
        return {self.key_field: key, **self.values(acc)}

    def window_result(self, key: Any, start: int, end: int, acc: Sequence[Any]) -> dict[str, Any]:
        """The output record of a key's window ``[start, end)``."""
        return {self.key_field: key, "start": start, "end": end, **self.values(acc)}


def _field(a: Agg) -> str | None:
    if a.of is not None and not isinstance(a.of, str):
        raise PipelineDefinitionError(
            f"{a.kind}(): the record path takes a field name, not {a.of!r}"
        )
    return a.of
