"""Vectorised key routing of Arrow record batches: the columnar twin of :class:`KeyHash`.

The key group of a row is ``stable_hash(key) % max_parallelism``, exactly as the record
path computes it for the same key (:func:`spillway.channels.routing.partitioners.stable_hash`), so a
keyed
channel may be written by record operators and batch operators alike. The hash is taken
once per *distinct* key of a batch (``dictionary_encode``), never per row in Python; the
per-row work (picking each row's group, splitting the batch) runs in Arrow's kernels.

Null keys: a null in the key column is the record path's key ``None``, hashed as
``stable_hash(None)`` — the two paths send it to the same key group, and a keyed
aggregate keeps it as a key of its own, as the record path does.

Pure; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from spillway.channels.errors import ConfigError
from spillway.channels.routing.partitioners import stable_hash

# Arrow key types whose Python values are the record path's key types (str, bytes, int,
# bool), so stable_hash gives both paths the same group. Floats, dates and nested types
# have no stable key form in the record path either (key_bytes refuses them).
_KEY_TYPE_CHECKS = (
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_binary,
    pa.types.is_large_binary,
    pa.types.is_integer,
    pa.types.is_boolean,
)


@dataclass(frozen=True)
class GroupSlice:
    """The rows of one key group, in their input order."""

    key_group: int
    batch: pa.RecordBatch


def check_key_type(column: str, typ: pa.DataType) -> None:
    """:class:`ConfigError` unless rows keyed by a ``typ`` column can be routed stably."""
    base = typ.value_type if pa.types.is_dictionary(typ) else typ
    if not any(check(base) for check in _KEY_TYPE_CHECKS):
        raise ConfigError(
            f"key column {column!r} has type {typ}, which has no stable hash; key by a "
            "string, binary, integer or boolean column (cast it first, e.g. with "
            "pyarrow.compute.cast)"
        )


def _indices_and_dictionary(keys: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
    """Each row's index into the batch's distinct keys, and those keys (nulls encoded)."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if pa.types.is_dictionary(keys.type):
        # Its dictionary may hold repeats or unused values: re-encode the decoded values.
        keys = keys.dictionary_decode()
    encoded = pc.dictionary_encode(keys, null_encoding="encode")
    return encoded.indices, encoded.dictionary


def key_groups(
    keys: pa.Array | pa.ChunkedArray, max_parallelism: int, column: str = "key"
) -> pa.Array:
    """The key group (``int32``) of every row: ``stable_hash(key) % max_parallelism``.

    ``keys``: a key column; ``column`` names it in errors. One Python hash per distinct
    key; a null key is hashed as ``None`` (the record path's null key).
    """
    if max_parallelism < 1:
        raise ConfigError(f"max_parallelism must be >= 1, got {max_parallelism}")
    check_key_type(column, keys.type)
    indices, dictionary = _indices_and_dictionary(keys)
    per_key = pa.array(
        [stable_hash(k) % max_parallelism for k in dictionary.to_pylist()], pa.int32()
    )
    return pc.take(per_key, indices)


def split_by_key_group(batch: pa.RecordBatch, key: str, max_parallelism: int) -> list[GroupSlice]:
    """``batch`` split into one slice per key group present, by ascending group.

    Each slice keeps its rows in input order (a stable sort), so a key's records reach
    its partition in the order they were read. The slices share one reordered copy of
    the batch (a single ``take``); each is a zero-copy slice of it.
    """
    if key not in batch.schema.names:
        raise ConfigError(
            f"key column {key!r} is not in the batch; its columns are {batch.schema.names}"
        )
    return split_by_keys(batch, batch.column(key), max_parallelism, key)


def split_by_keys(
    batch: pa.RecordBatch, keys: pa.Array, max_parallelism: int, name: str = "key"
) -> list[GroupSlice]:
    """As :func:`split_by_key_group`, by ``keys`` (one per row, e.g. a key function's
    result) instead of a column; ``name`` names them in errors."""
    groups = key_groups(keys, max_parallelism, name)
    if batch.num_rows == 0:
        return []
    order = pc.sort_indices(groups)  # stable: equal groups keep their row order
    ordered = batch.take(order)
    runs = pc.run_end_encode(pc.take(groups, order))
    out: list[GroupSlice] = []
    start = 0
    for group, end in zip(
        runs.values.to_pylist(), runs.run_ends.to_pylist(), strict=True
    ):  # one step per group present, not per row
        out.append(GroupSlice(int(group), ordered.slice(start, end - start)))
        start = end
    return out
