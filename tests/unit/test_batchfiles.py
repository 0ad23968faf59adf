"""read_files as batches (spillway.spark_jobs.connectors.batchfiles) on real CSV and Parquet files,
against the
record path: parse_csv line by line, then the Arrow channel codec's checks."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spillway.channels.errors import ConfigError, SchemaMismatchError
from spillway.channels.wire.arrowcodec import ArrowCodec, arrow_schema
from spillway.recovery.job.origins import FileLine
from spillway.spark_jobs.connectors.batchfiles import (
    FileBatch,
    read_csv_batches,
    read_parquet_batches,
)
from spillway.spark_jobs.records.lines import LineError, field_types, parse_csv, parse_csv_header

AVRO: dict[str, Any] = {
    "type": "record",
    "name": "row",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "x", "type": ["null", "double"]},
        {"name": "n", "type": ["null", "int"]},
        {"name": "ok", "type": ["null", "boolean"]},
    ],
}
SCHEMA = arrow_schema(AVRO)
assert SCHEMA is not None
CODEC = ArrowCodec(AVRO, SCHEMA)
HEADER = b"id,name,x,n,ok,extra"

GOOD = [
    b"1,a,1.5,7,true,zz",
    b'2,"b, quoted",-2e3,,FALSE,',
    b"+3,,0.25,-2147483648,1,q",
    b"4,d,,0,0,",
    b"-5,e,3,12,,",
]
BAD = [
    b"6,f,1.5",  # too few columns
    b"7,g,1,2,true,x,y",  # too many
    b"0x10,h,1,1,true,",
    b"8.0,i,1,1,true,",
    b",j,1,1,true,",  # empty non-nullable id
    b"9,k,abc,1,true,",
    b"10,l,nan,1,true,",
    b"11,m,inf,1,true,",
    b"12,n,1,3000000000,true,",
    b"13,o,1,1,maybe,",
    b"14,p,1,1.5,true,",
]
SKIPPED = [b"", b"   "]


def _record_path(path: Path) -> tuple[list[dict[str, Any]], list[FileLine], list[int]]:
    """Rows, their origins and the rejected lines, as FileSource + the channel writer see
    them (the reference)."""
    lines = path.read_bytes().splitlines()
    header = parse_csv_header(lines[0])
    rows, origins, rejected = [], [], []
    for n, raw in enumerate(lines[1:], 2):
        if not raw.strip():
            continue
        try:
            rec = parse_csv(raw, header, field_types(AVRO))
            row = CODEC.batch([rec]).to_pylist()[0]
        except (LineError, SchemaMismatchError):
            rejected.append(n)
            continue
        rows.append(row)
        origins.append(FileLine(str(path), n))
    return rows, origins, rejected


def _columnar(batches: list[FileBatch]) -> tuple[list[Any], list[Any], list[int]]:
    rows, origins, rejected = [], [], []
    for b in batches:
        rows.extend(b.batch.to_pylist())
        origins.extend(b.origins.at(i) for i in range(b.batch.num_rows))
        rejected.extend(r.origin.line for r in b.rejected if isinstance(r.origin, FileLine))
    return rows, origins, rejected


def _write_csv(path: Path, seed: int, n: int) -> None:
    rng = random.Random(seed)
    body = []
    for _ in range(n):
        u = rng.random()
        body.append(rng.choice(BAD if u < 0.15 else SKIPPED if u < 0.2 else GOOD))
    path.write_bytes(b"\n".join([HEADER, *body]) + (b"\n" if seed % 2 else b""))


@pytest.mark.parametrize("seed", range(4))
def test_csv_batches_equal_the_record_path_line_by_line(tmp_path: Path, seed: int) -> None:
    path = tmp_path / "in.csv"
    _write_csv(path, seed, 400)
    assert SCHEMA is not None
    batches = list(read_csv_batches(str(path), SCHEMA, 64))
    got = _columnar(batches)
    assert got == _record_path(path)
    assert all(b.batch.schema.equals(SCHEMA) for b in batches)
    # Past every data line, the blank and bad ones included.
    assert batches[-1].next == len(path.read_bytes().splitlines()) - 1
    bad = next(r for b in batches for r in b.rejected)
    assert bad.raw == path.read_bytes().splitlines()[bad.origin.line - 1]  # type: ignore[union-attr]


def test_csv_restart_at_every_position_reads_exactly_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    _write_csv(path, 7, 150)
    assert SCHEMA is not None
    batches = list(read_csv_batches(str(path), SCHEMA, 16))
    whole = _columnar(batches)
    done = 0
    for k, b in enumerate(batches):
        rest = _columnar(list(read_csv_batches(str(path), SCHEMA, 16, b.next)))
        later = _columnar(batches[k + 1 :])
        assert rest == later
        done += b.batch.num_rows
    assert done == len(whole[0])


def test_csv_files_that_cannot_be_read_are_refused(tmp_path: Path) -> None:
    assert SCHEMA is not None
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    with pytest.raises(ConfigError, match="is empty: a CSV file needs a header line"):
        list(read_csv_batches(str(empty), SCHEMA, 10))
    no_id = tmp_path / "no_id.csv"
    no_id.write_bytes(b"name,x\na,1\n")
    with pytest.raises(ConfigError, match=r"the header has no column for \['id'\]"):
        list(read_csv_batches(str(no_id), SCHEMA, 10))
    with pytest.raises(ConfigError, match="cannot read"):
        list(read_csv_batches(str(tmp_path / "missing.csv"), SCHEMA, 10))


def test_parquet_batches_from_any_row_with_row_origins(tmp_path: Path) -> None:
    path = tmp_path / "in.parquet"
    table = pa.table({"id": pa.array(range(1000), pa.int64()), "v": [i * 0.5 for i in range(1000)]})
    pq.write_table(table, path, row_group_size=100)
    for start in (0, 150, 999, 1000):
        batches = list(read_parquet_batches(str(path), None, 64, start))
        rows = [r for b in batches for r in b.batch.to_pylist()]
        assert rows == table.slice(start).to_pylist()
        origins = [b.origins.at(i) for b in batches for i in range(b.batch.num_rows)]
        assert origins == [FileLine(str(path), r + 1) for r in range(start, 1000)]
        assert all(b.batch.num_rows <= 64 for b in batches)
        if batches:
            assert batches[-1].next == 1000


def test_parquet_rows_that_do_not_fit_the_schema_are_rejected_alone(tmp_path: Path) -> None:
    path = tmp_path / "in.parquet"
    ids = list(range(300))
    ids[123] = 2**40  # too big for the schema's int32
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), path)
    schema = pa.schema([pa.field("id", pa.int32(), nullable=False)])
    batches = list(read_parquet_batches(str(path), schema, 100))
    rows = [r["id"] for b in batches for r in b.batch.to_pylist()]
    assert rows == [i for i in range(300) if i != 123]
    (bad,) = [r for b in batches for r in b.rejected]
    assert bad.origin == FileLine(str(path), 124)
    assert bad.raw == b'{"id": 1099511627776}'
