"""Records' event times carried beside them through channels (channel format, all versions).

A record that carries its event time (ms) is a :class:`Timed` record: a dict (what the
codecs take) with the time in an attribute, so user code, codecs and sinks see an
ordinary dict. Operators stamp their outputs (:mod:`spillway.spark_jobs.operators.stamping`);
a window reads the time back with :func:`time_of`, as Flink's record timestamp.

On the wire, a data message (or each part of a record that spans messages) of a channel
whose plan carries times has one more header, ``spw.t``: the times of the message's
records, in record order, as big-endian int64 (8 bytes per record). A record without a
time (a processing-time timer's output, say: Flink erases those too) is written as
``-2**63`` (Flink's ``Long.MIN_VALUE``, "no timestamp"); on the Python side it is
``None``. Channels whose plan carries no time never have the header, so pipelines
without carried time pay nothing. A reader of a carrying channel reads a message without
the header (written by an older Spillway, or by a run of the job whose plan did not
carry times yet) by giving each of its records the message's Kafka timestamp: the time
its writer wrote it, Flink's ingestion time (:func:`untimed`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Any

from spillway.channels.errors import SchemaMismatchError

H_TIMES = "spw.t"
# "No time" on the wire (Flink's Long.MIN_VALUE); never a time a record can have.
_NO_TIME = -(2**63)
_I64 = struct.Struct(">q")


class Timed(dict[str, Any]):
    """A record dict that carries its event time (ms) in :attr:`time` (None: it has none).

    Equal to, and encoded as, the plain dict of its fields: the time is not a field."""

    __slots__ = ("time",)

    def __init__(self, fields: Any, time: int | None) -> None:
        super().__init__(fields)
        self.time = time

    def __reduce__(self) -> tuple[Any, ...]:  # copies and pickles keep the time
        return (Timed, (dict(self), self.time))


def stamped(record: Any, time: int | None) -> Timed:
    """``record`` (a dict) carrying event time ``time``: the record itself if it is a
    :class:`Timed` already (its time replaced), else a :class:`Timed` copy of it."""
    if type(record) is Timed:
        record.time = time
        return record
    return Timed(record, time)


def time_of(record: Any) -> int | None:
    """The event time ``record`` carries; None if it carries none."""
    return record.time if type(record) is Timed else None


def times_header(records: Iterable[Any]) -> tuple[str, bytes]:
    """The ``spw.t`` header of a message holding ``records`` (in order)."""
    packed = [_NO_TIME if t is None else t for t in map(time_of, records)]
    return H_TIMES, struct.pack(f">{len(packed)}q", *packed)


def read_times(raw_headers: Sequence[tuple[str, bytes | None]] | None) -> list[int | None] | None:
    """The record times in a message's ``spw.t`` header; None if it has none;
    :class:`SchemaMismatchError` if it is not a whole number of int64."""
    for name, value in raw_headers or ():
        if name == H_TIMES:
            if value is None or len(value) % 8:
                size = None if value is None else len(value)
                raise SchemaMismatchError(f"a {H_TIMES} header of {size} bytes: not int64 times")
            n = len(value) // 8
            return [None if t == _NO_TIME else t for t in struct.unpack(f">{n}q", value)]
    return None


def with_times(records: Sequence[Any], times: Sequence[int | None]) -> list[Timed]:
    """``records`` (decoded dicts) carrying ``times``; :class:`SchemaMismatchError` if the
    counts differ (a damaged message)."""
    if len(times) != len(records):
        raise SchemaMismatchError(
            f"a message of {len(records)} records carries {len(times)} times ({H_TIMES})"
        )
    return [Timed(r, t) for r, t in zip(records, times, strict=True)]


def untimed(records: Sequence[Any], kafka_ms: int) -> list[Timed]:
    """Records of a message written without times, on a channel that carries them: each
    takes the message's Kafka timestamp ``kafka_ms`` (when its writer wrote it)."""
    return [Timed(r, kafka_ms) for r in records]
