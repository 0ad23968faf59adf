"""The error a job stops with when a record is bad and there is no dead-letter channel.

A bad record fails the same way on every attempt, so the error is *deterministic*: the
Spark task does not retry it, the driver stops the job at once and ``spillway run``
prints the error as its one last line (:func:`abort_message`). That line names the
subtask, where the record came from (``topic[partition]@offset`` or ``file:line``),
what was wrong, and the fix.

The runner processes and writes records in batches; when a batch fails, the functions
here find the first record that fails alone, so the error can name its origin.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from spillway.channels.errors import RecordError, RecordTooLargeError, SpillwayError
from spillway.channels.ids import SubtaskId
from spillway.recovery.job.origins import Origin, Origins, Same
from spillway.recovery.job.plan import Record, Rejected
from spillway.recovery.runtime.deadletter import DeadLetters, dead_letter_topic
from spillway.recovery.runtime.sinklimit import SinkRefusal


def one_line(text: str) -> str:
    """``text`` with its line breaks folded: the terminal's last line says it all."""
    return " ".join(text.split())


def fix_hint(subtask: SubtaskId, what: str) -> str:
    """The sentence every bad-record error ends with."""
    return (
        f"Nothing from there on is committed; fix {what}, or run with --dead-letter to "
        f"divert bad records to {dead_letter_topic(subtask.job)}"
    )


def first_failing(
    records: Sequence[Record], call: Callable[[list[Record]], Any]
) -> tuple[int, Exception] | None:
    """Index of the first record ``call([record])`` raises on, with the error (``None``:
    every record passes alone)."""
    for k, r in enumerate(records):
        try:
            call([r])
        except Exception as e:
            return k, e
    return None


def _where(origins: Origins, k: int, n: int) -> tuple[Origin | None, str]:
    origin = origins.at(k)
    if origin is None:
        return None, f"record {k + 1} of {n} in its batch"
    if isinstance(origins, Same) and n > 1:
        return origin, f"the record at {origin} (record {k + 1} of {n} in that message)"
    return origin, f"the record at {origin}"


def process_failure(
    subtask: SubtaskId,
    operator: str,
    records: Sequence[Record],
    origins: Origins,
    error: Exception,
    call: Callable[[list[Record]], Any],
) -> RecordError:
    """The error for ``operator``'s function raising ``error`` on a batch of ``records``.

    Re-runs the records one by one to name the first that fails (the operators change
    keyed state only after a whole call succeeds, and nothing of this attempt is
    committed after the error).
    """
    found = first_failing(records, call)
    k, cause = found if found is not None else (0, error)
    return _named(
        RecordError,
        subtask,
        _where(origins, k, len(records)),
        lambda where: (
            f"operator {operator!r} failed on {where}: {type(cause).__name__}: "
            f"{one_line(str(cause))}"
        ),
        "the function or the input",
    )


def emit_failure(
    subtask: SubtaskId,
    operator: str,
    records: Sequence[Record],
    origins: Origins,
    error: RecordError,
    write: Callable[[list[Record]], Any],
) -> RecordError:
    """The error for a batch of ``records`` ``operator`` emitted that its writers refused.

    Writes them one by one to name the first refused record and its origin (what it
    wrote of the batch belongs to a transaction that is never committed).
    """
    found = first_failing(records, write)
    k, cause = found if found is not None else (0, error)
    return _named(
        type(cause) if isinstance(cause, RecordError) else RecordError,
        subtask,
        _where(origins, k, len(records)),
        lambda where: (
            f"operator {operator!r} emitted a record it cannot write ({where}): "
            f"{one_line(str(cause))}"
        ),
        "the input or the schema",
    )


def sink_failure(
    subtask: SubtaskId,
    operator: str,
    records: Sequence[Record],
    origins: Origins,
    refusal: SinkRefusal,
) -> RecordError:
    """The error for the sink of ``operator`` refusing some of ``records`` as too large
    for its topic: names the first refused record, its origin, its size, the limit and
    the setting to raise."""
    k, reason = refusal.refused[0]
    return _named(
        RecordTooLargeError,
        subtask,
        _where(origins, k, len(records)),
        lambda where: f"the sink of operator {operator!r} cannot write {where}: {reason}",
        "the limit or the record",
    )


def _named(
    kind: type[RecordError],
    subtask: SubtaskId,
    found: tuple[Origin | None, str],
    what: Callable[[str], str],
    fix: str,
) -> RecordError:
    """A ``kind`` error of ``subtask`` about the record ``found`` (its origin, and where
    it was as :func:`_where` says it): ``what(where)`` went wrong; ``fix`` it."""
    origin, where = found
    return kind(
        f"{subtask}: {what(where)}. {fix_hint(subtask, fix)}",
        subtasks=[subtask],
        origin=None if origin is None else str(origin),
    )


def source_failure(subtask: SubtaskId, operator: str, bad: Rejected) -> RecordError:
    """The error for an input the source ``operator`` could not turn into a record."""
    return RecordError(
        f"{subtask}: source {operator!r} cannot read {bad.origin}: {bad.error}. "
        f"{fix_hint(subtask, 'the input')}",
        subtasks=[subtask],
        origin=str(bad.origin),
    )


def abort_message(subtask: SubtaskId, error: BaseException) -> str:
    """The one line ``spillway run`` ends with when ``error`` stops ``subtask``.

    Names the subtask, the record's origin if known, and for a bad record the fix.
    """
    text = one_line(str(error)) or type(error).__name__
    if str(subtask) not in text:
        text = f"{subtask}: {text}"
    origin = error.origin if isinstance(error, RecordError) else None
    if origin and origin not in text:
        text = f"{text} (at {origin})"
    if isinstance(error, RecordError) and "--dead-letter" not in text:
        text = f"{text}. {fix_hint(subtask, 'the input')}"
    return text


def failure_fields(subtask: SubtaskId, error: BaseException) -> dict[str, Any]:
    """What a ``failed`` event records besides the error: is it ``deterministic`` (the
    driver then stops the job instead of letting Spark retry), the ``origin``, and the
    one-line ``message`` to stop with."""
    return {
        "deterministic": isinstance(error, SpillwayError) and error.deterministic,
        "origin": error.origin if isinstance(error, RecordError) else None,
        "message": abort_message(subtask, error),
    }


def run_diverting(
    run: Callable[[Sequence[Record]], Iterable[Record]],
    records: Sequence[Record],
    origins: Origins,
    subtask: SubtaskId,
    operator: str,
    dead_letters: DeadLetters | None,
) -> list[Record]:
    """``run`` (an operator's call) on one input message's ``records`` and its output.

    If the call raises: without ``dead_letters``, the :class:`RecordError` of
    :func:`process_failure` naming the first bad record; with them, the records are run one
    by one and only those that fail are sent to the dead letters (stage ``process``, with
    their origin). A failed call leaves keyed state as it was: the operators write state
    only after a whole call succeeds, so re-running the good records is safe.
    """

    def alone(rs: Sequence[Record]) -> list[Record]:  # re-runs records to find the bad one
        return list(run(rs))

    try:
        return alone(records)
    except Exception as e:
        if dead_letters is None:
            raise process_failure(subtask, operator, records, origins, e, alone) from e
    out: list[Record] = []
    for k, r in enumerate(records):
        try:
            out.extend(run([r]))
        except Exception as e:
            dead_letters.send(stage="process", error=e, origin=origins.at(k), record=r)
    return out
