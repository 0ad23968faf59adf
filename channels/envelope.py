"""The on-the-wire format of a channel message (version 1).

A Kafka message in a channel is one of:

* **data**: the value is an Avro *array* of the channel's record schema, in Avro's
  binary encoding (a block count, the items, a terminating 0). Any consumer that has
  the record schema decodes it with ``schemaless_reader(buf, {"type": "array", "items": schema})``.
* **control**: end-of-stream, watermark or checkpoint barrier, with an 8-byte value.

Headers: ``spw.v`` (format version, ``b"1"``) and ``spw.k`` (kind: ``d``, ``e``, ``w``, ``b``).
The message key is the writer's subtask index in ASCII, so channel ``i → j`` is
"partition j, key i". A reader rejects versions it does not know instead of guessing.
"""

from __future__ import annotations

import enum
import io
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer

from channels.errors import SchemaMismatchError

VERSION = b"1"
H_VERSION = "spw.v"
H_KIND = "spw.k"
ARRAY_OVERHEAD = 20  # count varint (<= 10 bytes) + terminating 0, with room to spare

_I64 = struct.Struct(">q")


class Kind(enum.Enum):
    """What a channel message carries."""

    DATA = b"d"
    END_OF_STREAM = b"e"
    WATERMARK = b"w"
    BARRIER = b"b"


def headers(kind: Kind) -> list[tuple[str, bytes]]:
    """The headers of a message of ``kind``."""
    return [(H_VERSION, VERSION), (H_KIND, kind.value)]


def read_kind(raw_headers: Sequence[tuple[str, bytes | None]] | None) -> Kind:
    """The kind of a message; :class:`SchemaMismatchError` unless it is a v1 channel message."""
    version = kind = None
    for name, value in raw_headers or ():
        if name == H_VERSION:
            version = value
        elif name == H_KIND:
            kind = value
    if version != VERSION:
        raise SchemaMismatchError(
            f"message has channel format version {version!r}, this Spillway reads {VERSION!r}; "
            "upgrade Spillway or check that the topic is a Spillway channel"
        )
    try:
        return Kind(kind)
    except ValueError:
        raise SchemaMismatchError(f"unknown channel message kind {kind!r}") from None


def writer_key(index: int) -> bytes:
    """The message key of writer subtask ``index``."""
    return str(index).encode()


def writer_of(key: bytes | None) -> int:
    """The writer index from a message key."""
    if key is None or not key.isdigit():
        raise SchemaMismatchError(f"channel message key {key!r} is not a writer index")
    return int(key)


def encode_i64(value: int) -> bytes:
    """Value of a control message (watermark or barrier id)."""
    return _I64.pack(value)


def decode_i64(value: bytes | None) -> int:
    """Inverse of :func:`encode_i64`."""
    if value is None or len(value) != 8:
        raise SchemaMismatchError(f"control message value must be 8 bytes, got {value!r}")
    return int(_I64.unpack(value)[0])


@dataclass(frozen=True)
class RecordCodec:
    """Encodes single records and decodes whole batches with one Avro schema."""

    schema: dict[str, Any]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_parsed", parse_schema(self.schema))
        object.__setattr__(self, "_array", parse_schema({"type": "array", "items": self.schema}))

    def encode(self, record: Any) -> bytes:
        """Avro binary of one record; :class:`SchemaMismatchError` if it does not fit the schema."""
        buf = io.BytesIO()
        try:
            schemaless_writer(buf, self._parsed, record)  # type: ignore[attr-defined]
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as e:
            raise SchemaMismatchError(
                f"record {_short(record)} does not match schema "
                f"{self.schema.get('name', self.schema)!r}: {e}"
            ) from e
        return buf.getvalue()

    def encode_block(self, records: Sequence[Any]) -> bytes:
        """One Avro array *block* (count, items) of ``records``, encoded in a single call.

        A batch may hold several blocks followed by a terminating 0 (Avro's array
        encoding), so blocks from successive calls can share one Kafka message.
        """
        buf = io.BytesIO()
        try:
            schemaless_writer(buf, self._array, records)  # type: ignore[attr-defined]
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError):
            for r in records:  # find and name the record that does not fit
                self.encode(r)
            raise
        value = buf.getvalue()
        return value[:-1]  # drop the array terminator; frame_blocks adds one per batch

    def decode_batch(self, value: bytes) -> list[Any]:
        """All records of a data message, in write order."""
        try:
            records = schemaless_reader(io.BytesIO(value), self._array, None)  # type: ignore[attr-defined]
        except Exception as e:  # fastavro raises many unrelated types on corrupt input
            raise SchemaMismatchError(
                f"cannot decode a batch of {len(value)} bytes with schema "
                f"{self.schema.get('name', self.schema)!r}: {e}"
            ) from e
        assert isinstance(records, list)
        return records


def frame_batch(encoded: Sequence[bytes]) -> bytes:
    """Avro array framing around already-encoded records: ``count, items..., 0``."""
    return _zigzag_varint(len(encoded)) + b"".join(encoded) + b"\x00"


def frame_blocks(blocks: Sequence[bytes]) -> bytes:
    """A batch of blocks from :meth:`RecordCodec.encode_block`: ``block, block, ..., 0``."""
    return b"".join(blocks) + b"\x00"


def block_of(encoded: Sequence[bytes]) -> bytes:
    """A block of already-encoded records (count, items), without a terminator."""
    return _zigzag_varint(len(encoded)) + b"".join(encoded)


def _zigzag_varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z & ~0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _short(record: Any) -> str:
    text = repr(record)
    return text if len(text) <= 120 else text[:117] + "..."
