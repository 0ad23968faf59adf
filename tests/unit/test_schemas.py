"""Schemas from Python types, typed records at function edges, mismatch messages. No broker."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NotRequired, Optional, TypedDict

import pyarrow as pa
import pytest

from spillway.channels.errors import PipelineDefinitionError, SchemaMismatchError
from spillway.channels.wire.arrowcodec import arrow_schema
from spillway.channels.wire.envelope import Decoders, frame_blocks, writer_codec
from spillway.channels.wire.mismatch import describe
from spillway.spark_jobs.api.pipeline import Pipeline
from spillway.spark_jobs.api.windowspec import Tumbling
from spillway.spark_jobs.records.records import (
    adapt,
    from_dict,
    output_converter,
    output_schema,
    to_dict,
)
from spillway.spark_jobs.records.schemas import arrow_schema_of, avro_schema


@dataclass
class Click:
    seq: int
    user: int
    url: str
    ts: int


@dataclass(frozen=True)
class PageView:
    page: str
    section: str
    user: int


@dataclass
class Flat:
    b: bool
    i: int
    f: float
    s: str
    raw: bytes
    maybe: int | None
    old_style: Optional[str]  # noqa: UP045 - the typing.Optional spelling must work too


@dataclass
class Inner:
    a: int | None
    tags: list[str]


@dataclass
class Outer:
    name: str
    inner: Inner
    many: list[Inner]
    by: dict[str, Inner]
    maybe: Inner | None
    again: Inner


class Row(TypedDict):
    x: int
    y: NotRequired[str | None]


class BadRow(TypedDict, total=False):
    x: int


@dataclass
class WithDate:
    when: datetime


@dataclass
class WithIntKeys:
    counts: dict[int, str]


@dataclass
class WithUnion:
    either: int | str


@dataclass
class Tree:
    value: int
    children: list[Tree]


W = "operator 'op'"


# -- translation -------------------------------------------------------------------------


def test_a_flat_dataclass_gives_the_avro_record_written_by_hand() -> None:
    assert avro_schema(Click, where=W) == {
        "type": "record",
        "name": "Click",
        "fields": [
            {"name": "seq", "type": "long"},
            {"name": "user", "type": "long"},
            {"name": "url", "type": "string"},
            {"name": "ts", "type": "long"},
        ],
    }


def test_every_primitive_and_optional_maps_as_documented() -> None:
    fields = avro_schema(Flat, where=W)["fields"]
    assert fields == [
        {"name": "b", "type": "boolean"},
        {"name": "i", "type": "long"},
        {"name": "f", "type": "double"},
        {"name": "s", "type": "string"},
        {"name": "raw", "type": "bytes"},
        {"name": "maybe", "type": ["null", "long"], "default": None},
        {"name": "old_style", "type": ["null", "string"], "default": None},
    ]


def test_a_flat_generated_schema_still_travels_as_arrow() -> None:
    flat = arrow_schema(avro_schema(Flat, where=W))
    assert flat == pa.schema(
        [
            pa.field("b", pa.bool_(), nullable=False),
            pa.field("i", pa.int64(), nullable=False),
            pa.field("f", pa.float64(), nullable=False),
            pa.field("s", pa.string(), nullable=False),
            pa.field("raw", pa.binary(), nullable=False),
            pa.field("maybe", pa.int64()),
            pa.field("old_style", pa.string()),
        ]
    )
    codec = writer_codec(avro_schema(Flat, where=W), "arrow")
    assert codec.version == b"2"
    rec = {"b": True, "i": 1, "f": 0.5, "s": "x", "raw": b"\x00", "maybe": None}
    value = codec.frame([codec.encode_block([rec])])
    assert Decoders(avro_schema(Flat, where=W)).decode(b"2", value) == [{**rec, "old_style": None}]


def test_nested_types_become_records_arrays_and_maps_defined_once() -> None:
    schema = avro_schema(Outer, where=W)
    inner = {
        "type": "record",
        "name": "Inner",
        "fields": [
            {"name": "a", "type": ["null", "long"], "default": None},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
        ],
    }
    assert schema["fields"] == [
        {"name": "name", "type": "string"},
        {"name": "inner", "type": inner},
        {"name": "many", "type": {"type": "array", "items": "Inner"}},
        {"name": "by", "type": {"type": "map", "values": "Inner"}},
        {"name": "maybe", "type": ["null", "Inner"], "default": None},
        {"name": "again", "type": "Inner"},
    ]
    assert arrow_schema(schema) is None  # nested: the channel keeps Avro
    codec = writer_codec(schema, "arrow")
    assert codec.version == b"1"
    rec = to_dict(Outer)(
        Outer("n", Inner(1, ["x"]), [Inner(None, [])], {"k": Inner(2, [])}, None, Inner(3, []))
    )
    assert Decoders(schema).decode(b"1", frame_blocks([codec.encode_block([rec])])) == [rec]


def test_a_recursive_dataclass_refers_to_itself_by_name() -> None:
    schema = avro_schema(Tree, where=W)
    assert schema["fields"][1] == {"name": "children", "type": {"type": "array", "items": "Tree"}}
    tree = Tree(1, [Tree(2, []), Tree(3, [Tree(4, [])])])
    as_dict = to_dict(Tree)(tree)
    assert as_dict == {
        "value": 1,
        "children": [
            {"value": 2, "children": []},
            {"value": 3, "children": [{"value": 4, "children": []}]},
        ],
    }
    assert from_dict(Tree)(as_dict) == tree


def test_a_typeddict_maps_like_a_dataclass() -> None:
    assert avro_schema(Row, where=W) == {
        "type": "record",
        "name": "Row",
        "fields": [
            {"name": "x", "type": "long"},
            {"name": "y", "type": ["null", "string"], "default": None},
        ],
    }


def test_a_pyarrow_schema_maps_back_to_what_arrow_schema_reads() -> None:
    arrow = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("name", pa.string()),
            pa.field("score", pa.float32(), nullable=False),
        ]
    )
    avro = avro_schema(arrow, where=W, name="my-op")
    assert avro["name"] == "my_op"
    assert avro["fields"][1] == {"name": "name", "type": ["null", "string"], "default": None}
    assert arrow_schema(avro) == arrow  # the round trip is exact for flat schemas


def test_nested_pyarrow_types_map_to_records_arrays_and_maps() -> None:
    arrow = pa.schema(
        [
            pa.field("p", pa.struct([pa.field("x", pa.int32(), nullable=False)]), nullable=False),
            pa.field("xs", pa.list_(pa.field("item", pa.bool_(), nullable=False)), nullable=False),
            pa.field("m", pa.map_(pa.string(), pa.float64()), nullable=False),
        ]
    )
    avro = avro_schema(arrow, where=W, name="op")
    assert avro["fields"] == [
        {
            "name": "p",
            "type": {"type": "record", "name": "op_p", "fields": [{"name": "x", "type": "int"}]},
        },
        {"name": "xs", "type": {"type": "array", "items": "boolean"}},
        {"name": "m", "type": {"type": "map", "values": ["null", "double"]}},
    ]
    assert arrow_schema_of(avro, where=W) == arrow


def test_an_avro_dict_is_taken_as_it_is() -> None:
    schema = {"type": "record", "name": "X", "fields": [{"name": "a", "type": "int"}]}
    assert avro_schema(schema, where=W) is schema


@pytest.mark.parametrize(
    ("cls", "field", "type_text"),
    [
        (WithDate, "when", "datetime"),
        (WithIntKeys, "counts", "dict[int, str]"),
        (WithUnion, "either", "int | str"),
    ],
)
def test_an_unsupported_field_type_names_class_field_and_type(
    cls: type, field: str, type_text: str
) -> None:
    with pytest.raises(PipelineDefinitionError) as info:
        avro_schema(cls, where=W)
    message = str(info.value)
    assert message.startswith(f"{W}: field {cls.__qualname__}.{field} has type {type_text}")
    assert "no Avro equivalent" in message


def test_a_typeddict_key_that_may_be_absent_must_be_nullable() -> None:
    with pytest.raises(PipelineDefinitionError, match=r"BadRow\.x may be left out .* int \| None"):
        avro_schema(BadRow, where=W)


def test_something_that_is_no_schema_is_a_clear_error() -> None:
    with pytest.raises(PipelineDefinitionError, match="is not an Avro record schema"):
        avro_schema(int, where=W)


def test_unsupported_arrow_types_are_named() -> None:
    with pytest.raises(PipelineDefinitionError, match=r"field op\.t has Arrow type timestamp"):
        avro_schema(pa.schema([("t", pa.timestamp("ms"))]), where=W, name="op")


# -- conversions -------------------------------------------------------------------------


def test_to_dict_is_asdict_without_the_deep_copy_and_from_dict_inverts_it() -> None:
    o = Outer("n", Inner(1, ["x"]), [Inner(None, ["y"])], {"k": Inner(2, [])}, None, Inner(3, []))
    d = to_dict(Outer)(o)
    assert d == dataclasses.asdict(o)
    assert from_dict(Outer)(d) == o
    assert from_dict(Outer)({**d, "maybe": {"a": 5, "tags": []}}).maybe == Inner(5, [])


def test_output_converter_turns_known_dataclasses_into_dicts_and_passes_dicts_on() -> None:
    convert = output_converter([PageView, None], W)
    assert convert is not None
    assert convert(PageView("/a", "a", 1)) == {"page": "/a", "section": "a", "user": 1}
    d = {"page": "/b"}
    assert convert(d) is d
    with pytest.raises(SchemaMismatchError, match=r"operator 'op' returned a Click .* PageView"):
        convert(Click(1, 2, "u", 3))
    assert output_converter([dict, Row, None], W) is None  # nothing to convert


def enrich(c: Click) -> PageView:
    section = c.url.split("/")[3]
    return PageView(page=f"/{section}", section=section, user=c.user)


def untyped(r: dict[str, Any]) -> dict[str, Any]:
    return r


def split(c: Click) -> Iterator[PageView]:
    yield PageView("/a", "a", c.user)
    yield PageView("/b", "b", c.user)


def test_schema_and_conversions_come_from_the_annotations() -> None:
    avro, out = output_schema(None, enrich, W, "op")
    assert avro == avro_schema(PageView, where=W)
    fn = adapt(enrich, (0,), out)
    click = {"seq": 1, "user": 7, "url": "https://x.org/news/1", "ts": 0}
    assert fn(click) == {"page": "/news", "section": "news", "user": 7}
    many, out_many = output_schema(None, split, W, "op", many=True)
    assert many == avro
    assert adapt(split, (0,), out_many, many=True)(click) == [
        {"page": "/a", "section": "a", "user": 7},
        {"page": "/b", "section": "b", "user": 7},
    ]


def test_an_untyped_function_is_not_wrapped() -> None:
    assert adapt(untyped, (0,), None) is untyped
    _, out = output_schema(avro_schema(Click, where=W), untyped, W, "op")
    assert out is None  # dict schema, dict annotation: no per-record work at all
    assert adapt(untyped, (0,), out) is untyped


def test_a_missing_schema_without_annotation_says_what_to_do() -> None:
    with pytest.raises(PipelineDefinitionError) as info:
        output_schema(None, untyped, W, "op")
    assert str(info.value) == (
        "operator 'op' has no schema: pass schema= (an Avro record schema, a dataclass, a "
        "TypedDict or a pyarrow.Schema), or annotate the return type of untyped with a "
        "dataclass or TypedDict"
    )


def make_click(i: int) -> Click:
    return Click(i, i % 3, f"https://x.org/s{i % 2}/p", 1000 + i)


def page_of(v: PageView) -> str:
    return v.page


def count_add(n: int, v: PageView) -> int:
    return n + v.user


@dataclass
class PageCount:
    page: str
    n: int


def count_result(page: str, n: int) -> PageCount:
    return PageCount(page, n)


def test_a_typed_pipeline_plans_with_schemas_from_annotations() -> None:
    p = Pipeline("typed")
    clicks = p.generate("clicks", make=make_click, count=10)
    views = clicks.map("enrich", enrich)
    views.key_by(page_of).aggregate(
        "count", init=lambda: 0, add=count_add, result=count_result
    ).write_jsonl("out", "/tmp/unused")
    plan = p.plan("j")
    assert [e.schema["name"] for e in plan.edges] == ["Click", "PageView", "PageCount"]
    # The generator's records leave as dicts, ready for the channel.
    source = plan.operator("clicks").make_source
    assert source is not None
    assert source().make(4) == {"seq": 4, "user": 1, "url": "https://x.org/s0/p", "ts": 1004}


def test_a_typed_pipeline_without_a_schema_or_annotation_fails_naming_the_operator() -> None:
    p = Pipeline("typed")
    clicks = p.generate("clicks", make=make_click, count=10)
    with pytest.raises(PipelineDefinitionError, match="operator 'enrich' has no schema"):
        clicks.map("enrich", lambda c: c)


# -- mismatch messages -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("record", "why"),
    [
        ({"seq": "1", "user": 1, "url": "u", "ts": 0}, "field 'seq' expects long, got '1' (str)"),
        ({"seq": 1, "user": 1, "ts": 0}, "field 'url' (string) is missing"),
        ({"seq": 2**63, "user": 1, "url": "u", "ts": 0}, "out of range"),
    ],
)
@pytest.mark.parametrize("codec", ["avro", "arrow"])
def test_a_mismatch_names_field_expected_type_and_value(
    record: dict[str, Any], why: str, codec: str
) -> None:
    schema = avro_schema(Click, where=W)
    with pytest.raises(SchemaMismatchError, match=re.escape(why)):
        writer_codec(schema, codec).encode_block([record])


def test_a_nested_mismatch_names_the_path() -> None:
    schema = avro_schema(Outer, where=W)
    rec = to_dict(Outer)(Outer("n", Inner(1, []), [Inner(None, [])], {}, None, Inner(3, [])))
    rec["many"][0]["tags"] = ["ok", 5]
    assert describe(schema, rec) == "field 'many[0].tags[1]' expects string, got 5 (int)"
    rec = {**rec, "many": [], "by": {"k": {"a": "x", "tags": []}}}
    assert describe(schema, rec) == "field \"by['k'].a\" expects long, got 'x' (str)"


# -- every operator of the API, typed -----------------------------------------------------


class DictState:
    def __init__(self) -> None:
        self.d: dict[Any, Any] = {}

    def get(self, key: Any, default: Any = None) -> Any:
        return self.d.get(key, default)

    def put(self, key: Any, value: Any) -> None:
        self.d[key] = value

    def delete(self, key: Any) -> None:
        del self.d[key]

    def items(self) -> Any:
        return list(self.d.items())


@dataclass
class Ctx:
    state: DictState = dataclasses.field(default_factory=DictState)
    watermark: int | None = None


@dataclass
class Word:
    word: str
    n: int


@dataclass
class Window:
    word: str
    start: int
    end: int
    n: int


def words(c: Click) -> Iterator[Word]:
    for w in c.url.split("/"):
        yield Word(w, c.seq)


def long_word(w: Word) -> bool:
    return len(w.word) > 1


def word_of(w: Word) -> str:
    return w.word


def bigger(a: Word, b: Word) -> Word:
    return a if a.n >= b.n else b


def at(w: Word) -> int:
    return w.n


def window_add(n: int, w: Word) -> int:
    return n + 1


def window_result(word: str, start: int, end: int, n: int) -> Window:
    return Window(word, start, end, n)


def logic(p: Pipeline, name: str) -> Any:
    make = p.plan("j").operator(name).make_logic
    assert make is not None
    operator = make()
    operator.open(Ctx())
    return operator


def typed_words() -> Pipeline:
    p = Pipeline("typed")
    clicks = p.read_files("clicks", "/nowhere/*.jsonl", format="jsonl", schema=Click)
    ws = clicks.flat_map("words", words).filter("long", long_word)
    ws.key_by(word_of).reduce("max", bigger).print("a")
    ws.key_by(word_of).window("win", Tumbling(10), event_time=at).aggregate(
        init=lambda: 0, add=window_add, result=window_result
    ).print("b")
    return p


def test_flat_map_filter_reduce_and_windows_take_typed_functions() -> None:
    p = typed_words()
    plan = p.plan("j")
    assert {e.upstream: e.schema["name"] for e in plan.edges} == {
        "clicks": "Click",
        "words": "Word",
        "long": "Word",
        "max": "Word",
        "win": "Window",
    }
    click = {"seq": 3, "user": 1, "url": "a/bb/ccc", "ts": 0}
    assert logic(p, "words").process([click]) == [
        {"word": "a", "n": 3},
        {"word": "bb", "n": 3},
        {"word": "ccc", "n": 3},
    ]
    assert logic(p, "long").process([{"word": "a", "n": 1}, {"word": "bb", "n": 1}]) == [
        {"word": "bb", "n": 1}
    ]
    reduce = logic(p, "max")
    reduce.process([{"word": "x", "n": 1}, {"word": "x", "n": 5}, {"word": "x", "n": 2}])
    assert reduce.on_end() == [{"word": "x", "n": 5}]  # dicts: the accumulator is state
    window = logic(p, "win")
    window.process([{"word": "x", "n": 1}, {"word": "x", "n": 4}, {"word": "x", "n": 12}])
    assert window.on_watermark(10) == [{"word": "x", "start": 0, "end": 10, "n": 2}]


def test_sources_and_sinks_take_types_too() -> None:
    p = Pipeline("typed")
    arrow = pa.schema([pa.field("word", pa.string(), nullable=False), ("n", pa.int64())])
    p.read_kafka("in", "topic", schema=arrow).write_kafka("out", "t2", key=word_of)
    p.read_files("rows", "/x/*.csv", format="csv", schema=Row).print("c")
    plan = p.plan("j")
    assert [e.schema for e in plan.edges] == [
        {
            "type": "record",
            "name": "in",
            "fields": [
                {"name": "word", "type": "string"},
                {"name": "n", "type": ["null", "long"], "default": None},
            ],
        },
        avro_schema(Row, where=W),
    ]
    make = plan.operator("out").make_sink
    assert make is not None
    sink: Any = make()
    assert sink.key({"word": "w", "n": 1}) == "w"  # the key function gets a Word
