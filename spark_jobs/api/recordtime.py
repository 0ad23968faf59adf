"""Event time declared once, at the source, and travelling with each record to the windows.

A source with event time declares how a record's time is read — ``timestamp=`` (a
function of the record), ``timestamp_column=`` (an integer field, ms) or, for Kafka,
neither (the Kafka record timestamp). A window declared without ``event_time=`` uses
that time (:func:`time_at`), found at definition in one of three ways:

* **Read from the fields.** Where only operators that pass records on unchanged
  (``filter``, ``filter_batches``, the routings ``key_by`` / ``rebalance`` /
  ``broadcast`` / ``forward``) lie between the source and the window, the window reads
  the time as the source declared it (field or function): nothing travels, nothing is
  paid on the way.
* **Carried with each record**, as Flink's record timestamp. Where an operator on the way
  changes the records (a ``map`` that drops or changes the time field, say), or the time
  is the Kafka record timestamp, or the window's inputs come from sources that read time
  differently (a union), every operator between the source and the window stamps its
  outputs (:mod:`spillway.spark_jobs.operators.stamping`): the source each record with its
  declared time; ``map``, ``flat_map``, ``filter``, process functions, co-process
  functions, lookup joins and running aggregates (``emit="updates"``) each output with
  the time of the input it came from; an event-time timer's outputs with the timer's
  time; an interval join's pair with the larger of its records' times (Flink's rule), an
  as-of join's result with its left record's; and the
  channels on the way carry the times beside the records
  (:mod:`spillway.channels.wire.stamps`). The window reads the carried time
  (:class:`~spillway.spark_jobs.operators.stamping.CarriedTime`).
* **Read from the fields, through operators that cannot stamp.** Columnar (batch)
  operators, count windows, custom-fold windows and aggregates that emit at the
  end do not carry a time per record (rows do not map 1:1 to inputs, or have no time of
  their own). Behind one of them the window reads the fields as declared if the records
  still have them: ``timestamp_column=`` through any operator whose output keeps that
  field as an integer; ``timestamp=`` through operators whose output has the source's
  fields; ``read_kafka(..., kafka_timestamp_field="ts")`` puts the Kafka time into a field.

An event-time window with built-in aggregations assigns its results a time of their own,
as Flink does: ``end - 1``, the last instant of the window (read from the result's
``end`` field, or carried), so a window behind it (minutes into hours, say) needs no
``event_time=`` either.

What none of these finds is a :class:`PipelineDefinitionError` at definition, naming the
window and the operator where the time was lost. ``event_time=`` on a window stays as an
explicit override: a time other than the source's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from spillway.channels.errors import PipelineDefinitionError
from spillway.channels.wire.stamps import time_of
from spillway.recovery.job.plan import NodeKind, Record
from spillway.spark_jobs.operators.stamping import CarriedTime

_PASS_THROUGH = frozenset({"filter", "filter_batches"})
# Record-at-a-time operators: each output carries the time of the input it came from.
_EACH = frozenset(
    {"map", "flat_map", "filter", "process", "co_process", "interval_join", "asof_join",
     "lookup_join"}
)  # fmt: skip
_INTEGER = ("int", "long")


@dataclass(frozen=True)
class RecordTime:
    """How operator ``source`` (a source, or a window assigning its results' time) reads
    a record's event time (ms): field ``column`` plus ``offset``, function ``fn``, or
    (both ``None``) the Kafka record timestamp."""

    source: str
    column: str | None = None
    fn: Callable[[Record], int] | None = None
    fields: tuple[str, ...] = ()  # the source's record fields (what ``fn`` may read)
    offset: int = 0

    def reader(self) -> Callable[[Record], int] | None:
        """A function of the record giving its event time; ``None`` for Kafka's timestamp."""
        if self.column is not None:
            return FieldTime(self.column, self.offset)
        return self.fn


@dataclass(frozen=True)
class FieldTime:
    """The event time in the record's integer field ``column`` (ms), plus ``offset``."""

    column: str
    offset: int = 0

    def __call__(self, record: Record) -> int:
        """``record[column] + offset``."""
        t: int = record[self.column]
        return t + self.offset if self.offset else t


class _Node(Protocol):
    kind: NodeKind
    schema: dict[str, Any] | None
    description: dict[str, Any]
    time: RecordTime | None
    carry: bool


def _field_names(schema: Mapping[str, Any] | None) -> tuple[str, ...]:
    return tuple(f["name"] for f in (schema or {}).get("fields", []))


def integer_field(schema: Mapping[str, Any] | None, column: str) -> bool:
    """Whether ``schema`` has ``column`` as an integer (``int``/``long``) field."""
    for f in (schema or {}).get("fields", []):
        if f["name"] == column:
            t = f["type"]
            if isinstance(t, dict):
                t = t.get("type")
            return t in _INTEGER
    return False


def time_at(
    window: str,
    upstreams: Iterable[str],
    nodes: Mapping[str, _Node],
    inputs_of: Callable[[str], list[str]],
) -> Callable[[Record], int]:
    """The event-time reader of the records that operators ``upstreams`` send to window
    ``window`` (see the module docstring): their fields, read as declared, where only
    operators that pass records on unchanged lie between the time's origins and the
    window; else the time each record carries (:class:`CarriedTime`), and every operator
    on the way is marked to stamp its outputs (``carry``); else, where one of them cannot
    stamp (a columnar operator, a join...), the fields as declared if the records still
    have them.

    :class:`PipelineDefinitionError` naming the window, what lost the time, and what to
    do, when none of these finds it.
    """
    ups = list(upstreams)
    walk = _Walk(nodes, inputs_of)
    for up in ups:
        walk.visit(window, up)
    if not walk.changed and len(set(walk.origins.values())) == 1:
        reader = next(iter(walk.origins.values())).reader()
        if reader is not None:  # the fields as declared: nothing to carry
            return reader
    if walk.stampable:
        for name in walk.path:
            nodes[name].carry = True
        return CarriedTime(window)
    return _declared(window, ups, nodes, inputs_of)


def time_or_none(
    operator: str,
    upstreams: Iterable[str],
    nodes: Mapping[str, _Node],
    inputs_of: Callable[[str], list[str]],
) -> Callable[[Record], int | None] | None:
    """For an operator that may read event time (a process function's ``ctx.timestamp``):
    :func:`time_at`'s reader where it finds one (a carried time read as None where a
    record carries none), else None."""
    try:
        found = time_at(operator, upstreams, nodes, inputs_of)
    except PipelineDefinitionError:
        return None
    return time_of if isinstance(found, CarriedTime) else found


class _Walk:
    """The operators between a window and the origins of its records' time."""

    def __init__(self, nodes: Mapping[str, _Node], inputs_of: Callable[[str], list[str]]) -> None:
        self.nodes, self.inputs_of = nodes, inputs_of
        self.origins: dict[str, RecordTime] = {}  # origin operator -> its time reading
        self.path: list[str] = []  # every operator that would stamp, origins included
        self.changed = False  # an operator that changes records lies on the way
        self.stampable = True  # every one of them can stamp its outputs

    def visit(self, window: str, name: str) -> None:
        if name in self.path:
            return
        node = self.nodes[name]
        self.path.append(name)
        if node.kind == "source" or node.time is not None:
            if node.time is None:  # a source without event time: refused by _declared
                self.stampable = False
                return
            self.origins[name] = node.time
            self.stampable &= not node.description.get("batch")
            return
        self.changed |= node.description.get("op") not in _PASS_THROUGH
        self.stampable &= _stamps(node)
        ups = self.inputs_of(name)
        if not ups:
            raise PipelineDefinitionError(f"operator {window!r}: operator {name!r} has no input")
        for up in ups:
            self.visit(window, up)


def _stamps(node: _Node) -> bool:
    """Whether ``node`` can give each output its input's time (a record-at-a-time operator)."""
    op = node.description.get("op")
    if op == "aggregate":  # a running aggregate: its updates do; final results have no time
        return node.description.get("emit") == "updates"
    return op in _EACH


def _declared(
    window: str,
    upstreams: Iterable[str],
    nodes: Mapping[str, _Node],
    inputs_of: Callable[[str], list[str]],
) -> Callable[[Record], int]:
    """The reader of the records' fields as their source declared the time; refusals
    where the records no longer have them."""
    found: list[RecordTime] = []
    for up in upstreams:
        found.append(_resolve(window, up, nodes, inputs_of))
    first = found[0]
    if any(t != first for t in found[1:]):
        raise PipelineDefinitionError(
            f"operator {window!r}: its inputs come from sources that read event time "
            f"differently ({', '.join(sorted({t.source for t in found}))}) through an "
            "operator that cannot carry it; pass event_time= to the window to say which "
            "time it uses"
        )
    reader = first.reader()
    if reader is None:
        raise PipelineDefinitionError(
            f"operator {window!r}: source {first.source!r} takes event time from the Kafka "
            "record timestamp, which an operator on the way cannot carry (a columnar "
            "operator, a count or custom-fold window, an aggregate that emits at the end); "
            f"give {first.source!r} kafka_timestamp_field= (the Kafka time "
            "into a field) or timestamp_column= (or timestamp=), or pass event_time= to the "
            "window"
        )
    return reader


def _resolve(
    window: str, name: str, nodes: Mapping[str, _Node], inputs_of: Callable[[str], list[str]]
) -> RecordTime:
    node = nodes[name]
    if node.kind != "source" and node.time is not None:  # a window's results: their own time
        return node.time
    if node.kind == "source":
        if node.time is None:
            raise PipelineDefinitionError(
                f"operator {window!r}: source {name!r} has no event time; declare it there "
                "(timestamp_column= or timestamp=, and watermarks=), or pass event_time= "
                "to the window"
            )
        return node.time
    ups = inputs_of(name)
    if not ups:
        raise PipelineDefinitionError(f"operator {window!r}: operator {name!r} has no input")
    found = [_resolve(window, u, nodes, inputs_of) for u in ups]
    t = found[0]
    if any(x != t for x in found[1:]):
        raise PipelineDefinitionError(
            f"operator {window!r}: operator {name!r} joins inputs whose sources read event "
            "time differently; pass event_time= to the window"
        )
    if node.description.get("op") in _PASS_THROUGH:
        return t
    if t.column is not None:
        if integer_field(node.schema, t.column):
            return t
        lost = f"its output has no integer field {t.column!r}"
    elif t.fn is not None:
        if _field_names(node.schema) == t.fields:
            return t
        lost = f"its output's fields are not source {t.source!r}'s, which timestamp= reads"
    else:
        return t  # the Kafka timestamp: refused by time_at, naming the source
    raise PipelineDefinitionError(
        f"operator {window!r}: the event time declared at source {t.source!r} does not "
        f"reach it: operator {name!r} changes the records ({lost}); keep the time field "
        f"in {name!r}'s output (and declare timestamp_column= at the source), or pass "
        "event_time= to the window"
    )
