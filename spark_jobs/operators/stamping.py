"""Operators that stamp their outputs with event time, so the time travels with each record.

Where a window reads the time its records carry (:mod:`spillway.spark_jobs.api.recordtime`),
every operator between the time's origin and the window stamps what it emits
(:class:`~spillway.channels.wire.stamps.Timed` records), as Flink's operators set their
outputs' record timestamps:

* a source stamps each record with its event time as declared (:class:`StampingSource`:
  ``timestamp=``, ``timestamp_column=``; the Kafka record timestamp is stamped by the
  Kafka source itself, which has it);
* a record-at-a-time operator gives each output the time of the input it came from:
  ``map``, ``flat_map`` and ``filter`` (stateless) one record per call
  (:class:`EachStamping`); keyed running aggregates, process and co-process functions and
  lookup joins stamp inside their own call, because they write keyed state and a call
  that fails must leave it as it was (a failed message's good records are run again, one
  by one, when bad ones are dead-lettered: ``recovery/runtime/failures.py``). A process
  function's event-time timer gives its outputs the timer's time; outputs of
  processing-time timers and of the end of input carry no time (Flink erases those too);
* an event-time window's results carry ``end - 1``, their window's last instant
  (:class:`ReaderStamping` with the window's result-time reader);
* an interval join's pair carries the larger of its two records' times (Flink's rule), an
  as-of join's result its left record's time (never behind its right partner's), both as
  the join reads them (``left_time``/``right_time``); a lookup join's result carries its
  stream record's time.

A window reading the carried time fails on a record without one, naming itself and the
record (:class:`CarriedTime`; dead-lettered at stage ``process`` with ``--dead-letter``).
Columnar (batch) operators, count windows, custom-fold windows and aggregates that emit
at the end do not stamp: a window behind them reads time from fields, as declared at
definition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from spillway.channels.errors import RecordError
from spillway.channels.wire.stamps import stamped, time_of
from spillway.recovery.job.origins import Origins
from spillway.recovery.job.plan import Context, Logic, Record, Rejected, SetAside, Source
from spillway.spark_jobs.operators.operators import Stateless
from spillway.spark_jobs.records.watermarks import event_time


class CarriedTime:
    """The event time a record carries (a window's ``time_fn``); :class:`RecordError`
    naming window ``window`` for a record that carries none."""

    def __init__(self, window: str) -> None:
        self.window = window

    def __call__(self, record: Record) -> int:
        """``record``'s carried time."""
        t = time_of(record)
        if t is None:
            raise RecordError(
                f"operator {self.window!r}: record {repr(record)[:120]} carries no event time "
                "(the output of a processing-time timer or of the end of input); pass "
                "event_time= to the window to read a time from its fields"
            )
        return t


class _Delegating:
    """Forwards what the runtime asks of a logic to ``inner``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def open(self, ctx: Context) -> None:
        """``inner``'s."""
        self.inner.open(ctx)

    def set_aside(self) -> list[SetAside]:
        """``inner``'s."""
        out: list[SetAside] = self.inner.set_aside()
        return out

    def __getattr__(self, name: str) -> Any:
        # Optional parts of a logic (on_processing_time, folds_per_poll...) are inner's.
        if name == "inner":  # not set yet (a copy being built): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)


class EachStamping(_Delegating):
    """A stateless ``inner`` (``map``, ``flat_map``, ``filter``) whose every output carries
    the time of the input it came from: ``inner`` runs on one input at a time.

    Only for a :class:`~spillway.spark_jobs.operators.operators.Stateless` operator
    (:class:`TypeError` otherwise): one call per record would split a stateful operator's
    one state write per call into several, and a message that fails half-way would leave
    the first records' writes behind."""

    def __init__(self, inner: Any) -> None:
        if not isinstance(inner, Stateless):
            raise TypeError(f"{type(inner).__name__} keeps state: it must stamp in its own call")
        super().__init__(inner)

    def process(self, records: Sequence[Record]) -> list[Record]:
        """``inner.process`` on each record, its outputs stamped with its time."""
        return self._each(self.inner.process, records)

    @staticmethod
    def _each(
        call: Callable[[Sequence[Record]], Iterable[Record]], records: Sequence[Record]
    ) -> list[Record]:
        out: list[Record] = []
        for r in records:
            t = time_of(r)
            out.extend(stamped(o, t) for o in call([r]))
        return out

    def on_watermark(self, watermark: int) -> list[Record]:
        """``inner``'s (a stateless operator holds nothing back for a watermark)."""
        return list(self.inner.on_watermark(watermark))

    def on_end(self) -> list[Record]:
        """``inner``'s (nothing pending at the end)."""
        return list(self.inner.on_end())


class ReaderStamping(_Delegating):
    """``inner`` (a window) whose every output carries ``reader(output)``: its window's
    ``end - 1``."""

    def __init__(self, inner: Any, reader: Callable[[Record], int]) -> None:
        super().__init__(inner)
        self.reader = reader

    def _stamp(self, out: Iterable[Record]) -> list[Record]:
        read = self.reader
        return [stamped(o, read(o)) for o in out]

    def process(self, records: Sequence[Record]) -> list[Record]:
        """``inner``'s outputs (``emit="updates"``), stamped."""
        return self._stamp(self.inner.process(records))

    def on_watermark(self, watermark: int) -> list[Record]:
        """``inner``'s outputs, stamped."""
        return self._stamp(self.inner.on_watermark(watermark))

    def on_end(self) -> list[Record]:
        """``inner``'s outputs, stamped."""
        return self._stamp(self.inner.on_end())


class StampingSource:
    """A source whose records carry ``time(record)``, its declared event time; the rest
    is ``inner``'s."""

    def __init__(self, inner: Source, time: Callable[[Record], int]) -> None:
        self.inner = inner
        self.time = time

    def open(self, ctx: Context, position: Mapping[str, Any]) -> None:
        """``inner``'s."""
        self.inner.open(ctx, position)

    def read(self, max_records: int) -> list[Record] | None:
        """``inner``'s records, each stamped (the source took each one's time already,
        or rejected it)."""
        got = self.inner.read(max_records)
        if got is None:
            return None
        fn = self.time
        return [stamped(r, event_time(fn, r)) for r in got]

    def position(self) -> dict[str, Any]:
        """``inner``'s."""
        return self.inner.position()

    def watermark(self) -> int | None:
        """``inner``'s."""
        return self.inner.watermark()

    def idle(self) -> bool:
        """``inner``'s."""
        return self.inner.idle()

    def rejected(self) -> list[Rejected]:
        """``inner``'s."""
        return self.inner.rejected()

    def origins(self) -> Origins:
        """``inner``'s."""
        return self.inner.origins()

    def __getattr__(self, name: str) -> Any:
        # Optional parts of a source (progress, reread, ...) are inner's.
        if name == "inner":  # not set yet (a copy being built): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)


def stamping_logic(inner: Any, reader: Callable[[Record], int] | None) -> Logic:
    """``inner`` stamping its outputs: by ``reader`` (a window's results), else each
    output with its input's time."""
    if reader is not None:
        return ReaderStamping(inner, reader)
    if hasattr(inner, "stamp_pairs"):  # a join: it stamps its results itself
        inner.stamp_pairs = True
        return inner  # type: ignore[no-any-return]
    if hasattr(inner, "carry_time"):  # stateful: it stamps within the call that writes state
        inner.carry_time = True
        return inner  # type: ignore[no-any-return]
    return EachStamping(inner)


def stamping_source(factory: Callable[[], Any], time: Callable[[Record], int] | None) -> Any:
    """A source from ``factory`` whose records carry their event time: ``time(record)``,
    or, for a source that takes it from elsewhere (the Kafka record timestamp, ``time``
    None), as the source itself stamps it (its ``stamp_time``)."""
    source = factory()
    if hasattr(source, "stamp_time"):  # it has every record's time at hand: it stamps
        source.stamp_time = True
        return source
    assert time is not None, "a source without stamp_time reads time from its records"
    return StampingSource(source, time)
