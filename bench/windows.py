"""``python -m bench.windows``: what a watermark advance costs vs the number of open keys.

For each size N (default 10k, 100k, 1M open keys), a tumbling-window operator holds one
open window per key, far in the future, plus ``--fired`` keys whose windows end at each
of ``--advances`` earlier watermarks. Each advance then fires exactly ``--fired``
windows. Timed per advance: the old full scan (``operators.TumblingWindowLogic``, which
walks all keyed state per watermark) against the timer index (``windows.FixedWindowLogic``,
which pops due timers only). Also timed, for what a restore pays once: reading the
state back from its changelog bytes (``ChangelogState.restore`` from an in-memory
partition), then rebuilding the timer index from it (``open``, which decodes every
entry). Real ``ChangelogState``, no broker. Writes ``bench/results/windows-<UTC time>.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any, cast

from spillway.channels.ids import JobId, Offset, OperatorName, SubtaskId, TopicPartition
from spillway.recovery.restore.state import ChangelogState
from spillway.spark_jobs.operators.operators import TumblingWindowLogic
from spillway.spark_jobs.operators.windows import FixedWindowLogic

SIZE = 1000
FAR = 10**9  # the open windows' start: never reached by the advances


class _Ctx:
    def __init__(self) -> None:
        self.subtask = SubtaskId(JobId("bench"), OperatorName("win"), 0)
        self.state = ChangelogState(TopicPartition("bench-changelog", 0))
        self.watermark: int | None = None


def _add(acc: int, _r: Any) -> int:
    return acc + 1


def _result(key: Any, start: int, end: int, acc: int) -> tuple[Any, int, int, int]:
    return (key, start, end, acc)


def _logic(kind: str) -> Any:
    args = (lambda r: r[0], lambda r: r[1], SIZE)
    if kind == "scan":
        return TumblingWindowLogic(*args, lambda: 0, _add, _result)
    return FixedWindowLogic(*args, SIZE, lambda: 0, _add, _result)


class _Msg:
    def __init__(self, offset: int, key: bytes, value: bytes | None) -> None:
        self._o, self._k, self._v = offset, key, value

    def offset(self) -> int:
        return self._o

    def key(self) -> bytes:
        return self._k

    def value(self) -> bytes | None:
        return self._v


class _Changelog:
    """A changelog partition in memory: the producer ``flush_to`` writes to and the
    consumer ``restore`` reads from (so the restore copies bytes, as from Kafka)."""

    def __init__(self) -> None:
        self.log: list[_Msg] = []
        self.next = 0

    def produce(self, _topic: str, _partition: int, key: bytes, value: bytes | None) -> None:
        self.log.append(_Msg(len(self.log), key, value))

    def watermarks(self, _tp: Any) -> tuple[int, int]:
        return 0, len(self.log)

    def assign(self, starts: dict[Any, int]) -> None:
        self.next = int(next(iter(starts.values())))

    def consume(self, n: int, _timeout: float) -> list[_Msg]:
        out = self.log[self.next : self.next + n]
        self.next += len(out)
        return out

    def position(self, _tp: Any) -> int:
        return self.next


def _restore(logic: Any, ctx: _Ctx) -> tuple[float, float]:
    """Seconds to restore the state from its changelog bytes, then to rebuild the index."""
    log = _Changelog()
    ctx.state.flush_to(cast(Any, log))
    restored = _Ctx()
    t0 = time.perf_counter()
    restored.state.restore(cast(Any, log), Offset(len(log.log)))
    t1 = time.perf_counter()
    logic.open(restored)
    t2 = time.perf_counter()
    ctx.state = restored.state
    return t1 - t0, t2 - t1


def measure(kind: str, keys: int, fired: int, advances: int) -> dict[str, Any]:
    """Seconds per watermark advance (each firing ``fired`` windows) with ``keys`` open."""
    logic, ctx = _logic(kind), _Ctx()
    logic.open(ctx)
    batch = 10_000
    for lo in range(0, keys, batch):
        logic.process([(f"open-{i}", FAR) for i in range(lo, min(keys, lo + batch))])
    for a in range(advances):
        logic.process([(f"due-{a}-{j}", a * SIZE) for j in range(fired)])
    rebuild_s = restore_s = None
    if kind == "index":  # what a restore pays once: the state, then the index from it
        restore_s, rebuild_s = _restore(logic, ctx)
    times = []
    for a in range(advances):
        t0 = time.perf_counter()
        out = logic.on_watermark((a + 1) * SIZE)
        times.append(time.perf_counter() - t0)
        assert len(out) == fired, (kind, len(out))
    assert len(ctx.state) == keys
    return {
        "open_keys": keys,
        "fired_per_advance": fired,
        "advance_s_median": statistics.median(times),
        "advance_s": times,
        "us_per_fired_window": statistics.median(times) / fired * 1e6,
        "index_rebuild_s": rebuild_s,
        "changelog_restore_s": restore_s,
    }


def throughput(kind: str, records: int = 200_000, keys: int = 1000) -> float:
    """µs per record through ``process`` + ``on_watermark`` (a watermark every 500
    records, 2 s behind) with few open windows: where a full scan is cheap, this is the
    price of keeping the index."""
    rng = random.Random(1)
    recs = [(f"k{rng.randrange(keys)}", i * 5 + rng.randrange(2000)) for i in range(records)]
    logic, ctx = _logic(kind), _Ctx()
    logic.open(ctx)
    t0 = time.perf_counter()
    for lo in range(0, records, 500):
        logic.process(recs[lo : lo + 500])
        logic.on_watermark(recs[lo][1] - 2000)
    return (time.perf_counter() - t0) / records * 1e6


def main(argv: list[str] | None = None) -> None:
    """Print the table and write the JSON result."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--keys", default="10000,100000,1000000")
    ap.add_argument("--fired", type=int, default=100)
    ap.add_argument("--advances", type=int, default=5)
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args(argv)
    rows = []
    print(f"watermark advance, {args.fired} windows fired each (median of {args.advances})")
    for keys in (int(k) for k in args.keys.split(",")):
        for kind in ("scan", "index"):
            gc.collect()
            row = {"kind": kind, **measure(kind, keys, args.fired, args.advances)}
            rows.append(row)
            rebuild = row["index_rebuild_s"]
            print(
                f"  {keys:>9} open keys  {kind:5}  {row['advance_s_median'] * 1e3:10.3f} ms"
                f"  ({row['us_per_fired_window']:.1f} µs per fired window)"
                + (
                    f"  restore {row['changelog_restore_s']:.2f} s + index rebuild {rebuild:.2f} s"
                    if rebuild is not None
                    else ""
                )
            )
    per_record = {kind: throughput(kind) for kind in ("scan", "index")}
    print(
        f"  per record, 1000 keys (few open windows): scan {per_record['scan']:.2f} µs, "
        f"index {per_record['index']:.2f} µs"
    )
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = Path(args.out) / f"windows-{stamp}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {"loadavg": load, "window_size_ms": SIZE, "rows": rows, "us_per_record": per_record},
            indent=1,
        )
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
