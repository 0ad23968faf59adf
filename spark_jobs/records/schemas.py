"""Record schemas from Python types (and Avro schemas as Arrow schemas, for columnar sinks).

Every place of the pipeline API that takes a schema accepts an Avro record schema (a
dict), a dataclass, a ``TypedDict`` or a ``pyarrow.Schema``. :func:`avro_schema` turns
each into the Avro record schema the channels use; the translation is pure::

    int → long      float → double     str → string     bool → boolean    bytes → bytes
    X | None → ["null", X] with default None (on a field)
    list[X] → array     dict[str, X] → map     a nested dataclass or TypedDict → record

Anything else is a :class:`PipelineDefinitionError` naming the class, the field and the
type. A flat result (primitive fields, nullable or not) still travels as Arrow: see
:func:`spillway.channels.wire.arrowcodec.arrow_schema`.

How records of these types become dicts and back: :mod:`spillway.spark_jobs.records.records`.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from spillway.channels.errors import PipelineDefinitionError

_PRIMITIVES: dict[Any, str] = {
    int: "long",
    float: "double",
    str: "string",
    bool: "boolean",
    bytes: "bytes",
}
_SUPPORTED = (
    "int, float, str, bool, bytes, X | None, list[X], dict[str, X] or a nested dataclass "
    "or TypedDict"
)


def is_record_type(tp: Any) -> bool:
    """True for a dataclass class or a ``TypedDict`` class."""
    return isinstance(tp, type) and (dataclasses.is_dataclass(tp) or typing.is_typeddict(tp))


def avro_schema(spec: Any, *, where: str, name: str | None = None) -> dict[str, Any]:
    """The Avro record schema of ``spec``: an Avro dict (returned as it is), a dataclass,
    a ``TypedDict`` or a ``pyarrow.Schema`` (whose record is called ``name``).

    ``where`` names the place that asked (e.g. ``operator 'enrich'``) in errors.
    """
    if isinstance(spec, dict):
        return spec
    if isinstance(spec, pa.Schema):
        return _from_arrow(spec, avro_name(name or "Record"), where)
    if is_record_type(spec):
        return typing.cast(dict[str, Any], _record(spec, where, {}))
    raise PipelineDefinitionError(
        f"{where}: schema {spec!r} is not an Avro record schema (dict), a dataclass, a "
        "TypedDict or a pyarrow.Schema"
    )


def hints(cls: type, where: str) -> dict[str, Any]:
    """The resolved field annotations of ``cls``; a clear error if one cannot be resolved."""
    try:
        return typing.get_type_hints(cls)
    except Exception as e:  # NameError for an unresolvable forward reference, and others
        raise PipelineDefinitionError(
            f"{where}: cannot resolve the annotations of {cls.__qualname__} ({e}); define it "
            "at module level, with every type it names importable there"
        ) from e


def _fields(cls: type, where: str) -> list[tuple[str, Any, bool]]:
    """(name, type, may be absent) of each field of a record type, in order."""
    annotated = hints(cls, where)
    if typing.is_typeddict(cls):
        optional: frozenset[str] = getattr(cls, "__optional_keys__", frozenset())
        return [(n, t, n in optional) for n, t in annotated.items()]
    out = []
    for f in dataclasses.fields(cls):
        if not f.init:
            raise PipelineDefinitionError(
                f"{where}: field {cls.__qualname__}.{f.name} has init=False, so a record "
                "cannot be turned back into the dataclass; make it an init field"
            )
        out.append((f.name, annotated[f.name], False))
    return out


def _record(cls: type, where: str, named: dict[str, type]) -> Any:
    """The record schema of ``cls``, or its name if it was defined earlier in this schema
    (Avro forbids defining a named type twice)."""
    name = cls.__name__
    if name in named:
        if named[name] is not cls:
            raise PipelineDefinitionError(
                f"{where}: two different classes are both called {name!r} in one schema "
                f"({named[name].__module__} and {cls.__module__}); rename one"
            )
        return name
    named[name] = cls
    fields = []
    for fname, tp, may_be_absent in _fields(cls, where):
        avro = _avro_type(tp, cls, fname, where, named)
        field: dict[str, Any] = {"name": fname, "type": avro}
        if isinstance(avro, list):  # X | None: a missing value is None
            field["default"] = None
        elif may_be_absent:
            raise PipelineDefinitionError(
                f"{where}: field {cls.__qualname__}.{fname} may be left out (NotRequired or "
                f"total=False) but its type {_type_name(tp)} is not nullable; make it "
                f"{_type_name(tp)} | None"
            )
        fields.append(field)
    return {"type": "record", "name": name, "fields": fields}


def _avro_type(tp: Any, cls: type, field: str, where: str, named: dict[str, type]) -> Any:
    if tp in _PRIMITIVES:
        return _PRIMITIVES[tp]
    if is_record_type(tp):
        return _record(tp, where, named)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(args) == 2 and len(rest) == 1:
            inner = _avro_type(rest[0], cls, field, where, named)
            if not isinstance(inner, list):
                return ["null", inner]
    elif origin is list and len(args) == 1:
        return {"type": "array", "items": _avro_type(args[0], cls, field, where, named)}
    elif origin is dict and len(args) == 2 and args[0] is str:
        return {"type": "map", "values": _avro_type(args[1], cls, field, where, named)}
    raise PipelineDefinitionError(
        f"{where}: field {cls.__qualname__}.{field} has type {_type_name(tp)}, which has no "
        f"Avro equivalent; use {_SUPPORTED}"
    )


def _type_name(tp: Any) -> str:
    return tp.__name__ if isinstance(tp, type) and not typing.get_args(tp) else repr(tp)


# -- pyarrow.Schema → Avro -------------------------------------------------------------

_ARROW_PRIMITIVES: list[tuple[Callable[[pa.DataType], bool], str]] = [
    (pa.types.is_boolean, "boolean"),
    (pa.types.is_int32, "int"),
    (pa.types.is_int64, "long"),
    (pa.types.is_float32, "float"),
    (pa.types.is_float64, "double"),
    (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t), "string"),
    (lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t), "bytes"),
]


def _from_arrow(schema: pa.Schema | pa.StructType, name: str, where: str) -> dict[str, Any]:
    fields = []
    for f in schema:
        avro = _from_arrow_type(f.type, f"{name}_{f.name}", f"{name}.{f.name}", where)
        if f.nullable:
            fields.append({"name": f.name, "type": ["null", avro], "default": None})
        else:
            fields.append({"name": f.name, "type": avro})
    return {"type": "record", "name": name, "fields": fields}


def _from_arrow_type(t: pa.DataType, name: str, field: str, where: str) -> Any:
    for test, avro in _ARROW_PRIMITIVES:
        if test(t):
            return avro
    if pa.types.is_struct(t):
        return _from_arrow(t, avro_name(name), where)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        items = _from_arrow_type(t.value_type, name + "_item", field + "[]", where)
        return {"type": "array", "items": _nullable(items, t.value_field.nullable)}
    if pa.types.is_map(t) and pa.types.is_string(t.key_type):
        values = _from_arrow_type(t.item_type, name + "_value", field + "{}", where)
        return {"type": "map", "values": _nullable(values, t.item_field.nullable)}
    raise PipelineDefinitionError(
        f"{where}: field {field} has Arrow type {t}, which has no Avro equivalent; use bool, "
        "int32, int64, float32, float64, string, binary, struct, list or map<string, X>"
    )


def _nullable(avro: Any, nullable: bool) -> Any:
    return ["null", avro] if nullable else avro


def avro_name(text: str) -> str:
    """``text`` as a valid Avro name ([A-Za-z_][A-Za-z0-9_]*)."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", text)
    return name if name and not name[0].isdigit() else "_" + name


# -- Avro → Arrow (for columnar sinks) -----------------------------------------------------

_AVRO_TO_ARROW: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "bytes": pa.binary(),
}


def arrow_schema_of(avro: dict[str, Any], *, where: str) -> pa.Schema:
    """The Arrow schema of an Avro record schema, nested types included (records become
    structs, arrays lists, maps ``map<string, X>``; ``["null", X]`` a nullable field)."""
    named: dict[str, pa.DataType] = {}
    return pa.schema(_arrow_fields(avro, named, where))


def _arrow_fields(record: dict[str, Any], named: dict[str, Any], where: str) -> list[pa.Field]:
    out = []
    for f in record.get("fields", []):
        t, nullable = _arrow_type(f["type"], f["name"], named, where)
        out.append(pa.field(f["name"], t, nullable=nullable))
    return out


def _arrow_type(avro: Any, field: str, named: dict[str, Any], where: str) -> tuple[Any, bool]:
    if isinstance(avro, list):
        rest = [b for b in avro if b != "null"]
        if len(rest) == 1 and len(avro) == 2:
            return _arrow_type(rest[0], field, named, where)[0], True
    elif isinstance(avro, str) and avro in _AVRO_TO_ARROW:
        return _AVRO_TO_ARROW[avro], False
    elif isinstance(avro, str) and avro in named:
        return named[avro], False
    elif isinstance(avro, dict):
        kind = avro.get("type")
        if kind == "record":
            t = pa.struct(_arrow_fields(avro, named, where))
            named[avro["name"]] = t
            return t, False
        if kind == "array":
            items, nullable = _arrow_type(avro["items"], field, named, where)
            return pa.list_(pa.field("item", items, nullable=nullable)), False
        if kind == "map":
            values, nullable = _arrow_type(avro["values"], field, named, where)
            return pa.map_(pa.string(), pa.field("value", values, nullable=nullable)), False
        if set(avro) == {"type"}:
            return _arrow_type(kind, field, named, where)
    raise PipelineDefinitionError(
        f"{where}: field {field!r} has Avro type {avro!r}, which has no Arrow equivalent here "
        '(use primitives, records, arrays, maps and ["null", X] unions)'
    )


def parquet_schemas(
    spec: Any, upstream: dict[str, Any] | None, where: str, name: str
) -> tuple[pa.Schema, dict[str, Any] | None]:
    """(Arrow schema, Avro schema if any) of a columnar sink: a ``pyarrow.Schema`` is taken
    as it is; any other ``spec`` is translated; without one, the upstream's schema."""
    if isinstance(spec, pa.Schema):
        return spec, None
    avro = avro_schema(spec, where=where, name=name) if spec is not None else upstream
    if avro is None:
        raise PipelineDefinitionError(f"{where}: its input has no schema; pass schema=")
    return arrow_schema_of(avro, where=where), avro
