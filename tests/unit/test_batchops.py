"""Batch operators (spillway.spark_jobs.operators.batchops) against the record path and plain
Python, and the
bisection that dead-letters exactly the failing rows. The dead-letter channel is a fake."""

from __future__ import annotations

import random
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spillway.channels.errors import PipelineDefinitionError, RecordError, SchemaMismatchError
from spillway.recovery.job.origins import Origin, TopicOffset, topic_runs
from spillway.spark_jobs.operators.batchops import (
    FilterBatchesLogic,
    MapBatchesLogic,
    isolate_rows,
    process_batch,
)
from spillway.spark_jobs.operators.operators import FilterLogic, MapLogic

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("x", pa.float64())])
OUT = pa.schema([("id", pa.int64()), ("y", pa.float64())])


def _rows(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {"id": i, "name": rng.choice(["a", "b", None]), "x": rng.randrange(-50, 50) / 2}
        for i in range(n)
    ]


def _batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(rows, schema=SCHEMA)


class FakeDeadLetters:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, Origin | None, Any]] = []

    def send(
        self,
        *,
        stage: str,
        error: BaseException | str,
        origin: Origin | None,
        record: Any = None,
        raw: bytes | None = None,
    ) -> None:
        self.sent.append((stage, str(error), origin, record))


def _double(b: pa.RecordBatch) -> pa.RecordBatch:
    return pa.record_batch([b["id"], pc.multiply(b["x"], 2.0)], schema=OUT)


def test_map_batches_equals_the_record_path_and_plain_python() -> None:
    rows = _rows(1000)
    (out,) = MapBatchesLogic("m", _double, OUT).process_batch(_batch(rows))
    by_record = MapLogic(lambda r: {"id": r["id"], "y": r["x"] * 2.0}).process(rows)
    assert out.to_pylist() == by_record
    assert out.to_pylist() == [{"id": r["id"], "y": r["x"] * 2.0} for r in rows]


def test_filter_batches_equals_the_record_path_and_drops_null_mask_values() -> None:
    rows = _rows(1000, seed=1)
    logic = FilterBatchesLogic("f", lambda b: pc.equal(b["name"], "a"))  # null name: null
    (out,) = logic.process_batch(_batch(rows))
    assert out.schema == SCHEMA
    assert out.to_pylist() == FilterLogic(lambda r: r["name"] == "a").process(rows)


def test_pandas_frames_in_and_out() -> None:
    rows = _rows(300, seed=2)

    def double(df: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame({"id": df["id"], "y": df["x"] * 2.0})

    (out,) = MapBatchesLogic("m", double, OUT, frame="pandas").process_batch(_batch(rows))
    assert out.to_pylist() == [{"id": r["id"], "y": r["x"] * 2.0} for r in rows]
    keep = FilterBatchesLogic("f", lambda df: df["x"] > 0, frame="pandas")
    (kept,) = keep.process_batch(_batch(rows))
    assert kept.to_pylist() == [r for r in rows if r["x"] > 0]


def test_bad_definitions_and_results_are_named() -> None:
    with pytest.raises(PipelineDefinitionError, match=r"operator 'm': frame must be one of"):
        MapBatchesLogic("m", _double, OUT, frame="excel")
    wrong = MapBatchesLogic("m", lambda b: b, OUT)
    with pytest.raises(SchemaMismatchError, match=r"operator 'm': the function returned a batch"):
        wrong.process_batch(_batch(_rows(3)))
    with pytest.raises(RecordError, match=r"operator 'm': the function returned list"):
        MapBatchesLogic("m", lambda b: [1], None).process_batch(_batch(_rows(3)))
    with pytest.raises(RecordError, match=r"one boolean per row \(3\); it returned 2"):
        FilterBatchesLogic("f", lambda b: [True, False]).process_batch(_batch(_rows(3)))


def _picky(calls: list[int]) -> Any:
    """A row-wise map that fails on any batch holding an x of exactly 13.5."""

    def fn(b: pa.RecordBatch) -> pa.RecordBatch:
        calls.append(b.num_rows)
        if pc.any(pc.equal(b["x"], 13.5)).as_py():
            raise ValueError("x is 13.5")
        return _double(b)

    return MapBatchesLogic("m", fn, OUT).process_batch


def test_a_clean_batch_costs_one_call() -> None:
    calls: list[int] = []
    rows = [r for r in _rows(2000, seed=3) if r["x"] != 13.5]
    out = process_batch(_picky(calls), _batch(rows), topic_runs("in"), FakeDeadLetters(), "m")
    assert calls == [len(rows)]
    assert pa.Table.from_batches(out).to_pylist() == [
        {"id": r["id"], "y": r["x"] * 2.0} for r in rows
    ]


def test_failing_rows_are_dead_lettered_with_their_origin_and_the_rest_goes_on() -> None:
    rows = _rows(2000, seed=4)
    bad = [i for i, r in enumerate(rows) if r["x"] == 13.5]
    assert 5 < len(bad) < 100
    origins = topic_runs("in")
    origins.add_run(3, 100, 1500)  # partition 3, offsets 100.. ; then a gap
    origins.add_run(3, 1700, 500)
    dlq = FakeDeadLetters()
    calls: list[int] = []
    out = process_batch(_picky(calls), _batch(rows), origins, dlq, "m")
    good = [r for r in rows if r["x"] != 13.5]
    assert pa.Table.from_batches(out).to_pylist() == [
        {"id": r["id"], "y": r["x"] * 2.0} for r in good
    ]
    expect_origins = [TopicOffset("in", 3, 100 + i if i < 1500 else 200 + i) for i in bad]
    assert [(s, o, rec) for s, _, o, rec in dlq.sent] == [
        ("process", o, rows[i]) for i, o in zip(bad, expect_origins, strict=True)
    ]
    assert all(e == "x is 13.5" for _, e, _, _ in dlq.sent)
    assert len(calls) < 2 * len(bad) * 12  # bisection, not one call per row


def test_without_dead_letters_the_first_bad_row_stops_with_its_origin() -> None:
    rows = _rows(500, seed=4)
    first_bad = next(i for i, r in enumerate(rows) if r["x"] == 13.5)
    origins = topic_runs("in")
    origins.add_run(0, 10, 500)
    with pytest.raises(RecordError, match=rf"m: row {first_bad} of a batch of 500") as e:
        process_batch(_picky([]), _batch(rows), origins, None, "m")
    assert e.value.origin == f"in[0]@{10 + first_bad}"
    assert "--dead-letter" in str(e.value)


def test_isolate_rows_keeps_row_order_of_the_good_parts() -> None:
    def odd_fails(b: pa.RecordBatch) -> list[pa.RecordBatch]:
        if pc.any(pc.equal(pc.bit_wise_and(b["id"], 1), 1)).as_py():
            raise ValueError("odd")
        return [b]

    good, bad = isolate_rows(odd_fails, _batch(_rows(64)))
    assert [r["id"] for g in good for r in g.to_pylist()] == list(range(0, 64, 2))
    assert [b.index for b in bad] == list(range(1, 64, 2))
