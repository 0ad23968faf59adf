"""Vectorised key routing (spillway.channels.routing.batchroute) against the record path's
stable_hash % M."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest

from spillway.channels.errors import ConfigError
from spillway.channels.routing.batchroute import key_groups, split_by_key_group
from spillway.channels.routing.partitioners import KeyHash, stable_hash


def _random_keys(rng: random.Random, typ: pa.DataType, n: int) -> list[Any]:
    def one() -> Any:
        if rng.random() < 0.1:
            return None
        if pa.types.is_string(typ) or pa.types.is_large_string(typ):
            return rng.choice(["a", "b", "é", "", "key-" + str(rng.randrange(50))])
        if pa.types.is_binary(typ):
            return bytes([rng.randrange(256) for _ in range(rng.randrange(4))])
        if pa.types.is_boolean(typ):
            return rng.random() < 0.5
        return rng.randrange(-(2**31), 2**31 - 1) if rng.random() < 0.5 else rng.randrange(-5, 5)

    return [one() for _ in range(n)]


@pytest.mark.parametrize(
    "typ", [pa.string(), pa.large_string(), pa.binary(), pa.int64(), pa.int32(), pa.bool_()]
)
@pytest.mark.parametrize("m", [1, 7, 128])
def test_key_groups_equal_the_record_path_on_random_keys_with_nulls(
    typ: pa.DataType, m: int
) -> None:
    rng = random.Random(f"{typ}-{m}")
    keys = _random_keys(rng, typ, 2000)
    got = key_groups(pa.array(keys, typ), m).to_pylist()
    router = KeyHash(lambda r: r["k"], m)
    assert got == [router.targets({"k": k})[0] for k in keys]
    assert None in keys  # nulls are routed as the record path routes the key None
    assert got[keys.index(None)] == stable_hash(None) % m


def test_key_groups_of_dictionary_and_chunked_columns() -> None:
    keys = ["x", "y", None, "x", "z"]
    expect = [stable_hash(k) % 16 for k in keys]
    assert key_groups(pa.array(keys).dictionary_encode(), 16).to_pylist() == expect
    chunked = pa.chunked_array([pa.array(keys[:2]), pa.array(keys[2:])])
    assert key_groups(chunked, 16).to_pylist() == expect


def test_split_keeps_row_order_within_each_group_and_every_row_once() -> None:
    rng = random.Random(3)
    keys = _random_keys(rng, pa.string(), 3000)
    batch = pa.record_batch({"k": pa.array(keys), "i": pa.array(range(3000), pa.int64())})
    slices = split_by_key_group(batch, "k", 8)
    assert [s.key_group for s in slices] == sorted({stable_hash(k) % 8 for k in keys})
    seen: list[int] = []
    for s in slices:
        rows = s.batch.to_pylist()
        assert all(stable_hash(r["k"]) % 8 == s.key_group for r in rows)
        idx = [r["i"] for r in rows]
        assert idx == sorted(idx)  # input order kept inside a group
        seen.extend(idx)
    assert sorted(seen) == list(range(3000))


def test_split_of_an_empty_batch_is_empty() -> None:
    batch = pa.record_batch({"k": pa.array([], pa.string())})
    assert split_by_key_group(batch, "k", 4) == []


def test_unroutable_key_columns_are_refused_clearly() -> None:
    with pytest.raises(ConfigError, match=r"key column 'p' has type double.*cast it first"):
        key_groups(pa.array([1.5]), 4, "p")
    batch = pa.record_batch({"k": pa.array(["a"])})
    with pytest.raises(ConfigError, match=r"key column 'nope' is not in the batch.*\['k'\]"):
        split_by_key_group(batch, "nope", 4)
    with pytest.raises(ConfigError, match="max_parallelism must be >= 1"):
        key_groups(pa.array(["a"]), 0)
