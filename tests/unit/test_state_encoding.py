"""Keyed state's fast paths give exactly what the general JSON path gives (pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from spillway.channels.ids import TopicPartition
from spillway.recovery.restore.state import ChangelogState, _encode_key, restores_as_itself
from spillway.spark_jobs.operators.operators import _copy

KEYS: list[Any] = [
    "/news/12",
    "",
    'with "quote"',
    "back\\slash",
    "tab\there",
    "del\x7f",
    "é",
    "\u2028",
    7,
    ("a", 1),
    None,
]


@pytest.mark.parametrize("key", KEYS)
def test_key_text_is_the_json_text(key: Any) -> None:
    assert _encode_key(key) == json.dumps(key, separators=(",", ":"), sort_keys=True).encode()


@pytest.mark.parametrize(
    ("value", "flat"),
    [
        (["news", 3], True),
        ({"a": 1, "b": None, "c": 1.5, "d": True}, True),
        (3, True),
        ("x", True),
        ((1, 2), False),  # a tuple restores as a list
        ([[1], 2], False),
        ({1: "a"}, False),  # int keys restore as strings
        ([float("nan")], False),
        (float("inf"), False),
    ],
)
def test_restores_as_itself(value: Any, flat: bool) -> None:
    assert restores_as_itself(value) is flat
    if flat:
        assert json.loads(json.dumps(value)) == value


def test_put_keeps_a_private_copy_with_restored_types() -> None:
    state = ChangelogState(TopicPartition("t", 0))
    acc = ["news", 1]
    state.put("p", acc)
    acc[1] = 99  # the caller's list is not the stored one
    assert state.get("p") == ["news", 1]
    state.put("t", (1, 2))
    assert state.get("t") == [1, 2]  # as a restore would give it
    state.put("d", {"n": [1, {"x": 2}]})
    assert state.get("d") == {"n": [1, {"x": 2}]}


def test_copy_of_an_accumulator_is_independent() -> None:
    for value in (["a", 1], {"a": 1}, [["nested"], 1], {"a": [1]}):
        c = _copy(value)
        assert c == value
        assert c is not value
        if isinstance(c, list):
            c.append("x")
        else:
            c["new"] = 1
        assert c != value
    nested = [["x"], 1]
    c = _copy(nested)
    c[0].append("y")
    assert nested == [["x"], 1]


class _Capture:
    def __init__(self) -> None:
        self.sent: dict[bytes, bytes | None] = {}

    def produce(self, topic: str, partition: int, key: bytes, value: bytes | None) -> None:
        self.sent[key] = value


def test_flush_writes_the_value_each_key_had_at_its_last_put() -> None:
    state = ChangelogState(TopicPartition("t", 0))
    acc = ["news", 1]
    state.put("a", acc)
    acc[1] = 50  # changed after put: not what the changelog gets
    state.put("b", ("x", 2))  # not flat: encoded at put
    state.put("c", {"n": 1})
    state.put("c", {"n": 2})
    state.put("d", 1)
    state.delete("d")
    out = _Capture()
    assert state.flush_to(out) == 4  # type: ignore[arg-type]
    assert out.sent == {
        b'"a"': b'["news",1]',
        b'"b"': b'["x",2]',
        b'"c"': b'{"n":2}',
        b'"d"': None,
    }
    assert state.dirty_count() == 0
