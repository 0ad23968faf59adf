"""Key groups and ownership records (channels/routing/keygroups.py): pure, no broker."""

from __future__ import annotations

import pytest

from spillway.channels.errors import CheckpointFormatError, PipelineDefinitionError
from spillway.channels.routing.keygroups import (
    MAX_PARALLELISM_LIMIT,
    Ownership,
    key_group,
    key_group_range,
    max_parallelism,
    owner_of,
)
from spillway.channels.routing.partitioners import KeyHash


@pytest.mark.parametrize("m", [1, 2, 3, 7, 16, 32, 100, 128])
def test_ranges_cover_every_key_group_exactly_once_for_every_parallelism(m: int) -> None:
    for p in range(1, m + 1):
        ranges = [key_group_range(i, p, m) for i in range(p)]
        groups = [g for r in ranges for g in r]
        assert groups == list(range(m))  # contiguous, in subtask order, each once
        assert all(len(r) >= 1 for r in ranges)
        assert max(map(len, ranges)) - min(map(len, ranges)) <= 1  # balanced
        for i, r in enumerate(ranges):
            assert all(owner_of(g, p, m) == i for g in r)


def test_flink_ranges_for_16_groups_over_3_subtasks() -> None:
    # ceil(i*16/3): 0, 6, 11, 16
    expected = [range(6), range(6, 11), range(11, 16)]
    assert [key_group_range(i, 3, 16) for i in range(3)] == expected


def test_one_partition_per_slot_when_m_equals_p() -> None:
    assert [list(key_group_range(i, 4, 4)) for i in range(4)] == [[0], [1], [2], [3]]


def test_range_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="index"):
        key_group_range(3, 3, 16)
    with pytest.raises(ValueError, match="index"):
        key_group_range(0, 4, 3)
    with pytest.raises(ValueError, match="key group 16"):
        owner_of(16, 3, 16)


def test_key_group_is_stable_and_matches_the_keyed_partitioner() -> None:
    # Fixed values: the hash must never change between processes or versions, or a
    # restarted job would route keys to other partitions than its state sits in.
    assert [key_group(k, 128) for k in ("a", "page-1", 42, ("x", 1))] == [91, 47, 71, 90]
    assert key_group("a", 128) == 0xD24EC4F1A98C6E5B % 128  # xxh64(b"a")
    part = KeyHash(lambda r: r["k"], 16)
    for k in range(200):
        assert part.targets({"k": k}) == (key_group(k, 16),)
        assert 0 <= key_group(k, 16) < 16


def test_max_parallelism_validation_names_the_operator_and_bounds() -> None:
    assert max_parallelism(16, 3, "operator 'count'") == 16
    with pytest.raises(PipelineDefinitionError, match=r"operator 'count'.*parallelism \(4\)"):
        max_parallelism(3, 4, "operator 'count'")
    with pytest.raises(PipelineDefinitionError, match=str(MAX_PARALLELISM_LIMIT)):
        max_parallelism(MAX_PARALLELISM_LIMIT + 1, 1, "operator 'count'")
    with pytest.raises(PipelineDefinitionError, match="must be an int"):
        max_parallelism(True, 1, "operator 'count'")


def test_ownership_round_trips_through_json_sorted() -> None:
    own = Ownership.of({"b": [3, 1, 2, 2], "a": range(6, 11)})
    assert own.to_json() == {"a": [6, 7, 8, 9, 10], "b": [1, 2, 3]}
    assert Ownership.from_json(own.to_json()) == own
    assert own.of_topic("zzz") == ()
    assert [tp.partition for tp in own.topic_partitions("b")] == [1, 2, 3]


@pytest.mark.parametrize("bad", [[], {"t": [2, 1]}, {"t": [1, 1]}, {"t": [-1]}, {"t": "0"}])
def test_ownership_from_json_rejects_malformed_records(bad: object) -> None:
    with pytest.raises(CheckpointFormatError, match="ckpt 7"):
        Ownership.from_json(bad, "ckpt 7")


def test_key_hash_partitions_in_one_pass_equal_targets_per_record() -> None:
    part = KeyHash(lambda r: r["k"], 16)
    records = [{"k": k} for k in ["a", "b", "a", 1, True, 1.0 == 1, ("a", 1), b"a", "a"] * 3]
    assert part.partitions(records) == [part.targets(r)[0] for r in records]
    # True and 1 are equal dict keys but different keys here (b"True" vs b"i1").
    assert part.partitions([{"k": 1}, {"k": True}]) == [key_group(1, 16), key_group(True, 16)]
