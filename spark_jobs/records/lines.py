"""Parsing one line of a JSONL or CSV file into a record, checked against its Avro schema.

Pure functions, no I/O. A line that cannot become a record raises :class:`LineError`
saying what is wrong with it; the file source decides whether that stops the job or
goes to the dead-letter channel. What counts as bad: bytes that are not UTF-8, text
that is not one JSON object (or, in CSV, has another number of columns than the
header), NaN or infinite numbers, and numbers the schema's type cannot hold.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from spillway.channels.wire.jsontext import has_long_digit_run

Record = dict[str, Any]

_INT_RANGE = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}
_FLOAT_MAX = {"float": 3.4028234663852886e38, "double": math.inf}
_INT_TEXT = re.compile(r"[+-]?\d+")
_NUMBER_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_BOOL_TEXT = {"true": True, "false": False, "1": True, "0": False}


class LineError(ValueError):
    """One line cannot become a record; the message says why (not where: the caller knows)."""


@dataclass(frozen=True)
class FieldType:
    """The primitive Avro type of a field (``None``: complex, not checked here) and nullability."""

    name: str
    type: str | None
    nullable: bool


def field_types(schema: Mapping[str, Any] | None) -> dict[str, FieldType]:
    """The checkable fields of an Avro record schema ({} without a schema)."""
    if schema is None:
        return {}
    out = {}
    for f in schema.get("fields", []):
        t = f["type"]
        branches = t if isinstance(t, list) else [t]
        nullable = "null" in branches
        rest = [b for b in branches if b != "null"]
        primitive = rest[0] if len(rest) == 1 and isinstance(rest[0], str) else None
        if primitive not in (*_INT_RANGE, *_FLOAT_MAX, "string", "boolean"):
            primitive = None
        out[f["name"]] = FieldType(f["name"], primitive, nullable)
    return out


def decode(raw: bytes) -> str:
    """``raw`` as UTF-8 text; :class:`LineError` naming the first bad byte."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        bad = raw[e.start : e.start + 1]
        raise LineError(f"invalid UTF-8 at byte {e.start} ({bad!r}): {e.reason}") from None


def parse_jsonl(raw: bytes, fields: Mapping[str, FieldType]) -> Record:
    """One JSONL line as a record; :class:`LineError` if it is not a valid, fitting object."""
    text = decode(raw)
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except LineError:
        raise
    except ValueError as e:  # JSONDecodeError, and int() of a gigantic literal
        raise LineError(f"not JSON: {e}") from None
    if not isinstance(value, dict):
        raise LineError(f"a JSON {type(value).__name__}, not an object")
    for name, v in value.items():
        _check_json_value(name, v, fields.get(name))
    return value


def parse_json_value(raw: bytes | None, fields: Mapping[str, FieldType]) -> Record:
    """A Kafka message value (JSON) as a record; :class:`LineError` if it is empty, not
    UTF-8, not JSON, not an object, or holds NaN, Infinity or an integer out of range.

    Fast path: text orjson reads exactly becomes the record as it is, and the channel
    writer checks field types when it encodes the record (a record that does not fit is
    reported there, with this value's origin). Text orjson refuses, or that holds an
    integer orjson could read inexactly, gets :func:`parse_jsonl`'s full checks.
    """
    if not raw:
        raise LineError("empty value" if raw is not None else "no value (null)")
    if not has_long_digit_run(raw):
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass  # not UTF-8, not JSON, NaN/Infinity: parse_jsonl says which
        else:
            if isinstance(value, dict):
                return value
            raise LineError(f"a JSON {type(value).__name__}, not an object")
    return parse_jsonl(raw, fields)


def parse_csv_header(raw: bytes) -> list[str]:
    """The column names of a CSV header line; :class:`LineError` if it is unusable."""
    names = _csv_cells(raw)
    if len(set(names)) != len(names) or not all(names):
        raise LineError(f"header has empty or repeated column names: {names}")
    return names


def parse_csv(raw: bytes, header: list[str], fields: Mapping[str, FieldType]) -> Record:
    """One CSV line as a record, each cell converted to its field's type.

    Without a schema type, cells that look like integers or decimals become numbers and
    empty cells ``None``, as pyarrow's inference does for a uniform column.
    """
    cells = _csv_cells(raw)
    if len(cells) != len(header):
        raise LineError(f"{len(cells)} columns, the header has {len(header)}")
    pairs = zip(header, cells, strict=True)
    return {name: _convert_cell(name, cell, fields.get(name)) for name, cell in pairs}


def _csv_cells(raw: bytes) -> list[str]:
    text = decode(raw).rstrip("\r\n")
    try:
        rows = list(csv.reader([text], strict=True))
    except csv.Error as e:
        raise LineError(f"not CSV: {e}") from None
    return rows[0] if rows else []


def _reject_constant(name: str) -> Any:
    raise LineError(f"{name} is not a number (JSON has no NaN or Infinity)")


def _check_json_value(name: str, value: Any, ft: FieldType | None) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise LineError(f"field {name!r}: number too big for a 64-bit float")
    if ft is None or ft.type is None:
        if isinstance(value, int) and not isinstance(value, bool):
            _check_range(name, value, "long")
        return
    if value is None:
        if not ft.nullable:
            raise LineError(f"field {name!r} is null but the schema does not allow null")
        return
    if ft.type in _INT_RANGE:
        if isinstance(value, bool) or not isinstance(value, int):
            raise LineError(f"field {name!r} = {_short(value)} is not an integer ({ft.type})")
        _check_range(name, value, ft.type)
    elif ft.type in _FLOAT_MAX:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise LineError(f"field {name!r} = {_short(value)} is not a number ({ft.type})")
        if abs(value) > _FLOAT_MAX[ft.type]:
            raise LineError(f"field {name!r} = {_short(value)} is too big for {ft.type}")
    elif ft.type == "string" and not isinstance(value, str):
        raise LineError(f"field {name!r} = {_short(value)} is not a string")
    elif ft.type == "boolean" and not isinstance(value, bool):
        raise LineError(f"field {name!r} = {_short(value)} is not true or false")


def _check_range(name: str, value: int, avro_type: str) -> None:
    low, high = _INT_RANGE[avro_type]
    if not low <= value <= high:
        raise LineError(f"field {name!r} = {_short(value)} is too big for {avro_type}")


def _convert_cell(name: str, cell: str, ft: FieldType | None) -> Any:
    kind = ft.type if ft is not None else None
    if kind == "string":
        return cell
    if cell == "":
        if ft is not None and not ft.nullable:
            raise LineError(f"field {name!r} is empty but the schema does not allow null")
        return None
    if kind in _INT_RANGE or (kind is None and _INT_TEXT.fullmatch(cell)):
        if not _INT_TEXT.fullmatch(cell):
            raise LineError(f"field {name!r} = {_short(cell)} is not an integer ({kind})")
        value = int(cell)
        _check_range(name, value, kind or "long")
        return value
    if kind in _FLOAT_MAX or (kind is None and _NUMBER_TEXT.fullmatch(cell)):
        try:
            number = float(cell)
        except ValueError:
            raise LineError(f"field {name!r} = {_short(cell)} is not a number ({kind})") from None
        if math.isnan(number):
            raise LineError(f"field {name!r} = {_short(cell)} is not a number")
        if math.isinf(number) and not _NUMBER_TEXT.fullmatch(cell):
            raise LineError(f"field {name!r} = {_short(cell)} is not a finite number")
        if math.isinf(number) or abs(number) > _FLOAT_MAX[kind or "double"]:
            raise LineError(f"field {name!r} = {_short(cell)} is too big for {kind or 'double'}")
        return number
    if kind == "boolean":
        if cell.lower() not in _BOOL_TEXT:
            raise LineError(f"field {name!r} = {_short(cell)} is not true or false")
        return _BOOL_TEXT[cell.lower()]
    return cell


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
