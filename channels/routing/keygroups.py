"""Key groups and partition ownership (docs/architecture.md, Key groups). Pure: no I/O.

A keyed edge hashes each record's key (:func:`spillway.channels.routing.partitioners.stable_hash`)
into
one of ``M`` key groups, ``M`` being the downstream operator's *max parallelism*. The
edge's topic has ``M`` partitions, partition = key group, and so has the operator's
changelog. Subtask ``i`` of ``p`` owns the contiguous range of key groups
``[ceil(i*M/p), ceil((i+1)*M/p))``, as Flink's ``KeyGroupRangeAssignment``; rescaling
(``p`` changes, ``M`` does not) moves whole partitions between subtasks and never
rewrites data already in a channel.

A round-robin edge into an operator that is neither keyed nor stateful has ``M`` *slots*
(:class:`spillway.channels.routing.partitioners.Sticky`), owned by the same rule. Any other
non-keyed edge
has one partition per downstream subtask (``M == p``), for which the same rule gives
subtask ``i`` exactly partition ``i``; so every subtask's ownership is written in one
form, :class:`Ownership`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NewType

from spillway.channels.errors import CheckpointFormatError, PipelineDefinitionError
from spillway.channels.ids import TopicPartition
from spillway.channels.routing.partitioners import stable_hash

KeyGroup = NewType("KeyGroup", int)
MaxParallelism = NewType("MaxParallelism", int)

# Flink's upper bound (2^15): each key group is a Kafka partition here, and a topic of
# more partitions than that is beyond what a broker handles well anyway.
MAX_PARALLELISM_LIMIT = 32768

# Chosen by measurement (docs/benchmarks.md, "Key groups"): what partitioning costs
# the writer is per record, hardly per partition (`python -m bench.writercost`: 0.41 us a
# record at 1 partition, 0.79 / 0.85 / 1.02 at 16 / 32 / 128, load 17), and
# `make bench-channels` could not tell 16 from 32 on the shared machine; 32 doubles the
# room to rescale for that cost.
DEFAULT_MAX_PARALLELISM = MaxParallelism(32)


def max_parallelism(value: int, parallelism: int, where: str) -> MaxParallelism:
    """``value`` as a :data:`MaxParallelism` for an operator of ``parallelism`` subtasks.

    :class:`PipelineDefinitionError` naming ``where`` unless
    ``parallelism <= value <= MAX_PARALLELISM_LIMIT`` (a subtask owns at least one key group).
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise PipelineDefinitionError(
            f"{where}: max_parallelism must be an int, got {type(value).__name__}"
        )
    if not parallelism <= value <= MAX_PARALLELISM_LIMIT:
        raise PipelineDefinitionError(
            f"{where}: max_parallelism {value} must be between the operator's parallelism "
            f"({parallelism}) and {MAX_PARALLELISM_LIMIT}; every subtask owns at least one key "
            "group, and it cannot change once the job has run. Raise it (or lower parallelism)"
        )
    return MaxParallelism(value)


def key_group(key: Any, m: int) -> KeyGroup:
    """The key group of ``key`` among ``m``: ``stable_hash(key) % m``, the same in every
    process (so also the partition a keyed channel writes it to)."""
    return KeyGroup(stable_hash(key) % m)


def key_group_range(index: int, parallelism: int, m: int) -> range:
    """Key groups owned by subtask ``index`` of ``parallelism``: ``[ceil(i*m/p), ceil((i+1)*m/p))``.

    Over ``index in 0..p-1`` the ranges cover ``0..m-1`` exactly once, each non-empty
    when ``p <= m``.
    """
    if not 0 <= index < parallelism <= m:
        raise ValueError(f"need 0 <= index ({index}) < parallelism ({parallelism}) <= m ({m})")
    return range(-(-index * m // parallelism), -(-(index + 1) * m // parallelism))


def owner_of(group: int, parallelism: int, m: int) -> int:
    """The subtask index whose :func:`key_group_range` holds ``group`` (Flink's formula)."""
    if not 0 <= group < m:
        raise ValueError(f"key group {group} is not in 0..{m - 1}")
    return group * parallelism // m


@dataclass(frozen=True)
class Ownership:
    """The partitions a subtask owns: topic → ascending partition numbers."""

    partitions: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    @staticmethod
    def of(owned: Mapping[str, Iterable[int]]) -> Ownership:
        """Build from any iterables of partitions (sorted, duplicates removed)."""
        return Ownership({t: tuple(sorted(set(ps))) for t, ps in sorted(owned.items())})

    def of_topic(self, topic: str) -> tuple[int, ...]:
        """The owned partitions of ``topic`` (empty if none)."""
        return self.partitions.get(topic, ())

    def topic_partitions(self, topic: str) -> list[TopicPartition]:
        """The owned partitions of ``topic`` as :class:`TopicPartition` s."""
        return [TopicPartition(topic, p) for p in self.of_topic(topic)]

    def to_json(self) -> dict[str, list[int]]:
        """JSON form: ``{topic: [partition, ...]}``."""
        return {t: list(ps) for t, ps in sorted(self.partitions.items())}

    @staticmethod
    def from_json(doc: Any, where: str = "") -> Ownership:
        """Parse :meth:`to_json`'s form; :class:`CheckpointFormatError` naming ``where``."""
        if not isinstance(doc, dict):
            raise CheckpointFormatError(f"ownership {where}: expected an object, got {doc!r}")
        out: dict[str, tuple[int, ...]] = {}
        for topic, ps in doc.items():
            ok = isinstance(ps, list) and all(
                isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in ps
            )
            if not ok or list(ps) != sorted(set(ps)):
                raise CheckpointFormatError(
                    f"ownership {where}: partitions of {topic!r} must be ascending distinct "
                    f"non-negative ints, got {ps!r}"
                )
            out[str(topic)] = tuple(ps)
        return Ownership(out)
