"""Restarting with changed code and topology, without a broker: the compatibility report
(recovery/job/evolution.py) and Avro schema resolution (recovery/job/avrocompat.py)."""

from __future__ import annotations

from typing import Any

from spillway.recovery.job.avrocompat import resolution_problems
from spillway.recovery.job.evolution import (
    compare,
    evolution_of,
    recorded_fingerprint,
    topology_doc,
)
from spillway.recovery.job.plan import JobPlan
from spillway.recovery.restore.rescale import with_parallelism
from spillway.spark_jobs.api.pipeline import Pipeline


def schema(*fields: str, **typed: Any) -> dict[str, Any]:
    return {
        "type": "record",
        "name": "E",
        "fields": [{"name": f, "type": "string"} for f in fields]
        + [{"name": f, **t} for f, t in typed.items()],
    }


COUNT = schema("k", n={"type": "int"})


def plan(
    count_schema: dict[str, Any] = COUNT,
    count_p: int = 2,
    count_stateful: bool = True,
    with_count: bool = True,
    branch: bool = False,
    between: bool = False,
) -> JobPlan:
    """src(2) -> count(key_by, count_p) -> out(1); ``branch``: count also -> double -> out2;
    ``between``: count -> double -> out instead."""
    pipe = Pipeline("evolve")
    src = pipe.generate("src", make=lambda i: {"k": str(i % 3)}, schema=schema("k"), count=9,
                        parallelism=2)  # fmt: skip
    if not with_count:
        src.write_jsonl("out", "/x", parallelism=1)
        return pipe.plan("j")
    if count_stateful:
        counted = src.key_by(lambda r: r["k"], max_parallelism=4).aggregate(
            "count", init=lambda: 0, add=lambda n, _r: n + 1,
            result=lambda k, n: {"k": k, "n": n}, schema=count_schema, parallelism=count_p,
        )  # fmt: skip
    else:
        counted = src.key_by(lambda r: r["k"], max_parallelism=4).map(
            "count", lambda r: {"k": r["k"], "n": 1}, schema=count_schema, parallelism=count_p
        )
    if between:
        counted.map("double", lambda r: {**r, "n": 2 * r["n"]}, schema=COUNT).write_jsonl(
            "out", "/x", parallelism=1
        )
    else:
        counted.write_jsonl("out", "/x", parallelism=1)
    if branch:
        counted.map("double", lambda r: {**r, "n": 2 * r["n"]}, schema=COUNT).write_jsonl(
            "out2", "/y", parallelism=1
        )
    return pipe.plan("j")


def lines(old: JobPlan, new: JobPlan, allow: bool = False) -> list[str]:
    report = compare("j", topology_doc(old), new, allow)
    return [c.line().strip() for c in report.changes]


def evolve(old: JobPlan, new: JobPlan, allow: bool = False) -> Any:
    widths = {op.name: op.parallelism for op in old.operators}
    groups = {op.name: op.max_parallelism for op in old.operators}
    return evolution_of(new, widths, groups, topology_doc(old), allow)


def test_the_recorded_fingerprint_is_the_one_the_last_runs_checkpoints_carry() -> None:
    # Recorded at submission with count at 2; a live rescale to 3 (or 4 = its key-group
    # count) changed what later checkpoints carry.
    doc = topology_doc(plan())
    groups = {"count": 4, "out": 32}  # out: slots behind its round-robin input
    for p in (1, 2, 3, 4):
        widths = {"count": p}
        assert (
            recorded_fingerprint(doc, widths, groups)
            == with_parallelism(plan(), widths).fingerprint
        )


def test_unchanged_code_or_only_a_new_parallelism_makes_no_report() -> None:
    assert evolve(plan(), plan()) is None
    assert evolve(plan(), with_parallelism(plan(), {"count": 3})) is None


def test_an_added_operator_on_a_new_branch_starts_empty_and_is_allowed() -> None:
    # double follows count over a forward channel: it takes count's new width.
    found = evolve(plan(), with_parallelism(plan(branch=True), {"count": 3, "double": 3}))
    assert found is not None
    report, old = found
    assert old == plan().fingerprint
    assert report.allowed
    assert [c.line().strip() for c in report.changes] == [
        "ok      operator 'double': added: starts with no state",
        "ok      operator 'out2': added: starts with no state",
        "ok      operator 'count': parallelism 2 -> 3 (rescaled from the savepoint)",
        "ok      channel count -> double: added: a new channel, read from its start",
        "ok      channel double -> out2: added: a new channel, read from its start",
    ]
    assert "(allowed)" in report.render().splitlines()[0]


def test_an_operator_inserted_into_a_channel_drops_that_channel_unless_allowed() -> None:
    refused = compare("j", topology_doc(plan()), plan(between=True), False)
    assert not refused.allowed
    assert (
        "REFUSED channel count -> out: removed: records its reader had not consumed at the "
        "savepoint are dropped (refused without --allow-dropped-state)"
    ) in [c.line().strip() for c in refused.changes]
    assert "REFUSED, nothing was started" in refused.render().splitlines()[0]
    assert compare("j", topology_doc(plan()), plan(between=True), True).allowed


def test_a_removed_stateful_operator_drops_state_refused_without_the_flag() -> None:
    assert lines(plan(), plan(with_count=False)) == [
        "REFUSED operator 'count': removed: its state is dropped "
        "(refused without --allow-dropped-state)",
        "REFUSED channel count -> out: removed: records its reader had not consumed at the "
        "savepoint are dropped (refused without --allow-dropped-state)",
        "REFUSED channel src -> count: removed: records its reader had not consumed at the "
        "savepoint are dropped (refused without --allow-dropped-state)",
        "ok      channel src -> out: added: a new channel, read from its start",
    ]
    assert compare("j", topology_doc(plan()), plan(with_count=False), True).allowed


def test_a_removed_stateless_operator_drops_no_state() -> None:
    assert lines(plan(branch=True), plan())[:2] == [
        "ok      operator 'double': removed (it had no state)",
        "ok      operator 'out2': removed (it had no state)",
    ]


def test_stateful_to_stateless_drops_state_refused_without_the_flag() -> None:
    old, new = plan(), plan(count_stateful=False)
    changes = compare("j", topology_doc(old), new, False).changes
    assert changes[0].line().strip() == (
        "REFUSED operator 'count': stateful -> stateless: its state is dropped "
        "(refused without --allow-dropped-state)"
    )
    assert not compare("j", topology_doc(old), new, False).allowed
    flagged = compare("j", topology_doc(old), new, True)
    assert flagged.allowed
    assert "stateful -> stateless" in flagged.changes[0].what


def test_compatible_schema_changes_are_allowed() -> None:
    added = schema("k", n={"type": "int"}, tag={"type": "string", "default": "none"})
    promoted = schema("k", n={"type": "long"})
    dropped = schema(n={"type": "int"})
    for new in (added, promoted, dropped):
        report = compare("j", topology_doc(plan()), plan(count_schema=new), False)
        assert report.allowed, report.render()
        assert [c.line().strip() for c in report.changes if "channel" in c.subject] == [
            "ok      channel count -> out: schema changed, compatible under Avro resolution "
            "(records of the old schema still in the channel are resolved to the new one "
            "as they are read)"
        ]


def test_an_incompatible_schema_change_is_refused_naming_channel_and_field() -> None:
    no_default = schema("k", n={"type": "int"}, tag={"type": "string"})
    narrowed = schema("k", n={"type": "string"})
    report = compare("j", topology_doc(plan()), plan(count_schema=no_default), False)
    assert not report.allowed
    refused = [c for c in report.changes if not c.allowed]
    assert [(c.subject, c.what) for c in refused] == [
        (
            "channel count -> out",
            "schema change not readable under Avro resolution: field 'tag' is new and has "
            "no default",
        )
    ]
    report = compare("j", topology_doc(plan()), plan(count_schema=narrowed), False)
    assert [c.what for c in report.changes if not c.allowed] == [
        "schema change not readable under Avro resolution: field 'n': type int cannot be "
        "read as string"
    ]


def test_avro_resolution_rules() -> None:
    rec = {"type": "record", "name": "R", "fields": [
        {"name": "inner", "type": {"type": "record", "name": "I",
                                   "fields": [{"name": "x", "type": "int"}]}},
        {"name": "u", "type": ["null", "int"]},
        {"name": "e", "type": {"type": "enum", "name": "C", "symbols": ["A", "B"]}},
        {"name": "xs", "type": {"type": "array", "items": "float"}},
    ]}  # fmt: skip

    def with_field(i: int, t: Any) -> dict[str, Any]:
        fields = list(rec["fields"])
        fields[i] = {**fields[i], "type": t}
        return {**rec, "fields": fields}

    assert resolution_problems(rec, rec) == []
    assert resolution_problems(rec, with_field(1, ["null", "long"])) == []  # union, promoted
    assert resolution_problems(rec, with_field(3, {"type": "array", "items": "double"})) == []
    assert (
        resolution_problems(
            rec, with_field(2, {"type": "enum", "name": "C", "symbols": ["A", "B", "Z"]})
        )
        == []
    )
    assert resolution_problems(
        rec, with_field(2, {"type": "enum", "name": "C", "symbols": ["A"]})
    ) == ["field 'e': enum C lost symbols ['B'] and has no default"]
    assert resolution_problems(rec, with_field(1, "int")) == [
        "field 'u': type null cannot be read as int"
    ]
    inner = {"type": "record", "name": "I", "fields": [{"name": "x", "type": "boolean"}]}
    assert resolution_problems(rec, with_field(0, inner)) == [
        "field 'inner.x': type int cannot be read as boolean"
    ]
    assert resolution_problems(rec, with_field(3, {"type": "array", "items": "int"})) == [
        "field 'xs[]': type float cannot be read as int"
    ]
    assert resolution_problems("int", "long") == []
    assert resolution_problems("long", "int") == ["record: type long cannot be read as int"]
