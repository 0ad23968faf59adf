"""Parsing JSONL and CSV lines against a schema, and the file source's bad-line bookkeeping."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from spillway.spark_jobs.connectors.sources import FileSource
from spillway.spark_jobs.records.lines import (
    LineError,
    field_types,
    parse_csv,
    parse_csv_header,
    parse_jsonl,
)
from tests.unit.connectorfakes import ctx

SCHEMA = {
    "type": "record",
    "name": "R",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "small", "type": "int"},
        {"name": "x", "type": "double"},
        {"name": "f", "type": "float"},
        {"name": "name", "type": "string"},
        {"name": "note", "type": ["null", "string"]},
        {"name": "ok", "type": "boolean"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}
FIELDS = field_types(SCHEMA)
GOOD: dict[str, Any] = {
    "id": 2**63 - 1,
    "small": -(2**31),
    "x": 1.5e300,
    "f": 3.0e38,
    "name": "ü",
    "note": None,
    "ok": True,
    "tags": ["a"],
}


def test_field_types_of_primitives_unions_and_complex_fields() -> None:
    assert (FIELDS["note"].type, FIELDS["note"].nullable) == ("string", True)
    assert (FIELDS["id"].type, FIELDS["id"].nullable) == ("long", False)
    assert FIELDS["tags"].type is None  # complex: left to the channel's Avro encoder
    assert field_types(None) == {}


def test_a_good_json_line_is_its_object() -> None:
    assert parse_jsonl(json.dumps(GOOD).encode(), FIELDS) == GOOD


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b'{"id": 1, "name": "\xff"}', "invalid UTF-8 at byte 19 (b'\\xff')"),
        (b'{"id": 1,', "not JSON: Expecting property name"),
        (b"[1, 2]", "a JSON list, not an object"),
        (b'{"x": NaN}', "NaN is not a number (JSON has no NaN or Infinity)"),
        (b'{"x": -Infinity}', "-Infinity is not a number"),
        (b'{"x": 1e400}', "field 'x': number too big for a 64-bit float"),
        (b'{"f": 1e39}', "field 'f' = 1e+39 is too big for float"),
        (b'{"id": 9223372036854775808}', "field 'id' = 9223372036854775808 is too big for long"),
        (b'{"small": 2147483648}', "field 'small' = 2147483648 is too big for int"),
        (b'{"id": "7"}', "field 'id' = '7' is not an integer (long)"),
        (b'{"id": true}', "field 'id' = True is not an integer (long)"),
        (b'{"id": null}', "field 'id' is null but the schema does not allow null"),
        (b'{"name": 5}', "field 'name' = 5 is not a string"),
        (b'{"other": 99999999999999999999}', "field 'other' = 99999999999999999999 is too big"),
    ],
)
def test_a_bad_json_line_says_what_is_wrong(line: bytes, message: str) -> None:
    with pytest.raises(LineError) as info:
        parse_jsonl(line, FIELDS)
    assert message in str(info.value)


HEADER = ["id", "small", "x", "f", "name", "note", "ok"]


def test_csv_cells_become_the_schema_types() -> None:
    assert parse_csv_header(b"id,small,x,f,name,note,ok\r\n") == HEADER
    row = parse_csv(b'7,-3,2.5,1e3,"a, b",,true', HEADER, FIELDS)
    assert row == {
        "id": 7, "small": -3, "x": 2.5, "f": 1000.0, "name": "a, b", "note": "", "ok": True,
    }  # fmt: skip
    # Without a schema: numbers where cells look like numbers, None for empty cells.
    assert parse_csv(b"7,x,2.5,", ["a", "b", "c", "d"], {}) == {
        "a": 7, "b": "x", "c": 2.5, "d": None,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"1,2,3", "3 columns, the header has 7"),
        (b"1,2,3,4,5,6,7,8", "8 columns, the header has 7"),
        (b'1,2,"3,4,5,6,7', "not CSV"),
        (b"1,2,NaN,4,n,,true", "field 'x' = 'NaN' is not a number"),
        (b"1,2,inf,4,n,,true", "field 'x' = 'inf' is not a finite number"),
        (b"1,2,1e400,4,n,,true", "field 'x' = '1e400' is too big for double"),
        (b"1,2,3,1e39,n,,true", "field 'f' = '1e39' is too big for float"),
        (b"99999999999999999999,2,3,4,n,,true", "is too big for long"),
        (b"1,2147483648,3,4,n,,true", "field 'small' = 2147483648 is too big for int"),
        (b"1.5,2,3,4,n,,true", "field 'id' = '1.5' is not an integer (long)"),
        (b",2,3,4,n,,true", "field 'id' is empty but the schema does not allow null"),
        (b"1,2,3,4,n,,maybe", "field 'ok' = 'maybe' is not true or false"),
        (b"1,2,3,4,\xc3\x28,,true", "invalid UTF-8 at byte 8"),
    ],
)
def test_a_bad_csv_line_says_what_is_wrong(line: bytes, message: str) -> None:
    with pytest.raises(LineError) as info:
        parse_csv(line, HEADER, FIELDS)
    assert message in str(info.value)


def test_a_repeated_csv_column_is_an_error() -> None:
    with pytest.raises(LineError, match="repeated"):
        parse_csv_header(b"a,b,a")


# -- FileSource with bad lines -------------------------------------------------------------

SMALL = {
    "type": "record",
    "name": "S",
    "fields": [{"name": "k", "type": "string"}, {"name": "v", "type": "long"}],
}


def test_file_source_passes_bad_lines_with_file_and_line_and_keeps_exact_positions(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.jsonl"
    path.write_bytes(
        b'{"k": "a", "v": 1}\n'  # line 1
        b'{"k": "\xff", "v": 2}\n'  # 2: not UTF-8
        b"\n"  # 3: blank, skipped
        b'{"k": "c", "v": NaN}\n'  # 4: NaN
        b'{"k": "d", "v": 4}\n'  # 5
        b'{"k": "e", "v": 1e400}\n'  # 6: too big
        b'{"k": "f"\n'  # 7: malformed
        b'{"k": "g", "v": 7}\n'  # 8
    )
    src = FileSource(str(path), "jsonl", 1, SMALL)
    src.open(ctx(0), {})
    assert src.read(3) == [{"k": "a", "v": 1}]
    assert [(r.origin.line, r.raw) for r in src.rejected()] == [(2, b'{"k": "\xff", "v": 2}')]
    assert src.rejected()[0].origin.file == str(path)
    position = src.position()
    assert position["row"] == 3
    assert src.read(3) == [{"k": "d", "v": 4}]
    assert [r.origin.line for r in src.rejected()] == [4, 6]
    # A restart from the position after the first read sees lines 4.. again, exactly once.
    again = FileSource(str(path), "jsonl", 1, SMALL)
    again.open(ctx(0), json.loads(json.dumps(position)))
    got, bad = [], []
    while (recs := again.read(2)) is not None:
        got += recs
        bad += [r.origin.line for r in again.rejected()]
    assert got == [{"k": "d", "v": 4}, {"k": "g", "v": 7}]
    assert bad == [4, 6, 7]


def test_csv_line_numbers_count_the_header(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_bytes(b"k,v\na,1\nb\nc,3\n")
    src = FileSource(str(path), "csv", 1, SMALL)
    src.open(ctx(0), {})
    assert src.read(10) == [{"k": "a", "v": 1}, {"k": "c", "v": 3}]
    bad = [(r.origin.line, r.error) for r in src.rejected()]
    assert bad == [(3, "1 columns, the header has 2")]


def test_csv_header_without_a_required_field_is_a_config_error(tmp_path: Path) -> None:
    from spillway.channels.errors import ConfigError

    path = tmp_path / "a.csv"
    path.write_bytes(b"k,w\na,1\n")
    src = FileSource(str(path), "csv", 1, SMALL)
    src.open(ctx(0), {})
    with pytest.raises(ConfigError, match=r"the header has no column for \['v'\]"):
        src.read(10)
