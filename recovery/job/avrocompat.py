"""Can records written with one Avro schema be read with another? (Avro's schema
resolution rules, https://avro.apache.org/docs/current/specification/#schema-resolution).
Pure: no I/O.

:func:`resolution_problems` answers for a channel whose schema changed between two runs
of a job: the old schema is the *writer's* (records already in the channel), the new one
the *reader's*. What resolves: a reader field the writer lacks that has a default, a
writer field the reader dropped, the promotions int → long, float, double; long → float,
double; float → double; string ↔ bytes; a union on either side when every writer branch
resolves; an enum whose new symbols include the old ones (or which has a default).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spillway.channels.wire.resolve import (
    PROMOTIONS,  # the rules readers apply (spillway.channels.wire.resolve)
)

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


def _names(schema: Any, out: dict[str, Any]) -> dict[str, Any]:
    """Every named type (record, enum, fixed) of ``schema`` by its short and full name."""
    if isinstance(schema, list):
        for s in schema:
            _names(s, out)
    elif isinstance(schema, dict):
        t = schema.get("type")
        if t in ("record", "error", "enum", "fixed") and "name" in schema:
            name = str(schema["name"])
            out[name] = schema
            out[name.rsplit(".", 1)[-1]] = schema
            if schema.get("namespace"):
                out[f"{schema['namespace']}.{name}"] = schema
        for f in schema.get("fields", ()):
            _names(f.get("type"), out)
        for key in ("items", "values"):
            if key in schema:
                _names(schema[key], out)
        if isinstance(t, (dict, list)):
            _names(t, out)
    return out


class _Resolver:
    def __init__(self, writer: Any, reader: Any) -> None:
        self.wnames = _names(writer, {})
        self.rnames = _names(reader, {})
        self.seen: set[tuple[str, str]] = set()  # recursive named types checked once

    def _deref(self, s: Any, names: Mapping[str, Any]) -> Any:
        if isinstance(s, str) and s not in PRIMITIVES:
            return names.get(s, names.get(s.rsplit(".", 1)[-1], s))
        if isinstance(s, dict) and not isinstance(s.get("type"), str | None):
            return self._deref(s["type"], names)
        if isinstance(s, dict) and s.get("type") in PRIMITIVES:
            return s["type"]  # a logical type resolves as its underlying type
        return s

    def problems(self, w: Any, r: Any, at: str) -> list[str]:
        """Why a value of writer schema ``w`` cannot be read as ``r`` (``at``: its path)."""
        w, r = self._deref(w, self.wnames), self._deref(r, self.rnames)
        if isinstance(w, list):
            return [p for branch in w for p in self.problems(branch, r, at)]
        if isinstance(r, list):
            for branch in r:
                if not self.problems(w, branch, at):
                    return []
            return [f"{_where(at)}: {_kind(w)} matches no branch of the new union {_kinds(r)}"]
        wt, rt = _kind(w), _kind(r)
        if isinstance(w, str) and isinstance(r, str):
            if w == r or r in PROMOTIONS.get(w, frozenset()):
                return []
            return [f"{_where(at)}: type {w} cannot be read as {r}"]
        if wt != rt:
            return [f"{_where(at)}: type {wt} cannot be read as {rt}"]
        named = wt in ("record", "error", "enum", "fixed")
        if named and _short(w["name"]) != _short(r["name"]):
            return [f"{_where(at)}: named type {w['name']} cannot be read as {r['name']}"]
        if wt in ("record", "error"):
            key = (str(w["name"]), str(r["name"]))
            if key in self.seen:
                return []
            self.seen.add(key)
            return self._record(w, r, at)
        if wt == "enum":
            missing = sorted(set(w.get("symbols", ())) - set(r.get("symbols", ())))
            if missing and "default" not in r:
                return [f"{_where(at)}: enum {r['name']} lost symbols {missing} and has no default"]
            return []
        if wt == "fixed":
            if w.get("size") != r.get("size"):
                return [f"{_where(at)}: fixed {r['name']} size {w.get('size')} -> {r.get('size')}"]
            return []
        if wt == "array":
            return self.problems(w["items"], r["items"], f"{at}[]")
        if wt == "map":
            return self.problems(w["values"], r["values"], f"{at}{{}}")
        return []

    def _record(self, w: Mapping[str, Any], r: Mapping[str, Any], at: str) -> list[str]:
        by_name: dict[str, Mapping[str, Any]] = {}
        for f in w.get("fields", ()):
            by_name[str(f["name"])] = f
        out: list[str] = []
        for f in r.get("fields", ()):
            name = str(f["name"])
            where = f"{at}.{name}" if at else name
            old = next((by_name[a] for a in (name, *f.get("aliases", ())) if a in by_name), None)
            if old is None:
                if "default" not in f:
                    out.append(f"field {where!r} is new and has no default")
                continue
            out += self.problems(old["type"], f["type"], where)
        return out


def _where(at: str) -> str:
    """How a problem names its place: the field's dotted path, or the whole record."""
    return f"field {at!r}" if at else "record"


def _short(name: Any) -> str:
    return str(name).rsplit(".", 1)[-1]


def _kind(s: Any) -> str:
    if isinstance(s, str):
        return s
    if isinstance(s, list):
        return "union"
    return str(s.get("type")) if isinstance(s, dict) else repr(s)


def _kinds(branches: list[Any]) -> str:
    return "[" + ", ".join(_kind(b) for b in branches) + "]"


def resolution_problems(writer: Any, reader: Any) -> list[str]:
    """Why records written with ``writer`` cannot be read with ``reader`` under Avro's
    resolution rules, each naming the field (dotted path); empty: they can."""
    return _Resolver(writer, reader).problems(writer, reader, "")
