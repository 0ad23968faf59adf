"""Which input a record came from, for operators with several named inputs.

A plain :class:`~spillway.recovery.job.plan.Logic` sees one stream of records whatever edge they
came
over (a union). A :class:`~spillway.recovery.job.plan.MultiInputLogic` (a co-process function, a
join)
is told the name of each batch's input: the processor asks :func:`input_call` for the
function to call on a batch from a given input.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import partial

from spillway.recovery.job.plan import Logic, Record

Call = Callable[[Sequence[Record]], Iterable[Record]]


def input_call(logic: Logic, input_name: Callable[[], str] | None) -> Call:
    """What to call on a batch of records of one input (``input_name()`` names it; None:
    no channel input, e.g. a chained source): ``logic.process_input`` bound to that name
    for a logic that has it, else ``logic.process`` (the name is not asked for then)."""
    per_input = getattr(logic, "process_input", None)
    if per_input is None or input_name is None:
        return logic.process
    bound: Call = partial(per_input, input_name())
    return bound
