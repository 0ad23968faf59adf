"""spillway.spark_jobs.spark.handoverwait: which answer a new subtask launched ahead of
its live rescale's handover acts on, and the shape it then runs with."""

from __future__ import annotations

from typing import Any

import pytest

from spillway.channels.errors import RescaleError
from spillway.channels.ids import JobId
from spillway.recovery.restore.rescale import PlanShape, Rescale
from spillway.spark_jobs.spark.handoverwait import answer_for, resolve

SHAPE = PlanShape({"count": 16}, {"count": 4}, None, {}, "req1")
RESCALE = Rescale(3, ("fp",), {})


def ev(kind: str, **fields: Any) -> dict[str, Any]:
    return {"event": kind, **fields}


def test_the_answer_is_the_rescaled_event_of_the_request_or_a_stop_of_this_generation() -> None:
    op = ("count", 2)
    assert answer_for(ev("rescaled", request="req1", run="r"), "req1", "r", op)
    assert not answer_for(ev("rescaled", request="other", run="r"), "req1", "r", op)
    stop = ev("operator-stop-requested", run="r", target="count", generation=2)
    assert answer_for(stop, "req1", "r", op)
    assert not answer_for({**stop, "generation": 1}, "req1", "r", op)  # the old subtasks'
    assert not answer_for({**stop, "run": "earlier"}, "req1", "r", op)
    assert answer_for(ev("stop-requested", run="r"), "req1", "r", op)
    assert not answer_for(ev("stop-requested", run="earlier"), "req1", "r", op)


def test_the_rescaled_answer_gives_the_shape_its_rescale_record() -> None:
    shape = resolve(SHAPE, ev("rescaled", request="req1", rescale=RESCALE.to_json()), JobId("j"))
    assert shape == PlanShape({"count": 16}, {"count": 4}, RESCALE, {}, None)


def test_a_stop_ends_the_task_and_a_rescaled_event_without_a_record_is_refused() -> None:
    stop = ev("operator-stop-requested", run="r", target="count", generation=2)
    assert resolve(SHAPE, stop, JobId("j")) is None
    with pytest.raises(RescaleError, match="has no record"):
        resolve(SHAPE, ev("rescaled", request="req1"), JobId("j"))
