"""Reading a subtask's input channels: exactly its partitions, read_committed, from given offsets.

A reader's *position* on a partition is the next offset after everything :meth:`ChannelReader.poll`
has returned; the subtask checkpoints positions only between polls, after it has
processed what was returned, so a restored reader neither skips nor repeats a message.

A record split over several messages (spillway.channels.wire.spanning) is returned once its last
part
is read. Until then the position stays at its first part, so no checkpoint lands inside
a record; messages of other writers read meanwhile (they interleave in the partition) are
recorded in the skip state, so a restore from that position does not repeat them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spillway.channels.errors import RecordError, SchemaMismatchError
from spillway.channels.ids import Offset, TopicPartition
from spillway.channels.inputmarks import InputMark, WriterMark, combine, input_mark
from spillway.channels.kafka.consumer import AssignedConsumer
from spillway.channels.modes import DEFAULT_READER_MODES
from spillway.channels.modes import ReaderModes as ReaderModes  # re-exported
from spillway.channels.progress import ReaderState as ReaderState  # re-exported
from spillway.channels.progress import Spans as Spans
from spillway.channels.wire.batchread import BatchDecoders
from spillway.channels.wire.envelope import (
    H_KIND,
    PART_VERSION,
    Decoders,
    Kind,
    decode_i64,
    read_header,
    writer_of,
)
from spillway.channels.wire.schemaid import schema_id_of
from spillway.channels.wire.spanning import Assembler, read_mark
from spillway.channels.wire.stamps import read_times, untimed, with_times


@dataclass(frozen=True)
class InputChannel:
    """One input partition of a subtask: the edge's topic, its schema and upstream width,
    and the name of the input it belongs to (an operator may have several inputs)."""

    topic: str
    partition: int
    schema: dict[str, Any]
    upstream_parallelism: int
    input: str = ""
    # The schemas the channel had in the job's earlier runs: records still in it may have
    # been written with one (resolved to ``schema``, spillway.channels.wire.resolve).
    earlier_schemas: tuple[dict[str, Any], ...] = ()
    # Its records carry their event times (spillway.channels.wire.stamps): read as Timed
    # records, those of a message written without times taking its Kafka timestamp.
    carries_time: bool = False

    @property
    def tp(self) -> TopicPartition:
        """The Kafka partition this input reads."""
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True)
class Delivery:
    """One channel message: a batch of records, or a control record (``value`` set)."""

    tp: TopicPartition
    offset: int
    writer: int
    kind: Kind
    records: Sequence[Any]  # dicts, or ArrowRows for a reader of ``batches``
    value: int | None = None
    error: str | None = None  # set for a message that could not be decoded
    raw: bytes | None = None  # ... and then its raw value, for the dead-letter channel


class ChannelReader:
    """Reads and decodes the input channels of one subtask."""

    def __init__(
        self,
        consumer: AssignedConsumer,
        inputs: Sequence[InputChannel],
        modes: ReaderModes = DEFAULT_READER_MODES,
    ) -> None:
        """Reads ``inputs`` through ``consumer``, as ``modes`` says (:class:`ReaderModes`:
        undecodable messages delivered or raised, aligned checkpoints, Arrow batches, the
        upstream writers' guarantee)."""
        self._align = modes.aligned
        self._barriers: dict[tuple[TopicPartition, int], tuple[int, int]] = {}  # -> (n, offset)
        self._consumed: set[int] = set()  # barrier ids already checkpointed, channels still held
        self._held: dict[tuple[TopicPartition, int], list[Any]] = {}
        self._last: dict[TopicPartition, dict[int, int]] = {}  # last offset processed per writer
        self._consumer = consumer
        self._tolerate_bad = modes.bad == "deliver"
        self._inputs = {i.tp: i for i in inputs}
        decoders = BatchDecoders if modes.form == "batches" else Decoders
        self._codecs = {i.tp: decoders(i.schema, i.earlier_schemas) for i in inputs}
        # Columnar readers (batches) take no times: the plan carries none into them.
        self._timed = {i.tp for i in inputs if i.carries_time and modes.form != "batches"}
        self._positions: dict[TopicPartition, Offset] = {}
        self._pending: list[Any] = []  # consumed, not yet returned (after a barrier)
        self._parts = Assembler(resends=modes.resends)  # records that span messages
        self.state = ReaderState()

    @property
    def inputs(self) -> list[TopicPartition]:
        """The partitions this reader owns."""
        return list(self._inputs)

    def start(
        self,
        positions: Mapping[TopicPartition, Offset] | None = None,
        state: ReaderState | None = None,
    ) -> None:
        """Assign every input, each from its checkpointed offset (0 where there is none)."""
        positions = positions or {}
        unknown = set(positions) - set(self._inputs)
        if unknown:
            raise SchemaMismatchError(
                f"checkpoint has positions for partitions this subtask does not read: "
                f"{sorted(map(str, unknown))}"
            )
        self._positions = {tp: positions.get(tp, Offset(0)) for tp in self._inputs}
        self.state = state or ReaderState()
        self._pending = []
        self._barriers, self._held, self._consumed, self._last = {}, {}, set(), {}
        self._parts.clear()
        self._consumer.assign(self._positions)

    def poll(
        self, max_messages: int = 500, timeout_s: float = 0.1, *, stop_after_barrier: bool = False
    ) -> list[Delivery]:
        """Up to ``max_messages`` committed messages, decoded; positions advance past them.

        With ``stop_after_barrier`` the result ends at the first checkpoint barrier, so the
        caller can checkpoint exactly there; the messages after it come with the next poll.
        """
        if self._pending:
            msgs, self._pending = self._pending, []
        else:
            msgs = self._consumer.consume(max_messages, timeout_s)
        out: list[Delivery] = []
        for i, m in enumerate(msgs):
            tp = TopicPartition(m.topic() or "", m.partition() or 0)
            off = m.offset() or 0
            if self.state.discard and self._abandoned(tp, off, m.key()):
                self._positions[tp] = Offset(off + 1)
                continue
            if self._align or self.state.skip:
                w = _writer_or_unknown(m.key())
                if (tp, w) in self._barriers:  # held back until the alignment completes
                    self._held.setdefault((tp, w), []).append(m)
                    continue
                if off < self.state.skip.get(tp, {}).get(w, -1):
                    self._positions[tp] = Offset(off + 1)  # processed before the restart
                    continue
            try:
                d = self._decode(tp, off, m.key(), m.value(), m.headers())
                if d is not None and d.records and tp in self._timed:
                    d = _timed(d, m.headers(), m.timestamp()[1])
            except RecordError as e:
                if not self._tolerate_bad or not _is_data(m.headers()):
                    # Control records (end-of-stream, watermarks) cannot be skipped: a
                    # bounded job would wait forever for a lost end-of-stream.
                    where = "" if str(e).startswith(f"{tp}@") else f"{tp} offset {off}: "
                    raise type(e)(f"{where}{e}", origin=f"{tp}@{off}") from e
                d = Delivery(tp, off, -1, Kind.DATA, [], error=str(e), raw=m.value())
            self._positions[tp] = Offset(off + 1)
            if d is None:  # a part of a record not complete yet: positions() stay before it
                continue
            if self._align and d.kind is Kind.BARRIER and d.value is not None:
                self._barriers[(tp, d.writer)] = (d.value, off)
                continue  # the runner learns of it through aligned()
            # Processed up to here (a record's last part); skip_state() needs it where a
            # position stays behind (a held barrier, an incomplete record of another writer).
            self._last.setdefault(tp, {})[d.writer] = off
            out.append(d)
            if stop_after_barrier and d.kind is Kind.BARRIER:
                self._pending = msgs[i + 1 :]
                break
        return out

    def _abandoned(self, tp: TopicPartition, off: int, key: bytes | None) -> bool:
        per_writer = self.state.discard.get(tp)
        if not per_writer:
            return False
        spans = per_writer.get(_writer_or_unknown(key), ())
        return any(start <= off < end for start, end in spans)

    def discard_state(self) -> dict[TopicPartition, dict[int, Spans]]:
        """The discard ranges still ahead of the positions (to carry into a checkpoint)."""
        pos = self.positions()
        out: dict[TopicPartition, dict[int, Spans]] = {}
        for tp, per_writer in self.state.discard.items():
            ahead: dict[int, Spans] = {}
            for w, spans in per_writer.items():
                left = tuple(s for s in spans if s[1] > pos[tp])
                if left:
                    ahead[w] = left
            if ahead:
                out[tp] = ahead
        return out

    def aligned(self) -> int | None:
        """Barrier id n once every live channel has delivered barrier n (aligned mode)."""
        if not self._barriers:
            return None
        n = min(v for v, _ in self._barriers.values())
        for tp, ch in self._inputs.items():
            ended = self.state.ended.get(tp, set())
            for w in range(self._width(tp, ch)):
                if w not in ended and self._barriers.get((tp, w), (None, 0))[0] != n:
                    return None
        return n

    def release(self, n: int) -> None:
        """Barrier n is checkpointed: let the held channels flow again, in offset order."""
        done = [c for c, (v, _) in self._barriers.items() if v == n]
        held: list[Any] = []
        for c in done:
            del self._barriers[c]
            held.extend(self._held.pop(c, []))
        self._consumed.discard(n)
        held.sort(key=lambda m: (m.topic(), m.partition(), m.offset()))
        self._pending = held + self._pending

    def consume_barrier(self, n: int) -> None:
        """Count barrier n as processed (just before checkpoint n); channels stay held."""
        self._consumed.add(n)
        for (tp, w), (v, off) in self._barriers.items():
            if v == n:
                self._last.setdefault(tp, {})[w] = off

    def _decode(
        self,
        tp: TopicPartition,
        off: int,
        key: bytes | None,
        value: bytes | None,
        raw_headers: Any,
    ) -> Delivery | None:
        kind, version = read_header(raw_headers)
        writer = writer_of(key)
        if kind is Kind.IDLE:
            self.state.idle.setdefault(tp, set()).add(writer)
        elif self.state.idle:
            self.state.idle.get(tp, set()).discard(writer)  # it speaks again
        if version == PART_VERSION and value is not None:
            whole = self._parts.add(tp, writer, off, read_mark(raw_headers), value)
            if whole is None:
                return None
            records = self._codecs[tp].decode(whole.version, whole.value, schema_id_of(raw_headers))
            return Delivery(tp, whole.first, writer, Kind.DATA, records)
        self._parts.other(tp, writer, off)
        if kind is Kind.DATA:
            if value is None:
                raise SchemaMismatchError("data message without a value")
            records = self._codecs[tp].decode(version, value, schema_id_of(raw_headers))
            return Delivery(tp, off, writer, kind, records)
        v = decode_i64(value)
        if kind is Kind.END_OF_STREAM:
            self.state.ended.setdefault(tp, set()).add(writer)
        elif kind is Kind.WATERMARK:
            self.state.watermarks.setdefault(tp, {})[writer] = v
        elif kind is Kind.WIDTH:
            self.state.widths[tp] = v
        return Delivery(tp, off, writer, kind, [], v)

    def positions(self) -> dict[TopicPartition, Offset]:
        """Next offset to read per input partition.

        While channels are held back (aligned mode) that is the lowest offset not yet
        processed: a held barrier not yet checkpointed, the first held message, or a
        released one not yet returned. While a record that spans messages is incomplete,
        it is at most the offset of the record's first part.
        """
        pos = dict(self._positions)
        for m in self._pending:  # consumed, not yet returned: released held messages sit
            tp = TopicPartition(m.topic() or "", m.partition() or 0)  # below the position
            pos[tp] = Offset(min(pos[tp], m.offset() or 0))
        for tp, first in self._parts.lowest().items():  # never inside a record
            pos[tp] = Offset(min(pos[tp], first))
        for (tp, w), (n, off) in self._barriers.items():
            if n in self._consumed:
                held = self._held.get((tp, w))
                if not held:
                    continue
                low = held[0].offset() or 0
            else:
                low = off
            pos[tp] = Offset(min(pos[tp], low))
        return pos

    def open_records(self) -> int:
        """Records that span messages with some parts read, not complete yet."""
        return self._parts.open_records()

    def skip_state(self) -> dict[TopicPartition, dict[int, int]]:
        """Per partition and writer, the offset below which messages at or past the
        checkpointed position were already processed (to be skipped after a restore)."""
        pos = self.positions()
        out: dict[TopicPartition, dict[int, int]] = {}
        for tp, last in self._last.items():
            ahead = {w: o + 1 for w, o in last.items() if o >= pos[tp]}
            old = self.state.skip.get(tp, {})
            ahead.update({w: o for w, o in old.items() if o > pos[tp] and w not in ahead})
            if ahead:
                out[tp] = ahead
        return out

    def ended_writers(self, tp: TopicPartition) -> frozenset[int]:
        """Upstream subtasks that have sent end-of-stream on ``tp``."""
        return frozenset(self.state.ended.get(tp, ()))

    def finished(self) -> bool:
        """True when every upstream subtask has ended on every input partition (by index:
        after a rescale, writers an earlier width retired may have ended too)."""
        return all(
            self.state.ended.get(tp, set()).issuperset(range(self._width(tp, ch)))
            for tp, ch in self._inputs.items()
        )

    def input_of(self, tp: TopicPartition) -> str:
        """The name of the input that partition ``tp`` belongs to."""
        return self._inputs[tp].input

    def input_marks(self) -> dict[str, InputMark]:
        """Per named input: its watermark over its writers, idle, ended
        (spillway.channels.inputmarks)."""
        writers: dict[str, list[WriterMark]] = {}
        for tp, ch in self._inputs.items():
            per_writer = self.state.watermarks.get(tp, {})
            ended = self.state.ended.get(tp, set())
            idle = self.state.idle.get(tp, set())
            writers.setdefault(ch.input, []).extend(
                WriterMark(w in ended, w in idle, per_writer.get(w))
                for w in range(self._width(tp, ch))
            )
        return {name: input_mark(ws) for name, ws in writers.items()}

    def _width(self, tp: TopicPartition, ch: InputChannel) -> int:
        """Upstream writers of ``tp``: as a live rescale announced, else the plan's."""
        return self.state.widths.get(tp, ch.upstream_parallelism)

    def watermark(self) -> int | None:
        """The operator's input watermark: the minimum over its inputs, and within an
        input over its upstream writers, leaving out ended writers and idle writers and
        inputs (None until each live one reported); see spillway.channels.inputmarks."""
        return combine(self.input_marks())

    def idle(self) -> bool:
        """True when every upstream writer that has not ended announced it is idle."""
        live = [
            (tp, w)
            for tp, ch in self._inputs.items()
            for w in range(self._width(tp, ch))
            if w not in self.state.ended.get(tp, set())
        ]
        return bool(live) and all(w in self.state.idle.get(tp, set()) for tp, w in live)

    def close(self) -> None:
        """Close the consumer."""
        self._consumer.close()


def _timed(d: Delivery, raw_headers: Any, kafka_ms: int) -> Delivery:
    """``d`` with its records carrying the times its message carries, or its Kafka
    timestamp for each where it carries none (spillway.channels.wire.stamps)."""
    times = read_times(raw_headers)
    records = untimed(d.records, kafka_ms) if times is None else with_times(d.records, times)
    return dataclasses.replace(d, records=records)


def _writer_or_unknown(key: bytes | None) -> int:
    # Only a filter here: a bad key is reported by the decoder with its offset.
    return int(key) if key and key.isdigit() else -1


def _is_data(raw_headers: Any) -> bool:
    return all(
        not (name == H_KIND and value != Kind.DATA.value) for name, value in raw_headers or ()
    )
