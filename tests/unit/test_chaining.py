"""Operator chaining: which edges fuse, what the compiled plan looks like, and how a chain
runs its members (pure: no broker, no Spark)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from spillway.channels.ids import JobId, SubtaskId
from spillway.recovery.job.plan import JobPlan
from spillway.spark_jobs.api.pipeline import Pipeline
from spillway.spark_jobs.operators.operators import ChainedLogic, MapLogic, TumblingWindowLogic
from tests.unit.pipelinefakes import CHANGELOG_CFG, CHANNEL_CFG, EVENT, counting, source


def clicks_like(chaining: bool) -> JobPlan:
    """src -> parse -> keep -> [hash] count -> out, parallelism 2 everywhere."""
    p = Pipeline("c", chaining=chaining)
    kept = source(p).map("parse", dict, schema=EVENT).filter("keep", lambda r: r["n"] >= 0)
    counting(kept.key_by(lambda r: r["key"]), parallelism=2).write_jsonl("out", "/x")
    return p.plan("j")


def shape(plan: JobPlan) -> list[tuple[str, str, list[str]]]:
    return [
        (op.name, op.kind, [m["name"] for m in op.description.get("chain", [{"name": op.name}])])
        for op in plan.operators
    ]


def test_without_chaining_every_edge_is_a_channel() -> None:
    plan = clicks_like(chaining=False)
    assert [op.name for op in plan.operators] == ["src", "parse", "keep", "count", "out"]
    assert len(plan.edges) == 4


def test_forward_edges_fuse_and_the_keyed_edge_stays_a_channel() -> None:
    plan = clicks_like(chaining=True)
    assert shape(plan) == [
        ("src", "chain", ["src", "parse", "keep"]),
        ("count", "chain", ["count", "out"]),
    ]
    (edge,) = plan.edges
    assert (edge.upstream, edge.downstream, edge.kind) == ("src", "count", "hash")
    assert edge.schema == EVENT  # what `keep` emits
    src, count = plan.operators
    assert src.make_source is not None
    assert src.make_logic is not None
    assert src.make_sink is None
    assert count.make_source is None
    assert count.make_logic is not None
    assert count.make_sink is not None
    assert count.stateful
    topics = {t.name for t in plan.topics(CHANGELOG_CFG, CHANNEL_CFG)}
    assert topics == {
        "spillway.j.ch.src.count",
        "spillway.j.ckpt.src",
        "spillway.j.ckpt.count",
        "spillway.j.changelog.count",
    }
    assert plan.subtasks()[:2] == [
        SubtaskId(JobId("j"), src.name, 0),
        SubtaskId(JobId("j"), src.name, 1),
    ]


def test_chaining_changes_the_fingerprint() -> None:
    # Checkpoints of an unchained run must not be restored into a chained plan.
    assert clicks_like(True).fingerprint != clicks_like(False).fingerprint
    assert clicks_like(True).fingerprint == clicks_like(True).fingerprint


def test_what_does_not_fuse() -> None:
    p = Pipeline("c", chaining=True)
    src = source(p)
    a = src.map("a", dict, schema=EVENT)  # src has two outputs: neither edge fuses
    b = src.map("b", dict, schema=EVENT)
    a.rebalance().map("a2", dict, schema=EVENT).write_jsonl("oa", "/x")  # rebalance: channel
    counted = counting(b.key_by(lambda r: r["key"]), parallelism=2)
    # A transform after a stateful one stays separate; the sink after it fuses.
    counted.map("fmt", dict, schema=EVENT).write_jsonl("ob", "/x")
    plan = p.plan("j")
    assert shape(plan) == [
        ("src", "source", ["src"]),
        ("a", "transform", ["a"]),
        ("b", "transform", ["b"]),
        ("a2", "chain", ["a2", "oa"]),
        ("count", "transform", ["count"]),
        ("fmt", "chain", ["fmt", "ob"]),
    ]
    assert {(e.upstream, e.downstream) for e in plan.edges} == {
        ("src", "a"),
        ("src", "b"),
        ("a", "a2"),
        ("b", "count"),
        ("count", "fmt"),
    }


def test_different_parallelism_does_not_fuse() -> None:
    p = Pipeline("c", chaining=True)
    source(p, parallelism=2).map("m", dict, schema=EVENT, parallelism=3).write_jsonl("o", "/x")
    plan = p.plan("j")
    assert shape(plan) == [("src", "source", ["src"]), ("m", "chain", ["m", "o"])]


def test_a_whole_pipeline_can_be_one_chain() -> None:
    p = Pipeline("c", chaining=True)
    source(p).map("m", dict, schema=EVENT).write_jsonl("o", "/x")
    plan = p.plan("j")
    assert shape(plan) == [("src", "chain", ["src", "m", "o"])]
    assert plan.edges == ()
    op = plan.operators[0]
    assert op.make_source is not None
    assert op.make_sink is not None


class Upper:
    """A stateless member that records what it saw."""

    def __init__(self, seen: list[str]) -> None:
        self.seen = seen

    def open(self, ctx: Any) -> None:
        self.seen.append("open")

    def process(self, records: Sequence[Any]) -> list[Any]:
        self.seen.extend(records)
        return [r.upper() for r in records]

    def on_watermark(self, watermark: int) -> Iterable[Any]:
        self.seen.append(f"wm{watermark}")
        return [f"w{watermark}"]

    def on_end(self) -> Iterable[Any]:
        self.seen.append("end")
        return ["e"]


def test_chained_logic_passes_each_members_output_on_in_order() -> None:
    first: list[str] = []
    second: list[str] = []
    chain = ChainedLogic([Upper(first), MapLogic(lambda r: r + "!"), Upper(second)])
    chain.open(None)
    assert chain.process(["a", "b"]) == ["A!", "B!"]
    # Watermark: the first member's emission goes through the later ones before they see it.
    assert chain.on_watermark(5) == ["W5!", "w5"]
    assert second[-2:] == ["w5!", "wm5"]
    assert chain.on_end() == ["E!", "e"]
    assert first == ["open", "a", "b", "wm5", "end"]
    assert second == ["open", "A!", "B!", "w5!", "wm5", "e!", "end"]


class _Ctx:
    def __init__(self) -> None:
        self.subtask = SubtaskId(JobId("j"), "w", 0)  # type: ignore[arg-type]
        self.state = _State()
        self.kafka = None
        self.watermark = None


class _State(dict[Any, Any]):
    def put(self, k: Any, v: Any) -> None:
        self[k] = v

    def delete(self, k: Any) -> None:
        del self[k]


def test_a_window_at_the_end_of_a_chain_fires_on_the_watermark() -> None:
    window = TumblingWindowLogic(
        key_fn=lambda r: r["k"],
        time_fn=lambda r: r["t"],
        size=10,
        init=lambda: 0,
        add=lambda n, _r: n + 1,
        result=lambda k, start, end, n: (k, start, end, n),
    )
    chain = ChainedLogic([MapLogic(lambda r: {**r, "k": r["k"].upper()}), window])
    chain.open(_Ctx())
    assert chain.process([{"k": "a", "t": 1}, {"k": "a", "t": 12}, {"k": "b", "t": 3}]) == []
    assert chain.on_watermark(10) == [("A", 0, 10, 1), ("B", 0, 10, 1)]
    assert chain.on_end() == [("A", 10, 20, 1)]
