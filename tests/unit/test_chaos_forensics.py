"""chaos.forensics reads Kafka's on-disk record batches: data and control batches, and the
transaction coordinator's records, built here byte by byte as the broker writes them."""

from __future__ import annotations

import struct

from chaos.forensics import Batch, TxnState, batches, txn_states


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _varint(n: int) -> bytes:
    return _uvarint((n << 1) ^ (n >> 63))  # zigzag, as record fields are written


def _record(key: bytes, value: bytes | None, delta: int = 0) -> bytes:
    body = b"\x00" + _varint(0) + _varint(delta) + _varint(len(key)) + key
    body += _varint(-1) if value is None else _varint(len(value)) + value
    body += _varint(0)  # headers
    return _varint(len(body)) + body


def _batch(
    base: int, records: list[bytes], *, pid: int, epoch: int, attrs: int, leader_epoch: int = 0
) -> bytes:
    # After the length: leader epoch, magic, crc, attributes, last offset delta, first and
    # max timestamp, producer id and epoch, base sequence, record count, records.
    rest = struct.pack(">bihiqqqhii", 2, 0, attrs, len(records) - 1, 1000, 1000, pid, epoch, 0,
                       len(records))  # fmt: skip
    body = struct.pack(">i", leader_epoch) + rest + b"".join(records)
    return struct.pack(">qi", base, len(body)) + body


def test_data_and_control_batches_are_told_apart_with_the_marker_type() -> None:
    data = _batch(52, [_record(b"k", b"v")], pid=4, epoch=8, attrs=0x10)
    abort = _batch(53, [_record(struct.pack(">hh", 0, 0), b"")], pid=4, epoch=9, attrs=0x30,
                   leader_epoch=2)  # fmt: skip
    commit = _batch(54, [_record(struct.pack(">hh", 0, 1), b"")], pid=4, epoch=9, attrs=0x30)
    assert list(batches(data + abort + commit)) == [
        Batch(52, 52, 4, 8, True, "", 0),
        Batch(53, 53, 4, 9, True, "ABORT", 2),
        Batch(54, 54, 4, 9, True, "COMMIT", 0),
    ]


def test_coordinator_records_give_state_and_partitions_of_the_wanted_ids_only() -> None:
    def key(tid: str) -> bytes:
        return struct.pack(">hh", 0, len(tid)) + tid.encode()

    topic = b"job.ch.fold.sink"
    # Value version 1 (flexible): compact array of (compact topic, compact int32 array, tags).
    parts = _uvarint(2) + _uvarint(len(topic) + 1) + topic + _uvarint(3)
    parts += struct.pack(">ii", 7, 1) + _uvarint(0)
    value = struct.pack(">hqhib", 1, 4, 8, 60000, 3) + parts + struct.pack(">qq", 0, 0)
    other = struct.pack(">hqhib", 1, 5, 1, 60000, 1) + _uvarint(1) + struct.pack(">qq", 0, 0)
    seg = _batch(
        272, [_record(key("job.fold.0"), value), _record(key("job.weigh.0"), other, 1)],
        pid=-1, epoch=-1, attrs=0,
    )  # fmt: skip
    assert list(txn_states(seg, "fold.0")) == [
        TxnState(272, 1000, "job.fold.0", 4, 8, "PrepareAbort", (("job.ch.fold.sink", (1, 7)),))
    ]
