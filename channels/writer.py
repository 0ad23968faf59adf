"""Continuous writing of one output channel (one edge, seen from one upstream subtask).

Records are encoded and routed as they come and written in batches whenever a batch is
full or has lingered ``linger_s`` — not at checkpoint time. Everything is written inside
the subtask's open transaction, so downstream read_committed readers see it only once
the subtask's checkpoint commits.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from spillway.channels.config import ChannelSettings
from spillway.channels.errors import RecordError
from spillway.channels.ids import TopicPartition
from spillway.channels.output import MessageOutput
from spillway.channels.routing.batchwrite import conform, route_batch
from spillway.channels.routing.partitioners import KeyHash, Partitioner, Sticky
from spillway.channels.routing.spread import Spread
from spillway.channels.wire.arrowcodec import ArrowCodec
from spillway.channels.wire.batcher import Batcher
from spillway.channels.wire.envelope import (
    VERSION,
    Kind,
    encode_i64,
    headers,
    writer_codec,
    writer_key,
)
from spillway.channels.wire.schemaid import schema_header
from spillway.channels.wire.spanning import check_record_size, part_headers, split
from spillway.channels.wire.stamps import times_header

# Records an Arrow writer of many partitions holds across partitions before splitting
# them (channels/routing/spread.py), in batches' in-memory bytes: several messages' worth, so
# each partition's share makes blocks of many records.
SPREAD_BATCHES = 4


@dataclass(frozen=True)
class OutputChannel:
    """An edge as its writer sees it: topic, record schema, routing and downstream width."""

    topic: str
    schema: dict[str, Any]
    partitioner: Partitioner
    downstream_parallelism: int
    # Each data message carries its records' event times (spillway.channels.wire.stamps):
    # set where the plan says a window downstream reads the carried time.
    carries_time: bool = False


class ChannelWriter:
    """Writes records of one subtask into one channel topic. Not thread-safe (one per subtask)."""

    def __init__(
        self,
        producer: MessageOutput,
        channel: OutputChannel,
        writer_index: int,
        settings: ChannelSettings,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.channel = channel
        self.writer_index = writer_index
        self._producer = producer
        self._codec = writer_codec(channel.schema, settings.codec)
        if self._codec.overhead > settings.max_batch_bytes // 4:
            # A wide schema's Arrow schema message (in every message) would leave little or
            # no room for records in a small batch: Avro frames with 20 bytes.
            self._codec = writer_codec(channel.schema, "avro")
        # Every data message and part names its writer schema (spillway.channels.wire.schemaid):
        # after a restart with changed code, readers resolve old records by it.
        self._schema_header = schema_header(channel.schema)
        self._data_headers = [*headers(Kind.DATA, self._codec.version), self._schema_header]
        self._key = writer_key(writer_index)
        self._batcher = Batcher(
            settings.max_batch_bytes,
            settings.linger_s,
            topic=channel.topic,
            frame=self._codec.frame,
            overhead=self._codec.overhead,
        )
        self._clock = clock
        self._max_record = settings.max_record_bytes
        self.spanned = 0  # records written as parts, one per oversized record (_send_parts)
        # Round-robin over slots: a batch at a time to one slot
        # (spillway.channels.routing.partitioners).
        part = channel.partitioner
        self._sticky = part if isinstance(part, Sticky) else None
        # Per partition, the records of its open batch, in order, for their times (only
        # where the channel carries times: None otherwise, and nothing is kept).
        self._timed: dict[int, list[Any]] | None = {} if channel.carries_time else None
        # Arrow over several partitions: convert each call's records once, split later
        # (not with times: the records are kept per partition, where their times are).
        self._spread = (
            Spread(SPREAD_BATCHES * settings.max_batch_bytes, settings.linger_s)
            if self._codec.version != VERSION
            and self._timed is None
            and channel.downstream_parallelism > 1
            and self._sticky is None
            else None
        )
        self._counts = [0] * channel.downstream_parallelism
        self._marks = [0] * channel.downstream_parallelism

    @property
    def topic(self) -> str:
        """The channel topic written."""
        return self.channel.topic

    @property
    def counts(self) -> list[int]:
        """Records written so far to each downstream partition (output sequence numbers)."""
        return list(self._counts)

    def restore_counts(self, counts: Iterable[int]) -> None:
        """Continue the output sequence numbers of a checkpoint."""
        self._counts = list(counts) or [0] * self.channel.downstream_parallelism

    def marks(self) -> tuple[int, ...]:
        """Per downstream partition, the offset after the last message this writer's
        producer has had acknowledged there (its high-water mark; call after a flush)."""
        for p in range(len(self._marks)):
            last = self._producer.last_offset(TopicPartition(self.channel.topic, p))
            if last is not None:
                self._marks[p] = max(self._marks[p], int(last) + 1)
        return tuple(self._marks)

    def restore_marks(self, marks: Iterable[int]) -> None:
        """Continue the high-water marks of a checkpoint (an incarnation may write nothing)."""
        self._marks = list(marks) or [0] * self.channel.downstream_parallelism

    def write_many(self, records: Iterable[Any]) -> None:
        """Write records in order, encoding each partition's share in one codec call
        (per-record Python work dominates the cost of a channel).

        All-or-nothing: every record is encoded before any is buffered, so a record that
        does not fit the schema (or the size limit) raises and leaves the writer unchanged.
        """
        if self._sticky is not None:
            batch = records if isinstance(records, list) else list(records)
            if batch:
                self._write_sticky(self._sticky, lambda slot: self._blocks(slot, batch), batch)
            return
        if self._spread is not None:
            records = records if isinstance(records, list) else list(records)
            if self._spread_many(records):
                return
            self._split()  # what it holds goes first: a partition keeps the write order
        groups: dict[int, list[Any]] = {}
        if self.channel.downstream_parallelism == 1:
            # One downstream subtask: every partitioner routes everything to it, so no
            # record needs its key hashed (a keyed operator downstream computes keys anyway).
            only = list(records)
            if only:
                groups[0] = only
        else:
            for r in records:
                for p in self._targets(r):
                    group = groups.get(p)
                    if group is None:
                        groups[p] = [r]
                    else:
                        group.append(r)
        encoded = [(p, self._blocks(p, group), group) for p, group in groups.items()]
        now = self._clock()
        for p, blocks, group in encoded:
            done = 0
            for block, n in blocks:
                self._add(p, block, n, now, group[done : done + n])
                done += n

    def _add(self, p: int, block: bytes, n: int, now: float, records: Sequence[Any]) -> None:
        """Add a block of ``n`` records (``records``, for their times) to ``p``'s batch,
        sending the batch it filled first."""
        full = self._batcher.add_block(p, block, n, now)
        if full is not None:
            self._send(p, full)
        if self._timed is not None:
            self._timed.setdefault(p, []).extend(records)
        self._counts[p] += n

    def _spread_many(self, records: list[Any]) -> bool:
        """Convert and hold ``records`` for :attr:`_spread`; False (nothing done) when a
        record goes to several partitions (broadcast) or may exceed the size limit, which
        the per-partition path handles."""
        if not records:
            return True
        targets = self._partitions(records)
        if targets is None:
            return False
        batch = self._codec.batch(records)  # type: ignore[attr-defined]  # checks them all
        # A row is no bigger than its batch: the row bound is needed only for big calls.
        # (Buffer sizes: nbytes or more, and 30x cheaper to ask than nbytes in pyarrow 26.)
        big = batch.get_total_buffer_size() + _ROW_FRAME > self._batcher.max_record
        if big and _largest_row_bound(batch) > self._batcher.max_record:
            return False
        assert self._spread is not None
        counts = self._counts
        for p in targets:
            counts[p] += 1
        if self._spread.add(batch, targets, self._clock()):
            self._split()
        return True

    def _partitions(self, records: list[Any]) -> list[int] | None:
        """The one partition of each record; None if one goes to several (broadcast)."""
        part = self.channel.partitioner
        if isinstance(part, KeyHash):
            try:
                return part.partitions(records)
            except Exception:  # name the record: the per-record path raises RecordError
                for r in records:
                    self._targets(r)
                raise
        targets: list[int] = []
        for r in records:
            ts = self._targets(r)
            if len(ts) != 1:
                return None
            targets.append(ts[0])
        return targets

    def _split(self) -> None:
        """Move every record held in :attr:`_spread` into the batcher, a block per partition."""
        assert self._spread is not None
        opened = self._spread.opened_at
        for p, batch in self._spread.take():
            for block, n in self._arrow_blocks(batch):
                # Opened when its first record was written: linger is not counted twice.
                full = self._batcher.add_block(p, block, n, opened)
                if full is not None:
                    self._send(p, full)

    def _arrow_blocks(self, batch: Any) -> list[tuple[bytes, int]]:
        block: bytes = batch.serialize().to_pybytes()
        if self._batcher.fits(len(block)) or len(batch) == 1:
            return [(block, len(batch))]  # a row alone always fits (_largest_row_bound)
        half = len(batch) // 2
        return self._arrow_blocks(batch.slice(0, half)) + self._arrow_blocks(batch.slice(half))

    def write_batch(self, batch: pa.RecordBatch) -> None:
        """Write an Arrow batch as it is (rows in order): split by partition without
        Python objects per row, each part serialized as Arrow blocks.

        Falls back to :meth:`write_many` of its rows where the channel is not Arrow
        (Avro codec) or the edge routes by a key function. All-or-nothing, as write_many.
        """
        if self._spread is not None:
            self._split()  # records held across partitions go first: order per partition
        if self._timed is not None:
            # Rows of a columnar batch carry no time (the plan carries none through
            # columnar operators): written as records, each without a time.
            self.write_many(batch.to_pylist())
            return
        parts = None
        fit = conform(batch, self._codec.schema) if isinstance(self._codec, ArrowCodec) else None
        if fit is not None and self._sticky is not None:
            if fit.num_rows:
                self._write_sticky(self._sticky, lambda slot: self._batch_blocks(slot, fit))
            return
        if fit is not None:
            parts = route_batch(fit, self.channel.partitioner, len(self._counts))
        if parts is None:
            self.write_many(batch.to_pylist())
            return
        encoded = [(p, self._batch_blocks(p, part)) for p, part in parts if part.num_rows]
        now = self._clock()
        for p, blocks in encoded:
            for block, n in blocks:
                full = self._batcher.add_block(p, block, n, now)
                if full is not None:
                    self._send(p, full)
                self._counts[p] += n

    def _batch_blocks(self, partition: int, part: pa.RecordBatch) -> list[tuple[bytes, int]]:
        block = part.serialize().to_pybytes()
        if self._batcher.fits(len(block)):
            return [(block, part.num_rows)]
        if part.num_rows == 1:  # one record larger than a message: sent as parts (_send)
            self._check_spanning(partition, len(block))
            return [(block, 1)]
        half = part.num_rows // 2  # too big for one message: split, order kept
        return self._batch_blocks(partition, part.slice(0, half)) + self._batch_blocks(
            partition, part.slice(half)
        )

    def _write_sticky(
        self,
        sticky: Sticky,
        encode: Callable[[int], list[tuple[bytes, int]]],
        records: Sequence[Any] = (),
    ) -> None:
        """Add the blocks ``encode(slot)`` makes to the current slot's batch; when one would
        overfill it, send that batch (as full as it gets) and go on in the next slot. Only
        the current slot ever has a batch open, so batches are as large as on one partition."""
        slot = sticky.current
        blocks = encode(slot)  # every record encoded first: all-or-nothing
        now = self._clock()
        done = 0
        for block, n in blocks:
            if not self._batcher.room(slot, len(block)):
                full = self._batcher.take(slot)
                if full is not None:
                    self._send(slot, full)
                slot = sticky.advance()
            # (_add sends a batch it filled: not after room(), kept for the batcher's contract)
            self._add(slot, block, n, now, records[done : done + n])
            done += n

    def _sent(self, partition: int) -> None:
        """A batch of ``partition`` went out by linger or flush: a sticky writer moves on."""
        if self._sticky is not None and partition == self._sticky.current:
            self._sticky.advance()

    def _targets(self, record: Any) -> Sequence[int]:
        try:
            return self.channel.partitioner.targets(record)
        except Exception as e:  # a user key function failed, or returned an unhashable key
            raise RecordError(
                f"cannot route record {repr(record)[:120]} to {self.channel.topic}: "
                f"{type(e).__name__}: {e}"
            ) from e

    def _blocks(self, partition: int, group: list[Any]) -> list[tuple[bytes, int]]:
        block = self._codec.encode_block(group)
        if self._batcher.fits(len(block)):
            return [(block, len(group))]
        if len(group) == 1:  # one record larger than a message: sent as parts (_send)
            self._check_spanning(partition, len(block))
            return [(block, 1)]
        half = len(group) // 2  # too big for one message: split, order kept
        return self._blocks(partition, group[:half]) + self._blocks(partition, group[half:])

    def tick(self) -> None:
        """Write batches that have lingered long enough. Call this from the subtask loop."""
        now = self._clock()
        if self._spread is not None and self._spread.due(now):
            self._split()
        for p, batch in self._batcher.due(now):
            self._send(p, batch)
            self._sent(p)

    def flush_batches(self) -> None:
        """Write every buffered record now (before a control record or a checkpoint)."""
        if self._spread is not None:
            self._split()
        for p, batch in self._batcher.drain():
            self._send(p, batch)
            self._sent(p)

    def end_of_stream(self) -> None:
        """Tell every downstream subtask that this writer will send nothing more."""
        self._control(Kind.END_OF_STREAM, encode_i64(0))

    def watermark(self, event_time: int) -> None:
        """Tell every downstream subtask that no record with a smaller event time will follow."""
        self._control(Kind.WATERMARK, encode_i64(event_time))

    def idle(self) -> None:
        """Tell every downstream subtask to leave this writer out of its watermark until
        it sends data or a watermark again (its input is idle)."""
        self._control(Kind.IDLE, encode_i64(0))

    def barrier(self, checkpoint_id: int) -> None:
        """Send checkpoint barrier ``checkpoint_id`` in-band to every downstream subtask."""
        self._control(Kind.BARRIER, encode_i64(checkpoint_id))

    def _control(self, kind: Kind, value: bytes) -> None:
        # Control records must follow the data written before them, so drain first.
        self.flush_batches()
        hdrs = headers(kind)
        for p in range(self.channel.downstream_parallelism):
            self._producer.produce(self.channel.topic, p, self._key, value, hdrs)

    def _send(self, partition: int, batch: bytes) -> None:
        # The batch is the partition's whole open batch: its records' times go with it.
        hdrs = self._data_headers
        extra = []
        if self._timed is not None:
            extra = [times_header(self._timed.pop(partition, ()))]
            hdrs = [*hdrs, *extra]
        if len(batch) > self._batcher.max_bytes:  # one record (see _check_spanning)
            self._send_parts(partition, batch, extra)
            return
        self._producer.produce(self.channel.topic, partition, self._key, batch, hdrs)

    def _check_spanning(self, partition: int, block_size: int) -> None:
        """A record whose block alone exceeds a message goes out as parts of one partition
        (spillway.channels.wire.spanning); :class:`RecordTooLargeError` past ``max_record_bytes``.

        The batcher holds such a block in a batch of its own (it never fits beside
        another), so :meth:`_send` gets it as one oversized value, after what this writer
        wrote to the partition before it.
        """
        check_record_size(
            block_size + self._codec.overhead,
            self._max_record,
            f"{self.channel.topic}[{partition}] (writer {self.writer_index})",
        )

    def _send_parts(self, partition: int, value: bytes, extra: list[tuple[str, bytes]]) -> None:
        # All parts in this one call: no checkpoint (transaction commit) can fall between
        # them, and no other message of this writer either, so they are consecutive among
        # this writer's messages of the partition.
        self.spanned += 1
        for mark, chunk in split(value, self._batcher.max_bytes, self._codec.version):
            self._producer.produce(
                self.channel.topic,
                partition,
                self._key,
                chunk,
                [*part_headers(mark), self._schema_header, *extra],
            )


# What an Arrow record batch adds to a row's own bytes in a batch of its own (flatbuffer
# metadata, buffer alignment), generously: 1 KiB.
_ROW_FRAME = 1024


def _largest_row_bound(batch: Any) -> int:
    """An upper bound of the largest row of an Arrow record batch, as a block of its own."""
    import pyarrow as pa
    import pyarrow.compute as pc

    bound = _ROW_FRAME
    for column in batch.columns:
        t = column.type
        if pa.types.is_binary(t) or pa.types.is_string(t):
            longest = pc.max(pc.binary_length(column)).as_py()
            bound += int(longest or 0) + 8
        else:
            bound += max(1, t.bit_width // 8)
    return bound
