"""The Confluent wire format with Protobuf, by the schema registry: magic byte 0, the schema
id (4 bytes, big-endian), the message indexes (a zigzag varint count, then each index as a
zigzag varint; a lone 0 byte means ``[0]``, the file's first message), then the message's
Protobuf bytes: what confluent-kafka's ``ProtobufSerializer`` writes.

The user names the message by its generated class (``message_type=Click``, as
confluent-kafka's ``ProtobufDeserializer(Click)`` takes it). Its records are
:func:`record_schema`'s: the message's fields in order, scalars as their Avro types
(``uint32``/``fixed32`` as ``long``; ``uint64``/``fixed64`` as ``long`` too, a value
above 2^63−1 being a bad record), enums as their symbols' names (strings), repeated fields
as arrays, maps as maps (keys as text), nested messages as records, nullable (null when
absent). An absent scalar is its proto3 default (0, ``""``, ``false``, the first symbol),
as the generated class gives it.

Reading: :class:`RegistryProtoRecords` (the record path) and :class:`RegistryProtoBatches`
(the batch path, a flat message, Arrow rows of the same records) look each id's schema up
once (a base64 ``FileDescriptorProto``, what the registry serves as ``format=serialized``),
find the message its indexes name, check that the fields it shares (by number) with the
user's message have the same types, and parse the bytes with the user's class (fields the
writer added and the reader lacks are skipped, as Protobuf does). A value with no header,
an id the registry does not know (or of another kind), indexes that name no message, a
message of another shape, or bytes that do not parse as the message is a bad record whose
reason names the id.

Writing: :class:`RegistryProtoWriter` registers the message's file descriptor under a
subject (base64, as ``ProtobufSerializer`` registers it) and frames each record, built
into the message, with its id and the message's indexes.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import pyarrow as pa
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import Descriptor, FieldDescriptor, FileDescriptor
from google.protobuf.descriptor_pool import DescriptorPool
from google.protobuf.message import DecodeError, EncodeError, Message
from google.protobuf.message_factory import GetMessageClass

from spillway.channels.errors import PipelineDefinitionError
from spillway.spark_jobs.connectors.batchavro import AvroRun
from spillway.spark_jobs.connectors.batchregistry import flat_reader, read_one_by_one
from spillway.spark_jobs.connectors.confluentavro import split_header
from spillway.spark_jobs.connectors.registry import (
    RegistryClient,
    RegistryConfig,
    SchemaId,
    SchemaNotFound,
)
from spillway.spark_jobs.connectors.subjectschema import SubjectRegistry, SubjectSchema
from spillway.spark_jobs.modes import SubjectStrategy
from spillway.spark_jobs.records.lines import LineError

MessageType = type[Message]
"""A generated Protobuf message class (``Click``, not ``Click()``)."""

_REASON_CHARS = 300
_LONG_MAX = 2**63 - 1
_T = FieldDescriptor
_AVRO_TYPES = {
    _T.TYPE_DOUBLE: "double",
    _T.TYPE_FLOAT: "float",
    _T.TYPE_INT64: "long",
    _T.TYPE_UINT64: "long",
    _T.TYPE_INT32: "int",
    _T.TYPE_FIXED64: "long",
    _T.TYPE_FIXED32: "long",
    _T.TYPE_BOOL: "boolean",
    _T.TYPE_STRING: "string",
    _T.TYPE_BYTES: "bytes",
    _T.TYPE_UINT32: "long",
    _T.TYPE_SFIXED32: "int",
    _T.TYPE_SFIXED64: "long",
    _T.TYPE_SINT32: "int",
    _T.TYPE_SINT64: "long",
}
_UNSIGNED_64 = (_T.TYPE_UINT64, _T.TYPE_FIXED64)


class ProtoSchemaSource(Protocol):
    """What a Protobuf decoder asks of a registry
    (:class:`~spillway.spark_jobs.connectors.registry.RegistryClient` is one)."""

    def protobuf_schema(self, schema_id: SchemaId) -> str:
        """The Protobuf schema of ``schema_id`` (a base64 ``FileDescriptorProto``);
        ``SchemaNotFound`` if there is none."""
        ...


def message_type_of(value: object, where: str) -> MessageType:
    """``value`` as a generated message class; ``PipelineDefinitionError`` naming
    ``where`` if it is not one (an instance, or anything else)."""
    if isinstance(value, type) and issubclass(value, Message) and hasattr(value, "DESCRIPTOR"):
        return value
    raise PipelineDefinitionError(
        f'{where}: value_format="protobuf" needs message_type=<a generated Protobuf message '
        f"class>, e.g. message_type=Click; got {value!r}"
    )


def record_schema(descriptor: Descriptor) -> dict[str, Any]:
    """The Avro record schema of the records of messages of ``descriptor`` (see the module
    docstring); pure. ``PipelineDefinitionError`` for a message that holds itself (a
    record cannot)."""
    schema: dict[str, Any] = _record(descriptor, set(), ())
    return schema


def _record(descriptor: Descriptor, named: set[str], path: tuple[str, ...]) -> Any:
    name = descriptor.full_name
    if name in path:
        raise PipelineDefinitionError(
            f"the Protobuf message {path[0]} holds itself ({' → '.join([*path, name])}); "
            "a record cannot, so its values cannot be read as records"
        )
    if name in named:
        return name  # an Avro named type is defined once, then referred to by name
    named.add(name)
    fields = [
        {"name": f.name, "type": _field_type(f, named, (*path, name))} for f in descriptor.fields
    ]
    full = name.rsplit(".", 1)
    record = {"type": "record", "name": full[-1], "fields": fields}
    return record if len(full) == 1 else {**record, "namespace": full[0]}


def _field_type(f: FieldDescriptor, named: set[str], path: tuple[str, ...]) -> Any:
    if f.message_type is not None and f.message_type.GetOptions().map_entry:
        value = f.message_type.fields_by_name["value"]
        return {"type": "map", "values": _single_type(value, named, path)}
    one = _single_type(f, named, path)
    if f.is_repeated:
        return {"type": "array", "items": one}
    return ["null", one] if f.message_type is not None else one


def _single_type(f: FieldDescriptor, named: set[str], path: tuple[str, ...]) -> Any:
    if f.message_type is not None:
        return _record(f.message_type, named, path)
    if f.enum_type is not None:
        return "string"
    return _AVRO_TYPES[f.type]


def message_record(message: Message) -> dict[str, Any]:
    """``message`` as a record of :func:`record_schema`; ``LineError`` for a value a record
    cannot hold (an enum number that is no symbol, an unsigned 64-bit value above 2^63−1)."""
    record: dict[str, Any] = {}
    for f in message.DESCRIPTOR.fields:
        value = getattr(message, f.name)
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            item = f.message_type.fields_by_name["value"]
            record[f.name] = {_map_key(k): _value(item, v) for k, v in value.items()}
        elif f.is_repeated:
            record[f.name] = [_value(f, v) for v in value]
        elif f.message_type is not None:
            record[f.name] = message_record(value) if message.HasField(f.name) else None
        else:
            record[f.name] = _value(f, value)
    return record


def _map_key(key: Any) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key)


def _value(f: FieldDescriptor, value: Any) -> Any:
    if f.message_type is not None:
        return message_record(value)
    if f.enum_type is not None:
        symbol = f.enum_type.values_by_number.get(value)
        if symbol is None:
            raise LineError(
                f"field {f.name!r}: {value} is not a symbol of the enum {f.enum_type.full_name}"
            )
        return symbol.name
    if f.type in _UNSIGNED_64 and value > _LONG_MAX:
        raise LineError(f"field {f.name!r}: {value} does not fit a long (its record type)")
    return value


def fill_message(message: Message, record: dict[str, Any]) -> None:
    """Set ``message``'s fields from ``record`` (of :func:`record_schema`; a field the
    record lacks or holds null is left absent); ``ValueError``/``TypeError`` for a value
    the field cannot take."""
    for f in message.DESCRIPTOR.fields:
        value = record.get(f.name)
        if value is None:
            continue
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            key = f.message_type.fields_by_name["key"]
            item = f.message_type.fields_by_name["value"]
            target = getattr(message, f.name)
            for k, v in value.items():
                typed_key = _key_of(key, k)
                if item.message_type is not None:
                    fill_message(target[typed_key], v)
                else:
                    target[typed_key] = _field_value(item, v)
        elif f.is_repeated:
            target = getattr(message, f.name)
            for v in value:
                if f.message_type is not None:
                    fill_message(target.add(), v)
                else:
                    target.append(_field_value(f, v))
        elif f.message_type is not None:
            sub = getattr(message, f.name)
            sub.SetInParent()  # present, even if every field is its default
            fill_message(sub, value)
        else:
            setattr(message, f.name, _field_value(f, value))


def _key_of(f: FieldDescriptor, key: str) -> Any:
    if f.type == _T.TYPE_STRING:
        return key
    if f.type == _T.TYPE_BOOL:
        return key == "true"
    return int(key)


def _field_value(f: FieldDescriptor, value: Any) -> Any:
    if f.enum_type is not None:
        symbol = f.enum_type.values_by_name.get(value)
        if symbol is None:
            raise ValueError(f"{value!r} is not a symbol of the enum {f.enum_type.full_name}")
        return symbol.number
    return value


def message_indexes(descriptor: Descriptor) -> list[int]:
    """Where ``descriptor`` is in its file: its top-level message's index, then each
    nested message's index in the one holding it (the wire format's message indexes)."""
    indexes: list[int] = []
    current = descriptor
    while current.containing_type is not None:
        indexes.append(list(current.containing_type.nested_types).index(current))
        current = current.containing_type
    top = list(current.file.message_types_by_name.values())
    indexes.append(top.index(current))
    return indexes[::-1]


def indexes_bytes(indexes: Sequence[int]) -> bytes:
    """``indexes`` as the wire format writes them: ``[0]`` as the lone byte 0, else the
    count and each index as zigzag varints."""
    if list(indexes) == [0]:
        return b"\x00"
    return b"".join(_varint(_zigzag(n)) for n in (len(indexes), *indexes))


def split_indexes(body: bytes) -> tuple[list[int], bytes]:
    """The message indexes at the start of ``body`` and the message's bytes after them;
    ``ValueError`` if they are cut short or negative."""
    count, at = _read_varint(body, 0)
    if count == 0:
        return [0], body[at:]
    indexes = []
    for _ in range(count):
        index, at = _read_varint(body, at)
        if index < 0:
            raise ValueError(f"a negative message index ({index})")
        indexes.append(index)
    return indexes, body[at:]


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    """The zigzag varint at ``data[at:]`` and the position after it."""
    n = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError("the message indexes are cut short")
        byte = data[at]
        at += 1
        n |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (n >> 1) ^ -(n & 1), at


def proto_subject_name(topic: str, descriptor: Descriptor, strategy: SubjectStrategy) -> str:
    """The value subject of messages of ``descriptor`` written to ``topic``, as
    Confluent's strategies name it (the record name is the message's full name)."""
    if strategy == "topic":
        return f"{topic}-value"
    name = descriptor.full_name
    return name if strategy == "record" else f"{topic}-{name}"


def _files(descriptor: FileDescriptor) -> list[bytes]:
    """The serialized ``FileDescriptorProto`` of ``descriptor`` and of every file it
    imports, imports first (the order a pool takes them in)."""
    out: list[bytes] = []
    for dependency in descriptor.dependencies:
        out += [f for f in _files(dependency) if f not in out]
    return [*out, descriptor.serialized_pb]


class _Portable:
    """A message class that pickles as its descriptors (a class made at run time, not
    importable by name, pickles so too) and is made again where it is unpickled."""

    def __init__(self, message_type: MessageType) -> None:
        self.cls = message_type

    def __getstate__(self) -> dict[str, Any]:
        descriptor = self.cls.DESCRIPTOR
        return {"files": _files(descriptor.file), "name": descriptor.full_name}

    def __setstate__(self, state: dict[str, Any]) -> None:
        pool = DescriptorPool()
        for serialized in state["files"]:
            pool.AddSerializedFile(serialized)
        self.cls = GetMessageClass(pool.FindMessageTypeByName(state["name"]))


class RegistryProtoRecords:
    """The record path's decoder of registry-framed Protobuf values of ``message_type``
    into records of :func:`record_schema`.

    Picklable (the client is made on first use, by ``connect``: a module-level callable,
    :class:`RegistryClient` unless a test fakes it).
    """

    def __init__(
        self,
        message_type: MessageType,
        registry: RegistryConfig,
        connect: Callable[[RegistryConfig], ProtoSchemaSource] = RegistryClient,
    ) -> None:
        self._type = _Portable(message_type)
        self.schema = record_schema(message_type.DESCRIPTOR)
        self.registry, self.connect = registry, connect
        self._client: ProtoSchemaSource | None = None
        self._files: dict[SchemaId, FileDescriptor | str] = {}  # its file, or why none
        self._checked: dict[tuple[SchemaId, tuple[int, ...]], str | None] = {}

    def __getstate__(self) -> dict[str, Any]:
        # The client and the schemas are fetched again where the decoder is unpickled.
        return {**self.__dict__, "_client": None, "_files": {}, "_checked": {}}

    def read(self, value: bytes | None) -> dict[str, Any]:
        """``value`` as a record; ``LineError`` saying why not (naming the schema id)."""
        schema_id, body = split_header(value)
        try:
            indexes, data = split_indexes(body)
        except ValueError as e:
            raise LineError(f"schema id {schema_id}: {e}") from e
        self._check(schema_id, tuple(indexes))
        message = self._type.cls()
        try:
            message.ParseFromString(data)
        except DecodeError as e:
            raise LineError(
                f"schema id {schema_id}: not a Protobuf message "
                f"{message.DESCRIPTOR.full_name}: {str(e)[:_REASON_CHARS]}"
            ) from e
        try:
            return message_record(message)
        except LineError as e:
            raise LineError(f"schema id {schema_id}: {e}") from e

    def _check(self, schema_id: SchemaId, indexes: tuple[int, ...]) -> None:
        """``LineError`` unless the message ``indexes`` name in ``schema_id``'s file is of
        the user's message's shape (cached per id and indexes; an unknown id is asked
        again next time: it may be registered in between)."""
        key = (schema_id, indexes)
        if key not in self._checked:
            schema_file = self._file(schema_id)
            self._checked[key] = _mismatch(schema_file, indexes, self._type.cls.DESCRIPTOR)
        why = self._checked[key]
        if why is not None:
            raise LineError(f"schema id {schema_id}: {why}")

    def _file(self, schema_id: SchemaId) -> FileDescriptor:
        known = self._files.get(schema_id)
        if known is None:
            if self._client is None:
                self._client = self.connect(self.registry)
            try:
                text = self._client.protobuf_schema(schema_id)
            except SchemaNotFound as e:
                raise LineError(f"schema id {schema_id} is not in the schema registry ({e})") from e
            known = self._files[schema_id] = _parse_file(text)
        if isinstance(known, str):
            raise LineError(f"schema id {schema_id}: its Protobuf schema cannot be read: {known}")
        return known


def _parse_file(text: str) -> FileDescriptor | str:
    """The file of ``text`` (a base64 ``FileDescriptorProto``) in a pool of its own, its
    imports taken from the well-known types; else why not."""
    try:
        proto = descriptor_pb2.FileDescriptorProto.FromString(
            base64.b64decode(text.encode("ascii"), validate=True)
        )
    except (binascii.Error, UnicodeEncodeError, DecodeError) as e:
        return (
            "it is not a base64 FileDescriptorProto (the registry's format=serialized; "
            f".proto text is not parsed here): {str(e)[:_REASON_CHARS]}"
        )
    pool = DescriptorPool()
    try:
        for dependency in proto.dependency:
            known = descriptor_pool.Default().FindFileByName(dependency)
            for serialized in _files(known):
                _add_once(pool, serialized)
        pool.Add(proto)
        return pool.FindFileByName(proto.name)
    except (KeyError, TypeError) as e:
        return f"its imports {list(proto.dependency)} cannot be resolved: {e}"


def _add_once(pool: DescriptorPool, serialized: bytes) -> None:
    name = descriptor_pb2.FileDescriptorProto.FromString(serialized).name
    try:
        pool.FindFileByName(name)
    except KeyError:
        pool.AddSerializedFile(serialized)


def _mismatch(
    schema_file: FileDescriptor, indexes: tuple[int, ...], reader: Descriptor
) -> str | None:
    """Why the message at ``indexes`` in ``schema_file`` cannot be read as ``reader``;
    ``None`` if it can (every field number both have is of the same type)."""
    top = list(schema_file.message_types_by_name.values())
    if indexes[0] >= len(top):
        return f"the message indexes {list(indexes)} name no message of its schema"
    writer = top[indexes[0]]
    for i in indexes[1:]:
        if i >= len(writer.nested_types):
            return f"the message indexes {list(indexes)} name no message of its schema"
        writer = writer.nested_types[i]
    return _shape_mismatch(writer, reader, set())


def _shape_mismatch(
    writer: Descriptor, reader: Descriptor, seen: set[tuple[str, str]]
) -> str | None:
    pair = (writer.full_name, reader.full_name)
    if pair in seen:  # a message holding itself: compared once
        return None
    seen.add(pair)
    mine = {f.number: f for f in reader.fields}
    for w in writer.fields:
        r = mine.get(w.number)
        if r is None:
            continue  # a field the reader lacks: Protobuf skips it
        if (w.type, w.is_repeated) != (r.type, r.is_repeated):
            return (
                f"its message {writer.full_name}'s field {w.number} ({w.name}) is not of the "
                f"type of {reader.full_name}'s field {w.number} ({r.name})"
            )
        if w.enum_type is not None and w.enum_type.full_name != r.enum_type.full_name:
            return (
                f"its message {writer.full_name}'s field {w.number} is the enum "
                f"{w.enum_type.full_name}, not {r.enum_type.full_name}"
            )
        if w.message_type is not None:
            why = _shape_mismatch(w.message_type, r.message_type, seen)
            if why is not None:
                return why
    return None


class RegistryProtoBatches:
    """Decodes runs of registry-framed Protobuf values of a flat ``message_type`` into
    Arrow batches of :func:`record_schema`; ``decode`` as :meth:`AvroDecoder.decode
    <spillway.spark_jobs.connectors.batchavro.AvroDecoder.decode>`. Each value is read as
    on the record path, then the run's records become one batch.

    Picklable (as :class:`RegistryProtoRecords`).
    """

    def __init__(
        self,
        message_type: MessageType,
        registry: RegistryConfig,
        connect: Callable[[RegistryConfig], ProtoSchemaSource] = RegistryClient,
    ) -> None:
        self._records = RegistryProtoRecords(message_type, registry, connect)
        self.arrow = flat_reader(self._records.schema)

    def decode(self, values: Sequence[bytes | None]) -> AvroRun:
        """``values`` as one batch, in their order, bad values left out with the reason
        (which names the schema id where there is one); ``RegistryUnavailableError`` if
        the registry cannot be asked about a new id."""
        return read_one_by_one(self._records.read, values, self.arrow)


class RegistryProtoWriter:
    """Frames records as the registry's Protobuf wire format: each record built into a
    ``message_type`` message, behind the id of the message's file registered under
    ``subject`` and the message's indexes.

    :meth:`check` (before the job starts) asks the registry whether the subject's
    compatibility rule admits the file; :meth:`encode` and :meth:`encode_batch` register
    it on first use (:class:`~spillway.spark_jobs.connectors.subjectschema.SubjectSchema`).
    Picklable (the client is made on first use, by ``connect``).
    """

    def __init__(
        self,
        message_type: MessageType,
        registry: RegistryConfig,
        subject: str,
        connect: Callable[[RegistryConfig], SubjectRegistry] = RegistryClient,
    ) -> None:
        descriptor = message_type.DESCRIPTOR
        if descriptor.file.dependencies:
            raise PipelineDefinitionError(
                f"write_kafka: the Protobuf message {descriptor.full_name}'s file imports "
                f"{[d.name for d in descriptor.file.dependencies]}; only a file without "
                "imports is registered here (no schema references)"
            )
        self._type = _Portable(message_type)
        self._indexes = indexes_bytes(message_indexes(descriptor))
        text = base64.b64encode(descriptor.file.serialized_pb).decode("ascii")
        self.target = SubjectSchema(text, "PROTOBUF", registry, subject, connect)

    @property
    def subject(self) -> str:
        """The subject the schema is registered under."""
        return self.target.subject

    def check(self, where: str) -> None:
        """``PipelineDefinitionError`` naming ``where`` if the subject's compatibility
        rule refuses the message's file (the registry's reasons included)."""
        self.target.check(where, f"the Protobuf schema of {self._type.cls.DESCRIPTOR.full_name}")

    def encode(self, record: dict[str, Any]) -> bytes:
        """``record`` as magic byte, schema id, message indexes and the message's bytes;
        ``ValueError`` naming the message if a field cannot take its value."""
        message = self._type.cls()
        try:
            fill_message(message, record)
            data: bytes = message.SerializeToString()
        except (ValueError, TypeError, EncodeError) as e:
            raise ValueError(
                f"a record cannot be written as the Protobuf message "
                f"{message.DESCRIPTOR.full_name}: {e}"
            ) from e
        return self.target.header() + self._indexes + data

    def encode_batch(self, batch: pa.RecordBatch) -> list[bytes]:
        """Each row of ``batch`` as :meth:`encode` writes its dict."""
        return [self.encode(r) for r in batch.to_pylist()]
