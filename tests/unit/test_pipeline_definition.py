"""Pipeline definition: validation errors, compiled plans, topics, fingerprints, loading.

Pure: nothing here starts Spark or talks to a broker.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import pytest

from spillway.channels.errors import ConfigError, PipelineDefinitionError, SpillwayError
from spillway.channels.ids import JobId, OperatorName, SubtaskId
from spillway.channels.kafka.admin import TopicSpec
from spillway.channels.routing.keygroups import DEFAULT_MAX_PARALLELISM
from spillway.channels.routing.partitioners import Broadcast, Forward, KeyHash, RoundRobin
from spillway.offsets.store import CHECKPOINT_TOPIC_CONFIG
from spillway.recovery.job.loader import load_plan
from spillway.recovery.job.plan import JobPlan
from spillway.spark_jobs.api.pipeline import Pipeline
from spillway.spark_jobs.api.windowspec import Tumbling
from spillway.spark_jobs.spark.jobconfig import JobConfig
from tests.unit.pipelinefakes import (
    CHANGELOG_CFG,
    CHANNEL_CFG,
    COUNT,
    EVENT,
    counting,
    make_event,
    source,
)


def linear(parallelism: int = 2, schema: dict[str, Any] = EVENT, count_p: int = 3) -> Pipeline:
    """src(p) -> parse(p) -> [hash] count(count_p) -> out(count_p)."""
    p = Pipeline("lin")
    parsed = source(p, parallelism=parallelism).map("parse", dict, schema=schema)
    counting(parsed.key_by(lambda r: r["key"]), parallelism=count_p).write_jsonl("out", "/x")
    return p


def problems_of(p: Pipeline) -> str:
    with pytest.raises(PipelineDefinitionError) as info:
        p.validate()
    return str(info.value)


# -- validation errors -------------------------------------------------------------------


def test_a_valid_pipeline_validates() -> None:
    linear().validate()


def test_duplicate_operator_name_is_named_with_the_fix() -> None:
    p = Pipeline("dup")
    src = source(p)
    src.map("step", dict, schema=EVENT).write_jsonl("out", "/x")
    src.map("step", dict, schema=EVENT).write_jsonl("out2", "/x")
    msg = problems_of(p)
    assert "pipeline 'dup' is invalid" in msg
    assert "operator name 'step' is used twice; give each operator its own name" in msg


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2"])
def test_parallelism_below_one_or_not_an_int_is_rejected(bad: Any) -> None:
    p = Pipeline("par")
    source(p).map("step", dict, schema=EVENT, parallelism=bad).write_jsonl(
        "out", "/x", parallelism=2
    )
    msg = problems_of(p)
    assert f"operator 'step' has parallelism {bad!r}; use an integer >= 1" in msg


@pytest.mark.parametrize("bad", [0, -1, 2.0, None])
def test_source_parallelism_below_one_or_not_an_int_is_rejected(bad: Any) -> None:
    p = Pipeline("par")
    source(p, parallelism=bad).write_jsonl("out", "/x", parallelism=1)
    assert f"operator 'src' has parallelism {bad!r}; use an integer >= 1" in problems_of(p)


def test_every_problem_is_listed_at_once() -> None:
    p = Pipeline("many")
    src = source(p, parallelism=0)
    src.map("a.b", dict, schema=EVENT, parallelism=1).write_jsonl("out", "/x")
    src.map("out", dict, schema=EVENT, parallelism=1)
    msg = problems_of(p)
    assert "operator 'src' has parallelism 0" in msg
    assert "operator name 'out' is used twice" in msg
    assert "invalid operator name 'a.b'" in msg


def test_cycle_is_named_with_the_fix() -> None:
    p = Pipeline("cyc")
    a = source(p).map("a", dict, schema=EVENT)
    a.map("b", dict, schema=EVENT).write_jsonl("out", "/x")
    p.add_edge("b", "a")
    msg = problems_of(p)
    assert "the graph has a cycle: a -> b -> a; remove one of these edges" in msg


def test_self_loop_is_a_cycle() -> None:
    p = Pipeline("cyc")
    source(p).map("a", dict, schema=EVENT).write_jsonl("out", "/x")
    p.add_edge("a", "a")
    assert "the graph has a cycle: a -> a; remove one of these edges" in problems_of(p)


def test_operator_without_path_to_a_sink_is_named_with_the_fix() -> None:
    p = Pipeline("dangling")
    src = source(p)
    src.write_jsonl("out", "/x")
    src.map("orphan", dict, schema=EVENT).map("orphan2", dict, schema=EVENT)
    msg = problems_of(p)
    for name in ("orphan", "orphan2"):
        assert (
            f"operator {name!r} has no path to a sink; add write_jsonl(), write_kafka() or "
            "print() after it, or remove it"
        ) in msg
    assert "'src' has no path" not in msg


def test_source_without_any_sink_is_dangling() -> None:
    p = Pipeline("nosink")
    source(p)
    assert "operator 'src' has no path to a sink" in problems_of(p)


def test_forward_between_different_parallelisms_is_named_with_the_fix() -> None:
    p = Pipeline("fwd")
    source(p, parallelism=2).forward().map("wide", dict, schema=EVENT, parallelism=3).write_jsonl(
        "out", "/x"
    )
    msg = problems_of(p)
    assert (
        "forward edge 'src' (parallelism 2) -> 'wide' (parallelism 3): forward needs equal "
        "parallelism; use rebalance() or key_by()"
    ) in msg


def test_forward_via_add_edge_is_checked_too() -> None:
    p = Pipeline("fwd")
    src = source(p, parallelism=2)
    src.write_jsonl("out", "/x")
    src.map("m", dict, schema=EVENT).write_jsonl("out3", "/x", parallelism=3)
    p.add_edge("m", "out", "forward")
    p.add_edge("src", "out3", "forward")
    msg = problems_of(p)
    assert "forward edge 'src' (parallelism 2) -> 'out3' (parallelism 3)" in msg
    assert "'m' (parallelism 2) -> 'out'" not in msg


def test_no_source_is_named_with_the_fix() -> None:
    msg = problems_of(Pipeline("empty"))
    assert "the pipeline has no source; start it with generate() or read_files()" in msg


@pytest.mark.parametrize("bad", ["a.b", "", "with space", "x" * 65, "ünï"])
def test_invalid_operator_name_is_named_with_the_fix(bad: str) -> None:
    p = Pipeline("names")
    source(p).map(bad, dict, schema=EVENT).write_jsonl("out", "/x")
    msg = problems_of(p)
    assert f"invalid operator name {bad!r}: use 1-64 characters from A-Z, a-z, 0-9" in msg


def test_edge_naming_an_unknown_operator_is_named() -> None:
    p = Pipeline("unknown")
    source(p).write_jsonl("out", "/x")
    p.add_edge("src", "nope")
    p.add_edge("ghost", "out")
    msg = problems_of(p)
    assert "edge src -> nope names unknown operator 'nope'" in msg
    assert "edge ghost -> out names unknown operator 'ghost'" in msg


def test_sink_with_a_downstream_and_source_with_an_input_are_rejected() -> None:
    p = Pipeline("ends")
    src = source(p)
    src.write_jsonl("out", "/x")
    src.map("m", dict, schema=EVENT).write_jsonl("out2", "/x")
    p.add_edge("out", "m")
    p.add_edge("m", "src")
    msg = problems_of(p)
    assert "sink 'out' cannot have a downstream operator ('m')" in msg
    assert "source 'src' cannot have an input (from 'm')" in msg


@pytest.mark.parametrize("emit", ["FINAL", "update", "", "all"])
def test_emit_must_be_final_or_updates(emit: str) -> None:
    keyed = source(Pipeline("emit")).key_by(lambda r: r["key"])
    with pytest.raises(PipelineDefinitionError) as info:
        counting(keyed, "agg", emit=emit)
    assert str(info.value) == (
        f"operator 'agg': emit must be one of 'final', 'updates', got {emit!r}"
    )


@pytest.mark.parametrize("size", [0, -5])
def test_window_size_must_be_positive(size: int) -> None:
    keyed = source(Pipeline("win")).key_by(lambda r: r["key"])
    with pytest.raises(PipelineDefinitionError) as info:
        keyed.window("win", Tumbling(size), event_time=lambda r: r["n"])
    assert str(info.value) == f"operator 'win': window size must be >= 1 ms, got {size}"


def test_plan_validates_first() -> None:
    with pytest.raises(PipelineDefinitionError, match="has no source"):
        Pipeline("empty").plan("j")


def test_plan_rejects_an_invalid_job_id() -> None:
    with pytest.raises(ConfigError, match=r"invalid job id 'a\.b'"):
        linear().plan("a.b")


def unplannable_routing(routing: str) -> Pipeline:
    p = Pipeline("routing")
    src = source(p)
    src.write_jsonl("out", "/x")
    src.map("m", dict, schema=EVENT).write_jsonl("out2", "/x")
    p.add_edge("src", "out2", routing)  # add_edge takes no key function, so "hash" cannot work
    return p


@pytest.mark.parametrize("routing", ["hash", "bogus"])
def test_add_edge_with_unplannable_routing_fails_plan_with_a_definition_error(
    routing: str,
) -> None:
    with pytest.raises(PipelineDefinitionError, match=re.escape(repr(routing))):
        unplannable_routing(routing).plan("j")


def test_add_edge_without_a_key_for_hash_routing_is_reported_by_validate() -> None:
    # validate() promises to list every problem, naming the edge.
    msg = problems_of(unplannable_routing("hash"))
    assert "src" in msg
    assert "out2" in msg
    assert "'hash' without a key" in msg


def test_add_edge_with_an_unknown_routing_is_refused_where_it_is_declared() -> None:
    with pytest.raises(PipelineDefinitionError) as info:
        unplannable_routing("bogus")
    assert str(info.value) == (
        "edge src -> out2: routing must be one of 'auto', 'forward', 'hash', 'rebalance', "
        "'broadcast', got 'bogus'"
    )


# -- the compiled plan -------------------------------------------------------------------


def diamond() -> Pipeline:
    """Two sources merging into one operator; source b is declared after the rest of the graph."""
    p = Pipeline("diamond")
    a = source(p, "a", parallelism=2)
    merged = a.map("merge", dict, schema=EVENT, parallelism=2)
    keyed = merged.key_by(lambda r: r["key"]).map("keyed", dict, schema=EVENT, parallelism=3)
    keyed.broadcast().write_jsonl("out", "/x", parallelism=2)
    source(p, "b", parallelism=1)
    p.add_edge("b", "merge")
    return p


def test_operators_are_in_topological_order_sources_first() -> None:
    plan = diamond().plan("j")
    assert [op.name for op in plan.operators] == ["a", "b", "merge", "keyed", "out"]
    assert [op.kind for op in plan.operators] == [
        "source",
        "source",
        "transform",
        "transform",
        "sink",
    ]
    assert plan.job == JobId("j")
    assert plan.bounded is True


def test_operator_plans_carry_one_factory_of_their_kind() -> None:
    plan = linear().plan("j")
    for op in plan.operators:
        factories = {
            "source": op.make_source,
            "transform": op.make_logic,
            "sink": op.make_sink,
        }
        assert [k for k, f in factories.items() if f is not None] == [op.kind]
    assert [(op.name, op.stateful) for op in plan.operators] == [
        ("src", False),
        ("parse", False),
        ("count", True),
        ("out", False),
    ]


def test_unbounded_generator_makes_the_plan_unbounded() -> None:
    p = Pipeline("inf")
    p.generate("src", make=make_event, schema=EVENT, count=None).write_jsonl("out", "/x")
    assert p.plan("j").bounded is False


def test_subtasks_follow_operator_order_then_index() -> None:
    plan = linear(parallelism=2, count_p=3).plan("j")
    j = JobId("j")
    expected = [
        SubtaskId(j, OperatorName(name), i)
        for name, p in [("src", 2), ("parse", 2), ("count", 3), ("out", 3)]
        for i in range(p)
    ]
    assert plan.subtasks() == expected


def test_parallelism_is_inherited_from_upstream_unless_given() -> None:
    p = Pipeline("inherit")
    source(p, parallelism=4).map("m", dict, schema=EVENT).write_jsonl("out", "/x", parallelism=1)
    plan = p.plan("j")
    assert [(op.name, op.parallelism) for op in plan.operators] == [
        ("src", 4),
        ("m", 4),
        ("out", 1),
    ]


def test_edge_routing() -> None:
    p = Pipeline("routes")
    src = source(p, parallelism=2)
    same = src.map("same", dict, schema=EVENT)  # auto, equal p -> forward
    wider = same.map("wider", dict, schema=EVENT, parallelism=3)  # auto, 2 != 3 -> rebalance
    keyed = counting(wider.key_by(lambda r: r["key"]), parallelism=2)  # hash
    keyed.broadcast().write_jsonl("out", "/x", parallelism=4)  # broadcast
    src.rebalance().write_jsonl("out_rr", "/x")  # explicit rebalance at equal p
    plan = p.plan("j")
    kinds = {(e.upstream, e.downstream): e.kind for e in plan.edges}
    assert kinds == {
        ("src", "same"): "forward",
        ("same", "wider"): "rebalance",
        ("wider", "count"): "hash",
        ("count", "out"): "broadcast",
        ("src", "out_rr"): "rebalance",
    }
    parts = {
        (e.upstream, e.downstream): e.make_partitioner(1, plan.operator(e.downstream).parallelism)
        for e in plan.edges
    }
    assert parts[("src", "same")] == Forward(1, 2)
    assert isinstance(parts[("same", "wider")], RoundRobin)
    assert [parts[("same", "wider")].targets({}) for _ in range(4)] == [(1,), (2,), (0,), (1,)]
    hashed = parts[("wider", "count")]
    assert isinstance(hashed, KeyHash)
    assert hashed.downstream_parallelism == 2
    assert hashed.targets({"key": "k1"}) == hashed.targets({"key": "k1", "n": 99})
    assert parts[("count", "out")] == Broadcast(4)
    assert list(parts[("count", "out")].targets({})) == [0, 1, 2, 3]


def test_add_edge_auto_routing_follows_parallelism() -> None:
    plan = diamond().plan("j")
    kinds = {(e.upstream, e.downstream): e.kind for e in plan.edges}
    assert kinds == {
        ("a", "merge"): "forward",
        ("merge", "keyed"): "hash",
        ("keyed", "out"): "broadcast",
        ("b", "merge"): "rebalance",
    }


def test_edges_carry_the_upstream_schema() -> None:
    plan = linear(schema=COUNT).plan("j")
    schemas = {(e.upstream, e.downstream): e.schema for e in plan.edges}
    assert schemas == {("src", "parse"): EVENT, ("parse", "count"): COUNT, ("count", "out"): COUNT}


def test_filter_keeps_the_input_schema_and_reduce_the_keyed_one() -> None:
    p = Pipeline("schemas")
    kept = source(p).filter("keep", lambda r: r["n"] > 0)
    kept.key_by(lambda r: r["key"]).reduce("red", lambda a, b: b).write_jsonl("out", "/x")
    plan = p.plan("j")
    assert [e.schema for e in plan.edges] == [EVENT, EVENT, EVENT]
    assert plan.operator("red").stateful is True


def test_topics_of_a_plan() -> None:
    plan = linear(parallelism=2, count_p=3).plan("j")
    topics = plan.topics(CHANGELOG_CFG, CHANNEL_CFG)
    assert topics == [
        TopicSpec("spillway.j.ch.src.parse", 2, CHANNEL_CFG),
        # Keyed edge and changelog: one partition per key group (docs/architecture.md; was 3, the
        # downstream parallelism, before key groups).
        TopicSpec("spillway.j.ch.parse.count", DEFAULT_MAX_PARALLELISM, CHANNEL_CFG),
        TopicSpec("spillway.j.ch.count.out", 3, CHANNEL_CFG),
        TopicSpec("spillway.j.ckpt.src", 2, CHECKPOINT_TOPIC_CONFIG),
        TopicSpec("spillway.j.ckpt.parse", 2, CHECKPOINT_TOPIC_CONFIG),
        TopicSpec("spillway.j.ckpt.count", 3, CHECKPOINT_TOPIC_CONFIG),
        TopicSpec("spillway.j.changelog.count", DEFAULT_MAX_PARALLELISM, CHANGELOG_CFG),
        TopicSpec("spillway.j.ckpt.out", 3, CHECKPOINT_TOPIC_CONFIG),
    ]


def test_channel_partitions_follow_the_downstream_parallelism() -> None:
    plan = diamond().plan("j")
    channels = {t.name: t.partitions for t in plan.topics({}, {}) if ".ch." in t.name}
    assert channels == {
        "spillway.j.ch.a.merge": 2,
        "spillway.j.ch.b.merge": 2,
        "spillway.j.ch.merge.keyed": DEFAULT_MAX_PARALLELISM,  # key groups (was 3)
        "spillway.j.ch.keyed.out": 2,
    }
    assert not [t for t in plan.topics({}, {}) if ".changelog." in t.name]


def test_max_parallelism_sets_keyed_partitions_and_is_in_the_fingerprint() -> None:
    def job(m: int | None) -> Pipeline:
        p = Pipeline("kg")
        keyed = source(p).key_by(lambda r: r["key"], max_parallelism=m)
        keyed.reduce("red", lambda a, b: b, parallelism=3).write_jsonl("out", "/x")
        return p

    plan = job(16).plan("j")
    parts = {t.name: t.partitions for t in plan.topics({}, {})}
    assert parts["spillway.j.ch.src.red"] == 16
    assert parts["spillway.j.changelog.red"] == 16
    assert parts["spillway.j.ch.red.out"] == 3  # not keyed: one partition per subtask
    assert plan.operator("red").max_parallelism == 16
    assert job(None).plan("j").operator("red").max_parallelism == DEFAULT_MAX_PARALLELISM
    assert job(16).plan("j").fingerprint != job(17).plan("j").fingerprint
    with pytest.raises(PipelineDefinitionError, match=r"operator 'red'.*max_parallelism 2"):
        job(2).plan("j")


def test_window_operator_gets_a_changelog() -> None:
    p = Pipeline("win")
    source(p).key_by(lambda r: r["key"]).window(
        "win", Tumbling(10), event_time=lambda r: r["n"]
    ).aggregate(
        init=lambda: 0,
        add=lambda n, _r: n + 1,
        result=lambda k, s, e, n: {"key": k, "count": n},
        schema=COUNT,
    ).write_jsonl("out", "/x")
    names = [t.name for t in p.plan("j").topics({}, {}) if ".changelog." in t.name]
    assert names == ["spillway.j.changelog.win"]


def test_fingerprint_is_stable_when_rebuilt_identically() -> None:
    assert linear().plan("j").fingerprint == linear().plan("j").fingerprint
    assert diamond().plan("j").fingerprint == diamond().plan("j").fingerprint


def test_fingerprint_changes_with_parallelism() -> None:
    base = linear(parallelism=2, count_p=3).plan("j").fingerprint
    assert linear(parallelism=3, count_p=3).plan("j").fingerprint != base
    assert linear(parallelism=2, count_p=4).plan("j").fingerprint != base


def test_fingerprint_changes_with_a_schema() -> None:
    base = linear(schema=EVENT).plan("j").fingerprint
    renamed = {**EVENT, "name": "Event2"}
    assert linear(schema=COUNT).plan("j").fingerprint != base
    assert linear(schema=renamed).plan("j").fingerprint != base


def test_fingerprint_changes_with_routing() -> None:
    def build(rebalance: bool) -> JobPlan:
        p = Pipeline("r")
        src = source(p)
        (src.rebalance() if rebalance else src).map("m", dict, schema=EVENT).write_jsonl(
            "out", "/x"
        )
        return p.plan("j")

    assert build(True).fingerprint != build(False).fingerprint


# -- loading a plan by reference ---------------------------------------------------------


@pytest.mark.parametrize(
    "ref", ["spillway.examples.clicks", ":pipeline", "spillway.examples.clicks:", ""]
)
def test_load_plan_bad_reference_format(ref: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_plan(ref, "j")
    assert str(info.value) == (
        f"pipeline {ref!r} must look like MODULE:PIPELINE, e.g. spillway.examples.clicks:pipeline"
    )


def test_load_plan_missing_module() -> None:
    with pytest.raises(ConfigError) as info:
        load_plan("spillway.examples.no_such_module:pipeline", "j")
    msg = str(info.value)
    assert "cannot import pipeline module 'spillway.examples.no_such_module'" in msg
    assert "is it on PYTHONPATH" in msg


def test_load_plan_relative_module_is_a_config_error() -> None:
    # A leading '.' makes importlib raise TypeError, which load_plan does not translate.
    with pytest.raises(ConfigError, match=re.escape("'.clicks'")):
        load_plan(".clicks:pipeline", "j")


def test_load_plan_missing_attribute() -> None:
    with pytest.raises(ConfigError) as info:
        load_plan("spillway.examples.clicks:nope", "j")
    assert str(info.value) == "module 'spillway.examples.clicks' has no attribute 'nope'"


@pytest.mark.parametrize("attr", ["SECTIONS", "CLICK", "Counter"])
def test_load_plan_object_without_plan(attr: str) -> None:
    ref = f"spillway.examples.clicks:{attr}"
    with pytest.raises(PipelineDefinitionError) as info:
        load_plan(ref, "j")
    assert str(info.value) == f"{ref} is not a pipeline (it has no plan() method)"


def test_load_plan_function_that_needs_arguments_is_a_clear_error() -> None:
    # make_click(i) is callable but not a pipeline factory: calling it without arguments
    # raises a bare TypeError instead of an error that names the reference.
    ref = "spillway.examples.clicks:make_click"
    with pytest.raises(SpillwayError, match=re.escape(ref)):
        load_plan(ref, "j")


def test_load_plan_clicks_example(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("CLICKS_RECORDS", "CLICKS_OUT", "CLICKS_PARALLELISM", "CLICKS_RATE"):
        monkeypatch.delenv(var, raising=False)
    plan = load_plan("spillway.examples.clicks:pipeline", "clicks-1")
    assert isinstance(plan, JobPlan)
    assert plan.job == "clicks-1"
    assert [(op.name, op.parallelism, op.kind) for op in plan.operators] == [
        ("clicks", 2, "source"),
        ("enrich", 2, "transform"),
        ("count", 2, "transform"),
        ("out", 2, "sink"),
    ]
    assert [e.kind for e in plan.edges] == ["forward", "hash", "forward"]
    assert plan.bounded is True
    # The example declares the variables it reads; the runtime knows no example's prefix.
    assert plan.env_prefixes == ("CLICKS_",)
    assert JobConfig("m:p", "j", "b").env_prefixes == ("SPILLWAY_",)


def test_env_prefixes_must_be_non_empty_strings() -> None:
    with pytest.raises(PipelineDefinitionError, match="env_prefixes"):
        Pipeline("p", env_prefixes=("APP_", ""))


def test_load_plan_clicks_example_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLICKS_PARALLELISM", "3")
    monkeypatch.setenv("CLICKS_RECORDS", "100")
    plan = load_plan("spillway.examples.clicks:pipeline", "c")
    assert {op.parallelism for op in plan.operators} == {3}
    assert plan.operator("clicks").description == {"source": "generator", "count": 100}


def test_load_plan_clicks_example_settings_win_over_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CLICKS_PARALLELISM", "3")
    monkeypatch.setenv("CLICKS_RECORDS", "100")
    monkeypatch.setenv("CLICKS_CHAINING", "1")
    conf = {
        "clicks.parallelism": "4",
        "clicks.records": "250",
        "clicks.rate": "12.5",
        "clicks.chaining": "0",
        "clicks.out": "/data/out/c",
    }
    plan = load_plan("spillway.examples.clicks:pipeline", "c", conf)
    assert [(op.name, op.parallelism) for op in plan.operators] == [
        ("clicks", 4),
        ("enrich", 4),
        ("count", 4),
        ("out", 4),
    ]
    assert plan.operator("clicks").description == {"source": "generator", "count": 250}
    source = plan.operator("clicks").make_source
    assert isinstance(source, functools.partial)
    assert source.args[1:4] == (250, 4, 12.5)  # count, parallelism, rate
    sink = plan.operator("out").make_sink
    assert isinstance(sink, functools.partial)
    assert sink.args == ("/data/out/c", "out")


def test_load_plan_accepts_a_pipeline_object(monkeypatch: pytest.MonkeyPatch) -> None:
    import spillway.examples.clicks as clicks

    monkeypatch.setattr(clicks, "built", clicks.build(10, "/x", 1), raising=False)
    plan = load_plan("spillway.examples.clicks:built", "c")
    assert [op.parallelism for op in plan.operators] == [1, 1, 1, 1]


def test_final_results_of_an_unbounded_source_are_rejected() -> None:
    from spillway.examples import clicks

    p = Pipeline("x")
    s = p.generate("gen", make=clicks.make_click, schema=clicks.CLICK, count=None)
    s.key_by(lambda r: r["url"]).aggregate(
        "count",
        init=lambda: 0,
        add=lambda n, r: n + 1,
        result=lambda k, n: {"page": k, "section": "", "views": n},
        schema=clicks.PAGE_COUNT,
    ).print()
    with pytest.raises(PipelineDefinitionError, match=r"'count' emits its results only when"):
        p.plan("j")
    clicks.build(None, "/tmp/unused").plan("j")  # the example switches to emit="updates"
