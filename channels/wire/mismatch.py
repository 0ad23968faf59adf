"""Saying precisely why a record does not fit its Avro schema: field, expected type, value.

Codecs report a record that does not fit with the library's own words ("an integer is
required on field user"); :func:`describe` names the field (a path for nested ones), the
type the schema expects and the value found, e.g. ``field 'user' expects long, got 'x'
(str)``. Pure; only called on the error path, so it may walk the record slowly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_PYTHON: dict[str, tuple[type, ...]] = {
    "null": (type(None),),
    "boolean": (bool,),
    "int": (int,),
    "long": (int,),
    "float": (float, int),
    "double": (float, int),
    "string": (str,),
    "bytes": (bytes,),
}
_INT_RANGE = {"int": 2**31, "long": 2**63}


def describe(schema: Any, record: Any) -> str | None:
    """Why ``record`` does not fit record schema ``schema``; ``None`` if no reason is found
    (the codec's own message is then the best there is)."""
    return _check(schema, record, "", {})


def _name(t: Any) -> str:
    if isinstance(t, list):
        return " | ".join(_name(b) for b in t)
    if isinstance(t, dict):
        kind = t.get("type")
        if kind in ("record", "enum", "fixed"):
            return str(t.get("name", kind))
        if kind == "array":
            return f"array<{_name(t.get('items'))}>"
        if kind == "map":
            return f"map<{_name(t.get('values'))}>"
        return _name(kind)
    return str(t)


def _value(v: Any) -> str:
    text = repr(v)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{text} ({type(v).__name__})"


def _check(t: Any, v: Any, path: str, named: dict[str, Any]) -> str | None:
    if isinstance(t, str) and t in named:
        t = named[t]
    if isinstance(t, list):
        rest = [b for b in t if b != "null"]
        if v is not None and len(rest) == 1:  # X | None: say what is wrong inside X
            return _check(rest[0], v, path, named)
        reasons = [_check(b, v, path, named) for b in t]
        if all(r is not None for r in reasons):
            return _wrong(t, v, path)
        return None
    if isinstance(t, dict) and t.get("type") in _PYTHON:
        t = t["type"]
    if isinstance(t, str):
        ok = type(v) in _PYTHON.get(t, (object,)) and not (t != "boolean" and type(v) is bool)
        if ok and t in _INT_RANGE and not -_INT_RANGE[t] <= v < _INT_RANGE[t]:
            return f"{_where(path)} expects {t}, got {_value(v)}: out of range"
        return None if ok else _wrong(t, v, path)
    if not isinstance(t, dict):
        return None
    kind = t.get("type")
    if kind == "record":
        if "name" in t:
            named[t["name"]] = t
        if not isinstance(v, Mapping):
            return _wrong(t, v, path)
        for f in t.get("fields", []):
            sub = f"{path}.{f['name']}" if path else f["name"]
            if f["name"] not in v and "default" not in f:
                return f"{_where(sub)} ({_name(f['type'])}) is missing"
            if f["name"] in v:
                reason = _check(f["type"], v[f["name"]], sub, named)
                if reason:
                    return reason
        return None
    if kind == "array":
        if not isinstance(v, (list, tuple)):
            return _wrong(t, v, path)
        for i, item in enumerate(v):
            reason = _check(t.get("items"), item, f"{path}[{i}]", named)
            if reason:
                return reason
        return None
    if kind == "map":
        if not isinstance(v, Mapping):
            return _wrong(t, v, path)
        for k, item in v.items():
            if not isinstance(k, str):
                return f"{_where(path)} expects string keys, got {_value(k)}"
            reason = _check(t.get("values"), item, f"{path}[{k!r}]", named)
            if reason:
                return reason
        return None
    return None  # enum, fixed, logical types: leave it to the codec's message


def _where(path: str) -> str:
    return f"field {path!r}" if path else "the record"


def _wrong(t: Any, v: Any, path: str) -> str:
    return f"{_where(path)} expects {_name(t)}, got {_value(v)}"
