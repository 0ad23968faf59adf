"""Key functions over whole batches (spillway.channels.routing.batchkey): checked at definition,
routed
vectorised to the record path's partitions, and feeding aggregate_batches with results
equal to the record aggregate keyed per record."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spillway.channels.errors import PipelineDefinitionError, RecordError
from spillway.channels.ids import JobId, OperatorName, SubtaskId, TopicPartition
from spillway.channels.routing.batchkey import BatchKey, BatchKeyHash
from spillway.channels.routing.batchwrite import route_batch
from spillway.channels.routing.partitioners import KeyHash
from spillway.recovery.restore.state import ChangelogState
from spillway.spark_jobs.api.pipeline import Pipeline
from spillway.spark_jobs.operators.batchagg import Agg
from spillway.spark_jobs.operators.operators import KeyedAggregateLogic

SCHEMA = {
    "type": "record",
    "name": "Visit",
    "fields": [
        {"name": "user", "type": "string"},
        {"name": "amount", "type": "long"},
    ],
}
ARROW = pa.schema([pa.field("user", pa.string(), False), pa.field("amount", pa.int64(), False)])


def lower(b: pa.RecordBatch) -> Any:
    return pc.utf8_lower(b["user"])


def visits(n: int, start: int = 0) -> pa.RecordBatch:
    rows = [
        {"user": f"{'U' if i % 2 else 'u'}{i % 13}", "amount": i} for i in range(start, start + n)
    ]
    return pa.RecordBatch.from_pylist(rows, schema=ARROW)


def test_a_batch_key_routes_each_row_where_the_record_path_routes_its_key() -> None:
    key = BatchKey(lower, "user_lc", ARROW)
    assert key.key_type == pa.string()
    batch = visits(500)
    parts = BatchKeyHash(key, 8).route(batch)
    record_path = KeyHash(lambda r: r["user"].lower(), 8)
    seen = 0
    for p, part in parts:
        for r in part.to_pylist():
            assert record_path.targets(r) == (p,)
            assert BatchKeyHash(key, 8).targets(r) == (p,)  # a record routed alone
        seen += part.num_rows
    assert seen == 500
    # Rows keep their input order within a partition.
    assert [r["amount"] for r in parts[0][1].to_pylist()] == sorted(
        r["amount"] for r in parts[0][1].to_pylist()
    )
    assert route_batch(batch, BatchKeyHash(key, 8), 8) == parts


def test_numpy_and_pandas_results_are_keys_too() -> None:
    batch = visits(20)
    by_numpy = BatchKey(lambda b: np.asarray(b["amount"]) % 3, "k", ARROW)
    assert by_numpy.keys(batch).to_pylist() == [i % 3 for i in range(20)]
    by_pandas = BatchKey(lambda b: b.to_pandas()["user"].str.upper(), "k", ARROW)
    assert by_pandas.keys(batch).to_pylist() == [r.upper() for r in batch["user"].to_pylist()]
    assert isinstance(pd.Series([1]).to_numpy(), np.ndarray)


def test_a_per_record_function_is_refused_saying_what_to_pass() -> None:
    with pytest.raises(PipelineDefinitionError) as e:
        BatchKey(lambda r: r["user"].lower(), "k", ARROW)
    msg = str(e.value)
    assert "once per batch with a pyarrow.RecordBatch" in msg
    assert "pc.utf8_lower(b['user'])" in msg
    assert "AttributeError" in msg
    assert "aggregate(...)" in msg
    assert "key_by('column')" in msg
    with pytest.raises(PipelineDefinitionError, match="returned str"):
        BatchKey(lambda r: str(r["user"]), "k", ARROW)
    with pytest.raises(PipelineDefinitionError, match="no stable hash"):
        BatchKey(lambda b: pc.cast(b["amount"], pa.float64()), "k", ARROW)


def test_a_key_function_that_breaks_its_contract_at_run_time_is_a_record_error() -> None:
    key = BatchKey(lambda b: b["user"] if b.num_rows < 5 else b["user"][:2], "k", ARROW)
    with pytest.raises(RecordError, match="returned 2 keys of type string for 9 rows"):
        key.keys(visits(9))
    key = BatchKey(lambda b: b["amount"] if b.num_rows < 5 else b["user"], "k", ARROW)
    with pytest.raises(RecordError, match="one int64 key per row"):
        key.keys(visits(9))


class _Ctx:
    def __init__(self) -> None:
        self.subtask = SubtaskId(JobId("t"), OperatorName("agg"), 0)
        self.state = ChangelogState(TopicPartition("t-changelog", 0))
        self.watermark: int | None = None


def test_aggregate_batches_keyed_by_a_function_equals_the_record_aggregate() -> None:
    p = Pipeline("t")
    src = p.read_kafka("src", "in", schema=SCHEMA, batches=True, parallelism=2, bounded=True)
    src.key_by(lower).aggregate_batches(
        "agg", {"n": Agg("count"), "total": Agg("sum", "amount")}, key_name="user", parallelism=3
    ).print()
    plan = p.plan("t")
    edge = plan.inputs_of("agg")[0]
    part = edge.make_partitioner(0, 3)
    assert isinstance(part, BatchKeyHash)
    assert part.key.name == "user"
    description = plan.operator("agg").description
    assert description["key"] == "user"
    assert description["key_fn"].endswith("lower")
    make = plan.operator("agg").make_logic
    assert make is not None
    logic: Any = make()
    ctx = _Ctx()
    logic.open(ctx)
    assert logic.folds_per_poll
    for start in range(0, 300, 70):
        assert logic.process_batch(visits(70, start)) == []
    (finals,) = logic.on_end()
    record = KeyedAggregateLogic(
        lambda r: r["user"].lower(),
        lambda: [0, 0],
        lambda acc, r: [acc[0] + 1, acc[1] + r["amount"]],
        lambda k, acc: {"user": k, "n": acc[0], "total": acc[1]},
        "final",
    )
    rctx = _Ctx()
    record.open(rctx)  # type: ignore[arg-type]
    record.process(visits(350).to_pylist())
    assert finals.to_pylist() == list(record.on_end())
    expected: dict[str, list[int]] = {}
    for i in range(350):
        acc = expected.setdefault(f"u{i % 13}", [0, 0])
        acc[0], acc[1] = acc[0] + 1, acc[1] + i
    assert finals.to_pylist() == [
        {"user": k, "n": n, "total": t} for k, (n, t) in sorted(expected.items())
    ]


def test_aggregate_batches_refuses_a_per_record_key_function_naming_the_operator() -> None:
    p = Pipeline("t")
    src = p.read_kafka("src", "in", schema=SCHEMA, batches=True)
    with pytest.raises(PipelineDefinitionError, match="operator 'agg': key_by"):
        src.key_by(lambda r: r["user"].lower()).aggregate_batches("agg", {"n": Agg("count")})
    # The record aggregate still takes it, record by record.
    src.key_by(lambda r: r["user"].lower()).aggregate(
        "rec",
        init=lambda: 0,
        add=lambda n, r: n + 1,
        result=lambda k, n: {"user": k, "amount": n},
        schema=SCHEMA,
    ).print()
