"""The on-the-wire format of a channel message (versions 1, 2 and 3).

A Kafka message in a channel is one of:

* **data**: the value is an Avro *array* of the channel's record schema, in Avro's
  binary encoding (a block count, the items, a terminating 0). Any consumer that has
  the record schema decodes it with ``schemaless_reader(buf, {"type": "array", "items": schema})``.
* **data, Arrow** (format version 2): for flat record schemas the value is an Arrow IPC
  stream of the same records (:mod:`spillway.channels.wire.arrowcodec`), readable with
  ``pyarrow.ipc.open_stream(value)`` alone.
* **part** (format version 3): one part of a record too large for one message, split
  over consecutive messages of its partition (:mod:`spillway.channels.wire.spanning`); its headers
  say
  which part and the format version (1 or 2) of the whole value the parts make.
* **control**: end-of-stream, watermark, idle or checkpoint barrier, with an 8-byte value.

A data message or part may carry one more header, ``spw.t``: its records' event times,
8 bytes each (:mod:`spillway.channels.wire.stamps`), written only on channels whose plan
carries time to a window downstream. It needs no version of its own: it adds nothing to
the value, a reader that does not carry time ignores it, and a reader that does reads a
message without it (an older writer's) with the message's Kafka timestamp as each
record's time.

Headers: ``spw.v`` (format version: ``b"1"``, ``b"2"`` for Arrow data, ``b"3"`` for a
part) and ``spw.k`` (kind: ``d``, ``e``, ``w``, ``i``, ``b``); a part has three more
(spillway.channels.wire.spanning). A data message and a part also carry ``spw.s``, the id of the
schema they were written with (:mod:`spillway.channels.wire.schemaid`): a reader decodes each
message
with its writer's schema and resolves it to its own (:mod:`spillway.channels.wire.resolve`), so a
channel may hold records of an older schema of it after a restart with changed code.
The message key is the writer's subtask index in ASCII, so channel ``i → j`` is
"partition j, key i". A reader rejects versions it does not know instead of
guessing; every reader decodes both data encodings, whatever its own writers use, so
changing the codec needs no migration.
"""

from __future__ import annotations

import enum
import io
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import pyarrow as pa
from fastavro import parse_schema, schemaless_reader, schemaless_writer

from spillway.channels.errors import SchemaMismatchError
from spillway.channels.modes import Codec
from spillway.channels.wire.arrowcodec import ArrowCodec, arrow_schema, short_repr
from spillway.channels.wire.mismatch import describe
from spillway.channels.wire.resolve import ResolvingDecoder, resolved_rows
from spillway.channels.wire.schemaid import WriterSchemas, schema_id_of

VERSION = b"1"
ARROW_VERSION = b"2"
PART_VERSION = b"3"  # a part of a record that spans messages (spillway.channels.wire.spanning)
VERSIONS = (VERSION, ARROW_VERSION, PART_VERSION)
H_VERSION = "spw.v"
H_KIND = "spw.k"
ARRAY_OVERHEAD = 20  # count varint (<= 10 bytes) + terminating 0, with room to spare

_I64 = struct.Struct(">q")


class Kind(enum.Enum):
    """What a channel message carries."""

    DATA = b"d"
    END_OF_STREAM = b"e"
    WATERMARK = b"w"
    IDLE = b"i"  # the writer has no input for now: leave it out of watermarks until it speaks
    BARRIER = b"b"
    # The upstream operator now has this many writers (a live rescale,
    # spillway.recovery.control.liverescale):
    # written after every earlier writer stopped and before any new one starts, so every
    # message of a retired writer lies before it and every message of a new one after it.
    WIDTH = b"n"


def headers(kind: Kind, version: bytes = VERSION) -> list[tuple[str, bytes]]:
    """The headers of a message of ``kind`` (``version``: the data encoding's)."""
    return [(H_VERSION, version), (H_KIND, kind.value)]


def read_header(raw_headers: Sequence[tuple[str, bytes | None]] | None) -> tuple[Kind, bytes]:
    """Kind and format version of a message; :class:`SchemaMismatchError` unless it is a
    channel message of a version this Spillway reads."""
    version = kind = None
    for name, value in raw_headers or ():
        if name == H_VERSION:
            version = value
        elif name == H_KIND:
            kind = value
    if version not in VERSIONS:
        raise SchemaMismatchError(
            f"message has channel format version {version!r}, this Spillway reads "
            f"{b', '.join(VERSIONS)!r}; upgrade Spillway or check that the topic is a "
            "Spillway channel"
        )
    try:
        return Kind(kind), version
    except ValueError:
        raise SchemaMismatchError(f"unknown channel message kind {kind!r}") from None


def read_kind(raw_headers: Sequence[tuple[str, bytes | None]] | None) -> Kind:
    """The kind of a message (see :func:`read_header`)."""
    return read_header(raw_headers)[0]


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


class BlockCodec(Protocol):
    """How a writer encodes a channel's records: blocks, framed into one message value."""

    @property
    def version(self) -> bytes:
        """The ``spw.v`` of data messages in this encoding."""
        ...

    @property
    def overhead(self) -> int:
        """Bytes a message adds around its blocks."""
        ...

    def encode_block(self, records: Sequence[Any]) -> bytes:
        """One block of ``records``; :class:`SchemaMismatchError` naming a record that does
        not fit."""
        ...

    def frame(self, blocks: Sequence[bytes]) -> bytes:
        """A data message's value made of ``blocks``, in order."""
        ...

    def decode_batch(self, value: bytes) -> list[Any]:
        """All records of a data message in this encoding, in write order."""
        ...


@dataclass(frozen=True)
class RecordCodec:
    """Encodes single records and decodes whole batches with one Avro schema."""

    schema: dict[str, Any]
    version: ClassVar[bytes] = VERSION
    overhead: ClassVar[int] = ARRAY_OVERHEAD

    def __post_init__(self) -> None:
        object.__setattr__(self, "_parsed", parse_schema(self.schema))
        object.__setattr__(self, "_array", parse_schema({"type": "array", "items": self.schema}))

    def frame(self, blocks: Sequence[bytes]) -> bytes:
        """A data message's value: ``blocks`` and the array terminator."""
        return frame_blocks(blocks)

    def encode(self, record: Any) -> bytes:
        """Avro binary of one record; :class:`SchemaMismatchError` if it does not fit the schema."""
        buf = io.BytesIO()
        try:
            schemaless_writer(buf, self._parsed, record)  # type: ignore[attr-defined]
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as e:
            raise SchemaMismatchError(
                f"record {short_repr(record)} does not match schema "
                f"{self.schema.get('name', self.schema)!r}: {describe(self.schema, record) or e}"
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


class ArrowBlockCodec(ArrowCodec):
    """:class:`~spillway.channels.wire.arrowcodec.ArrowCodec` as a channel codec (format version
    2)."""

    version = ARROW_VERSION


def writer_codec(schema: dict[str, Any], codec: Codec) -> BlockCodec:
    """The codec a writer uses for ``schema``: ``"arrow"`` where the schema is flat (see
    :func:`spillway.channels.wire.arrowcodec.arrow_schema`), Avro otherwise; ``"avro"``: always
    Avro."""
    flat = arrow_schema(schema) if codec == "arrow" else None
    return RecordCodec(schema) if flat is None else ArrowBlockCodec(schema, flat)


class Decoders:
    """Decodes a channel's data messages in whichever encoding each message says it has,
    each with the schema it was written with, resolved to the reader's (``schema``).

    ``earlier``: the schemas the channel had in the job's earlier runs, which records
    still in it may have been written with (:mod:`spillway.channels.wire.schemaid`)."""

    def __init__(self, schema: dict[str, Any], earlier: Iterable[dict[str, Any]] = ()) -> None:
        self.schema = schema
        self._avro = RecordCodec(schema)
        self._flat = arrow_schema(schema)
        self._writers = WriterSchemas(schema, earlier)
        self._resolving: dict[bytes, ResolvingDecoder] = {}

    def decode(self, version: bytes, value: bytes, writer: bytes | None = None) -> list[Any]:
        """The records of a data message of format ``version`` (1 or 2: a part, version 3,
        is decoded once its record is reassembled) written with schema id ``writer``
        (None: a message from before schema ids, read with the reader's schema)."""
        if version == PART_VERSION:
            raise SchemaMismatchError(_PART_ALONE)
        if version == VERSION:
            if writer is None or self._writers.is_own(writer):
                return self._avro.decode_batch(value)
            return self.resolver(writer).decode_batch(value)
        return self._decode_arrow(value)

    def resolver(self, writer: bytes) -> ResolvingDecoder:
        """The decoder of Avro messages written with schema id ``writer`` (kept per id);
        :class:`SchemaMismatchError` if the id is not one of the channel's schemas."""
        found = self._resolving.get(writer)
        if found is None:
            found = ResolvingDecoder(self._writers.get(writer), self.schema)
            self._resolving[writer] = found
        return found

    def _decode_arrow(self, value: bytes) -> list[Any]:
        # An Arrow message carries its own schema: the reader's is the fast path; another
        # (an older schema of the channel) is resolved column by column.
        name = self.schema.get("name", "?")
        try:
            stream = pa.ipc.open_stream(value)
            batches = list(stream)
        except (pa.ArrowException, OSError) as e:
            raise SchemaMismatchError(
                f"cannot decode an Arrow batch of {len(value)} bytes for schema {name!r}: {e}"
            ) from e
        out: list[Any] = []
        if self._flat is not None and stream.schema.equals(self._flat):
            for batch in batches:
                out.extend(batch.to_pylist())
            return out
        try:
            for batch in batches:
                out.extend(resolved_rows(batch, self.schema))
        except (pa.ArrowException, ValueError) as e:
            raise SchemaMismatchError(
                f"cannot read an Arrow batch of schema {stream.schema} as schema {name!r}: {e}"
            ) from e
        return out


def decode_data(
    raw_headers: Sequence[tuple[str, bytes | None]] | None,
    value: bytes,
    schema: dict[str, Any],
    earlier: Iterable[dict[str, Any]] = (),
) -> list[Any]:
    """The records of one data message (any encoding), given the channel's schema (and
    its ``earlier`` ones, see :class:`Decoders`).

    For tools and tests that read a channel topic directly; a reader keeps a
    :class:`Decoders` per input instead.
    """
    kind, version = read_header(raw_headers)
    if kind is not Kind.DATA:
        raise SchemaMismatchError(f"not a data message: {kind.name}")
    return Decoders(schema, earlier).decode(version, value, schema_id_of(raw_headers))


_PART_ALONE = (
    "a part of a record that spans messages (format version 3) cannot be decoded alone: "
    "read the channel with spillway.channels.reader.ChannelReader, which reassembles the parts "
    "(spillway.channels.wire.spanning.Assembler)"
)


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
