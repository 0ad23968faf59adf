"""Routing a whole Arrow batch to a channel's partitions, without a Python object per row.

:func:`route_batch` is the writer-side half of the columnar path: which part
of a batch goes to which downstream partition, for the partitioners that can say it for
a batch at once. A record key function can only be asked record by record; for such an
edge it returns ``None`` and the writer falls back to the records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from spillway.channels.routing.batchkey import BatchKeyHash
from spillway.channels.routing.batchroute import split_by_key_group
from spillway.channels.routing.partitioners import (
    Broadcast,
    Forward,
    Partitioner,
    RoundRobin,
    stable_hash,
)


@dataclass(frozen=True)
class ColumnKey:
    """The key function ``lambda r: r[column]`` that says which column it reads, so an
    edge keyed by it routes batches by the column (:class:`ColumnKeyHash`)."""

    column: str

    def __call__(self, record: Any) -> Any:
        """The record's value in ``column``."""
        return record[self.column]


@dataclass(frozen=True)
class ColumnKeyHash:
    """Records with equal values in ``column`` go to the same subtask:
    ``stable_hash(record[column]) % p``, as :class:`spillway.channels.routing.partitioners.KeyHash`
    with
    the key function ``lambda r: r[column]`` (batches are split by
    :func:`spillway.channels.routing.batchroute.split_by_key_group`, which hashes per distinct
    key)."""

    column: str
    downstream_parallelism: int

    def targets(self, record: Any) -> tuple[int]:
        """The single partition owning the record's key."""
        return (stable_hash(record[self.column]) % self.downstream_parallelism,)


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch | None:
    """``batch`` with the channel's ``schema`` where only field nullability differs and
    no non-nullable field holds a null (no copy); ``None`` if it does not fit."""
    if batch.schema.equals(schema):
        return batch
    if batch.schema.names != schema.names or batch.schema.types != schema.types:
        return None
    if any(not f.nullable and c.null_count for f, c in zip(schema, batch.columns, strict=True)):
        return None
    return pa.RecordBatch.from_arrays(batch.columns, schema=schema)


def route_batch(
    batch: pa.RecordBatch, partitioner: Partitioner, downstream_parallelism: int
) -> list[tuple[int, pa.RecordBatch]] | None:
    """``batch`` split by downstream partition, rows in input order within each part;
    ``None`` if ``partitioner`` can only route record by record (a key function).

    Pure except for :class:`RoundRobin`, which sends the whole batch to its next
    partition (spreading batches, not rows: the unit a batch operator hands on).
    """
    if downstream_parallelism == 1:
        return [(0, batch)]
    if isinstance(partitioner, Forward):
        return [(partitioner.writer_index, batch)]
    if isinstance(partitioner, Broadcast):
        return [(p, batch) for p in range(downstream_parallelism)]
    if isinstance(partitioner, RoundRobin):
        return [(partitioner.targets(None)[0], batch)]
    if isinstance(partitioner, ColumnKeyHash):
        slices = split_by_key_group(batch, partitioner.column, downstream_parallelism)
        return [(s.key_group, s.batch) for s in slices]
    if isinstance(partitioner, BatchKeyHash):  # key_by(batch function): RecordError if it fails
        return partitioner.route(batch)
    return None
