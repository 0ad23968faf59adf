"""The chaos suite's bookkeeping without a broker: schedule, output check, kill count."""

from __future__ import annotations

import pytest

from chaos.check import (
    attempts_by_subtask,
    change_mismatches,
    check_output,
    kill_mismatches,
    replay_outside,
)
from chaos.pipeline import OPERATORS, reference
from chaos.schedule import CHAOS_POINTS, make_schedule
from spillway.recovery.runtime.faults import parse


def test_schedule_is_seeded_hits_every_point_and_respects_the_attempt_limit() -> None:
    a = make_schedule(7, 16, OPERATORS, 2, max_per_subtask=3)
    assert a == make_schedule(7, 16, OPERATORS, 2, max_per_subtask=3)
    assert a != make_schedule(8, 16, OPERATORS, 2, max_per_subtask=3)
    assert len(a.crashes) == 16
    assert all(n >= 1 for n in a.by_point().values())
    assert set(a.by_point()) == set(CHAOS_POINTS)
    # The chaos job checkpoints on intervals: points only other modes reach are not planned.
    assert not {"after-final-commit", "after-partial-commit"} & set(CHAOS_POINTS)
    assert max(a.kills().values()) <= 3
    assert sum(a.kills().values()) == 16
    # Attempts of one subtask die in order 0, 1, 2, ...: each retry is the next attempt.
    for s, k in a.kills().items():
        attempts = [c.attempt for c in a.crashes if f"{c.operator}[{c.index}]" == s]
        assert attempts == list(range(k))
    assert all(c.nth == 1 for c in a.crashes if c.point == "restore")
    assert parse(a.spec()) == list(a.crashes)


def test_schedule_rejects_impossible_plans() -> None:
    with pytest.raises(ValueError, match="cannot hit all"):
        make_schedule(1, 3, OPERATORS, 2)
    with pytest.raises(ValueError, match="do not fit"):
        make_schedule(1, 30, OPERATORS, 2, max_per_subtask=3)


def test_reference_has_dense_seq_per_key_and_running_counts() -> None:
    rows = list(reference(1000, 10, 3))
    assert len(rows) == 1000
    k0 = [r for r in rows if r[0] == "k0000"]
    assert [r[1] for r in k0] == list(range(100))
    assert [r[2] for r in k0] == list(range(1, 101))
    assert rows == list(reference(1000, 10, 3))
    assert rows != list(reference(1000, 10, 4))


def test_exact_output_passes() -> None:
    ref = list(reference(500, 10, 1))
    rep = check_output(ref, ref)
    assert rep.exact
    assert (rep.expected, rep.committed) == (500, 500)


def test_a_repeat_is_counted_as_duplicate_and_seq_repeat() -> None:
    ref = list(reference(500, 10, 1))
    out = ref[:100] + ref[90:100] + ref[100:]  # ten records replayed
    rep = check_output(out, ref)
    assert not rep.exact
    assert (rep.duplicated, rep.lost, rep.unexpected) == (10, 0, 0)
    assert rep.seq_repeats == 10


def test_a_loss_is_counted_as_lost_and_seq_gap() -> None:
    ref = list(reference(500, 10, 1))
    out = [r for r in ref if not (r[0] == "k0003" and r[1] == 7)]
    rep = check_output(out, ref)
    assert (rep.lost, rep.duplicated, rep.seq_gaps, rep.missing_seqs) == (1, 0, 1, 1)
    assert not rep.exact


def test_a_wrong_value_is_unexpected_and_the_right_one_lost() -> None:
    ref = list(reference(50, 5, 1))
    key, seq, n, total = ref[20]
    out = [*ref[:20], (key, seq, n + 1, total), *ref[21:]]
    rep = check_output(out, ref)
    assert (rep.unexpected, rep.lost, rep.duplicated) == (1, 1, 0)
    assert rep.missing_seqs == 0  # the seq is there, with the wrong count


def _ev(kind: str, s: str, attempt: int, run: str = "r1", **kw: object) -> dict[str, object]:
    op, idx = s.rstrip("]").split("[")
    return {"event": kind, "operator": op, "index": int(idx), "attempt": attempt, "run": run, **kw}


def test_kill_count_must_equal_the_schedule() -> None:
    planned = {"a[0]": 2, "a[1]": 1}
    silent = {"a[0]": {1}}  # attempt 1 of a[0] dies while restoring: no "started"
    events = [
        _ev("fencing", "a[0]", 0),
        _ev("started", "a[0]", 0),
        _ev("fencing", "a[0]", 1),
        _ev("fencing", "a[0]", 2),
        _ev("started", "a[0]", 2),
        _ev("started", "a[1]", 0),
        _ev("started", "a[1]", 1),
        _ev("started", "b[0]", 0),
        _ev("started", "b[0]", 5, run="r2"),  # another run does not count
    ]
    subtasks = ["a[0]", "a[1]", "b[0]"]
    assert kill_mismatches(events, "r1", planned, silent, subtasks) == []
    unplanned = [*events, _ev("fencing", "b[0]", 1)]
    assert kill_mismatches(unplanned, "r1", planned, silent, subtasks) == [
        "b[0]: attempts [0, 1] seen, [0] planned"
    ]
    restore_survived = [*events, _ev("started", "a[0]", 1)]
    assert kill_mismatches(restore_survived, "r1", planned, silent, subtasks) == [
        "a[0]: attempts [0, 1, 2] started, [0, 2] expected (the others die while restoring)"
    ]
    assert len(kill_mismatches(events[:1], "r1", planned, silent, subtasks)) == 3
    assert attempts_by_subtask(events, "r1", "started")["a[0]"] == {0, 2}


def test_replay_of_a_partition_not_the_subtask_s_own_is_reported() -> None:
    inputs = {"f[0]": {"ch[0]"}, "f[1]": {"ch[1]"}}
    events = [
        _ev("started", "f[0]", 1, replay={"ch[0]": [0, 10, 10]}),
        _ev("started", "f[1]", 1, replay={"ch[0]": [0, 10, 10]}),
        _ev("finished", "f[1]", 1, replay={"ch[0]": [0, 10, 10]}),
    ]
    assert replay_outside(events, inputs) == ["f[1] attempt 1 replayed ch[0]"]


def test_live_changes_are_seeded_and_kill_one_of_the_subtasks_they_start() -> None:
    kw = {"changes": ("rescale", "upgrade"), "rescalable": ("fold",), "upgradable": ("fold",)}
    a = make_schedule(1, 16, OPERATORS, 2, **kw)  # type: ignore[arg-type]
    assert a == make_schedule(1, 16, OPERATORS, 2, **kw)  # type: ignore[arg-type]
    # The crash schedule before the changes is the one without them, for the same seed.
    assert a.crashes == make_schedule(1, 16, OPERATORS, 2).crashes
    assert all(c.generation == 0 for c in a.crashes)
    rescale, upgrade = a.changes
    assert (rescale.kind, rescale.operator, rescale.generation) == ("rescale", "fold", 1)
    assert rescale.width in (1, 3)
    assert rescale.describe() == f"rescale fold {rescale.width}"
    # The upgrade of the same operator keeps its new width, in its next generation.
    assert (upgrade.kind, upgrade.width, upgrade.generation) == ("upgrade", rescale.width, 2)
    assert upgrade.describe() == "upgrade fold"
    for ch in a.changes:
        (crash,) = ch.crashes
        assert (crash.operator, crash.attempt, crash.generation) == ("fold", 0, ch.generation)
        assert crash.index < ch.width
    (crash,) = rescale.crashes
    assert crash.point == "restore"
    assert rescale.silent_attempts() == {f"fold[{crash.index}]": {0}}
    assert parse(a.spec()) == [*a.crashes, *rescale.crashes, *upgrade.crashes]
    assert a.widths(OPERATORS, 2) == {"gen": 2, "weigh": 2, "fold": rescale.width, "sink": 2}
    assert a.slots(OPERATORS, 2) == 8 + max(0, rescale.width - 2)
    with pytest.raises(ValueError, match="unknown change"):
        make_schedule(1, 16, OPERATORS, 2, changes=("resize",))


def _change_events(request: str, answer: str = "rescaled") -> list[dict[str, object]]:
    return [
        {"event": "rescale-requested", "request": request, "target": "f", "run": "r1"},
        _ev("stopped", "f[0]", 0),
        {"event": "fencing", "operator": "f", "index": 1, "by": "rescale"},  # the driver's
        {"event": answer, "request": request, "target": "f", "run": "r1", "error": "no"},
        _ev("fencing", "f[0]", 0),
        _ev("fencing", "f[1]", 0),
        _ev("fencing", "f[2]", 0),  # dies restoring: no "started"
        _ev("fencing", "f[2]", 1),
        _ev("started", "f[0]", 0),
        _ev("started", "f[1]", 0),
        _ev("started", "f[2]", 1),
    ]


def test_a_live_change_must_restart_only_the_new_subtasks_as_planned() -> None:
    before = [_ev("fencing", "f[0]", 0), _ev("started", "f[0]", 0), _ev("started", "g[0]", 0)]
    events = before + _change_events("q1")

    def check(evs: list[dict[str, object]], width: int = 3) -> list[str]:
        return change_mismatches(evs, "r1", "q1", "f", width, {"f[2]": 1}, {"f[2]": {0}})

    assert check(events) == []
    assert check(events[:-3]) == [
        "f[0]: attempts [] started, [0] expected (the others die while restoring)",
        "f[1]: attempts [] started, [0] expected (the others die while restoring)",
        "f[2]: attempts [] started, [1] expected (the others die while restoring)",
    ]
    other = [*events, _ev("fencing", "g[0]", 1)]
    assert check(other) == ["g[0] restarted during the rescaled of f"]
    early = [*events[:4], _ev("fencing", "f[1]", 1), *events[4:]]
    assert check(early) == ["f[1] attempt 1 started while f was stopping"]
    assert check(events, width=2) == ["f[2] started, but f has 2 subtasks now"]
    unmarked = [*events[:-1], _ev("started", "f[2]", 1, handover_unmarked={"rescale": 1})]
    assert check(unmarked) == ["f[2] found no handed-over mark: {'rescale': 1}"]
    refused = before + _change_events("q1", "rescale-failed")[:4]
    assert check(refused) == ["rescale-failed (f): no"]
    assert check(before + _change_events("q1")[:2]) == ["request q1 (f): no answer yet"]
    assert check(before) == ["request q1 (f): not in the event log"]
