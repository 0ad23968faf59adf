"""Key functions over whole Arrow batches: ``key_by(fn).aggregate_batches``.

A Polars or pandas user keys a frame by an expression over its columns, e.g.
``lambda b: pc.utf8_lower(b["user"])``: one call per batch returning one key per row.
:class:`BatchKey` is such a function, named (the key column of the aggregate's output)
and checked against the input's schema once, at definition, by calling it on an empty
batch; :class:`BatchKeyHash` routes a batch by it with one Python hash per distinct key
(:func:`spillway.channels.routing.batchroute.split_by_keys`). The function must be row-wise — a
row's key
depends on that row alone — so that a record routed alone (:meth:`BatchKeyHash.targets`,
when a record operator writes the channel) lands where its batch would.

Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from spillway.channels.errors import ConfigError, PipelineDefinitionError, RecordError
from spillway.channels.routing.batchroute import check_key_type, split_by_keys
from spillway.channels.routing.partitioners import stable_hash

BatchKeyFn = Callable[[pa.RecordBatch], Any]


def as_arrow(keys: Any) -> pa.Array:
    """What a key function returned as one Arrow array: an Arrow array or chunked array,
    a numpy array, a pandas or Polars Series (converted without copies where Arrow
    allows); ``TypeError`` for anything else."""
    if isinstance(keys, pa.ChunkedArray):
        return keys.combine_chunks()
    if isinstance(keys, pa.Array):
        return keys
    if hasattr(keys, "to_arrow"):  # a Polars Series
        return as_arrow(keys.to_arrow())
    if hasattr(keys, "__array__"):  # numpy, pandas
        return pa.array(keys)
    raise TypeError(f"returned {type(keys).__name__}, not an array of one key per row")


@dataclass(frozen=True)
class BatchKey:
    """``fn(batch)``: one key per row of ``batch``; ``name``: the key column's name in
    the keyed operator's output; ``schema``: the input batches' Arrow schema;
    ``key_type``: the Arrow type ``fn`` returns (found at definition)."""

    fn: BatchKeyFn
    name: str
    schema: pa.Schema
    key_type: pa.DataType = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key_type", self._probe())

    def _probe(self) -> pa.DataType:
        """Call ``fn`` on an empty batch of the schema: a per-record function fails here."""
        what = getattr(self.fn, "__qualname__", repr(self.fn))
        try:
            keys = as_arrow(self.fn(pa.RecordBatch.from_pylist([], schema=self.schema)))
        except Exception as e:
            raise PipelineDefinitionError(
                f"key_by({what}) before a batch operator: the key function is called once per "
                f"batch with a pyarrow.RecordBatch and must return one key per row (an Arrow "
                f"array, numpy array or pandas/Polars Series), e.g. lambda b: "
                f"pc.utf8_lower(b['user']); on an empty batch of the input's schema it "
                f"raised {type(e).__name__}: {e}. A per-record function (lambda r: ...) goes "
                f"with aggregate(...); a column as it is with key_by('column')"
            ) from e
        try:
            check_key_type(self.name, keys.type)
        except ConfigError as e:
            raise PipelineDefinitionError(f"key_by({what}): {e}") from e
        return keys.type

    def keys(self, batch: pa.RecordBatch) -> pa.Array:
        """The key of every row of ``batch``; ``RecordError`` if ``fn`` fails or does not
        return exactly one key per row of the type found at definition."""
        try:
            keys = as_arrow(self.fn(batch))
        except Exception as e:
            raise RecordError(
                f"key function {self.name!r} failed on a batch of {batch.num_rows} rows: "
                f"{type(e).__name__}: {e}"
            ) from e
        if len(keys) != batch.num_rows or keys.type != self.key_type:
            raise RecordError(
                f"key function {self.name!r} returned {len(keys)} keys of type {keys.type} "
                f"for {batch.num_rows} rows; it must return one {self.key_type} key per row"
            )
        return keys

    def with_key(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` with its keys as column ``name`` (replacing a column of that name)."""
        keys = self.keys(batch)
        index = batch.schema.get_field_index(self.name)
        if index >= 0:
            return batch.set_column(index, self.name, keys)
        return batch.append_column(self.name, keys)

    def __call__(self, record: Any) -> Any:
        """One record's key (the record path; slow: a one-row batch per record)."""
        return self.keys(pa.RecordBatch.from_pylist([record], self.schema))[0].as_py()


@dataclass(frozen=True)
class BatchKeyHash:
    """Rows with equal keys go to the same partition: ``stable_hash(key) % p`` of the
    key :class:`BatchKey` gives them, as :class:`spillway.channels.routing.partitioners.KeyHash`
    would."""

    key: BatchKey
    downstream_parallelism: int

    def targets(self, record: Any) -> tuple[int]:
        """The single partition owning the record's key (one-row batch)."""
        return (stable_hash(self.key(record)) % self.downstream_parallelism,)

    def route(self, batch: pa.RecordBatch) -> list[tuple[int, pa.RecordBatch]]:
        """``batch`` split by partition (ascending), rows in input order in each part."""
        slices = split_by_keys(batch, self.key.keys(batch), self.downstream_parallelism)
        return [(s.key_group, s.batch) for s in slices]
