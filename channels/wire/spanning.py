"""Records that span messages: one record larger than a message, written as parts. Pure.

A channel message holds at most ``max_batch_bytes``. A record whose encoded batch (the
record alone, framed by its codec) is larger goes out as consecutive *parts* in one
partition, with the writer's key, all in the writer's open transaction (the writer sends
every part in one call, and a checkpoint only ever commits between calls). Each part is
a data message of channel format version 3 (:data:`spillway.channels.wire.envelope.PART_VERSION`):

* headers ``spw.v=3``, ``spw.k=d``, ``spw.p=<index>/<count>`` (index from 0),
  ``spw.e=<format version of the whole value>`` (``1`` Avro, ``2`` Arrow) and
  ``spw.n=<bytes of the whole value>``;
* value: bytes ``[index*part_bytes, (index+1)*part_bytes)`` of the whole value, which is an
  ordinary data message value of version ``spw.e`` holding the one record.

A reader of an older Spillway rejects version 3 with its "upgrade Spillway" error rather
than misreading it; messages of versions 1 and 2 read as before.

:class:`Assembler` is the reading side's bookkeeping: parts per (partition, writer),
joined when the last one arrives. While a record is incomplete, :meth:`Assembler.lowest`
gives the offset of its first part: the reader's checkpointable position never passes it,
so a checkpoint never lands inside a record and a restore reads the record again from its
first part. A part other than the first with no record open means reading started inside
a record, which positions make impossible; it is an error naming topic[partition]@offset.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from spillway.channels.config import MAX_RECORD_BYTES
from spillway.channels.errors import RecordTooLargeError, SchemaMismatchError
from spillway.channels.ids import TopicPartition
from spillway.channels.wire.envelope import PART_VERSION, Kind, headers

H_PART = "spw.p"
H_WHOLE_VERSION = "spw.e"
H_WHOLE_SIZE = "spw.n"

log = logging.getLogger("spillway.spanning")


@dataclass(frozen=True)
class PartMark:
    """Which part of a record a message holds."""

    index: int  # 0 .. count-1
    count: int
    size: int  # bytes of the whole value
    version: bytes  # channel format version of the whole value

    @property
    def last(self) -> bool:
        """True for the record's last part."""
        return self.index == self.count - 1


def part_headers(mark: PartMark) -> list[tuple[str, bytes]]:
    """The headers of the message holding part ``mark``."""
    return [
        *headers(Kind.DATA, PART_VERSION),
        (H_PART, f"{mark.index}/{mark.count}".encode()),
        (H_WHOLE_VERSION, mark.version),
        (H_WHOLE_SIZE, str(mark.size).encode()),
    ]


def read_mark(raw_headers: Sequence[tuple[str, bytes | None]] | None) -> PartMark:
    """The :class:`PartMark` of a version-3 message; :class:`SchemaMismatchError` if its
    part headers are missing or malformed."""
    found = {name: value for name, value in raw_headers or () if name.startswith("spw.")}
    try:
        index_b, count_b = (found[H_PART] or b"").split(b"/")
        mark = PartMark(
            int(index_b),
            int(count_b),
            int(found[H_WHOLE_SIZE] or b""),
            found[H_WHOLE_VERSION] or b"",
        )
    except (KeyError, ValueError):
        raise SchemaMismatchError(
            f"a part message (channel format 3) with malformed part headers {found!r}"
        ) from None
    if not (0 <= mark.index < mark.count and mark.count >= 2 and mark.size > 0):
        raise SchemaMismatchError(f"a part message with impossible part headers {found!r}")
    return mark


def split(value: bytes, part_bytes: int, version: bytes) -> list[tuple[PartMark, bytes]]:
    """``value`` (a data message of format ``version`` larger than ``part_bytes``) as
    parts of at most ``part_bytes`` each, in order."""
    count = -(-len(value) // part_bytes)
    if count < 2:
        raise ValueError(f"a value of {len(value)} bytes fits one message of {part_bytes}")
    view = memoryview(value)
    return [
        (
            PartMark(i, count, len(value), version),
            bytes(view[i * part_bytes : (i + 1) * part_bytes]),
        )
        for i in range(count)
    ]


def check_record_size(size: int, limit: int, where: str) -> None:
    """:class:`RecordTooLargeError` if a record of ``size`` encoded bytes exceeds
    ``limit`` (``where``: the channel and writer, for the message)."""
    if size > limit:
        raise RecordTooLargeError(
            f"record of {size} bytes for {where} exceeds the largest record a channel "
            f"carries, {limit} bytes (max_record_bytes; at most {MAX_RECORD_BYTES} = 64 MiB): "
            "make it smaller, split it into several records, or keep the payload in a file "
            "or object store and send its path"
        )


@dataclass(frozen=True)
class Whole:
    """A record's reassembled value: a data message value of format ``version``."""

    first: int  # offset of its first part
    last: int  # offset of its last part
    version: bytes
    value: bytes


@dataclass
class _Open:
    first: int
    mark: PartMark
    parts: list[bytes] = field(default_factory=list)
    size: int = 0


class Assembler:
    """Parts of records per (partition, writer), joined when complete.

    ``resends``: upstream writes without transactions (at-least-once), so a restarted
    writer may send a record's first part again, or other messages, after an incomplete
    record; that record is then dropped (it is sent again whole). Under exactly-once a
    record's parts commit in one transaction and such a break is an error.
    ``limit``: a record announcing more bytes is refused before it is held.
    """

    def __init__(self, *, resends: bool = False, limit: int = MAX_RECORD_BYTES) -> None:
        self._resends = resends
        self._limit = limit
        self._open: dict[tuple[TopicPartition, int], _Open] = {}

    def add(
        self, tp: TopicPartition, writer: int, offset: int, mark: PartMark, chunk: bytes
    ) -> Whole | None:
        """Take the part at ``offset``; the whole record once this is its last part.

        :class:`SchemaMismatchError` (naming topic[partition]@offset) for a part out of
        order, a part other than the first with no record open, or sizes that disagree.
        """
        key = (tp, writer)
        rec = self._open.get(key)
        where = f"{tp}@{offset}"
        if mark.index == 0:
            if rec is not None:
                self._broken(key, rec, offset, "a new record's first part")
            check_record_size(mark.size, self._limit, f"{tp} (writer {writer}) at {where}")
            rec = self._open[key] = _Open(offset, mark)
        elif rec is None:
            raise SchemaMismatchError(
                f"{where}: part {mark.index + 1} of {mark.count} of a record from writer "
                f"{writer}, whose first part was never read: reading started inside a record. "
                "Positions never stop inside a record, so the checkpoint or the offsets given "
                "are wrong; restore from a checkpoint of this job"
            )
        elif (mark.index, mark.count, mark.size, mark.version) != (
            len(rec.parts),
            rec.mark.count,
            rec.mark.size,
            rec.mark.version,
        ):
            del self._open[key]
            raise SchemaMismatchError(
                f"{where}: part {mark.index + 1}/{mark.count} of a record from writer {writer} "
                f"follows part {len(rec.parts)}/{rec.mark.count} of the record that starts at "
                f"{tp}@{rec.first}: a part is missing or the parts disagree; the channel is "
                "damaged (was it written by something other than Spillway?)"
            )
        rec.parts.append(chunk)
        rec.size += len(chunk)
        if not mark.last:
            return None
        del self._open[key]
        if rec.size != mark.size:
            raise SchemaMismatchError(
                f"{where}: the record from writer {writer} starting at {tp}@{rec.first} has "
                f"{rec.size} bytes in its parts, its parts announce {mark.size}"
            )
        return Whole(rec.first, offset, mark.version, b"".join(rec.parts))

    def other(self, tp: TopicPartition, writer: int, offset: int) -> None:
        """A message that is not a part came from ``writer`` at ``offset``: an error if
        that writer has a record open (see ``resends``)."""
        rec = self._open.get((tp, writer))
        if rec is not None:
            self._broken((tp, writer), rec, offset, "a message that is not a part")

    def _broken(self, key: tuple[TopicPartition, int], rec: _Open, offset: int, what: str) -> None:
        tp, writer = key
        del self._open[key]
        text = (
            f"{tp}@{offset}: {what} from writer {writer} while its record starting at "
            f"{tp}@{rec.first} has {len(rec.parts)} of {rec.mark.count} parts"
        )
        if not self._resends:
            raise SchemaMismatchError(
                f"{text}: parts are missing, which a transactional writer cannot leave; the "
                "channel is damaged (was it written by something other than Spillway?)"
            )
        log.warning("%s: dropped (an at-least-once writer restarted and sends it again)", text)

    def lowest(self) -> dict[TopicPartition, int]:
        """Per partition with an incomplete record, the offset of the earliest first part."""
        out: dict[TopicPartition, int] = {}
        for (tp, _), rec in self._open.items():
            out[tp] = min(out.get(tp, rec.first), rec.first)
        return out

    def open_records(self) -> int:
        """Records with some parts read and not yet complete."""
        return len(self._open)

    def clear(self) -> None:
        """Forget every incomplete record (the reader starts over from positions)."""
        self._open.clear()
