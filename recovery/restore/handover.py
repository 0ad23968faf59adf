"""The "handed over" mark of a live rescale (docs/architecture.md, Handover). Pure: no I/O.

A live rescale (or upgrade) stops one operator while the job runs: each of its subtasks
commits a last checkpoint marked ``handed_over`` (:mod:`spillway.offsets.checkpoint`) and stops;
the driver records the previous subtasks' latest checkpoints as the handover, and the
new subtasks continue from them (:func:`spillway.recovery.restore.rescale.handover_checkpoint`).

A previous owner whose latest checkpoint lacks the mark ended after that checkpoint
without committing its stop checkpoint: killed and not run again (a subtask killed while
stopping is normally retried by Spark, and its retry commits the mark; one whose Spark
job was cancelled, after a stop that timed out, is not). Continuing from it is still
exactly-once: like every latest checkpoint it is part of a consistent cut (what the owner
did after it was never committed; the inputs it had not checkpointed are still in the
channels), so the runtime continues from it, as it would after any crash, and records
the fact: the restorer finds it (:func:`unmarked`), the new subtask's ``started`` event
carries it (``handover_unmarked``), and ``spillway status`` shows it
(:func:`describe_unmarked`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spillway.offsets.checkpoint import Checkpoint
from spillway.recovery.restore.rescale import Rescale


@dataclass(frozen=True)
class Unmarked:
    """Previous subtasks of ``operator`` whose handed-over checkpoint (id, or None: they
    had none) carries no handed-over mark, in live rescale ``rescale``."""

    rescale: int
    operator: str
    checkpoints: Mapping[int, int | None]

    def to_json(self) -> dict[str, Any]:
        """JSON form (in a ``started`` event)."""
        return {
            "rescale": self.rescale,
            "operator": self.operator,
            "checkpoints": {str(j): c for j, c in sorted(self.checkpoints.items())},
        }


def live_handover(rescale: Rescale, operator: str) -> Rescale:
    """``rescale`` with ``operator``'s handover recorded as live (its subtasks were
    stopped while the job ran, each to commit a checkpoint marked handed over)."""
    h = rescale.operators[operator]
    ops = {**rescale.operators, operator: dataclasses.replace(h, live=True)}
    return dataclasses.replace(rescale, operators=ops)


def unmarked(
    rescale: Rescale, operator: str, handed: Mapping[int, Checkpoint | None]
) -> Unmarked | None:
    """The handed-over checkpoints (``handed``: by previous index) of ``operator`` without
    the mark, if ``rescale`` handed it over live (None: every one has it, or the rescale
    was from a savepoint, whose checkpoints are not stop checkpoints of a handover)."""
    h = rescale.operators.get(operator)
    if h is None or not h.live:
        return None
    missing = {
        j: None if c is None else int(c.checkpoint_id)
        for j, c in sorted(handed.items())
        if c is None or not c.meta.handed_over
    }
    return Unmarked(rescale.number, operator, missing) if missing else None


def describe_unmarked(events: Iterable[Mapping[str, Any]]) -> list[str]:
    """One line per previous subtask a live rescale found without its handed-over mark
    (from the ``started`` events that report it, each once), for ``spillway status``."""
    seen: dict[tuple[int, str, int], int | None] = {}
    for e in events:
        doc = e.get("handover_unmarked") if e.get("event") == "started" else None
        if not isinstance(doc, Mapping):
            continue
        for j, cid in doc.get("checkpoints", {}).items():
            seen.setdefault((int(doc["rescale"]), str(doc["operator"]), int(j)), cid)
    return [
        f"rescale {n}: {op}[{j}] died before its handed-over checkpoint; its new owners "
        + (f"continued from its latest checkpoint {cid}" if cid is not None else "started "
           "its partitions from their beginning (it had no checkpoint)")
        + " (exactly-once: what it did after that was never committed)"
        for (n, op, j), cid in sorted(seen.items())
    ]  # fmt: skip
