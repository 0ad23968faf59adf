"""Durations as the pipeline API takes them: a ``datetime.timedelta`` (whole
milliseconds) or integer milliseconds."""

from __future__ import annotations

import datetime

from spillway.channels.errors import PipelineDefinitionError

Duration = datetime.timedelta | int


def millis(value: object, what: str, where: str, *, minimum: int = 1) -> int:
    """``value`` (a ``timedelta`` or integer ms) in integer milliseconds, at least
    ``minimum``; :class:`PipelineDefinitionError` naming ``where`` and ``what`` otherwise."""
    if isinstance(value, datetime.timedelta):
        ms, rest = divmod(value, datetime.timedelta(milliseconds=1))
        if rest:
            raise PipelineDefinitionError(
                f"{where}: {what} {value!r} is not a whole number of milliseconds"
            )
    elif isinstance(value, int) and not isinstance(value, bool):
        ms = value
    else:
        raise PipelineDefinitionError(
            f"{where}: {what} must be a datetime.timedelta or integer milliseconds, got {value!r}"
        )
    if ms < minimum:
        raise PipelineDefinitionError(f"{where}: {what} must be >= {minimum} ms, got {value!r}")
    return int(ms)
