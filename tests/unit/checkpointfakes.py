"""Checkpoints for tests, built from the fields by name whatever part holds them."""

from __future__ import annotations

import dataclasses
from typing import Any

from spillway.channels.ids import CheckpointId, SubtaskId
from spillway.offsets.checkpoint import (
    Checkpoint,
    CheckpointMeta,
    OperatorProgress,
    ReaderPositions,
    StatePositions,
    WriterCounts,
)

PARTS: dict[str, type[Any]] = {
    "meta": CheckpointMeta,
    "reader": ReaderPositions,
    "writers": WriterCounts,
    "state": StatePositions,
    "operator": OperatorProgress,
}
PART_OF = {f.name: part for part, cls in PARTS.items() for f in dataclasses.fields(cls)}


def checkpoint(
    subtask: SubtaskId, checkpoint_id: int, topology: str = "fp", **fields: Any
) -> Checkpoint:
    """A checkpoint of ``subtask`` with ``fields`` (``inputs=``, ``wall_time=``, ``source=``
    ...) put into their parts; a name no part has is a ``KeyError``."""
    by_part: dict[str, dict[str, Any]] = {part: {} for part in PARTS}
    by_part["meta"]["topology"] = topology
    top: dict[str, Any] = {}
    for name, value in fields.items():
        if name in ("source", "sink"):
            top[name] = value
        else:
            by_part[PART_OF[name]][name] = value
    parts = {part: PARTS[part](**kw) for part, kw in by_part.items()}
    return Checkpoint(subtask, CheckpointId(checkpoint_id), **parts, **top)


def changed(c: Checkpoint, **fields: Any) -> Checkpoint:
    """``c`` with ``fields`` replaced, each in its part (``checkpoint_id=`` at the top)."""
    top = {k: fields.pop(k) for k in ("checkpoint_id", "source", "sink") if k in fields}
    by_part: dict[str, dict[str, Any]] = {}
    for name, value in fields.items():
        by_part.setdefault(PART_OF[name], {})[name] = value
    parts = {p: dataclasses.replace(getattr(c, p), **kw) for p, kw in by_part.items()}
    return dataclasses.replace(c, **parts, **top)
