"""Keyed state of one subtask, made durable incrementally through a changelog topic.

Only keys changed since the last checkpoint are written, inside the checkpoint's
transaction (Kafka Streams / Samza style), so a checkpoint's cost follows the change
rate, not the state size. The changelog is compacted, which bounds restore time by the
number of live keys rather than by the job's age.

A value whose message would be larger than one changelog message may be (``part_bytes``,
the channels' ``max_batch_bytes``) is written as parts, split as the channels split a
large record (:func:`spillway.channels.wire.spanning.split`, with its part headers), up to
``max_value_bytes`` (the channels' ``max_record_bytes``). Why the parts are keyed as they
are (compaction must never leave a torn value): see :func:`part_key`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka import Message

from spillway.channels.config import MAX_RECORD_BYTES, ChannelSettings
from spillway.channels.errors import RecordError, RecordTooLargeError, SpillwayError
from spillway.channels.ids import Offset, TopicPartition
from spillway.channels.kafka.consumer import AssignedConsumer
from spillway.channels.kafka.producer import TransactionalProducer
from spillway.channels.wire.spanning import PartMark, part_headers, read_mark, split

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


# A part or a head of a large value starts its message value with this byte; JSON text
# (every plain value) and JSON keys never hold a raw NUL, so one byte tells them apart.
_LARGE = b"\x00"
_LARGE_VERSION = b"json"  # spw.e of a part: the whole value is JSON text
_TOKEN_BYTES = 16  # a large value's random id: unique across versions, runs and restarts
_DEFAULT_PART_BYTES = ChannelSettings().max_batch_bytes


def part_key(token: bytes, index: int) -> bytes:
    """The changelog key of part ``index`` of the large value whose id is ``token``.

    Design (compaction must never leave a torn value): a large value of key ``K`` is its
    parts, each keyed by the value's own random id and its index, then a *head* keyed
    ``K`` whose value names that id. The parts' keys are unique to that one value, so no
    later record supersedes them except the tombstones its successor writes for them,
    *after* its own head for ``K`` (or ``K``'s tombstone), in the same transaction. The
    log cleaner removes a record only for a later one of the same key inside the range
    it maps, which starts where the last clean ended; so whenever it removes a part, it
    also removes (or has removed) the head that named it, and a head it keeps always
    finds all its parts. Keying parts by ``K`` and index instead would let a partial clean
    drop one part of a live value, or keep a dead part under a live head. (Raising the
    changelog topic's max.message.bytes to the record limit would avoid parts, but the
    broker's and many managed services' caps are lower: the channels split for that reason.)
    """
    return b"%s%s/%d" % (_LARGE, token, index)


def _head(token: bytes) -> bytes:
    return _LARGE + token


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


def _text_floor(value: Any) -> int:
    """A lower bound of the JSON size of a flat value (its strings' characters)."""
    if type(value) is str:
        return len(value)
    if isinstance(value, (list, dict)):
        items = value.values() if isinstance(value, dict) else value
        return sum(len(v) for v in items if type(v) is str)
    return 0


def _preview(key: Any) -> str:
    text = repr(key)
    return text if len(text) <= 80 else f"{text[:77]}..."


def _decode_key(raw: bytes) -> Any:
    return _tuples(json.loads(raw))


def _tuples(v: Any) -> Any:
    # JSON has no tuples; keys must stay hashable after a restore.
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


class ChangelogState:
    """A dict of key → JSON-able value with changelog partitions behind it.

    One partition (``ChangelogState(tp)``), or a keyed operator's key groups
    (:meth:`keyed`): each entry is logged to the partition ``partition_of`` gives its key,
    which must be one the subtask owns. ``part_bytes``: the largest changelog message
    value (a larger one goes as parts); ``max_value_bytes``: the largest value.
    """

    def __init__(
        self,
        tp: TopicPartition,
        *,
        part_bytes: int = _DEFAULT_PART_BYTES,
        max_value_bytes: int = MAX_RECORD_BYTES,
    ) -> None:
        if not 0 < part_bytes <= max_value_bytes:
            raise ValueError(f"part_bytes {part_bytes} must be in 1..{max_value_bytes}")
        self.tp = tp
        self.part_bytes = part_bytes
        self.max_value_bytes = max_value_bytes
        self.tps: tuple[TopicPartition, ...] = (tp,)
        self._partition_of: Callable[[Any], int] | None = None
        self._owned: frozenset[int] = frozenset((tp.partition,))
        # Keyed by the changelog key (JSON bytes) -> (key, value); or the raw changelog
        # value (JSON bytes) of a restored key not used since: a restore only copies the
        # message's bytes, as Kafka Streams' does into RocksDB, and each key is decoded
        # when first read.
        self._data: dict[bytes, tuple[Any, Any] | bytes] = {}
        self._dirty: dict[bytes, Any] = {}  # key -> JSON text, _PENDING or _DELETED
        # Keys whose latest changelog record is a large value's head -> (id, parts): the
        # next record of the key tombstones those parts (see part_key).
        self._large: dict[bytes, tuple[bytes, int]] = {}
        # Parts an abandoned run wrote past a rewind's restore point -> their partition:
        # tombstoned at the next flush.
        self._stray: dict[bytes, int] = {}

    @staticmethod
    def keyed(
        topic: str,
        partitions: Sequence[int],
        partition_of: Callable[[Any], int],
        settings: ChannelSettings | None = None,
    ) -> ChangelogState:
        """State over the owned ``partitions`` of ``topic``; a key goes to ``partition_of(key)``.

        ``settings``: the job's channel settings, whose message and record bounds the
        changelog keeps (the defaults when None)."""
        if not partitions:
            raise ValueError(f"a keyed state of {topic} needs at least one partition")
        s = settings or ChannelSettings()
        state = ChangelogState(
            TopicPartition(topic, partitions[0]),
            part_bytes=s.max_batch_bytes,
            max_value_bytes=s.max_record_bytes,
        )
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
        self._check_key(key, k)
        if restores_as_itself(value):
            # A flat value always encodes and comes back from JSON as itself: keep a
            # private copy and encode it once per checkpoint (flush_to), not per put. Its
            # strings alone tell a value past the limit here, in the operator's call, where
            # the error names the record (flush_to checks the exact size).
            if _text_floor(value) > self.max_value_bytes:
                self._check_value(key, len(_VALUE_TEXT(value)))
            self._data[k] = (key, value.copy() if isinstance(value, (list, dict)) else value)
            self._dirty[k] = _PENDING
            return
        try:
            text = _VALUE_TEXT(value)
        except (TypeError, ValueError) as e:
            raise RecordError(
                f"state value for key {key!r} in {self.tp} is not JSON-serializable: {e}"
            ) from e
        self._check_value(key, len(text))  # in the operator's call: the error names the record
        self._data[k] = (key, json.loads(text))
        self._dirty[k] = text

    def _check_key(self, key: Any, k: bytes) -> None:
        # A large value's head is keyed by the key itself, so a key must fit one message.
        if len(k) + len(_head(b"0" * 2 * _TOKEN_BYTES)) > self.part_bytes:
            raise RecordTooLargeError(
                f"state key of {len(k)} bytes in {self.tp.topic} ({_preview(key)}) is larger "
                f"than one changelog message may be ({self.part_bytes} bytes, max_batch_bytes): "
                "key by something shorter, e.g. a hash of it"
            )

    def _check_value(self, key: Any, size: int) -> None:
        if size > self.max_value_bytes:
            raise RecordTooLargeError(
                f"state value of {size} bytes for key {_preview(key)} in {self.tp.topic} "
                f"exceeds the largest value keyed state keeps, {self.max_value_bytes} bytes "
                f"(max_record_bytes; at most {MAX_RECORD_BYTES} = 64 MiB): keep less per key"
            )

    def delete(self, key: Any) -> None:
        """Remove ``key`` (a tombstone in the changelog)."""
        k = _encode_key(key)
        self._data.pop(k, None)
        self._dirty[k] = _DELETED

    def _apply_all(
        self,
        batch: list[Message],
        todo: Mapping[TopicPartition, tuple[int, int]],
        abandoned: dict[bytes, int],
        large: _Restoring,
    ) -> int:
        """:meth:`_apply` per partition (a batch of several partitions keeps each one's order)."""
        if len(self.tps) == 1:
            return self._apply(batch, self.tp.partition, todo[self.tp][0], abandoned, large)
        parts: dict[int, list[Message]] = {}
        for m in batch:
            parts.setdefault(m.partition() or 0, []).append(m)
        topic = self.tp.topic
        n = 0
        for p, msgs in parts.items():
            bounds = todo.get(TopicPartition(topic, p))
            if bounds is not None:  # a partition already done delivers nothing more
                n += self._apply(msgs, p, bounds[0], abandoned, large)
        return n

    def _apply(
        self,
        batch: list[Message],
        partition: int,
        upto: int,
        abandoned: dict[bytes, int],
        large: _Restoring,
    ) -> int:
        """Copy one batch (offset order) of ``partition`` into ``_data``; keys at or past
        ``upto`` go to ``abandoned`` (with their partition). Returns how many records were
        applied."""
        last = batch[-1].offset() or 0
        if last >= upto:  # rare: mostly a rewind, which reads past `upto` on purpose
            cut = next(i for i, m in enumerate(batch) if (m.offset() or 0) >= upto)
            abandoned.update((m.key() or b"", partition) for m in batch[cut:])
            batch = batch[:cut]
        # The hot loop of a restore: offsets are checked once per batch above, and keys
        # and values stay the message's bytes objects (decoded on first use).
        data = self._data
        parts = large.parts
        try:
            for m in batch:
                v = m.value()
                k = m.key() or b""
                if v is None:
                    data.pop(k, None)
                    if parts:  # a part's tombstone (see part_key)
                        parts.pop(k, None)
                elif v[0]:  # JSON text; cheaper than comparing with _LARGE
                    data[k] = v
                else:
                    large.take(m, partition, k, v, data)
        except IndexError:  # v[0] of an empty value, which no Spillway writes
            raise SpillwayError(
                f"changelog {self.tp.topic}[{partition}] holds an empty record: the changelog "
                "topic was written by something other than this subtask"
            ) from None
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
        """Write changed keys to the changelog inside the open transaction; return how many.

        A value larger than ``part_bytes`` goes as its parts, then its head; the parts of
        the key's previous large value are tombstoned after that (see :func:`part_key`).
        :class:`RecordTooLargeError` for a value past ``max_value_bytes``.
        """
        n = 0
        topic, partition = self.tp.topic, self.tp.partition
        large = self._large
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
            old = large.pop(k, None) if large else None
            if value is not None and len(k) + len(value) > self.part_bytes:
                self._produce_large(producer, partition, k, value)
            else:
                producer.produce(topic, partition, k, value)
            if old is not None:
                for i in range(old[1]):
                    producer.produce(topic, partition, part_key(old[0], i), None)
            n += 1
        for pk, p in self._stray.items():
            producer.produce(topic, p, pk, None)
        self._stray.clear()
        self._dirty.clear()
        return n

    def _produce_large(
        self, producer: TransactionalProducer, partition: int, k: bytes, value: bytes
    ) -> None:
        """``value`` of key ``k`` as its parts, then its head."""
        if len(value) > self.max_value_bytes:
            self._check_value(_decode_key(k), len(value))
        token = os.urandom(_TOKEN_BYTES).hex().encode()
        topic = self.tp.topic
        parts = split(value, self.part_bytes, _LARGE_VERSION)
        for mark, chunk in parts:
            producer.produce(
                topic, partition, part_key(token, mark.index), _LARGE + chunk, part_headers(mark)
            )
        producer.produce(topic, partition, k, _head(token))
        self._large[k] = (token, len(parts))

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
        self._large.clear()
        self._stray.clear()
        if upto is None or isinstance(upto, int):
            upto = {self.tp: Offset(upto or 0)}
        n = 0
        abandoned: dict[bytes, int] = {}
        large = _Restoring(self.tp.topic)
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
                    n += self._apply_all(batch, todo, abandoned, large)
                for tp in list(todo):
                    pos = consumer.position(tp)
                    if pos is not None:
                        left[tp] = todo[tp][1] - pos
                        if pos >= todo[tp][1]:
                            del todo[tp], left[tp]
                if todo and time.monotonic() > deadline:
                    where = ", ".join(f"{tp} up to {e}" for tp, (_u, e) in sorted(todo.items()))
                    raise SpillwayError(f"restoring {where} did not finish in {timeout_s:.0f}s")
        # Parts left without their head belong to a value whose head and tombstones lie
        # past the restore point (a rewind): not state.
        self._large = large.live(self._data)
        if rewrite:
            for k, entry in self._data.items():
                self._dirty[k] = (
                    entry.decode()
                    if isinstance(entry, bytes)
                    else json.dumps(entry[1], separators=(",", ":"))
                )
            for k in abandoned.keys() - self._data.keys():
                if k[:1] == _LARGE:  # a part the abandoned run wrote: its own partition
                    self._stray[k] = abandoned[k]
                else:
                    self._dirty[k] = _DELETED
        return n


class _Restoring:
    """The large values of one restore: parts held until their head names them."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.parts: dict[bytes, tuple[PartMark, bytes]] = {}
        self._heads: dict[bytes, tuple[bytes, int, bytes]] = {}  # key -> (id, parts, value)

    def take(
        self, m: Message, partition: int, k: bytes, v: bytes, data: dict[bytes, Any]
    ) -> None:
        """The message ``m`` of ``partition``: a part (held), or a head, whose value is
        joined from its parts into ``data``."""
        if k[:1] == _LARGE:
            raw: Any = m.headers()  # confluent-kafka's list of (name, bytes) pairs
            self.parts[k] = (read_mark(raw), v[1:])
            return
        token = v[1:]
        where = f"{self.topic}[{partition}]@{m.offset()}"
        first = self.parts.pop(part_key(token, 0), None)
        if first is None:
            raise self._corrupt(where, k, "its first part")
        count, size, version = first[0].count, first[0].size, first[0].version
        chunks = [first[1]]
        for i in range(1, count):
            got = self.parts.pop(part_key(token, i), None)
            if got is None or got[0] != PartMark(i, count, size, version):
                raise self._corrupt(where, k, f"part {i + 1} of {count}")
            chunks.append(got[1])
        whole = b"".join(chunks)
        if len(whole) != size:
            raise self._corrupt(where, k, f"{size} bytes (its parts hold {len(whole)})")
        data[k] = whole
        self._heads[k] = (token, count, whole)

    def live(self, data: Mapping[bytes, Any]) -> dict[bytes, tuple[bytes, int]]:
        """Keys whose restored value is the large value of a head -> (id, parts)."""
        return {k: (t, n) for k, (t, n, whole) in self._heads.items() if data.get(k) is whole}

    @staticmethod
    def _corrupt(where: str, k: bytes, what: str) -> SpillwayError:
        return SpillwayError(
            f"changelog {where}: the large value of state key {k.decode(errors='replace')[:80]} "
            f"lacks {what}. Compaction never separates a value from its parts, so the "
            "changelog topic was written or cleaned by something other than Spillway"
        )
