"""Partitioners: which downstream subtasks receive a record. Pure and deterministic.

Key hashing uses xxhash64 of a canonical byte form of the key: stable across processes,
machines and Python versions (Python's ``hash()`` is salted per process and would send
the same key to different subtasks after a restart).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import xxhash

from channels.errors import ConfigError, PipelineDefinitionError

KeyFn = Callable[[Any], Any]


class Partitioner(Protocol):
    """Maps a record to the downstream partitions (subtask indices) it must reach."""

    def targets(self, record: Any) -> Sequence[int]:
        """Partitions in ``0..downstream_parallelism-1`` that receive ``record``."""
        ...


def key_bytes(key: Any) -> bytes:
    """Canonical bytes of a key: str as UTF-8, bytes as is, int/bool/None/tuples by value."""
    if isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, bool) or key is None:
        return repr(key).encode()
    if isinstance(key, int):
        return b"i" + str(key).encode()
    if isinstance(key, tuple):
        return b"t" + b"\x00".join(key_bytes(k) for k in key)
    raise ConfigError(
        f"key of type {type(key).__name__} cannot be hashed stably; "
        "return str, bytes, int or a tuple of those from key_by"
    )


def stable_hash(key: Any) -> int:
    """A 64-bit hash of ``key`` that is the same in every process."""
    return int(xxhash.xxh64_intdigest(key_bytes(key)))


@dataclass(frozen=True)
class Forward:
    """Subtask i sends everything to subtask i. Needs equal parallelism on both sides."""

    writer_index: int
    downstream_parallelism: int

    def __post_init__(self) -> None:
        if self.writer_index >= self.downstream_parallelism:
            raise PipelineDefinitionError(
                f"forward edge from subtask {self.writer_index} to an operator with parallelism "
                f"{self.downstream_parallelism}: forward needs equal parallelism; use rebalance "
                "or key_by instead"
            )

    def targets(self, record: Any) -> Sequence[int]:
        """Always the writer's own index."""
        return (self.writer_index,)


# Keys whose partition a KeyHash remembers, at most (then it forgets them all): routing
# hashes each distinct key once, not once per record.
_KEY_CACHE = 65_536


@dataclass(frozen=True)
class KeyHash:
    """Records with equal keys go to the same partition: ``stable_hash(key) % p`` (on a
    keyed edge, ``p`` is the key-group count: the partition is the key group)."""

    key_fn: KeyFn
    downstream_parallelism: int
    # str keys only: equal str keys have equal bytes (1 == True == 1.0 would not).
    _cache: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    def targets(self, record: Any) -> Sequence[int]:
        """The single partition owning the record's key."""
        return (stable_hash(self.key_fn(record)) % self.downstream_parallelism,)

    def partitions(self, records: Sequence[Any]) -> list[int]:
        """The partition of each record, as :meth:`targets` gives it, computed in one pass."""
        cache = self._cache
        if len(cache) > _KEY_CACHE:
            cache.clear()
        keys = list(map(self.key_fn, records))
        try:  # C-level loop; only str keys are ever cached, and no other key equals a str
            return list(map(cache.__getitem__, keys))
        except KeyError:
            pass
        n = self.downstream_parallelism
        out = list(map(cache.get, keys))
        for i, p in enumerate(out):
            if p is None:
                k = keys[i]
                out[i] = p = stable_hash(k) % n
                if type(k) is str:
                    cache[k] = p
        return out  # type: ignore[return-value]  # no None left


class RoundRobin:
    """Spreads records evenly; each writer starts at its own index so writers do not collide."""

    def __init__(self, writer_index: int, downstream_parallelism: int) -> None:
        self._next = writer_index % downstream_parallelism
        self._p = downstream_parallelism

    def targets(self, record: Any) -> Sequence[int]:
        """The next partition in turn."""
        p = self._next
        self._next = (p + 1) % self._p
        return (p,)


@dataclass(frozen=True)
class Broadcast:
    """Every downstream subtask receives every record."""

    downstream_parallelism: int

    def targets(self, record: Any) -> Sequence[int]:
        """All partitions."""
        return range(self.downstream_parallelism)
