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

from spillway.channels.errors import ConfigError, PipelineDefinitionError

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


class Sticky:
    """Round-robin over ``slots`` partitions, one batch at a time (docs/architecture.md,
    Slots): every record goes to the current slot until the writer has sent that slot's
    batch and calls :meth:`advance`. A round-robin edge into an operator with slots has
    one partition per slot, a number fixed when the job first ran, so what a writer does
    never depends on the downstream width; and a batch fills as on a single partition,
    however many slots there are.

    The slots are visited in bit-reversed order (0, 16, 8, 24, ... of 32), so consecutive
    batches go to slots far apart, which contiguous slot ranges give to different
    downstream subtasks; each writer starts at its own place in that cycle.
    """

    def __init__(self, writer_index: int, slots: int) -> None:
        if slots < 1:
            raise ConfigError(f"a round-robin edge needs at least one slot, got {slots}")
        bits = (slots - 1).bit_length()
        self._order = sorted(range(slots), key=lambda s: _reversed_bits(s, bits))
        self._at = writer_index % slots
        self.slots = slots

    @property
    def current(self) -> int:
        """The slot records go to now."""
        return self._order[self._at]

    def targets(self, record: Any) -> Sequence[int]:
        """The current slot."""
        return (self._order[self._at],)

    def advance(self) -> int:
        """Move to the next slot of the cycle (the current one's batch was sent); returns it."""
        self._at = (self._at + 1) % self.slots
        return self._order[self._at]


def _reversed_bits(value: int, bits: int) -> int:
    """``value``'s lowest ``bits`` bits in reverse order (a bijection on ``0..2**bits-1``)."""
    out = 0
    for _ in range(bits):
        out = (out << 1) | (value & 1)
        value >>= 1
    return out


@dataclass(frozen=True)
class Broadcast:
    """Every downstream subtask receives every record."""

    downstream_parallelism: int

    def targets(self, record: Any) -> Sequence[int]:
        """All partitions."""
        return range(self.downstream_parallelism)
