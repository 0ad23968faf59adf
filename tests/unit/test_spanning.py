"""Records that span messages: splitting, reassembly and positions, without a broker."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, cast

import pytest

from spillway.channels.config import ChannelSettings
from spillway.channels.errors import ConfigError, RecordTooLargeError, SchemaMismatchError
from spillway.channels.ids import Offset, TopicPartition
from spillway.channels.progress import ReaderState
from spillway.channels.reader import ChannelReader, InputChannel, ReaderModes
from spillway.channels.routing.partitioners import Forward, KeyHash
from spillway.channels.wire.envelope import PART_VERSION, Kind, decode_data, read_header
from spillway.channels.wire.spanning import Assembler, PartMark, part_headers, read_mark, split
from spillway.channels.writer import ChannelWriter, OutputChannel
from spillway.recovery.runtime.checkpointer import cut_inside_message
from tests.unit.channelfakes import BLOB_SCHEMA, FakeProducer, LogMsg, ScriptedLog

SCHEMA = BLOB_SCHEMA
TOPIC = "ch"
TP0 = TopicPartition(TOPIC, 0)
PART = 1024  # max_batch_bytes in these tests


def blob(key: str, seq: int, size: int) -> dict[str, Any]:
    data = hashlib.sha256(f"{key}{seq}".encode()).digest() * (size // 32 + 1)
    return {"key": key, "seq": seq, "data": data[:size]}


def write(codec: str, writer_index: int, records: list[dict[str, Any]]) -> FakeProducer:
    producer = FakeProducer()
    channel = OutputChannel(TOPIC, SCHEMA, Forward(0, 1), 1)
    settings = ChannelSettings(max_batch_bytes=PART, codec=codec, linger_s=60)
    writer = ChannelWriter(cast(Any, producer), channel, writer_index, settings, lambda: 0.0)
    for r in records:  # one call each, and one call for a run, as operators do
        writer.write_many([r])
    writer.write_many([blob("tail", 0, 10), blob("tail", 1, 3000), blob("tail", 2, 10)])
    writer.flush_batches()
    return producer


# Per writer: big and small records; writer 1 also writes runs of small ones, so some
# of its messages hold several records while a record of writer 0 is incomplete.
SIZES = {0: [10, 5000, 20, 30, 2500, 2500, 40, 1100, 15], 1: [10, 5000, 20, 30, 2500] + [60] * 60}


def records_of(writer: int) -> list[dict[str, Any]]:
    return [blob(f"w{writer}", i, s) for i, s in enumerate(SIZES[writer])]


def reference(writer: int) -> list[dict[str, Any]]:
    return [*records_of(writer), blob("tail", 0, 10), blob("tail", 1, 3000), blob("tail", 2, 10)]


def interleaved_log(codec: str) -> list[LogMsg]:
    """Two writers' messages of partition 0, alternating: parts interleave."""
    sent = [write(codec, w, records_of(w)).sent for w in (0, 1)]
    log: list[LogMsg] = []
    while any(sent):
        for s in sent:
            if s:
                p, k, v, h = s.pop(0)
                log.append(LogMsg(p, len(log), k, v, h))
    return log


def reader_on(log: list[LogMsg], *, batches: bool = False) -> ChannelReader:
    return ChannelReader(
        cast(Any, ScriptedLog(log)),
        [InputChannel(TOPIC, 0, SCHEMA, 2)],
        ReaderModes(form="batches" if batches else "rows"),
    )


def by_writer(deliveries: list[Any]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {0: [], 1: []}
    for d in deliveries:
        out[d.writer].extend(list(d.records))
    return out


@pytest.mark.parametrize("codec", ["arrow", "avro"])
def test_big_records_go_out_as_parts_and_come_back_whole(codec: str) -> None:
    log = interleaved_log(codec)
    assert all(len(m.v) <= PART for m in log)
    versions = [read_header(m.h)[1] for m in log]
    assert versions.count(PART_VERSION) > 10  # the 5000-byte record alone takes 5 parts
    whole = b"2" if codec == "arrow" else b"1"
    assert set(versions) == {whole, PART_VERSION}
    r = reader_on(log)
    r.start()
    got = r.poll(10_000)
    assert by_writer(got) == {w: reference(w) for w in (0, 1)}
    assert r.positions() == {TP0: Offset(len(log))}
    # A reassembled record is delivered at its first part's offset.
    big = next(d for d in got if d.records[0]["seq"] == 1 and d.records[0]["key"] == "w0")
    first_part = next(m for m in log if read_header(m.h)[1] == PART_VERSION)
    assert big.offset == first_part.off


@pytest.mark.parametrize("codec", ["arrow", "avro"])
def test_a_restore_from_any_position_neither_loses_nor_repeats_a_record(codec: str) -> None:
    log = interleaved_log(codec)
    r = reader_on(log)
    r.start()
    done: list[Any] = []
    inside = 0
    for _ in log:  # one message per poll; a checkpoint may follow any of them
        done.extend(r.poll(1))
        pos, skip = r.positions(), r.skip_state()
        at = log[int(pos[TP0])] if int(pos[TP0]) < len(log) else None
        # A position never lands on a part other than a first one.
        if at is not None and read_header(at.h)[1] == PART_VERSION:
            assert read_mark(at.h).index == 0
        inside += bool(r.open_records())
        again = reader_on(log)
        again.start(pos, ReaderState(skip=skip))
        rest = again.poll(10_000)
        assert by_writer(done + rest) == {w: reference(w) for w in (0, 1)}
    assert inside > 10  # positions were taken with records incomplete, many times


@dataclass
class Done:
    writer: int
    records: Any


@pytest.mark.parametrize("codec", ["arrow", "avro"])
def test_a_checkpoint_inside_a_message_while_a_record_is_incomplete(codec: str) -> None:
    """Unaligned mode: a checkpoint after the first record of a message, with another
    writer's record open in the partition
    (spillway.recovery.runtime.checkpointer.cut_inside_message)."""
    log = interleaved_log(codec)
    r = reader_on(log)
    r.start()
    done: list[Any] = []
    cuts = 0
    for _ in log:
        for d in r.poll(1):
            if len(d.records) >= 2 and r.open_records():
                partial = (TP0, d.offset, 1)
                pos, skip = cut_inside_message(r.positions(), r.skip_state(), partial)
                assert pos[TP0] < d.offset  # the open record's first part
                again = reader_on(log)
                again.start(pos, ReaderState(skip=skip))
                rest = [
                    Done(e.writer, e.records[1:] if e.offset == d.offset else e.records)
                    for e in again.poll(10_000)
                ]
                head = [*done, Done(d.writer, d.records[:1])]
                assert by_writer(head + rest) == {w: reference(w) for w in (0, 1)}
                cuts += 1
            done.append(d)
    assert cuts >= 2


def test_arrow_batches_reader_gets_a_big_record_as_one_row() -> None:
    log = interleaved_log("arrow")
    r = reader_on(log, batches=True)
    r.start()
    got = r.poll(10_000)
    rows = by_writer(got)
    assert rows == {w: reference(w) for w in (0, 1)}


def test_split_and_assemble_in_order() -> None:
    value = hashlib.sha256(b"x").digest() * 100  # 3200 bytes
    parts = split(value, 1000, b"2")
    assert [(m.index, m.count, m.size, len(c)) for m, c in parts] == [
        (0, 4, 3200, 1000),
        (1, 4, 3200, 1000),
        (2, 4, 3200, 1000),
        (3, 4, 3200, 200),
    ]
    assert read_mark(part_headers(parts[2][0])) == parts[2][0]
    a = Assembler()
    outs = [a.add(TP0, 3, 10 + i, m, c) for i, (m, c) in enumerate(parts)]
    assert outs[:3] == [None, None, None]
    assert a.lowest() == {}
    whole = outs[3]
    assert whole is not None
    assert (whole.first, whole.last, whole.version, whole.value) == (10, 13, b"2", value)


def test_a_missing_part_is_an_error_naming_the_place() -> None:
    parts = split(b"x" * 3000, 1000, b"1")
    a = Assembler()
    a.add(TP0, 1, 5, *parts[0])
    assert a.lowest() == {TP0: 5}
    with pytest.raises(
        SchemaMismatchError, match=r"ch\[0\]@7: part 3/3 .* follows part 1/3 .* ch\[0\]@5"
    ):
        a.add(TP0, 1, 7, *parts[2])
    # A record cut short, then another message of the same writer (exactly-once: damage).
    a.add(TP0, 1, 8, *parts[0])
    with pytest.raises(SchemaMismatchError, match=r"ch\[0\]@9: a message that is not a part"):
        a.other(TP0, 1, 9)


def test_reading_that_starts_inside_a_record_is_an_error() -> None:
    parts = split(b"x" * 3000, 1000, b"1")
    with pytest.raises(
        SchemaMismatchError, match=r"ch\[0\]@41: part 2 of 3 .* reading started inside"
    ):
        Assembler().add(TP0, 0, 41, *parts[1])
    log = interleaved_log("avro")
    second = next(m for m in log if read_header(m.h)[1] == PART_VERSION and read_mark(m.h).index)
    r = reader_on(log)
    r.start({TP0: Offset(second.off)})
    with pytest.raises(SchemaMismatchError, match=rf"ch\[0\]@{second.off}: part 2 of"):
        r.poll(10_000)


def test_at_least_once_writer_resending_a_record_drops_the_cut_one() -> None:
    parts = split(b"a" * 2500, 1000, b"1")
    a = Assembler(resends=True)
    a.add(TP0, 0, 1, *parts[0])
    a.add(TP0, 0, 2, *parts[1])  # the writer died here; its restart sends it again
    assert a.add(TP0, 0, 3, *parts[0]) is None
    assert a.lowest() == {TP0: 3}
    a.add(TP0, 0, 4, *parts[1])
    whole = a.add(TP0, 0, 5, *parts[2])
    assert whole is not None
    assert (whole.value, whole.first) == (b"a" * 2500, 3)


def test_interleaving_writers_and_lowest_first_part() -> None:
    big = split(b"b" * 2500, 1000, b"1")
    a = Assembler()
    a.add(TP0, 0, 1, *big[0])
    a.other(TP0, 1, 2)  # another writer's small message: fine
    a.add(TP0, 1, 3, *big[0])
    a.add(TopicPartition(TOPIC, 1), 0, 9, *big[0])
    assert a.lowest() == {TP0: 1, TopicPartition(TOPIC, 1): 9}
    a.add(TP0, 0, 4, *big[1])
    assert a.add(TP0, 0, 5, *big[2]) is not None
    assert a.lowest() == {TP0: 3, TopicPartition(TOPIC, 1): 9}


def test_a_record_past_the_bound_names_its_size_the_limit_and_the_fix() -> None:
    channel = OutputChannel(TOPIC, SCHEMA, KeyHash(lambda r: r["key"], 4), 4)
    settings = ChannelSettings(max_batch_bytes=PART, max_record_bytes=8192, codec="avro")
    producer = FakeProducer()
    writer = ChannelWriter(cast(Any, producer), channel, 2, settings)
    writer.write_many([blob("k", 0, 8000)])  # under the bound: parts
    with pytest.raises(
        RecordTooLargeError,
        match=r"record of 100\d\d bytes for ch\[\d\] \(writer 2\) exceeds the largest record a "
        r"channel carries, 8192 bytes \(max_record_bytes.*split it into several records",
    ):
        writer.write_many([blob("k", 1, 10_000)])
    with pytest.raises(ConfigError, match="max_record_bytes"):
        ChannelSettings(max_record_bytes=65 * 1024 * 1024)
    with pytest.raises(RecordTooLargeError, match=r"67108865 bytes .* 67108864 bytes"):
        Assembler().add(TP0, 0, 0, PartMark(0, 2, 64 * 1024 * 1024 + 1, b"1"), b"")


def test_a_part_alone_cannot_be_decoded_by_tools() -> None:
    sent = write("avro", 0, [blob("k", 0, 3000)]).sent
    _, _, value, hdrs = sent[0]
    assert read_header(hdrs) == (Kind.DATA, PART_VERSION)
    with pytest.raises(SchemaMismatchError, match="cannot be decoded alone"):
        decode_data(hdrs, value, SCHEMA)


def test_unknown_version_still_rejected() -> None:
    with pytest.raises(SchemaMismatchError, match="upgrade Spillway"):
        read_header([("spw.v", b"4"), ("spw.k", b"d")])


def read_partitions(sent: list[Any], partitions: int, *, batches: bool = False) -> list[Any]:
    """Per partition, the records a reader gets from what a writer sent."""
    out = []
    for p in range(partitions):
        log = [LogMsg(p, n, k, v, h) for n, (q, k, v, h) in enumerate(x for x in sent if x[0] == p)]
        r = ChannelReader(
            cast(Any, ScriptedLog(log)),
            [InputChannel(TOPIC, p, SCHEMA, 1)],
            ReaderModes(form="batches" if batches else "rows"),
        )
        r.start()
        out.append([rec for d in r.poll(10_000) for rec in d.records])
    return out


@pytest.mark.parametrize("codec", ["arrow", "avro"])
def test_big_records_in_one_call_over_many_partitions_keep_each_partitions_order(
    codec: str,
) -> None:
    route = KeyHash(lambda r: r["key"], 4)
    producer = FakeProducer()
    channel = OutputChannel(TOPIC, SCHEMA, route, 4)
    settings = ChannelSettings(max_batch_bytes=PART, codec=codec, linger_s=60)
    writer = ChannelWriter(cast(Any, producer), channel, 0, settings, lambda: 0.0)
    records = [blob(f"k{i % 9}", i, 4000 if i % 7 == 3 else 12) for i in range(120)]
    writer.write_many(records[:60])  # Arrow: a call with a big row is split per partition
    writer.write_many(records[60:])
    writer.flush_batches()
    assert any(read_header(h)[1] == PART_VERSION for *_, h in producer.sent)
    got = read_partitions(producer.sent, 4)
    assert got == [[r for r in records if route.targets(r)[0] == p] for p in range(4)]


def test_an_arrow_batch_with_a_big_row_is_written_as_parts() -> None:
    import pyarrow as pa

    producer = FakeProducer()
    channel = OutputChannel(TOPIC, SCHEMA, Forward(0, 1), 1)
    settings = ChannelSettings(max_batch_bytes=PART, codec="arrow", linger_s=60)
    writer = ChannelWriter(cast(Any, producer), channel, 0, settings, lambda: 0.0)
    records = [blob("k", i, 5000 if i == 4 else 10) for i in range(9)]
    schema = pa.schema([("key", pa.string()), ("seq", pa.int64()), ("data", pa.binary())])
    writer.write_batch(pa.RecordBatch.from_pylist(records, schema=schema))
    writer.flush_batches()
    assert [read_header(h)[1] for *_, h in producer.sent].count(PART_VERSION) == 6
    [rows] = read_partitions(producer.sent, 1, batches=True)
    assert rows == records


def test_a_rewind_discards_a_writers_records_whole_and_restores_from_any_position() -> None:
    """spillway.recovery.control.rewind: writer 1's messages from a transaction boundary on (here:
    the
    first part of its second big record) belong to an abandoned run; the reader drops
    them, parts included, and a restore from any position with that state agrees."""
    log = interleaved_log("avro")
    firsts = [
        m.off
        for m in log
        if m.k == b"1" and read_header(m.h)[1] == PART_VERSION and read_mark(m.h).index == 0
    ]
    second = firsts[1]  # writer 1's second big record starts a transaction
    discard = {TP0: {1: ((second, len(log)),)}}
    whole = reader_on(log)
    whole.start(None, ReaderState(discard=discard))
    expected = by_writer(whole.poll(10_000))
    assert expected[0] == reference(0)
    assert expected[1] == reference(1)[: len(expected[1])]
    assert len(expected[1]) < len(reference(1))
    r = reader_on(log)
    r.start(None, ReaderState(discard=discard))
    done: list[Any] = []
    for _ in log:
        done.extend(r.poll(1))
        again = reader_on(log)
        state = ReaderState(skip=r.skip_state(), discard=r.discard_state())
        again.start(r.positions(), state)
        assert by_writer(done + again.poll(10_000)) == expected


def test_an_at_least_once_reader_takes_a_resent_record_once() -> None:
    """A writer without transactions died after two parts; its restart sends the record
    again whole: the reader (at-least-once upstream) delivers it once, exactly-once refuses."""
    sent = write("avro", 0, [blob("k", 0, 3000)]).sent
    assert read_header(sent[0][3])[1] == PART_VERSION
    cut = sent[:2]
    log = [LogMsg(p, n, k, v, h) for n, (p, k, v, h) in enumerate(cut + sent)]
    r = ChannelReader(
        cast(Any, ScriptedLog(log)),
        [InputChannel(TOPIC, 0, SCHEMA, 1)],
        ReaderModes(guarantee="at-least-once"),
    )
    r.start()
    got = [rec for d in r.poll(10_000) for rec in d.records]
    assert got == [
        blob("k", 0, 3000),
        blob("tail", 0, 10),
        blob("tail", 1, 3000),
        blob("tail", 2, 10),
    ]
    strict = ChannelReader(cast(Any, ScriptedLog(log)), [InputChannel(TOPIC, 0, SCHEMA, 1)])
    strict.start()
    with pytest.raises(SchemaMismatchError, match=r"ch\[0\]@2: a new record's first part"):
        strict.poll(10_000)
