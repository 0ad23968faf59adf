"""Typed records at the edges of user functions: dataclass instances in, dicts out.

Channels and sinks carry records as dicts (what fastavro and pyarrow take). The rule:

* **Out.** Where an operator's schema, or its function's return annotation, is a
  dataclass, the function may return instances of it. Each is turned into a dict once,
  as it leaves the function, by a converter compiled per class (:func:`to_dict`: one dict
  literal of attribute reads; ``dataclasses.asdict`` deep-copies and costs ~10x more).
* **In.** A function receives dicts, unless the parameter that takes the record is
  annotated with a dataclass (``def enrich(c: Click) -> PageView``): then it receives an
  instance, built by :func:`from_dict`. So untyped code pays nothing, and typed code pays
  one conversion per record and direction, only where it asked for instances.
* ``TypedDict`` records are dicts already and are never converted.

Key functions follow the same rule (they see dicts unless annotated), so ``key_by(lambda
v: v["page"])`` works on any stream.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from typing import Any

from spillway.channels.errors import PipelineDefinitionError, SchemaMismatchError
from spillway.spark_jobs.records.schemas import avro_schema, hints, is_record_type

_Cache = dict[tuple[type, str], Callable[[Any], Any]]
_CACHE: _Cache = {}


def to_dict(cls: type) -> Callable[[Any], dict[str, Any]]:
    """The compiled converter from an instance of dataclass ``cls`` to its record dict
    (nested dataclasses, their lists, maps and ``None`` included)."""
    fn: Callable[[Any], dict[str, Any]] = _compile(cls, "w", _CACHE)
    return fn


def from_dict(cls: type) -> Callable[[dict[str, Any]], Any]:
    """The compiled converter from a record dict to an instance of dataclass ``cls``."""
    fn: Callable[[dict[str, Any]], Any] = _compile(cls, "r", _CACHE)
    return fn


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _needs_conversion(tp: Any) -> bool:
    """Whether values of ``tp`` hold dataclass instances (or, reading, must)."""
    return _is_dataclass_type(tp) or any(_needs_conversion(a) for a in typing.get_args(tp))


def _compile(cls: type, kind: str, cache: _Cache) -> Callable[[Any], Any]:
    """``kind`` "w": instance → dict; "r": dict → instance. Compiled once per class: one
    dict literal (or constructor call) of the fields, so a record costs a few attribute
    reads, not a generic walk."""
    key = (cls, kind)
    if key in cache:
        return cache[key]
    env: dict[str, Any] = {"_cls": cls}
    types_of = hints(cls, f"dataclass {cls.__qualname__}")
    parts = []
    for f in dataclasses.fields(cls):
        src = f"o.{f.name}" if kind == "w" else f"o[{f.name!r}]"
        parts.append((f.name, _expr(types_of[f.name], src, kind, env, cache, 0)))
    if kind == "w":
        body = "{" + ", ".join(f"{n!r}: {e}" for n, e in parts) + "}"
    else:
        body = "_cls(" + ", ".join(f"{n}={e}" for n, e in parts) + ")"
    # The source is built from field names, which are Python identifiers: nothing of a
    # record's data ever reaches exec.
    exec(f"def convert(o):\n    return {body}\n", env)
    fn: Callable[[Any], Any] = env["convert"]
    cache[key] = fn
    return fn


def _expr(tp: Any, src: str, kind: str, env: dict[str, Any], cache: _Cache, depth: int) -> str:
    """The expression converting ``src`` (of type ``tp``)."""
    if not _needs_conversion(tp):
        return src
    if _is_dataclass_type(tp):
        name = f"_c{len(env)}"
        env[name] = _Lazy(tp, kind, cache)  # looked up on first call: allows recursive types
        return f"{name}({src})"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    v = f"v{depth}"
    if origin in (typing.Union, types.UnionType):
        inner = next(a for a in args if a is not type(None))
        return f"(None if {src} is None else {_expr(inner, src, kind, env, cache, depth)})"
    if origin is list:
        return f"[{_expr(args[0], v, kind, env, cache, depth + 1)} for {v} in {src}]"
    k, inner = f"k{depth}", _expr(args[1], v, kind, env, cache, depth + 1)  # dict[str, X]
    return f"{{{k}: {inner} for {k}, {v} in {src}.items()}}"


class _Lazy:
    """The converter of a nested class, compiled on its first call."""

    def __init__(self, cls: type, kind: str, cache: _Cache) -> None:
        self.cls, self.kind, self.cache = cls, kind, cache
        self.fn: Callable[[Any], Any] | None = None

    def __call__(self, value: Any) -> Any:
        if self.fn is None:
            self.fn = _compile(self.cls, self.kind, self.cache)
        return self.fn(value)


def output_converter(classes: Iterable[Any], where: str) -> Callable[[Any], Any] | None:
    """A function turning an instance of one of the dataclasses among ``classes`` into a
    dict and passing anything else on as it is; ``None`` when there is no dataclass.

    An instance of any other dataclass raises :class:`SchemaMismatchError` naming ``where``.
    """
    table = {c: to_dict(c) for c in classes if _is_dataclass_type(c)}
    if not table:
        return None
    expected = " or ".join(sorted({c.__name__ for c in table}))

    def convert(record: Any) -> Any:
        fn = table.get(type(record))
        if fn is not None:
            return fn(record)
        if type(record) is not dict and dataclasses.is_dataclass(record):
            raise SchemaMismatchError(
                f"{where} returned a {type(record).__name__} ({record!r:.120}); expected a "
                f"{expected} or a dict"
            )
        return record

    return convert


# -- annotations of user functions -----------------------------------------------------


def _annotations(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # lambdas, partials, builtins: no annotations we can resolve
        return {}


def returned_type(fn: Callable[..., Any], *, many: bool = False) -> Any:
    """The return annotation of ``fn`` (with ``many``, its element type: ``X`` of
    ``Iterable[X]``, ``Iterator[X]``, ``list[X]``, ``Sequence[X]``, ``Generator[X, ...]``);
    ``None`` when there is none."""
    tp = _annotations(fn).get("return")
    if not many:
        return tp
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (list, Iterable, Iterator, Sequence, Generator) and args:
        return args[0]
    return None


def record_parameter(fn: Callable[..., Any], position: int) -> Any:
    """The annotation of ``fn``'s parameter number ``position`` if it is a dataclass."""
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):  # some callables have no signature
        return None
    if position >= len(params):
        return None
    tp = _annotations(fn).get(params[position])
    return tp if _is_dataclass_type(tp) else None


def output_schema(
    spec: Any, fn: Callable[..., Any], where: str, name: str, *, many: bool = False
) -> tuple[dict[str, Any], Callable[[Any], Any] | None]:
    """The Avro schema of what ``fn`` returns — ``spec``, or ``fn``'s return annotation if
    ``spec`` is ``None`` — and the converter for dataclass instances ``fn`` may return."""
    returned = returned_type(fn, many=many)
    if spec is None:
        if not is_record_type(returned):
            fname = getattr(fn, "__qualname__", repr(fn))
            raise PipelineDefinitionError(
                f"{where} has no schema: pass schema= (an Avro record schema, a dataclass, a "
                f"TypedDict or a pyarrow.Schema), or annotate the return type of {fname} "
                f"with a dataclass or TypedDict{' (e.g. -> Iterator[MyRecord])' if many else ''}"
            )
        spec = returned
    return avro_schema(spec, where=where, name=name), output_converter((spec, returned), where)


def adapt(
    fn: Callable[..., Any],
    records: Sequence[int] = (0,),
    out: Callable[[Any], Any] | None = None,
    *,
    many: bool = False,
) -> Callable[..., Any]:
    """``fn`` with its record parameters (by position) built as the dataclasses they are
    annotated with, and its result (each element of it, with ``many``) passed through
    ``out``. Returns ``fn`` itself when there is nothing to convert."""
    ins = [(i, from_dict(cls)) for i in records if (cls := record_parameter(fn, i)) is not None]
    if not ins and out is None:
        return fn
    if ins == [] and not many:
        assert out is not None
        o = out
        return lambda *a: o(fn(*a))
    if len(ins) == 1 and ins[0][0] == 0 and out is None and not many:
        c = ins[0][1]
        return lambda r, *a: fn(c(r), *a)

    def typed(*args: Any) -> Any:
        if ins:
            args_ = list(args)
            for i, c in ins:
                args_[i] = c(args_[i])
            args = tuple(args_)
        result = fn(*args)
        if out is None:
            return result
        return [out(r) for r in result] if many else out(result)

    return typed
