"""What every Spillway producer shares: produce with back-pressure, delivery tracking,
acknowledged offsets, and Spillway's error policy for what the broker reports.

:class:`spillway.channels.kafka.producer.TransactionalProducer` adds transactions (the subtask's
producer); :class:`spillway.channels.kafka.idempotent.IdempotentProducer` is this alone (outputs of
the at-least-once guarantee). Error policy: see spillway.channels.kafka.producer.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from spillway.channels.errors import (
    ProducerFencedError,
    RecordTooLargeError,
    SpillwayError,
    TransactionAbortedError,
)
from spillway.channels.ids import Offset, TopicPartition
from spillway.channels.kafka.limits import producer_bytes
from spillway.channels.kafka.retry import is_fenced, kafka_error

log = logging.getLogger("spillway.producer")
# The broker refused the message for its size: the same message fails on every retry.
_TOO_LARGE = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE})


def pending_kafka_exception(exc: BaseException) -> KafkaException | None:
    """The :class:`KafkaException` a ``SystemError`` from a client call was chained to, if any.

    Follows ``__cause__``/``__context__`` (CPython chains the exception that was pending
    when a C call returned a result anyway) a few links deep.
    """
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return None
        if isinstance(seen, KafkaException):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


class ProducerBase:
    """A producer named ``name`` in every message. Construction does no network I/O."""

    def __init__(self, config: dict[str, Any], name: str) -> None:
        self.name = name
        self._config = config
        self._producer: Producer | None = None
        self._in_txn = False  # only a transactional producer opens transactions
        self._delivery_error: KafkaError | None = None
        self._failed_delivery = ""  # " to <topic> (the record at <origin>)" of that error
        self._last_offsets: dict[TopicPartition, int] = {}
        self.txn_bytes = 0  # key + value bytes produced since the transaction began

    def start(self) -> None:
        """Create the client."""
        self._producer = Producer(self._config)

    def close(self) -> None:
        """Serve what is pending and drop the client."""
        if self._producer is not None:
            try:
                self._serve(self._producer.flush, 0)
            except KafkaException as e:  # the fatal error that ended the process, seen again
                log.info("flush on close of %s: %s", self.name, e)
            self._producer = None
        self._in_txn = False

    @property
    def message_max_bytes(self) -> int:
        """The largest message this producer sends (its ``message.max.bytes``)."""
        return producer_bytes(self._config)

    def cap_batch_size(self, size: int) -> None:
        """Keep this producer's record batches within ``size`` bytes (``batch.size``), e.g.
        below a sink topic's ``max.message.bytes``. Before :meth:`start` only; a producer
        recreated later keeps the cap."""
        if self._producer is not None:
            raise SpillwayError(f"producer {self.name}: batch.size capped after start()")
        current = int(self._config.get("batch.size", size))
        self._config["batch.size"] = min(current, size)

    @property
    def _p(self) -> Producer:
        if self._producer is None:
            raise SpillwayError(f"producer {self.name} used before start()")
        return self._producer

    def produce(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]] | None = None,
        *,
        track: bool = True,
        origin: str | None = None,
    ) -> None:
        """Queue one message (in the open transaction, if any); blocks briefly on a full queue.

        ``track=False``: no per-message delivery report (one Python callback per message
        costs more than a small message itself). :meth:`last_offset` then ignores the
        message; a failed delivery still fails the transaction's commit. ``origin``: where
        the record in the message came from; a failed delivery names it.
        """
        self.txn_bytes += len(value or b"") + len(key or b"")
        on_delivery: Callable[[KafkaError | None, Message], None] | None = None
        if origin is not None:
            on_delivery = functools.partial(self._on_delivery, origin=origin)
        elif track:
            on_delivery = self._on_delivery
        hdrs: list[tuple[str, str | bytes | None]] | None = list(headers) if headers else None
        self._produce_waiting(topic, partition, key, value, hdrs, on_delivery)

    def produce_many(self, topic: str, messages: Iterable[tuple[bytes | None, bytes]]) -> None:
        """Queue ``(key, value)`` messages to ``topic`` (in the open transaction, if any), placed
        by librdkafka's partitioner (by key), without per-message delivery reports.

        The sink path: one Python call per batch instead of per message, and the short
        positional ``produce`` form (keyword arguments cost more than a small message).
        A failed delivery still fails the transaction's commit.
        """
        produce = self._p.produce
        size = 0
        try:
            for key, value in messages:
                size += len(value) + (len(key) if key else 0)
                try:
                    produce(topic, value, key)
                except BufferError:
                    self._produce_waiting(topic, -1, key, value, None, None)
        except KafkaException as e:
            raise self._translate(e, topic) from e
        finally:
            self.txn_bytes += size

    def _produce_waiting(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, str | bytes | None]] | None,
        on_delivery: Callable[[KafkaError | None, Message], None] | None,
    ) -> None:
        for _ in range(1000):
            try:
                self._p.produce(
                    topic,
                    value,
                    key,
                    partition=partition,
                    headers=headers,
                    on_delivery=on_delivery,
                )
                return
            except BufferError:
                # librdkafka's queue is full: serve delivery reports to make room.
                self.poll(0.05)
            except KafkaException as e:
                raise self._translate(e, topic, len(value or b"") + len(key or b"")) from e
        raise TransactionAbortedError(
            f"producer {self.name}: local queue stayed full for 50 s; broker too slow"
        )

    def poll(self, timeout_s: float = 0.0) -> None:
        """Serve delivery reports; a fatal error (e.g. fencing) raises its Spillway error."""
        try:
            self._serve(self._p.poll, timeout_s)
        except KafkaException as e:
            raise self._translate(e) from e

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait until every queued message is acknowledged; raise if any delivery failed."""
        try:
            remaining = self._serve(self._p.flush, timeout_s)
        except KafkaException as e:
            raise self._translate(e) from e
        if remaining:
            self._abort_quietly()
            raise TransactionAbortedError(
                f"producer {self.name}: {remaining} messages not delivered within "
                f"{timeout_s:.0f}s; transaction aborted"
            )
        self._raise_delivery_error()

    def last_offset(self, tp: TopicPartition) -> Offset | None:
        """The highest offset acknowledged for ``tp`` by this producer (after :meth:`flush`)."""
        off = self._last_offsets.get(tp)
        return None if off is None else Offset(off)

    def _on_delivery(self, err: KafkaError | None, msg: Message, origin: str | None = None) -> None:
        # Runs inside poll()/flush(); never raise here (exceptions in callbacks get lost).
        if err is not None:
            if self._delivery_error is None:
                self._delivery_error = err
                where = f" (the record at {origin})" if origin else ""
                self._failed_delivery = f" to {msg.topic()}{where}"
            return
        tp = TopicPartition(msg.topic() or "", msg.partition() or 0)
        off = msg.offset()
        if off is not None and off > self._last_offsets.get(tp, -1):
            self._last_offsets[tp] = off

    def _serve(self, call: Callable[[float], int], timeout_s: float) -> int:
        """``poll``/``flush`` with librdkafka's fatal errors surfaced as :class:`KafkaException`.

        confluent-kafka 2.16 raises a fatal error (e.g. ``_FENCED``) from ``flush``/``poll``
        and may then still call a delivery callback with that exception pending; CPython
        turns this into a ``SystemError`` whose cause is the real ``KafkaException``.
        Unwrapping it lets a fenced zombie be recognised as fenced (and stop) instead of
        failing with an unexplained error that Spark would retry.
        """
        try:
            return call(timeout_s)
        except SystemError as e:
            inner = pending_kafka_exception(e)
            if inner is None and e.__cause__ is None and e.__context__ is None:
                # "returned NULL without setting an exception": the same fatal error, with
                # nothing chained (seen when fencing is found during flush); ask the
                # producer for it rather than fail with an error Spark would retry.
                fatal = self._fatal_behind_bare_system_error()
                if fatal is not None:
                    raise KafkaException(fatal) from e
            if inner is None:
                raise
            raise inner from e

    def _fatal_behind_bare_system_error(self) -> KafkaError | None:
        """The producer's fatal error, if it has one (None here: only a transactional
        producer can ask librdkafka for it)."""
        return None

    def _raise_delivery_error(self) -> None:
        err = self._delivery_error
        if err is None:
            return
        if is_fenced(err):
            raise ProducerFencedError(f"producer {self.name} fenced: {err.str()}")
        if err.fatal():
            raise SpillwayError(f"producer {self.name}: fatal {err.name()}: {err.str()}")
        self._abort_quietly()
        if err.code() in _TOO_LARGE:
            raise RecordTooLargeError(
                f"producer {self.name}: the broker refused a message"
                f"{self._failed_delivery} as too large ({err.str()}); raise that topic's "
                "max.message.bytes (and the broker's message.max.bytes), or make the "
                "record smaller"
            )
        raise TransactionAbortedError(
            f"producer {self.name}: a message{self._failed_delivery} could not be "
            f"delivered ({err.str()}); transaction aborted"
        )

    def _translate(self, e: KafkaException, topic: str = "", size: int = 0) -> SpillwayError:
        """The Spillway error for ``e`` (``topic``, ``size``: of the message a produce
        call failed on, if that is where it came from)."""
        err = kafka_error(e)
        if err is None:
            return SpillwayError(str(e))
        if err.code() in _TOO_LARGE:
            # Refused for its size (by this client's message.max.bytes before sending, or
            # by the broker): deterministic, so the job stops at once rather than retrying.
            # A produce call refuses before queuing: the transaction stays usable, so the
            # record can go to the dead letters in it; a refusal seen later spoiled it.
            if not topic:
                self._abort_quietly()
            what = f"a message of {size} bytes" if size else "a message"
            to = f" to {topic}" if topic else ""
            limit = producer_bytes(self._config)
            return RecordTooLargeError(
                f"producer {self.name}: {what}{to} is too large ({err.str()}); raise the "
                f"producer's message.max.bytes (now {limit}; a client setting) and that "
                "topic's max.message.bytes, or make the record smaller"
            )
        if err.code() in (KafkaError._FATAL, KafkaError._STATE):
            # _STATE: a produce refused because the transaction is in a fatal state, e.g.
            # this producer was fenced by a newer incarnation while messages were queued
            # (seen in the chaos suite's zombie fault). The cause tells a fenced zombie,
            # which must stop quietly, from anything else; the subtask stops either way,
            # so aborting to learn it costs nothing.
            err = self._original_fatal(err)
        if is_fenced(err):
            self._in_txn = False
            return ProducerFencedError(
                f"producer {self.name} was fenced by a newer incarnation "
                f"({err.name()}: {err.str()}); this process must stop"
            )
        if err.fatal():
            self._in_txn = False
            return SpillwayError(
                f"producer {self.name} hit a fatal error {err.name()}: {err.str()} "
                "(e.g. missing ACLs for the transactional id, or a transaction the broker "
                "timed out); fix the cause and restart the job"
            )
        if err.txn_requires_abort():
            self._abort_quietly()
            return TransactionAbortedError(
                f"transaction of {self.name} aborted after {err.name()}: {err.str()}"
            )
        return SpillwayError(f"producer {self.name}: {err.name()}: {err.str()}")

    def _abort_quietly(self) -> None:
        """Take back what a failed delivery spoiled: a transactional producer aborts its
        open transaction; without one, what was delivered stays (at-least-once)."""

    def _original_fatal(self, err: KafkaError) -> KafkaError:
        """The error behind a bare ``_FATAL`` (a transactional producer can ask for it)."""
        return err
