"""JSON text of an Arrow batch's rows, built column by column (the columnar Kafka sink).

:func:`json_values` gives, for each row of a flat batch, the bytes that
``spillway.channels.wire.jsontext.dumps(row_as_dict)`` gives, without making a dict per row: each
column's values become JSON text with ``pyarrow.compute`` (integers cast, booleans
picked, strings escaped by substring replacement), and the row texts are joined element
by element in key order (``jsontext`` sorts keys). A string column with nothing to escape
and no null (the usual case, checked over its bytes) goes into that join as it is, its
quotes part of the join's separators: half the cost per row of escaping and quoting it.
Only floats are written value by value (by orjson: Arrow's shortest-text formatting
differs from orjson's, e.g. ``1e+15`` against ``1000000000000000.0``), never a whole row.

A column of another type (binary, dates, decimals...) makes :func:`json_values` return
``None``: the caller writes the rows as records, where ``jsontext`` decides.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from spillway.channels.wire import jsontext

# orjson's escapes: the two-character forms where JSON has them, else \u00XX (lowercase).
_SHORT = {0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"}
_CONTROL = [(chr(c), _SHORT.get(c, f"\\u{c:04x}")) for c in range(0x20)]
_CONTROL_RE = "[\\x00-\\x1f]"


def _plain(col: pa.Array) -> bool:
    """True if ``col`` (UTF-8, ``string`` type) has no null and no character JSON escapes
    (quote, backslash, control characters): its values go between quotes as they are.

    Looks at the bytes the values span as one ``uint8`` array (three passes over bytes, no
    per-value work): cheaper than the regex that finds control characters."""
    if col.null_count:
        return False
    _, offsets, data = col.buffers()
    ends = pa.Array.from_buffers(pa.int32(), len(col) + 1, [None, offsets], offset=col.offset)
    start, end = ends[0].as_py(), ends[-1].as_py()
    if data is None or end == start:
        return True
    raw = pa.Array.from_buffers(pa.uint8(), end - start, [None, data], offset=start)
    if pc.min(raw).as_py() < 0x20:
        return False
    quote, backslash = pc.any(pc.equal(raw, ord('"'))), pc.any(pc.equal(raw, ord("\\")))
    return not (quote.as_py() or backslash.as_py())


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


def _value_text(col: pa.Array) -> tuple[pa.Array, bool] | None:
    """JSON text of each value of ``col`` (``"null"`` for nulls) and whether it still needs
    its quotes around it (plain strings: the row's join adds them, one pass less);
    ``None`` for a type this module does not write."""
    typ = col.type
    if pa.types.is_dictionary(typ):
        return _value_text(pc.cast(col, typ.value_type))
    if pa.types.is_string(typ) and _plain(col):
        return col, True
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
    return (pc.fill_null(text, "null") if text.null_count else text), False


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
    close = ""  # the quote that ends the previous value, if the join adds its quotes
    for i, name in enumerate(sorted(names)):
        value = _value_text(batch.column(name))
        if value is None:
            return None
        text, quoted = value
        key = jsontext.dumps(name).decode()
        parts += [close + ("{" if i == 0 else ",") + key + ":" + ('"' if quoted else ""), text]
        close = '"' if quoted else ""
    parts.append(close + "}")
    joined = pc.binary_join_element_wise(*parts, "")
    values: list[bytes] = pc.cast(joined, pa.binary()).to_pylist()
    return values


def key_values(column: pa.Array) -> list[bytes] | None:
    """``spillway.channels.routing.partitioners.key_bytes`` of each value of ``column`` (strings as
    UTF-8,
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
