"""Topic names derived from job id and operator names.

All names have the form ``spillway.<job>.<kind>.<operator>[.<operator>]``. Job ids and
operator names cannot contain '.', so a name maps back to exactly one edge or operator.
"""

from __future__ import annotations

import re

from spillway.channels.errors import ConfigError
from spillway.channels.ids import JobId, OperatorName

# Names end up inside Kafka topic names and transactional ids. Kafka allows
# [a-zA-Z0-9._-]; we keep '.' for our own separators so names stay unambiguous.
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def job_id(value: str) -> JobId:
    """``value`` as a :class:`JobId`; :class:`ConfigError` if it is not a valid name."""
    _check_name(value, "job id")
    return JobId(value)


def operator_name(value: str) -> OperatorName:
    """Return ``value`` as an :class:`OperatorName`; raise :class:`ConfigError` if invalid."""
    _check_name(value, "operator name")
    return OperatorName(value)


def is_name(value: str) -> bool:
    """True if ``value`` is a valid job id or operator name."""
    return _NAME.match(value) is not None


def _check_name(value: str, what: str) -> None:
    if not is_name(value):
        raise ConfigError(
            f"invalid {what} {value!r}: use 1-64 characters from A-Z, a-z, 0-9, '_' and '-'"
        )

PREFIX = "spillway"
_MAX_TOPIC = 249  # Kafka's limit
_LEGAL = re.compile(r"^[A-Za-z0-9._-]+$")


def channel_topic(job: JobId, upstream: OperatorName, downstream: OperatorName) -> str:
    """The topic of the edge ``upstream → downstream``; its partitions are owned by the
    downstream subtasks (spillway.recovery.restore.ownership: one each, or ranges of key groups or
    slots)."""
    return _checked(f"{PREFIX}.{job}.ch.{upstream}.{downstream}")


def changelog_topic(job: JobId, operator: OperatorName) -> str:
    """The compacted changelog of ``operator``'s keyed state; partition = subtask index."""
    return _checked(f"{PREFIX}.{job}.changelog.{operator}")


def checkpoint_topic(job: JobId, operator: OperatorName) -> str:
    """The checkpoint records of ``operator``'s subtasks; partition = subtask index."""
    return _checked(f"{PREFIX}.{job}.ckpt.{operator}")


def job_topic_prefix(job: JobId) -> str:
    """Every topic of ``job`` starts with this string (used to list and delete them)."""
    return f"{PREFIX}.{job}."


def _checked(name: str) -> str:
    if len(name) > _MAX_TOPIC or not _LEGAL.match(name):
        raise ConfigError(
            f"topic name {name!r} is not valid for Kafka (max {_MAX_TOPIC} characters "
            "from [A-Za-z0-9._-]); use a shorter job id or operator name"
        )
    return name
