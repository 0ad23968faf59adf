"""Sources with checkpointable positions: a seeded generator and files read with pyarrow."""

from __future__ import annotations

import glob
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from channels.errors import ConfigError
from recovery.plan import Context, Record


class GeneratorSource:
    """Records ``make(i)`` for ``i`` in ``0..count-1``; subtask k of p takes ``i ≡ k (mod p)``.

    Deterministic in ``i``, so a batch reference can recompute exactly what was emitted.
    ``count=None`` is unbounded. ``rate`` caps records per second per subtask.
    Position: the next ``i`` to emit.
    """

    def __init__(
        self,
        make: Callable[[int], Record],
        count: int | None,
        parallelism: int,
        rate: float | None = None,
        event_time: Callable[[Record], int] | None = None,
    ) -> None:
        self.make, self.count, self.p, self.rate, self.event_time = (
            make,
            count,
            parallelism,
            rate,
            event_time,
        )
        self._next = 0
        self._wm: int | None = None
        self._t0 = 0.0
        self._emitted = 0

    def open(self, ctx: Context, position: Mapping[str, Any]) -> None:
        """Continue after the last checkpointed record."""
        self._next = int(position.get("next", ctx.subtask.index))
        wm = position.get("watermark")
        self._wm = None if wm is None else int(wm)
        self._t0 = time.monotonic()

    def read(self, max_records: int) -> list[Record] | None:
        """Up to ``max_records`` new records, or ``None`` when ``count`` is reached."""
        if self.count is not None and self._next >= self.count:
            return None
        n = max_records
        if self.rate is not None:
            allowed = int((time.monotonic() - self._t0) * self.rate) - self._emitted
            if allowed <= 0:
                time.sleep(min(0.05, 1 / self.rate))
                return []
            n = min(n, allowed)
        stop = self._next + n * self.p
        if self.count is not None:
            stop = min(stop, self.count)
        out = [self.make(i) for i in range(self._next, stop, self.p)]
        self._next = self._next + len(out) * self.p
        self._emitted += len(out)
        if self.event_time is not None and out:
            self._wm = max(self._wm or 0, max(self.event_time(r) for r in out))
        return out

    def position(self) -> dict[str, Any]:
        """The next index and the watermark so far."""
        return {"next": self._next, "watermark": self._wm}

    def watermark(self) -> int | None:
        """Event times per subtask only grow, so the last one seen is the watermark."""
        return self._wm


class FileSource:
    """JSONL, CSV or Parquet files read with pyarrow; file i goes to subtask ``i % p``.

    Position: index of the current file among this subtask's files and the next row in it.
    """

    FORMATS = ("jsonl", "csv", "parquet")

    def __init__(self, pattern: str, fmt: str, parallelism: int) -> None:
        if fmt not in self.FORMATS:
            raise ConfigError(f"file format {fmt!r} is not one of {', '.join(self.FORMATS)}")
        self.pattern, self.fmt, self.p = pattern, fmt, parallelism
        self._files: list[str] = []
        self._file = 0
        self._row = 0
        self._rows: list[dict[str, Any]] | None = None

    def open(self, ctx: Context, position: Mapping[str, Any]) -> None:
        """List this subtask's files and continue at the checkpointed file and row."""
        files = sorted(glob.glob(self.pattern))
        if not files:
            raise ConfigError(f"no input files match {self.pattern!r}")
        self._files = files[ctx.subtask.index :: self.p]
        self._file = int(position.get("file", 0))
        self._row = int(position.get("row", 0))
        self._rows = None

    def read(self, max_records: int) -> list[Record] | None:
        """The next rows; ``None`` after the last row of the last file."""
        while self._file < len(self._files):
            if self._rows is None:
                self._rows = _read_table(Path(self._files[self._file]), self.fmt)
            if self._row < len(self._rows):
                out = self._rows[self._row : self._row + max_records]
                self._row += len(out)
                return out
            self._file, self._row, self._rows = self._file + 1, 0, None
        return None

    def position(self) -> dict[str, Any]:
        """File index and next row."""
        return {"file": self._file, "row": self._row}

    def watermark(self) -> int | None:
        """Files carry no event-time order."""
        return None


def _read_table(path: Path, fmt: str) -> list[dict[str, Any]]:
    import pyarrow.csv as pcsv
    import pyarrow.json as pjson
    import pyarrow.parquet as pq

    try:
        if fmt == "jsonl":
            table = pjson.read_json(path)
        elif fmt == "csv":
            table = pcsv.read_csv(path)
        else:
            table = pq.read_table(path)
    except Exception as e:  # pyarrow raises ArrowInvalid and friends
        raise ConfigError(f"cannot read {path} as {fmt}: {e}") from e
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows
