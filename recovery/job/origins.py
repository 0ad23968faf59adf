"""Where a record came from: a line of an input file, or an offset in a Kafka partition.

A source tells the runner the origin of every record its last read returned
(:meth:`spillway.recovery.job.plan.Source.origins`), so a record that fails later — in the
operator's
function, or when its channel writer encodes it — is reported and dead-lettered with
the place it was read from. Reads return thousands of records and almost never fail,
so origins are kept as *runs* of consecutive positions (one small list per run, not an
object per record) and an :class:`Origin` is made only for a record that is reported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class FileLine:
    """Line ``line`` (1-based, as editors count) of ``file``."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class TopicOffset:
    """The message at ``offset`` of ``topic[partition]``."""

    topic: str
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


Origin = FileLine | TopicOffset


class Origins(Protocol):
    """The origins of a sequence of records, by position in that sequence."""

    def at(self, k: int) -> Origin | None:
        """Where record ``k`` came from (``None``: unknown, e.g. generated)."""
        ...


class Unknown:
    """Records without an origin (generated ones; outputs of a chained function)."""

    def at(self, k: int) -> Origin | None:
        """Always ``None``."""
        return None


UNKNOWN = Unknown()


class Same:
    """Every record has the same origin: the records of one channel message."""

    def __init__(self, origin: Origin) -> None:
        self.origin = origin

    def at(self, k: int) -> Origin | None:
        """The message's origin, whatever ``k``."""
        return self.origin


class Listed:
    """Origins given one per record: those of some of another sequence's records (the
    records a writer took, say)."""

    def __init__(self, origins: Sequence[Origin | None]) -> None:
        self._origins = list(origins)

    def at(self, k: int) -> Origin | None:
        """The origin of record ``k`` (``None`` past the end)."""
        return self._origins[k] if 0 <= k < len(self._origins) else None


class Runs:
    """Origins as runs of consecutive positions: ``[place, first, count]``.

    ``place`` is what the positions count in (a partition, a file); ``make(place,
    position)`` turns a position into an :class:`Origin`. :meth:`add` costs a comparison
    and an increment while positions stay consecutive, which they do for all but the
    records after a gap (a skipped line or message, another partition).
    """

    __slots__ = ("_make", "_runs")

    def __init__(self, make: Callable[[int, int], Origin]) -> None:
        self._make = make
        self._runs: list[list[int]] = []

    def add(self, place: int, position: int) -> None:
        """The next record came from ``position`` of ``place``."""
        runs = self._runs
        if runs:
            last = runs[-1]
            if last[0] == place and last[1] + last[2] == position:
                last[2] += 1
                return
        runs.append([place, position, 1])

    def add_run(self, place: int, first: int, count: int) -> None:
        """The next ``count`` records came from ``first``, ``first + 1``, ... of ``place``."""
        if count > 0:
            self._runs.append([place, first, count])

    def __len__(self) -> int:
        return sum(r[2] for r in self._runs)

    def at(self, k: int) -> Origin | None:
        """The origin of record ``k`` (``None`` past the end)."""
        for place, first, count in self._runs:
            if k < count:
                return self._make(place, first + k)
            k -= count
        return None


def topic_runs(topic: str) -> Runs:
    """Runs of offsets in partitions (``place``) of ``topic``."""
    return Runs(lambda partition, offset: TopicOffset(topic, partition, offset))


def line_runs(files: list[str]) -> Runs:
    """Runs of 1-based line numbers in ``files[place]``."""
    return Runs(lambda index, line: FileLine(files[index], line))
