"""Keyed state of one subtask, made durable incrementally through a changelog topic.

Only keys changed since the last checkpoint are written, inside the checkpoint's
transaction (Kafka Streams / Samza style), so a checkpoint's cost follows the change
rate, not the state size. The changelog is compacted, which bounds restore time by the
number of live keys rather than by the job's age.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka import Message

from spillway.channels.errors import RecordError, SpillwayError
from spillway.channels.ids import Offset, TopicPartition
from spillway.channels.kafka.consumer import AssignedConsumer
from spillway.channels.kafka.producer import TransactionalProducer

_DELETED = object()
_PENDING = object()  # dirty, encoded from the stored value when flushed
# Messages per consume call while restoring; librdkafka fetches ahead meanwhile.
_RESTORE_BATCH = 1000
_RESTORE_WAIT_S = 0.01  # per consume() call of a restore

CHANGELOG_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    # Records stay uncompacted this long, so a whole-job rewind can rebuild the state of a
    # checkpoint up to a day old (recovery/control/rewind.py checks the actual topic setting).
    "min.compaction.lag.ms": str(24 * 3600 * 1000),
    "segment.bytes": str(64 * 1024 * 1024),
}


# Shared encoders (json.dumps with options builds one per call); same text as before.
_KEY_TEXT = json.JSONEncoder(separators=(",", ":"), sort_keys=True).encode
_VALUE_TEXT = json.JSONEncoder(separators=(",", ":")).encode
_ATOMS = (str, int, float, bool, type(None))


def _encode_key(key: Any) -> bytes:
    # Plain ASCII strings (the usual key) skip the encoder; the bytes are what it gives.
    plain = type(key) is str and key.isascii() and key.isprintable()
    if plain and '"' not in key and "\\" not in key:
        return f'"{key}"'.encode()
    try:
        return _KEY_TEXT(key).encode()
    except TypeError as e:
        raise SpillwayError(f"state key {key!r} is not JSON-serializable: {e}") from e


def restores_as_itself(value: Any) -> bool:
    """True when ``json.loads(json.dumps(value)) == value`` with the same types: atoms
    (finite floats) and lists / str-keyed dicts of them. Such a value is also copied
    completely by a shallow copy (its items are immutable)."""
    if isinstance(value, list):
        items: Iterable[Any] = value
    elif isinstance(value, dict):
        if not all(type(k) is str for k in value):
            return False
        items = value.values()
    else:
        items = (value,)
    for v in items:
        t = type(v)
        if t is float:
            if v != v or v in (float("inf"), float("-inf")):
                return False
        elif t not in _ATOMS:
            return False
    return True


def _decode_key(raw: bytes) -> Any:
    return _tuples(json.loads(raw))


def _tuples(v: Any) -> Any:
    # JSON has no tuples; keys must stay hashable after a restore.
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


class ChangelogState:
    """A dict of key → JSON-able value with changelog partitions behind it.

    One partition (``ChangelogState(tp)``), or a keyed operator's key groups
    (:meth:`keyed`): each entry is logged to the partition ``partition_of`` gives its key,
    which must be one the subtask owns.
    """

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.tps: tuple[TopicPartition, ...] = (tp,)
        self._partition_of: Callable[[Any], int] | None = None
        self._owned: frozenset[int] = frozenset((tp.partition,))
        # Keyed by the changelog key (JSON bytes) -> (key, value); or the raw changelog
        # value (JSON bytes) of a restored key not used since: a restore only copies the
        # message's bytes, as Kafka Streams' does into RocksDB, and each key is decoded
        # when first read.
        self._data: dict[bytes, tuple[Any, Any] | bytes] = {}
        self._dirty: dict[bytes, Any] = {}  # key -> JSON text, _PENDING or _DELETED

    @staticmethod
    def keyed(
        topic: str, partitions: Sequence[int], partition_of: Callable[[Any], int]
    ) -> ChangelogState:
        """State over the owned ``partitions`` of ``topic``; a key goes to ``partition_of(key)``."""
        if not partitions:
            raise ValueError(f"a keyed state of {topic} needs at least one partition")
        state = ChangelogState(TopicPartition(topic, partitions[0]))
        state.tps = tuple(TopicPartition(topic, p) for p in partitions)
        state._partition_of = partition_of
        state._owned = frozenset(partitions)
        return state

    def get(self, key: Any, default: Any = None) -> Any:
        """The value of ``key``, or ``default``."""
        k = _encode_key(key)
        hit = self._data.get(k)
        if hit is None:
            return default
        return (self._decoded(k, hit) if isinstance(hit, bytes) else hit)[1]

    def _decoded(self, k: bytes, raw: bytes) -> tuple[Any, Any]:
        try:
            entry = (_decode_key(k), json.loads(raw))
        except ValueError as e:
            # Reported on first use rather than during the restore (values are not parsed
            # then); either way the subtask stops before using the key.
            raise SpillwayError(
                f"changelog {self.tp} holds a corrupt record for state key "
                f"{k.decode(errors='replace')}: {e}. The "
                "changelog topic was written by something other than this subtask"
            ) from e
        self._data[k] = entry
        return entry

    def put(self, key: Any, value: Any) -> None:
        """Set ``key``; the change is logged at the next checkpoint.

        The value is stored as it will be restored (through JSON), so a run with a
        restart and a run without one see the same types (no tuple/list or int/str
        key drift), and a value JSON cannot hold fails here, naming the key.
        """
        k = _encode_key(key)
        if restores_as_itself(value):
            # A flat value always encodes and comes back from JSON as itself: keep a
            # private copy and encode it once per checkpoint (flush_to), not per put.
            self._data[k] = (key, value.copy() if isinstance(value, (list, dict)) else value)
            self._dirty[k] = _PENDING
            return
        try:
            text = _VALUE_TEXT(value)
        except (TypeError, ValueError) as e:
            raise RecordError(
                f"state value for key {key!r} in {self.tp} is not JSON-serializable: {e}"
            ) from e
        self._data[k] = (key, json.loads(text))
        self._dirty[k] = text

    def delete(self, key: Any) -> None:
        """Remove ``key`` (a tombstone in the changelog)."""
        k = _encode_key(key)
        self._data.pop(k, None)
        self._dirty[k] = _DELETED

    def _apply_all(
        self,
        batch: list[Message],
        todo: Mapping[TopicPartition, tuple[int, int]],
        abandoned: set[bytes],
    ) -> int:
        """:meth:`_apply` per partition (a batch of several partitions keeps each one's order)."""
        if len(self.tps) == 1:
            return self._apply(batch, todo[self.tp][0], abandoned)
        parts: dict[int, list[Message]] = {}
        for m in batch:
            parts.setdefault(m.partition() or 0, []).append(m)
        topic = self.tp.topic
        n = 0
        for p, msgs in parts.items():
            bounds = todo.get(TopicPartition(topic, p))
            if bounds is not None:  # a partition already done delivers nothing more
                n += self._apply(msgs, bounds[0], abandoned)
        return n

    def _apply(self, batch: list[Message], upto: int, abandoned: set[bytes]) -> int:
        """Copy one batch (offset order) into ``_data``; keys at or past ``upto`` go to
        ``abandoned``. Returns how many records were applied."""
        last = batch[-1].offset() or 0
        if last >= upto:  # rare: mostly a rewind, which reads past `upto` on purpose
            cut = next(i for i, m in enumerate(batch) if (m.offset() or 0) >= upto)
            abandoned.update(m.key() or b"" for m in batch[cut:])
            batch = batch[:cut]
        # The hot loop of a restore: offsets are checked once per batch above, and keys
        # and values stay the message's bytes objects (decoded on first use).
        data = self._data
        for m in batch:
            v = m.value()
            k = m.key() or b""
            if v is None:
                data.pop(k, None)
            else:
                data[k] = v
        return len(batch)

    def items(self) -> Iterable[tuple[Any, Any]]:
        """All live (key, value) pairs."""
        return [
            self._decoded(k, v) if isinstance(v, bytes) else v for k, v in list(self._data.items())
        ]

    def keys(self) -> list[Any]:
        """All live keys. Restored values stay undecoded (a restore rebuilding an index
        from the keys alone, such as a window operator's timers, skips their cost)."""
        out = []
        for k, v in self._data.items():
            if not isinstance(v, bytes):
                out.append(v[0])
                continue
            try:
                out.append(_decode_key(k))
            except ValueError as e:
                raise SpillwayError(
                    f"changelog {self.tp} holds a corrupt state key "
                    f"{k.decode(errors='replace')}: {e}. The changelog topic was written by "
                    "something other than this subtask"
                ) from e
        return out

    def __len__(self) -> int:
        return len(self._data)

    def dirty_count(self) -> int:
        """Keys changed since the last :meth:`flush_to`."""
        return len(self._dirty)

    def flush_to(self, producer: TransactionalProducer) -> int:
        """Write changed keys to the changelog inside the open transaction; return how many."""
        n = 0
        topic, partition = self.tp.topic, self.tp.partition
        for k, v in self._dirty.items():
            if v is _DELETED:
                value = None
            elif v is _PENDING:
                entry = self._data[k]
                assert isinstance(entry, tuple)  # put() stored it decoded
                value = _VALUE_TEXT(entry[1]).encode()
            else:
                value = v.encode()
            if self._partition_of is not None:
                partition = self._partition(k)
            producer.produce(topic, partition, k, value)
            n += 1
        self._dirty.clear()
        return n

    def _partition(self, k: bytes) -> int:
        """The owned changelog partition of encoded key ``k`` (keyed state)."""
        assert self._partition_of is not None
        entry = self._data.get(k)
        key = entry[0] if isinstance(entry, tuple) else _decode_key(k)
        p = self._partition_of(key)
        if p not in self._owned:
            # The key's group belongs to another subtask: the record carrying it reached
            # the wrong subtask, which a key function that is not deterministic causes.
            raise SpillwayError(
                f"state key {key!r} belongs to partition {p} of {self.tp.topic}, which this "
                f"subtask does not own ({sorted(self._owned)}): the key_by function must "
                "return the same key for a record in every process"
            )
        return p

    def restore(
        self,
        consumer: AssignedConsumer,
        upto: Offset | Mapping[TopicPartition, Offset] | None,
        timeout_s: float = 300,
        *,
        rewrite: bool = False,
    ) -> int:
        """Rebuild state from committed changelog records below ``upto``; return records read.

        ``upto``: the next offset per owned partition (a partition left out, or ``None``:
        nothing of it is restored); a bare offset for a state of one partition.

        ``rewrite`` (after a whole-job rewind): the changelog also holds records of the
        abandoned run at or past ``upto``. They are read only for their keys; every live key
        and a tombstone for each key only they wrote are marked dirty, so the next
        checkpoint leaves the changelog's latest record per key equal to this state —
        which is what later restores and compaction see.
        """
        self._data.clear()
        self._dirty.clear()
        if upto is None or isinstance(upto, int):
            upto = {self.tp: Offset(upto or 0)}
        n = 0
        abandoned: set[bytes] = set()
        todo: dict[TopicPartition, tuple[int, int]] = {}  # tp -> (upto, end)
        start: dict[TopicPartition, Offset] = {}
        for tp in self.tps:
            below = int(upto.get(tp, Offset(0)))
            low, high = consumer.watermarks(tp)
            end = high if rewrite else below
            if low < end:
                todo[tp] = (below, end)
                start[tp] = Offset(low)
        if todo:
            consumer.assign(start)
            deadline = time.monotonic() + timeout_s
            left = {tp: end - int(start[tp]) for tp, (_u, end) in todo.items()}
            while todo:
                # Never more than is left below the ends, and a short wait: consume()
                # returns early only once it has all it asked for, and the offsets left
                # include a commit marker per checkpoint, so the last call used to wait
                # out a 0.2 s timeout on every restore. librdkafka fetches ahead meanwhile.
                want = max(1, min(_RESTORE_BATCH, sum(left.values())))
                batch = consumer.consume(want, _RESTORE_WAIT_S)
                if batch:
                    n += self._apply_all(batch, todo, abandoned)
                for tp in list(todo):
                    pos = consumer.position(tp)
                    if pos is not None:
                        left[tp] = todo[tp][1] - pos
                        if pos >= todo[tp][1]:
                            del todo[tp], left[tp]
                if todo and time.monotonic() > deadline:
                    where = ", ".join(f"{tp} up to {e}" for tp, (_u, e) in sorted(todo.items()))
                    raise SpillwayError(f"restoring {where} did not finish in {timeout_s:.0f}s")
        if rewrite:
            for k, entry in self._data.items():
                self._dirty[k] = (
                    entry.decode()
                    if isinstance(entry, bytes)
                    else json.dumps(entry[1], separators=(",", ":"))
                )
            for k in abandoned - self._data.keys():
                self._dirty[k] = _DELETED
        return n
