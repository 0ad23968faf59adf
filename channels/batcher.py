"""Per-partition batching of encoded records, bounded by size and linger time. Pure.

The batcher only decides *when* a batch is complete; writing it is the caller's job.
This keeps the flushing rules unit-testable without a broker.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from channels.envelope import ARRAY_OVERHEAD, frame_batch
from channels.errors import RecordTooLargeError


@dataclass
class _Open:
    records: list[bytes] = field(default_factory=list)
    size: int = 0
    opened_at: float = 0.0


class Batcher:
    """Collects encoded records per partition into Avro-array batches of at most ``max_bytes``."""

    def __init__(self, max_bytes: int, linger_s: float, *, topic: str = "?") -> None:
        self.max_bytes = max_bytes
        self.max_record = max_bytes - ARRAY_OVERHEAD
        self.linger_s = linger_s
        self.topic = topic
        self._open: dict[int, _Open] = {}

    def add(self, partition: int, encoded: bytes, now: float) -> bytes | None:
        """Add one record; return a full batch (framed) to write first, if adding overflowed one.

        Raises :class:`RecordTooLargeError` if the record alone exceeds the batch limit:
        records are never truncated.
        """
        n = len(encoded)
        if n > self.max_record:
            raise RecordTooLargeError(
                f"record of {n} bytes for {self.topic}[{partition}] exceeds the channel limit of "
                f"{self.max_record} bytes (max_batch_bytes={self.max_bytes}); raise "
                "max_batch_bytes (and the broker's message.max.bytes) or split the record"
            )
        batch = self._open.get(partition)
        full: bytes | None = None
        if batch is None:
            batch = self._open[partition] = _Open(opened_at=now)
        elif batch.size + n > self.max_record:
            full = frame_batch(batch.records)
            batch.records, batch.size, batch.opened_at = [], 0, now
        batch.records.append(encoded)
        batch.size += n
        return full

    def due(self, now: float) -> list[tuple[int, bytes]]:
        """Take every batch that has lingered ``linger_s`` or longer."""
        ready = [
            p for p, b in self._open.items() if b.records and now - b.opened_at >= self.linger_s
        ]
        return [(p, self._take(p)) for p in ready]

    def drain(self) -> list[tuple[int, bytes]]:
        """Take every non-empty batch (before a control record or a checkpoint)."""
        return [(p, self._take(p)) for p, b in list(self._open.items()) if b.records]

    def pending_records(self) -> int:
        """Records buffered and not yet taken."""
        return sum(len(b.records) for b in self._open.values())

    def _take(self, partition: int) -> bytes:
        batch = self._open.pop(partition)
        return frame_batch(batch.records)
