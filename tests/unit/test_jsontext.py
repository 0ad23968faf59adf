"""spillway.channels.wire.jsontext: the sinks' JSON text, checked against the standard library."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from spillway.channels.wire import jsontext

_STDLIB = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode


@pytest.mark.parametrize(
    "value",
    [
        {"page": "/news/1", "section": "news", "views": 3},
        {"b": [1, 2.5, None, True, False], "a": {"z": "é€😀", "y": -(2**63)}},
        {"nested": {"c": 1, "a": {"y": 2, "x": [{"q": 1, "p": 2}]}}},
        [],
        'plain "quoted" \\ text\n',
        0.1,
        2**63 - 1,
    ],
)
def test_same_text_as_the_stdlib_for_ordinary_records(value: Any) -> None:
    assert jsontext.dumps(value) == _STDLIB(value).encode()


def test_integers_beyond_64_bits_are_written_exactly() -> None:
    big = {"n": 2**70, "m": -(2**65)}
    assert jsontext.dumps(big) == b'{"m":-36893488147419103232,"n":1180591620717411303424}'
    assert json.loads(jsontext.dumps(big)) == big


def test_non_finite_floats_become_null_not_invalid_json() -> None:
    out = jsontext.dumps({"a": math.nan, "b": math.inf, "c": -math.inf})
    assert out == b'{"a":null,"b":null,"c":null}'
    json.loads(out, parse_constant=lambda c: pytest.fail(f"invalid JSON constant {c}"))


def test_a_value_json_cannot_write_names_its_type() -> None:
    with pytest.raises(TypeError, match="set"):
        jsontext.dumps({"a": {1, 2}})


@pytest.mark.parametrize(
    "text",
    [
        b'{"seq":1,"url":"https://example.com/a?b=1","agent":"\\u00e9"}',
        b'{"big": 123456789012345678901234567890}',
        b'{"x": NaN, "y": -Infinity}',
        b"null",
        '{"s":"é€😀"}'.encode(),
    ],
)
def test_loads_reads_what_the_stdlib_reads(text: bytes) -> None:
    got, want = jsontext.loads(text), json.loads(text.decode())
    assert repr(got) == repr(want)  # repr: NaN != NaN


@pytest.mark.parametrize("text", [b"{", b"not json", b'{"a": 1} trailing', b'"\xff\xfe"'])
def test_loads_rejects_what_is_not_json_with_a_value_error(text: bytes) -> None:
    with pytest.raises(ValueError, match=r"(?i)expecting|extra data|utf-8|codec"):
        jsontext.loads(text)


@pytest.mark.parametrize(
    "n", [2**63 - 1, -(2**63), 2**64 - 1, 2**64, -(2**63) - 1, 10**19, -(10**19)]
)
def test_loads_keeps_integers_at_and_beyond_64_bits_exact(n: int) -> None:
    assert jsontext.loads(f'{{"n": {n}, "l": [{n}]}}'.encode()) == {"n": n, "l": [n]}


def test_a_lone_surrogate_is_written_escaped() -> None:
    value = jsontext.loads(b'{"name":"\\ud83d"}')
    assert jsontext.dumps(value) == b'{"name":"\\ud83d"}'
    assert jsontext.loads(jsontext.dumps(value)) == value
