"""JSON text of an Arrow batch's rows, built column by column (issue 21's Kafka sink).

:func:`json_values` gives, for each row of a flat batch, the bytes that
``channels.jsontext.dumps(row_as_dict)`` gives, without making a dict per row: each
column's values become JSON text with ``pyarrow.compute`` (integers cast, booleans
picked, strings escaped by substring replacement), and the row texts are joined element
by element in key order (``jsontext`` sorts keys). Only floats are written value by
value (by orjson: Arrow's shortest-text formatting differs from orjson's, e.g. ``1e+15``
against ``1000000000000000.0``), never a whole row.

A column of another type (binary, dates, decimals...) makes :func:`json_values` return
``None``: the caller writes the rows as records, where ``jsontext`` decides.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from channels import jsontext

# orjson's escapes: the two-character forms where JSON has them, else \u00XX (lowercase).
_SHORT = {0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"}
_CONTROL = [(chr(c), _SHORT.get(c, f"\\u{c:04x}")) for c in range(0x20)]
_CONTROL_RE = "[\\x00-\\x1f]"


def _string_text(col: pa.Array) -> pa.Array:
    """JSON string literals of a UTF-8 column (nulls stay null)."""
    text = pc.replace_substring(col, "\\", "\\\\")
    text = pc.replace_substring(text, '"', '\\"')
    # Control characters are rare: one regex pass to see, 32 replacements only then.
    if pc.any(pc.match_substring_regex(text, _CONTROL_RE)).as_py():
        for char, escape in _CONTROL:
            text = pc.replace_substring(text, char, escape)
    return pc.binary_join_element_wise('"', text, '"', "")


def _float_text(col: pa.Array) -> pa.Array:
    """orjson's text of each float (float32 widened first, as ``to_pylist`` does)."""
    values = pc.cast(col, pa.float64()).to_pylist()
    dumps = jsontext.dumps
    return pa.array([None if v is None else dumps(v).decode() for v in values], pa.string())


def _value_text(col: pa.Array) -> pa.Array | None:
    """JSON text of each value of ``col`` (``"null"`` for nulls); ``None`` for a type this
    module does not write."""
    typ = col.type
    if pa.types.is_dictionary(typ):
        return _value_text(pc.cast(col, typ.value_type))
    if pa.types.is_integer(typ):
        text = pc.cast(col, pa.string())
    elif pa.types.is_boolean(typ):
        text = pc.if_else(col, "true", "false")
    elif pa.types.is_floating(typ):
        text = _float_text(col)
    elif pa.types.is_string(typ) or pa.types.is_large_string(typ):
        text = _string_text(pc.cast(col, pa.string()))
    else:
        return None
    return pc.fill_null(text, "null") if text.null_count else text


def json_values(batch: pa.RecordBatch) -> list[bytes] | None:
    """Each row of ``batch`` as ``jsontext.dumps`` writes the row's dict (compact, keys
    sorted, UTF-8), or ``None`` if a column's type is not written here (then write the
    rows as records). A batch without columns gives ``b"{}"`` per row."""
    n = int(batch.num_rows)
    if batch.num_columns == 0:
        return [b"{}"] * n
    if n == 0:
        return []
    names = batch.schema.names
    if len(set(names)) != len(names):
        return None  # a dict keeps one of the repeated fields: the records path decides
    parts: list[pa.Array | str] = []
    for i, name in enumerate(sorted(names)):
        text = _value_text(batch.column(name))
        if text is None:
            return None
        prefix = "{" if i == 0 else ","
        parts += [prefix + jsontext.dumps(name).decode() + ":", text]
    parts.append("}")
    joined = pc.binary_join_element_wise(*parts, "")
    values: list[bytes] = pc.cast(joined, pa.binary()).to_pylist()
    return values


def key_values(column: pa.Array) -> list[bytes] | None:
    """``channels.partitioners.key_bytes`` of each value of ``column`` (strings as UTF-8,
    integers as ``b"i<digits>"``, nulls as ``b"None"``), or ``None`` for another type."""
    typ = column.type
    if pa.types.is_dictionary(typ):
        return key_values(pc.cast(column, typ.value_type))
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        text = pc.cast(column, pa.string())
    elif pa.types.is_integer(typ):
        text = pc.binary_join_element_wise("i", pc.cast(column, pa.string()), "")
    else:
        return None
    if text.null_count:
        text = pc.fill_null(text, "None")  # key_bytes(None), as a record's null key
    keys: list[bytes] = pc.cast(text, pa.binary()).to_pylist()
    return keys
