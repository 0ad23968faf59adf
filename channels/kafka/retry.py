"""Bounded, logged retries of retriable Kafka errors (tenacity) and error classification."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException
from tenacity import (
    RetryCallState,
    retry,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

log = logging.getLogger("spillway.kafka")
T = TypeVar("T")

FENCING_CODES = frozenset(
    {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
)


# Transient conditions librdkafka does not always flag retriable() on errors raised by
# synchronous calls (e.g. get_watermark_offsets right after a topic was created).
TRANSIENT_CODES = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._WAIT_COORD,
        # Right after a broker restart a request may carry a leader epoch the broker has
        # not caught up with yet; Kafka marks it retriable (UnknownLeaderEpochException).
        KafkaError.UNKNOWN_LEADER_EPOCH,
    }
)


def kafka_error(exc: BaseException) -> KafkaError | None:
    """The :class:`KafkaError` inside a :class:`KafkaException`, else ``None``."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def is_retriable(exc: BaseException) -> bool:
    """True for errors librdkafka marks retriable (and never for fatal or abortable ones)."""
    err = kafka_error(exc)
    if err is None or err.fatal() or err.txn_requires_abort():
        return False
    return bool(err.retriable() or err.code() in TRANSIENT_CODES)


def is_fenced(err: KafkaError) -> bool:
    """True when a newer producer with our transactional id has taken over (by code only:
    other fatal errors, e.g. authorization, are not a zombie's problem)."""
    return err.code() in FENCING_CODES


# Metadata not propagated yet (a topic just created, a leader just elected): expected and
# handled by the retry, so logged at DEBUG; if the retries run out, the error is raised.
PROPAGATION_CODES = frozenset(
    {
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
    }
)


def _log_retry(state: RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome else None
    err = kafka_error(exc) if exc is not None else None
    quiet = err is not None and err.code() in PROPAGATION_CODES
    log.log(
        logging.DEBUG if quiet else logging.WARNING,
        "retriable Kafka error in %s (attempt %d): %s",
        getattr(state.fn, "__name__", "call"),
        state.attempt_number,
        exc,
    )


def retrying(
    attempts: int = 6, max_wait_s: float = 4.0, *, except_codes: frozenset[int] = frozenset()
) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Retry retriable Kafka errors up to ``attempts`` times with backoff, logging each
    (never those with a code in ``except_codes``)."""

    def should_retry(exc: BaseException) -> bool:
        err = kafka_error(exc)
        return is_retriable(exc) and not (err is not None and err.code() in except_codes)

    return retry(
        retry=retry_if_exception(should_retry),
        stop=stop_after_attempt(attempts),
        wait=wait_exponential(multiplier=0.1, max=max_wait_s),
        before_sleep=_log_retry,
        reraise=True,
    )
