"""Watermarks of an operator with several named inputs (pure bookkeeping, no I/O).

An operator's watermark is the minimum over its inputs; an input's watermark is the
minimum over its upstream writers (each writer of each partition it reads). A writer
that ended holds nothing back; a writer that announced it is idle is left out until it
speaks again; an input whose live writers are all idle is left out of the operator's
minimum in the same way (docs/architecture.md, Event time).

When everything still live is idle, the result is the largest watermark any idle writer
reported, as Flink's status valve does: what they promised before falling quiet still
holds, and a sampled watermark must not fall back to None because the last writers went
idle between two samples.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["InputMark", "WriterMark", "combine", "input_mark"]


@dataclass(frozen=True)
class WriterMark:
    """What one upstream writer of an input last said: ended, idle, its watermark."""

    ended: bool
    idle: bool
    watermark: int | None  # None: it has not sent one yet


@dataclass(frozen=True)
class InputMark:
    """The state of one input: its watermark, whether it is idle, whether it ended.

    ``watermark`` is None while a live, non-idle writer has not reported one (the input
    then holds the operator back), or when no idle writer ever reported one.
    """

    watermark: int | None
    idle: bool  # it has live writers and every one of them is idle
    ended: bool  # every writer ended (or it has none)


def input_mark(writers: Iterable[WriterMark]) -> InputMark:
    """Combine the writers of one input (see the module docstring)."""
    active: list[int] = []
    quiet: list[int] = []
    live = waiting = 0
    for w in writers:
        if w.ended:
            continue
        live += 1
        if w.idle:
            if w.watermark is not None:
                quiet.append(w.watermark)
        elif w.watermark is None:
            waiting += 1
        else:
            active.append(w.watermark)
    if waiting:
        return InputMark(None, False, False)
    if active:
        return InputMark(min(active), False, False)
    return InputMark(max(quiet) if quiet else None, live > 0, live == 0)


def combine(inputs: Mapping[str, InputMark]) -> int | None:
    """The operator's watermark over its named inputs: the minimum over inputs neither
    ended nor idle (None while one of them has none yet); with every live input idle,
    the largest watermark they reported; None when all ended or nothing was reported."""
    active: list[int] = []
    quiet: list[int] = []
    for mark in inputs.values():
        if mark.ended:
            continue
        if mark.idle:
            if mark.watermark is not None:
                quiet.append(mark.watermark)
            continue
        if mark.watermark is None:
            return None
        active.append(mark.watermark)
    if active:
        return min(active)
    return max(quiet) if quiet else None
