"""Event time declared once, at the source, and found again where a window needs it.

A source with event time declares how a record's time is read — ``timestamp=`` (a
function of the record), ``timestamp_column=`` (an integer field, ms) or, for Kafka,
neither (the Kafka record timestamp). A window declared without ``event_time=`` reads
its records' time the way their source declared it (:func:`time_at`), as long as the
records still carry what that reading needs:

* through operators that pass records on unchanged (``filter``, ``filter_batches``, the
  routings ``key_by`` / ``rebalance`` / ``broadcast`` / ``forward``) always;
* with ``timestamp_column=``, through any operator whose output keeps that field as an
  integer;
* with ``timestamp=``, through operators whose output has the source's fields;
* the Kafka record timestamp is part of the record only with
  ``read_kafka(..., kafka_timestamp_field="ts")``, which puts it into a field (then it is
  carried as a ``timestamp_column`` is); otherwise a window behind it is refused, saying
  to declare that (or ``timestamp_column=`` / ``timestamp=``) at the source, or to pass
  ``event_time=`` to the window.

An event-time window with built-in aggregations assigns its results a time of their own,
as Flink does: ``end - 1``, the last instant of the window (read from the result's
``end`` field), so a window behind it (minutes into hours, say) needs no ``event_time=``
either.

Behind a union, every input must give the same reading. What cannot be found is a
:class:`PipelineDefinitionError` at definition, naming the window and the operator
where the time was lost. ``event_time=`` on a window stays as an explicit override: a
time other than the source's, or one the records no longer carry as the source read it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from spillway.channels.errors import PipelineDefinitionError
from spillway.recovery.job.plan import NodeKind, Record

_PASS_THROUGH = frozenset({"filter", "filter_batches"})
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
    ``window``, as their source declared it (see the module docstring).

    :class:`PipelineDefinitionError` naming the window, what lost the time, and what to
    do, when the records do not carry it.
    """
    found: list[RecordTime] = []
    for up in upstreams:
        found.append(_resolve(window, up, nodes, inputs_of))
    first = found[0]
    if any(t != first for t in found[1:]):
        raise PipelineDefinitionError(
            f"operator {window!r}: its inputs come from sources that read event time "
            f"differently ({', '.join(sorted({t.source for t in found}))}); pass "
            "event_time= to the window to say which time it uses"
        )
    reader = first.reader()
    if reader is None:
        raise PipelineDefinitionError(
            f"operator {window!r}: source {first.source!r} takes event time from the Kafka "
            "record timestamp, which the records do not carry past the source; give "
            f"{first.source!r} kafka_timestamp_field= (the Kafka time into a field) or "
            "timestamp_column= (or timestamp=), or pass event_time= to the window"
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
