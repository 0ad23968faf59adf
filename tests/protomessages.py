"""Protobuf message classes for the registry tests, built from descriptors at import time
(no protoc): an ``Order`` in two versions of ``orders.proto`` (version 2 adds ``note``),
the ``Taxed`` output of the jobs, and a ``Rich`` message of every field kind the records
hold (nested, repeated, map, enum, unsigned)."""

from __future__ import annotations

from google.protobuf import descriptor_pb2
from google.protobuf.descriptor_pool import DescriptorPool
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

F = descriptor_pb2.FieldDescriptorProto


def _field(
    m: descriptor_pb2.DescriptorProto, name: str, number: int, kind: int, **more: object
) -> None:
    label = more.pop("label", F.LABEL_OPTIONAL)
    m.field.add(name=name, number=number, type=kind, label=label, **more)  # type: ignore[arg-type]


def _order_file(version: int) -> descriptor_pb2.FileDescriptorProto:
    """``orders.proto`` of ``version`` (1 or 2): ``shop.Order`` and the enum ``shop.Kind``."""
    fp = descriptor_pb2.FileDescriptorProto(name="orders.proto", package="shop", syntax="proto3")
    kind = fp.enum_type.add(name="Kind")
    for number, symbol in enumerate(["VIEW", "BUY", "RETURN"]):
        kind.value.add(name=symbol, number=number)
    order = fp.message_type.add(name="Order")
    _field(order, "id", 1, F.TYPE_INT64)
    _field(order, "amount", 2, F.TYPE_INT64)
    _field(order, "kind", 3, F.TYPE_ENUM, type_name=".shop.Kind")
    if version == 2:
        _field(order, "note", 4, F.TYPE_STRING)
    taxed = fp.message_type.add(name="Taxed")
    _field(taxed, "id", 1, F.TYPE_INT64)
    _field(taxed, "amount", 2, F.TYPE_INT64)
    _field(taxed, "kind", 3, F.TYPE_ENUM, type_name=".shop.Kind")
    _field(taxed, "note", 4, F.TYPE_STRING)
    _field(taxed, "gross", 5, F.TYPE_INT64)
    return fp


def _rich_file() -> descriptor_pb2.FileDescriptorProto:
    """``rich.proto``: ``lab.Rich`` with a nested ``Rich.Point``, a map and unsigned fields."""
    fp = descriptor_pb2.FileDescriptorProto(name="rich.proto", package="lab", syntax="proto3")
    rich = fp.message_type.add(name="Rich")
    point = rich.nested_type.add(name="Point")
    _field(point, "x", 1, F.TYPE_SINT32)
    _field(point, "y", 2, F.TYPE_DOUBLE)
    entry = rich.nested_type.add(name="CountsEntry")
    entry.options.map_entry = True
    _field(entry, "key", 1, F.TYPE_STRING)
    _field(entry, "value", 2, F.TYPE_UINT32)
    _field(rich, "big", 1, F.TYPE_UINT64)
    _field(rich, "ratio", 2, F.TYPE_FLOAT)
    _field(rich, "ok", 3, F.TYPE_BOOL)
    _field(rich, "raw", 4, F.TYPE_BYTES)
    _field(rich, "at", 5, F.TYPE_MESSAGE, type_name=".lab.Rich.Point")
    _field(rich, "path", 6, F.TYPE_MESSAGE, type_name=".lab.Rich.Point", label=F.LABEL_REPEATED)
    _field(rich, "tags", 7, F.TYPE_STRING, label=F.LABEL_REPEATED)
    _field(
        rich, "counts", 8, F.TYPE_MESSAGE, type_name=".lab.Rich.CountsEntry", label=F.LABEL_REPEATED
    )
    _field(rich, "small", 9, F.TYPE_FIXED32)
    return fp


def message_class(fp: descriptor_pb2.FileDescriptorProto, name: str) -> type[Message]:
    """The class of message ``name`` of ``fp``, in a pool of its own (two versions of a
    file coexist, as in two programs)."""
    pool = DescriptorPool()
    pool.Add(fp)
    return GetMessageClass(pool.FindMessageTypeByName(name))


ORDERS_V1, ORDERS_V2, RICH_FILE = _order_file(1), _order_file(2), _rich_file()
OrderV1 = message_class(ORDERS_V1, "shop.Order")
Order = message_class(ORDERS_V2, "shop.Order")  # the readers' class: version 2
Taxed = message_class(ORDERS_V2, "shop.Taxed")
Rich = message_class(RICH_FILE, "lab.Rich")
