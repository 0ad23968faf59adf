"""Running per-key totals within a batch, row by row, with Arrow compute only.

``aggregate_batches(..., emit="rows")`` emits, for every input row, its key's result
after that row: what the record aggregate with ``emit="updates"`` emits, one update per
record. :func:`running_sum` gives each row the sum of its key's values up to and
including it, without a Python step per row: a stable sort by key code, one cumulative
sum, each key's total before its first row carried forward and subtracted, and the
inverse permutation back to input order. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class KeyCodes:
    """A batch's key column as codes: ``codes[row]`` indexes ``keys`` (distinct keys, in
    order of first appearance; a null key is one of them); ``order`` sorts rows by code
    (stable) and ``inverse`` puts sorted rows back in input order."""

    keys: pa.Array
    codes: pa.Array
    order: pa.Array
    inverse: pa.Array
    starts: pa.Array  # per sorted row: True where its key's rows begin


def key_codes(column: pa.Array) -> KeyCodes:
    """The codes of ``column`` (a plain or dictionary array of keys)."""
    if pa.types.is_dictionary(column.type):
        column = pc.cast(column, column.type.value_type)
    encoded = pc.dictionary_encode(column, null_encoding="encode")
    codes = encoded.indices
    order = pc.sort_indices(codes)
    inverse = pc.sort_indices(order)
    sorted_codes = pc.take(codes, order)
    n = len(codes)
    if n:
        changed = pc.not_equal(sorted_codes.slice(1), sorted_codes.slice(0, n - 1))
        starts = pa.concat_arrays([pa.array([True]), changed])
    else:
        starts = pa.array([], pa.bool_())
    return KeyCodes(encoded.dictionary, codes, order, inverse, starts)


def running_sum(kc: KeyCodes, values: pa.Array) -> pa.Array:
    """Per row, the sum of ``values`` (no nulls) over the rows of its key up to it."""
    if not len(values):
        return values
    ordered = pc.take(values, kc.order)
    cum = pc.cumulative_sum(ordered)
    # At each key's first sorted row: the total of the keys before it; nulls elsewhere,
    # filled forward, so each row subtracts the total its key started from.
    before = pc.if_else(kc.starts, pc.subtract(cum, ordered), pa.scalar(None, cum.type))
    within = pc.subtract(cum, pc.fill_null_forward(before))
    return pc.take(within, kc.inverse)


def with_base(kc: KeyCodes, running: pa.Array, base: Sequence[Any]) -> pa.Array:
    """``running`` plus each row's key's value before the batch (``base``, per distinct
    key in ``kc.keys`` order; ``None``: nothing yet, counted as 0)."""
    if all(b is None for b in base):
        return running
    start = pa.array([0 if b is None else b for b in base], running.type)
    return pc.add(running, pc.take(start, kc.codes))
