"""Columnar keyed aggregation (spillway.spark_jobs.operators.batchagg) against the record path's
aggregate,
incl. a restore of its state through the changelog. No broker: the changelog is a list."""

from __future__ import annotations

import random
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spillway.channels.errors import ConfigError, PipelineDefinitionError, RecordError
from spillway.channels.ids import JobId, Offset, OperatorName, SubtaskId
from spillway.spark_jobs.operators.batchagg import Agg, BatchAggregate, BatchAggregateLogic
from spillway.spark_jobs.operators.operators import KeyedAggregateLogic
from tests.unit.aggfakes import Ctx, Log

SCHEMA = pa.schema([("k", pa.string()), ("x", pa.int32()), ("f", pa.float64())])
AGGS = {
    "n": Agg("count"),
    "nx": Agg("count", "x"),
    "sx": Agg("sum", "x"),
    "mn": Agg("min", "x"),
    "mx": Agg("max", "f"),
    "avg": Agg("mean", "f"),
    "rev": Agg("sum", lambda b: pc.multiply(b["x"], b["f"])),  # a user expression
}
DERIVE = {"per_row": lambda t: pc.divide(pc.cast(t["sx"], pa.float64()), t["n"])}


SUBTASK = SubtaskId(JobId("j"), OperatorName("agg"), 0)


# -- the record path, written plainly: the reference ----------------------------------


def _init() -> dict[str, Any]:
    return {"n": 0, "nx": 0, "sx": None, "mn": None, "mx": None, "fs": 0.0, "fc": 0, "rev": None}


def _add(acc: dict[str, Any], r: dict[str, Any]) -> dict[str, Any]:
    x, f = r["x"], r["f"]
    acc["n"] += 1
    if x is not None:
        acc["nx"] += 1
        acc["sx"] = x if acc["sx"] is None else acc["sx"] + x
        acc["mn"] = x if acc["mn"] is None else min(acc["mn"], x)
    if f is not None:
        acc["mx"] = f if acc["mx"] is None else max(acc["mx"], f)
        acc["fs"] += f
        acc["fc"] += 1
    if x is not None and f is not None:
        acc["rev"] = x * f if acc["rev"] is None else acc["rev"] + x * f
    return acc


def _result(k: Any, acc: dict[str, Any]) -> dict[str, Any]:
    return {
        "k": k,
        "n": acc["n"],
        "nx": acc["nx"],
        "sx": acc["sx"],
        "mn": acc["mn"],
        "mx": acc["mx"],
        "avg": acc["fs"] / acc["fc"] if acc["fc"] else None,
        "rev": acc["rev"],
        "per_row": None if acc["sx"] is None else acc["sx"] / acc["n"],
    }


def _records(seed: int, n: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)

    def maybe(v: Any) -> Any:
        return None if rng.random() < 0.15 else v

    # Floats are multiples of 1/4 below 2**20: every sum is exact in any order, so the two
    # paths (record by record vs. Arrow's per-batch sums) must agree bit for bit.
    return [
        {
            "k": maybe(f"k{rng.randrange(40)}"),
            "x": maybe(rng.randrange(-1000, 1000)),
            "f": maybe(rng.randrange(-400, 400) / 4),
        }
        for _ in range(n)
    ]


def _batches(records: list[dict[str, Any]], size: int) -> list[pa.RecordBatch]:
    return [
        pa.RecordBatch.from_pylist(records[i : i + size], schema=SCHEMA)
        for i in range(0, len(records), size)
    ]


def _record_path(records: list[dict[str, Any]], emit: str, size: int) -> Any:
    logic = KeyedAggregateLogic(lambda r: r["k"], _init, _add, _result, emit)
    logic.open(cast(Any, Ctx()))
    per_batch = [logic.process(records[i : i + size]) for i in range(0, len(records), size)]
    return per_batch, logic.on_end()


def _agg(emit: str = "final") -> BatchAggregate:
    return BatchAggregate("agg", "k", AGGS, SCHEMA, derive=DERIVE, emit=emit)


# -- tests ------------------------------------------------------------------------------


def test_finals_equal_the_record_path() -> None:
    records = _records(1, 5000)
    _, expect = _record_path(records, "final", 700)
    logic = BatchAggregateLogic(_agg())
    logic.open(cast(Any, Ctx()))
    for b in _batches(records, 700):
        assert logic.process_batch(b) == []
    (out,) = logic.on_end()
    assert out.schema == _agg().output_schema
    assert out.to_pylist() == expect
    assert any(r["k"] is None for r in expect)  # null keys are a key of their own


def test_updates_are_the_record_paths_last_update_per_key_and_batch() -> None:
    records = _records(2, 3000)
    per_batch, _ = _record_path(records, "updates", 500)
    logic = BatchAggregateLogic(_agg("updates"))
    logic.open(cast(Any, Ctx()))
    for b, recs in zip(_batches(records, 500), per_batch, strict=True):
        last: dict[Any, dict[str, Any]] = {}
        for r in recs:
            last[r["k"]] = r  # insertion order: the key's first appearance in the batch
        (out,) = logic.process_batch(b)
        assert out.to_pylist() == list(last.values())
    assert logic.on_end() == []


def test_rows_are_the_record_paths_updates_row_for_row_and_survive_a_restore() -> None:
    # emit="rows": one output row per input row, its key's running result (count, sum and
    # mean; min/max are refused). State continues across batches and from the changelog.
    aggs = {k: a for k, a in AGGS.items() if a.kind in ("count", "sum", "mean")}
    records = _records(3, 3000)
    per_batch, _ = _record_path(records, "updates", 450)

    def rows_agg() -> BatchAggregate:
        return BatchAggregate("agg", "k", aggs, SCHEMA, derive=DERIVE, emit="rows")

    def drop(r: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in r.items() if k not in ("mn", "mx")}

    ctx = Ctx()
    logic = BatchAggregateLogic(rows_agg())
    logic.open(cast(Any, ctx))
    batches = _batches(records, 450)
    for b, recs in zip(batches[:3], per_batch[:3], strict=True):
        (out,) = logic.process_batch(b)
        assert out.to_pylist() == [drop(r) for r in recs]
    # A new subtask whose state is restored through the changelog goes on exactly.
    log = Log()
    ctx.state.flush_to(cast(Any, log))
    restored = Ctx()
    assert restored.state.restore(cast(Any, log), Offset(len(log.log))) == len(log.log)
    logic = BatchAggregateLogic(rows_agg())
    logic.open(cast(Any, restored))
    for b, recs in zip(batches[3:], per_batch[3:], strict=True):
        (out,) = logic.process_batch(b)
        assert out.to_pylist() == [drop(r) for r in recs]
    assert logic.on_end() == []
    with pytest.raises(PipelineDefinitionError, match="emit='rows' keeps count, sum, mean"):
        BatchAggregate("agg", "k", AGGS, SCHEMA, emit="rows")


@pytest.mark.parametrize("emit", ["final", "updates"])
def test_state_restored_from_the_changelog_continues_exactly(emit: str) -> None:
    records = _records(3, 6000)
    per_batch, expect_final = _record_path(records, emit, 600)
    batches = _batches(records, 600)
    log = Log()
    first = Ctx()
    logic = BatchAggregateLogic(_agg(emit))
    logic.open(cast(Any, first))
    got: list[list[dict[str, Any]]] = []
    for b in batches[:4]:
        got.append([r for o in logic.process_batch(b) for r in o.to_pylist()])
    first.state.flush_to(cast(Any, log))  # checkpoint 1 ends at this changelog offset
    checkpoint_1 = len(log.log)
    for b in batches[4:6]:
        logic.process_batch(b)  # lost with the crash below
    first.state.flush_to(cast(Any, log))  # past checkpoint 1: a restore must ignore it
    assert len(log.log) > checkpoint_1
    # A new attempt: state restored from the changelog up to checkpoint 1.
    restored = Ctx()
    assert restored.state.restore(cast(Any, log), Offset(checkpoint_1)) == checkpoint_1
    logic = BatchAggregateLogic(_agg(emit))
    logic.open(cast(Any, restored))
    for b in batches[4:]:
        got.append([r for o in logic.process_batch(b) for r in o.to_pylist()])
    if emit == "final":
        (out,) = logic.on_end()
        assert out.to_pylist() == expect_final
    else:
        for g, recs in zip(got, per_batch, strict=True):
            last = {r["k"]: r for r in recs}
            assert g == list(last.values())


def test_definitions_that_cannot_work_are_refused() -> None:
    with pytest.raises(PipelineDefinitionError, match=r"key column 'q' is not in the input"):
        BatchAggregate("a", "q", AGGS, SCHEMA)
    with pytest.raises(PipelineDefinitionError, match=r"sum of 'bad' over type string"):
        BatchAggregate("a", "x", {"bad": Agg("sum", "k")}, SCHEMA)
    with pytest.raises(PipelineDefinitionError, match=r"reads column 'zz'"):
        BatchAggregate("a", "k", {"m": Agg("max", "zz")}, SCHEMA)
    with pytest.raises(PipelineDefinitionError, match=r"kind must be one of .*, got 'median'"):
        BatchAggregate("a", "k", {"m": Agg("median", "x")}, SCHEMA)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="has type double"):
        BatchAggregate("a", "f", AGGS, SCHEMA)


def test_a_batch_that_fails_leaves_state_as_it_was() -> None:
    def boom(t: pa.Table) -> pa.Array:
        if t.num_rows and pc.max(t["n"]).as_py() > 2:
            raise ValueError("too many")
        return t["n"]

    ctx = Ctx()
    agg = BatchAggregate(
        "agg", "k", {"n": Agg("count")}, SCHEMA, derive={"d": boom}, emit="updates"
    )
    batch = pa.RecordBatch.from_pylist([{"k": "a", "x": 1, "f": 1.0}] * 2, schema=SCHEMA)
    agg.fold(batch, ctx.state)
    with pytest.raises(RecordError, match=r"operator 'agg': derive 'd' failed: too many"):
        agg.fold(batch, ctx.state)
    assert ctx.state.get("a") == [2]


def test_integer_keys_and_an_empty_batch() -> None:
    schema = pa.schema([("id", pa.int64()), ("v", pa.float64())])
    agg = BatchAggregate("agg", "id", {"s": Agg("sum", "v"), "m": Agg("mean", "v")}, schema)
    ctx = Ctx()
    agg.fold(pa.RecordBatch.from_pylist([], schema=schema), ctx.state)
    agg.fold(
        pa.RecordBatch.from_pylist([{"id": 2, "v": 1.0}, {"id": 1, "v": 3.0}], schema=schema),
        ctx.state,
    )
    agg.fold(pa.RecordBatch.from_pylist([{"id": 2, "v": 2.0}], schema=schema), ctx.state)
    assert agg.finals(ctx.state).to_pylist() == [
        {"id": 1, "s": 3.0, "m": 3.0},
        {"id": 2, "s": 3.0, "m": 1.5},
    ]


def test_an_integer_sum_that_overflows_in_a_batch_is_an_error_not_a_wrap() -> None:
    schema = pa.schema([("k", pa.string()), ("x", pa.int64())])
    agg = BatchAggregate("agg", "k", {"s": Agg("sum", "x")}, schema)
    ctx = Ctx()
    big = pa.RecordBatch.from_pylist(
        [{"k": "a", "x": 2**62}, {"k": "b", "x": 2**62}], schema=schema
    )
    agg.fold(big, ctx.state)  # large, but no key's sum overflows
    assert agg.finals(ctx.state).to_pylist() == [{"k": "a", "s": 2**62}, {"k": "b", "s": 2**62}]
    two = pa.RecordBatch.from_pylist([{"k": "a", "x": 2**62}] * 2, schema=schema)
    with pytest.raises(RecordError, match=r"sum 's' of key 'a' is 9223372036854775808 within"):
        agg.fold(two, ctx.state)
    assert ctx.state.get("a") == [2**62]  # state as it was
