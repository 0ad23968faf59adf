"""The per-operator Spark job bookkeeping (spillway.spark_jobs.spark.opjobs), without Spark or a
broker."""

from __future__ import annotations

import pytest

from spillway.channels.errors import ConfigError
from spillway.channels.ids import JobId, OperatorName
from spillway.recovery.observe.events import operator_stop
from spillway.spark_jobs.spark.opjobs import (
    Action,
    OperatorJobs,
    OpState,
    operator_groups,
)

A, B, C = OperatorName("a"), OperatorName("b"), OperatorName("c")


def book() -> OperatorJobs:
    return OperatorJobs(JobId("j"), operator_groups([(A, 2), (B, 3), (C, 1)]))


def rows(*statuses: str) -> list[dict[str, object]]:
    return [{"status": s} for s in statuses]


def test_each_operator_owns_its_slice_of_the_plan_s_subtasks() -> None:
    assert operator_groups([(A, 2), (B, 3), (C, 1)]) == [(A, [0, 1]), (B, [2, 3, 4]), (C, [5])]
    b = book()
    assert b.operators() == [A, B, C]
    assert b.get("b").subtasks == (2, 3, 4)
    assert b.states() == {A: OpState.RUNNING, B: OpState.RUNNING, C: OpState.RUNNING}


def test_run_is_done_when_every_job_ended_and_rows_keep_the_plan_s_order() -> None:
    b = book()
    b.ended(C, 0, rows("finished"))
    b.ended(A, 0, rows("finished", "finished"))
    assert not b.done()
    b.ended(B, 0, rows("skipped", "finished", "finished"))
    assert b.done()
    assert [r["status"] for r in b.rows()] == ["finished"] * 2 + ["skipped"] + ["finished"] * 3
    assert b.failure is None


def test_stopped_operator_is_held_until_started_again_in_a_new_generation() -> None:
    b = book()
    assert b.group(B) == "spillway.j.b.0"
    assert b.request_stop("b") == 0
    assert b.get("b").state is OpState.STOPPING
    b.ended(A, 0, rows("finished", "finished"))
    b.ended(C, 0, rows("finished"))
    assert not b.done()  # b is still stopping
    b.ended(B, 0, rows("stopped", "stopped", "stopped"))
    assert b.get("b").state is OpState.HELD
    assert not b.done()  # held: it will be started again
    assert b.start("b") == 1
    assert b.group(B) == "spillway.j.b.1"
    b.ended(B, 0, rows("finished"))  # a stale generation changes nothing
    assert b.get("b").state is OpState.RUNNING
    b.ended(B, 1, rows("finished", "finished", "finished"))
    assert b.done()
    assert [r["status"] for r in b.rows()][2:5] == ["finished"] * 3


def test_sigterm_while_an_operator_is_held_ends_the_run() -> None:
    b = book()
    b.request_stop("a")
    b.ended(A, 0, rows("stopped", "stopped"))
    b.stop_all()
    b.ended(B, 0, rows("stopped") * 3)
    b.ended(C, 0, rows("stopped"))
    assert b.done()
    with pytest.raises(ConfigError, match="stopping"):
        b.start("a")


def test_first_failure_cancels_all_and_later_cancelled_jobs_are_not_causes() -> None:
    b = book()
    first, later = RuntimeError("b failed 1 times"), RuntimeError("Job cancelled")
    assert b.failed(B, 0, first) is Action.CANCEL_ALL
    assert b.failed(A, 0, later) is Action.NOTHING
    assert not b.done()
    b.ended(C, 0, rows("finished"))  # it ended before the cancel reached it
    assert b.done()
    assert b.failure == (B, first)
    assert b.states() == {A: OpState.CANCELLED, B: OpState.FAILED, C: OpState.CANCELLED}


def test_failure_watch_cancel_is_not_a_failure_of_any_operator() -> None:
    b = book()
    b.request_stop("c")
    b.cancel_all()
    for op in (A, B, C):
        assert b.failed(op, 0, RuntimeError("Job cancelled")) is Action.NOTHING
    assert b.done()
    assert b.failure is None


def test_forced_stop_cancels_only_that_operator_s_group_and_holds_it() -> None:
    b = book()
    b.request_stop("a")
    assert b.force_stop("a") == "spillway.j.a.0"
    assert b.failed(A, 0, RuntimeError("Job group cancelled")) is Action.NOTHING
    assert b.get("a").state is OpState.HELD
    assert b.failure is None
    assert b.start("a") == 1
    assert not b.get("a").cancelled


def test_transitions_outside_the_table_are_refused_with_the_operator_named() -> None:
    b = book()
    with pytest.raises(ConfigError, match="of job j is running; it cannot become running"):
        b.start("a")
    b.ended(A, 0, rows("finished"))
    with pytest.raises(ConfigError, match="is ended; it cannot become stopping"):
        b.request_stop("a")
    with pytest.raises(ConfigError, match="is ended"):
        b.force_stop("a")
    with pytest.raises(ConfigError, match=r"no operator 'x'; its operators are a, b, c"):
        b.request_stop("x")


def test_an_operator_fused_into_a_chain_names_its_chain_s_job() -> None:
    b = OperatorJobs(JobId("j"), operator_groups([(A, 1), (C, 1)]), {"m": A})
    assert b.get("m") is b.get("a")
    assert b.request_stop("m") == 0
    assert b.get("a").state is OpState.STOPPING


def test_subtasks_honour_only_their_operator_s_stop_of_their_generation() -> None:
    e = {"event": "operator-stop-requested", "target": "b", "generation": 1}
    assert operator_stop(e, ("b", 1))
    assert not operator_stop(e, ("b", 0))  # the job that stop ended; not its successor
    assert not operator_stop(e, ("b", 2))
    assert not operator_stop(e, ("a", 1))
    assert not operator_stop(e, None)
    assert not operator_stop({**e, "event": "stop-requested"}, ("b", 1))
