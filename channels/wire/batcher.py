"""Per-partition batching of encoded records, bounded by size and linger time. Pure.

The batcher only decides *when* a batch is complete; writing it is the caller's job.
This keeps the flushing rules unit-testable without a broker. A batch is a list of
encoded blocks, framed into one message value by the channel codec's ``frame`` when the
batch is taken (Avro by default). Single records (:meth:`Batcher.add`, Avro only) become
one-record Avro blocks; whole blocks (many records encoded in one call) are added as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from spillway.channels.errors import RecordTooLargeError
from spillway.channels.wire.envelope import ARRAY_OVERHEAD, block_of, frame_blocks


@dataclass
class _Open:
    blocks: list[bytes] = field(default_factory=list)  # finished blocks
    records: list[bytes] = field(default_factory=list)  # single records of the next block
    count: int = 0
    size: int = 0
    opened_at: float = 0.0

    def frame(self, frame: Callable[[Sequence[bytes]], bytes]) -> bytes:
        blocks = [*self.blocks, block_of(self.records)] if self.records else self.blocks
        return frame(blocks)


class Batcher:
    """Collects encoded records per partition into batches of at most ``max_bytes``.

    ``frame`` turns a batch's blocks into a message value and ``overhead`` is what it adds
    (defaults: Avro array framing).
    """

    def __init__(
        self,
        max_bytes: int,
        linger_s: float,
        *,
        topic: str = "?",
        frame: Callable[[Sequence[bytes]], bytes] = frame_blocks,
        overhead: int = ARRAY_OVERHEAD,
    ) -> None:
        self.max_bytes = max_bytes
        self.max_record = max_bytes - overhead
        self._frame = frame
        self.linger_s = linger_s
        self.topic = topic
        self._open: dict[int, _Open] = {}

    def add(self, partition: int, encoded: bytes, now: float) -> bytes | None:
        """Add one record; return a full batch (framed) to write first, if adding overflowed one.

        Raises :class:`RecordTooLargeError` if the record alone exceeds the batch limit:
        records are never truncated.
        """
        n = len(encoded)
        self.check_record(partition, n)
        batch, full = self._room(partition, n, now)
        batch.records.append(encoded)
        batch.count += 1
        batch.size += n
        return full

    def add_block(self, partition: int, block: bytes, count: int, now: float) -> bytes | None:
        """Add a block of ``count`` records (``len(block)`` must fit in one batch).

        Returns a full batch to write first, like :meth:`add`.
        """
        batch, full = self._room(partition, len(block), now)
        if batch.records:  # keep record order: close the block of single records first
            batch.blocks.append(block_of(batch.records))
            batch.records = []
        batch.blocks.append(block)
        batch.count += count
        batch.size += len(block)
        return full

    def check_record(self, partition: int, size: int) -> None:
        """:class:`RecordTooLargeError` if one record of ``size`` bytes can never be written."""
        if size > self.max_record:
            raise RecordTooLargeError(
                f"record of {size} bytes for {self.topic}[{partition}] exceeds the channel limit "
                f"of {self.max_record} bytes (max_batch_bytes={self.max_bytes}); raise "
                "max_batch_bytes (and the broker's message.max.bytes) or split the record"
            )

    def fits(self, size: int) -> bool:
        """True if ``size`` encoded bytes fit in one batch."""
        return size <= self.max_record

    def room(self, partition: int, size: int) -> bool:
        """True if a block of ``size`` bytes joins ``partition``'s open batch without
        filling it past the limit (or the partition has no batch open)."""
        batch = self._open.get(partition)
        return batch is None or not batch.count or batch.size + size <= self.max_record

    def take(self, partition: int) -> bytes | None:
        """Take ``partition``'s open batch (framed); None if it holds no record."""
        batch = self._open.get(partition)
        if batch is None or not batch.count:
            return None
        return self._take(partition)

    def _room(self, partition: int, n: int, now: float) -> tuple[_Open, bytes | None]:
        batch = self._open.get(partition)
        if batch is None:
            batch = self._open[partition] = _Open(opened_at=now)
            return batch, None
        if batch.size + n > self.max_record:
            full = batch.frame(self._frame)
            self._open[partition] = fresh = _Open(opened_at=now)
            return fresh, full
        return batch, None

    def due(self, now: float) -> list[tuple[int, bytes]]:
        """Take every batch that has lingered ``linger_s`` or longer."""
        ready = [p for p, b in self._open.items() if b.count and now - b.opened_at >= self.linger_s]
        return [(p, self._take(p)) for p in ready]

    def drain(self) -> list[tuple[int, bytes]]:
        """Take every non-empty batch (before a control record or a checkpoint)."""
        return [(p, self._take(p)) for p, b in list(self._open.items()) if b.count]

    def pending_records(self) -> int:
        """Records buffered and not yet taken."""
        return sum(b.count for b in self._open.values())

    def _take(self, partition: int) -> bytes:
        return self._open.pop(partition).frame(self._frame)
