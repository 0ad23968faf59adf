"""``read_files`` as batches: Parquet and CSV files read into Arrow record batches.

Every row keeps its origin as ``file:line`` (:class:`~spillway.recovery.job.origins.FileLine`): for
CSV
the line of the file as editors count it, for Parquet the 1-based row number. A position
is the number of data rows (CSV: data lines after the header, blank and bad ones
included, as :class:`spillway.spark_jobs.connectors.sources.FileSource` counts them) already read,
so a
restart neither repeats nor skips a row.

CSV is parsed by ``pyarrow.csv`` with every column as text, then cast to the schema in
one vectorised call; only a batch whose cast fails is bisected to find the rows that
fail alone. Rejected, as the record path (:func:`spillway.spark_jobs.records.lines.parse_csv`)
rejects
them: a line with another number of columns than the header (values may not span
lines), an integer that is not ``[+-]digits`` or out of range, a number Arrow cannot read
or that is NaN or infinite, a boolean other than true/false/1/0 (any case), an empty cell
of a non-nullable non-string field. Empty cells are null, except in string fields, which
keep ``""``. Whitespace-only and empty lines carry no row. Float text is read by Arrow's
parser: Python's ``float`` also takes ``1_0`` and surrounding spaces, Arrow does not.

Parquet is typed; a row that does not cast to the schema is rejected the same way.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from spillway.channels.errors import ConfigError
from spillway.recovery.job.origins import FileLine, Runs, line_runs
from spillway.recovery.job.plan import Rejected
from spillway.spark_jobs.connectors.batchjson import non_finite_rows
from spillway.spark_jobs.operators.batchops import isolate_rows
from spillway.spark_jobs.records.lines import LineError, decode, parse_csv_header

_INT_TEXT = r"^[+-]?[0-9]+$"


@dataclass(frozen=True)
class FileBatch:
    """Rows of one file: the batch, each row's origin, what was rejected, and the position
    (data rows read so far) to continue after this batch."""

    batch: pa.RecordBatch
    origins: Runs
    rejected: list[Rejected]
    next: int


def _cast(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` (text cells for CSV) as ``schema``; raises for a row that does not fit."""
    arrays = []
    for f in schema:
        col = batch.column(f.name)
        if pa.types.is_string(col.type) and not pa.types.is_string(f.type):
            col = pc.if_else(pc.equal(col, ""), pa.scalar(None, col.type), col)
            if pa.types.is_integer(f.type):
                if pc.any(pc.invert(pc.match_substring_regex(col, _INT_TEXT))).as_py():
                    raise ValueError(f"field {f.name!r} is not an integer ({f.type})")
                col = pc.replace_substring_regex(col, r"^\+", "")
        col = pc.cast(col, f.type)
        if not f.nullable and col.null_count:
            raise ValueError(f"field {f.name!r} is empty but the schema does not allow null")
        arrays.append(col)
    out = pa.RecordBatch.from_arrays(arrays, schema=schema)
    bad = non_finite_rows(pa.Table.from_batches([out]))
    if bad:
        raise ValueError(next(iter(bad.values())))
    return out


def _typed(
    batch: pa.RecordBatch, schema: pa.Schema, lines: list[int], path: str, raw: _Raw
) -> tuple[pa.RecordBatch, list[int], list[Rejected]]:
    """``batch`` cast to ``schema``; rows that fail alone rejected with their line."""
    try:
        return _cast(batch, schema), lines, []
    except (pa.ArrowException, ValueError):
        pass
    good, bad = isolate_rows(lambda part: [_cast(part, schema)], batch)
    bad_rows = {b.index for b in bad}
    rejected = [
        Rejected(FileLine(path, lines[b.index]), _reason(b.error), raw.line(lines[b.index]))
        for b in bad
    ]
    kept = [line for i, line in enumerate(lines) if i not in bad_rows]
    table = pa.Table.from_batches(good, schema=schema)
    return _one(table, schema), kept, rejected


def _reason(error: BaseException) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def _one(table: pa.Table, schema: pa.Schema) -> pa.RecordBatch:
    if not table.num_rows:
        return pa.RecordBatch.from_pylist([], schema=schema)
    return table.combine_chunks().to_batches()[0]


class _Raw(Protocol):
    def line(self, number: int) -> bytes:
        """The bytes of line (CSV) or row (Parquet) ``number``, 1-based."""
        ...


class RawLines:
    """The bytes of a file's lines, split only when a rejected line must be quoted."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._lines: list[bytes] | None = None

    def line(self, number: int) -> bytes:
        """Line ``number`` (1-based) without its end of line."""
        if self._lines is None:
            self._lines = self._data.split(b"\n")
        return self._lines[number - 1].rstrip(b"\r")


def _blank_lines(data: bytes, start: int, first_line: int) -> list[int]:
    """Numbers of the empty lines of ``data[start:]`` (``first_line`` is its first)."""
    out = []
    line, at = first_line, start
    for m in re.finditer(rb"(?m)^\r?$", data[start:]):
        if start + m.start() >= len(data):
            break  # the end after a final newline is not a line
        line += data.count(b"\n", at, start + m.start())
        at = start + m.start()
        out.append(line)
    return out


def _not_utf8(data: bytes, body: int, first_line: int, path: str) -> tuple[bytes, list[Rejected]]:
    """``data`` with the lines of ``data[body:]`` that are not UTF-8 emptied, and those
    lines rejected as the record path rejects them (one decode of the whole when clean)."""
    try:
        data[body:].decode("utf-8")
        return data, []
    except UnicodeDecodeError:
        pass
    out: list[bytes] = []
    bad: list[Rejected] = []
    for n, line in enumerate(data[body:].split(b"\n"), first_line):
        try:
            decode(line)
            out.append(line)
        except LineError as e:
            text = line.rstrip(b"\r")
            bad.append(Rejected(FileLine(path, n), str(e), text))
            out.append(b"")
    return data[:body] + b"\n".join(out), bad


def read_csv_batches(
    path: str, schema: pa.Schema, batch_size: int, start: int = 0
) -> Iterator[FileBatch]:
    """The data rows of CSV file ``path`` from data row ``start`` on, as batches of at most
    ``batch_size`` rows of ``schema``; :class:`ConfigError` if the file cannot be read or
    its header lacks a non-nullable field."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from e
    header_end = data.find(b"\n") + 1 or len(data)
    if not data.strip():
        raise ConfigError(f"{path} is empty: a CSV file needs a header line")
    try:
        names = parse_csv_header(data[:header_end])
    except LineError as e:
        raise ConfigError(f"{path} line 1 (the header): {e}") from None
    missing = [f.name for f in schema if f.name not in names and not f.nullable]
    if missing:
        raise ConfigError(
            f"{path}: the header has no column for {missing}, which the schema requires"
        )
    body = header_end
    for _ in range(start):  # only on a restart: skip the data lines already read
        nl = data.find(b"\n", body)
        body = len(data) if nl < 0 else nl + 1
    raw = RawLines(data)
    # pyarrow fails the whole file on a line that is not UTF-8: such lines are rejected
    # here and parsed as blank (line numbers stay).
    data, rejected = _not_utf8(data, body, start + 2, path)
    # Lines that carry no row, by file line number (header: line 1).
    blanks = _blank_lines(data, body, start + 2)
    skipped = list(blanks)

    def invalid(row: pcsv.InvalidRow) -> str:
        # pyarrow counts the lines it parses (the header is 1), not the empty ones.
        line = (row.number or 0) + start
        while line != (row.number or 0) + start + bisect.bisect_right(blanks, line):
            line = (row.number or 0) + start + bisect.bisect_right(blanks, line)
        bisect.insort(skipped, line)
        if row.text.strip():
            why = f"{row.actual_columns} columns, the header has {row.expected_columns}"
            rejected.append(Rejected(FileLine(path, line), why, row.text.encode()))
        return "skip"

    reader = pcsv.open_csv(
        pa.BufferReader(data[:header_end] + data[body:]),
        read_options=pcsv.ReadOptions(use_threads=False),
        parse_options=pcsv.ParseOptions(invalid_row_handler=invalid),
        convert_options=pcsv.ConvertOptions(
            column_types={f.name: pa.string() for f in schema},
            include_columns=schema.names,
            include_missing_columns=True,
            strings_can_be_null=False,
            null_values=[],
        ),
    )
    next_line = start + 2  # the file line of the next row
    row_pos = start
    for block in reader:
        for off in range(0, block.num_rows, batch_size):
            part = block.slice(off, batch_size)
            lines, next_line = _row_lines(skipped, next_line, part.num_rows)
            typed, kept, bad = _typed(part, schema, lines, path, raw)
            origins = line_runs([path])
            _add_lines(origins, kept)
            row_pos = next_line - 2
            before = [r for r in rejected if _line(r) < next_line]
            rejected[:] = [r for r in rejected if _line(r) >= next_line]
            yield FileBatch(typed, origins, sorted(before + bad, key=_line), row_pos)
    total = (
        start + data.count(b"\n", body) + (0 if data.endswith(b"\n") or body == len(data) else 1)
    )
    if rejected or row_pos < total:
        # Lines after the last row (blank or bad): the position moves past them too.
        empty = pa.RecordBatch.from_pylist([], schema=schema)
        yield FileBatch(empty, line_runs([path]), sorted(rejected, key=_line), total)


def _row_lines(skipped: list[int], next_line: int, rows: int) -> tuple[list[int], int]:
    """The file lines of the next ``rows`` rows from ``next_line`` on, stepping over the
    ``skipped`` lines (sorted); and the line after them. One step per run of lines."""
    lines: list[int] = []
    while len(lines) < rows:
        k = bisect.bisect_left(skipped, next_line)
        stop = skipped[k] if k < len(skipped) else next_line + rows
        take = min(rows - len(lines), stop - next_line)
        lines.extend(range(next_line, next_line + take))
        next_line += take
        if len(lines) < rows:
            next_line += 1  # over the skipped line
    return lines, next_line


def _line(r: Rejected) -> int:
    return r.origin.line if isinstance(r.origin, FileLine) else 0


def _add_lines(origins: Runs, lines: list[int]) -> None:
    if lines and lines[-1] - lines[0] == len(lines) - 1:
        origins.add_run(0, lines[0], len(lines))  # the usual case: consecutive lines
        return
    for line in lines:
        origins.add(0, line)


def read_parquet_batches(
    path: str, schema: pa.Schema | None, batch_size: int, start: int = 0
) -> Iterator[FileBatch]:
    """The rows of Parquet file ``path`` from row ``start`` on, as batches of at most
    ``batch_size`` rows (cast to ``schema`` if given); origins ``file:row`` (1-based)."""
    try:
        f = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises ArrowInvalid and friends
        raise ConfigError(f"cannot read {path} as parquet: {e}") from e
    first_group, row = 0, 0
    meta = f.metadata
    while first_group < meta.num_row_groups and row + meta.row_group(first_group).num_rows <= start:
        row += meta.row_group(first_group).num_rows
        first_group += 1
    groups = list(range(first_group, meta.num_row_groups))
    raw = _ParquetRows()
    for batch in f.iter_batches(batch_size=batch_size, row_groups=groups, use_threads=False):
        if row + batch.num_rows <= start:
            row += batch.num_rows
            continue
        if row < start:
            batch, row = batch.slice(start - row), start
        lines = list(range(row + 1, row + 1 + batch.num_rows))
        row += batch.num_rows
        typed, kept, bad = batch, lines, list[Rejected]()
        if schema is not None:
            typed, kept, bad = _typed(
                batch, schema, lines, path, raw.of(batch, row - batch.num_rows)
            )
        origins = line_runs([path])
        _add_lines(origins, kept)
        yield FileBatch(typed, origins, bad, row)


class _ParquetRows:
    """A rejected Parquet row's "bytes": the row as JSON (a Parquet row has no text)."""

    def __init__(self) -> None:
        self._batch: pa.RecordBatch | None = None
        self._first = 0

    def of(self, batch: pa.RecordBatch, first_row: int) -> _ParquetRows:
        """Quote rows of ``batch``, whose first row is ``first_row`` (0-based)."""
        self._batch, self._first = batch, first_row
        return self

    def line(self, number: int) -> bytes:
        """Row ``number`` (1-based) of the file, as JSON."""
        assert self._batch is not None
        row = self._batch.slice(number - 1 - self._first, 1).to_pylist()[0]
        return json.dumps(row, default=repr).encode()
