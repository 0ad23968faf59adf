"""The transactional producer of one subtask, with Spillway's error policy.

Policy (DESIGN §8, librdkafka's transactional API contract):

* retriable errors: retried a bounded number of times, each retry logged;
* ``txn_requires_abort()``: the transaction is aborted and :class:`TransactionAbortedError`
  raised — the subtask restarts from its last checkpoint;
* fencing (or any fatal error): :class:`ProducerFencedError` — fatal for this process only;
* a commit that times out: the producer is closed and recreated (``init_transactions``
  aborts or completes whatever was pending) and :class:`TransactionAbortedError` is
  raised, because the outcome of that commit is unknown until the checkpoint is re-read.
  Retrying the commit blindly could let a late commit end a later transaction;
* ``send_offsets_to_transaction`` that does not return although its timeout passed
  (librdkafka can wait for a dead group coordinator forever): abandoned after
  :data:`SEND_OFFSETS_DEADLINE_S`, :class:`TransactionAbortedError`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka import TopicPartition as CkTopicPartition

from channels.config import KafkaSettings
from channels.errors import (
    BrokerUnavailableError,
    ProducerFencedError,
    RecordTooLargeError,
    SpillwayError,
    TransactionAbortedError,
)
from channels.ids import Offset, TopicPartition
from channels.kafka.retry import is_fenced, kafka_error, retrying

log = logging.getLogger("spillway.producer")
# The broker refused the message for its size: the same message fails on every retry.
_TOO_LARGE = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE})

# init_transactions is called in steps this long (see TransactionalProducer._init_transactions),
# again after a step that timed out or ended in a retriable error.
_INIT_WAIT_S = 0.02
_INIT_PAUSE_S = {KafkaError.CONCURRENT_TRANSACTIONS: 0.005}  # before asking again; else 0.1 s

T = TypeVar("T")

SEND_OFFSETS_TIMEOUT_S = 30.0
# librdkafka's send_offsets_to_transaction() can block past its timeout while the group
# coordinator is down (confluentinc/librdkafka#5456, #5511: its coordinator request timer
# is never checked). Found by make compose-test: a subtask hung for minutes after one of
# three brokers was killed. Past this deadline the call is abandoned.
SEND_OFFSETS_DEADLINE_S = SEND_OFFSETS_TIMEOUT_S + 15.0


def call_within(deadline_s: float, call: Callable[[], T], what: str) -> T:
    """``call()`` run in a helper thread; :class:`TransactionAbortedError` past the deadline.

    For client calls that may ignore their own timeout. A call still running at the
    deadline is abandoned in its (daemon) thread; the caller must then give up the
    producer, as it does after any aborted transaction: the subtask restarts.
    """
    outcome: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as e:  # handed to the caller's thread below
            outcome.append((False, e))

    thread = threading.Thread(target=run, name=f"spillway {what}", daemon=True)
    thread.start()
    thread.join(deadline_s)
    if not outcome:
        raise TransactionAbortedError(
            f"{what} did not return within {deadline_s:.0f}s although told to give up "
            f"after {SEND_OFFSETS_TIMEOUT_S:.0f}s (librdkafka waits for a dead coordinator: "
            "confluentinc/librdkafka#5456); restart the subtask from its last checkpoint"
        )
    ok, value = outcome[0]
    if not ok:
        raise value
    result: T = value
    return result


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


class TransactionalProducer:
    """One ``transactional.id``'s producer. Construction does no network I/O; call :meth:`start`."""

    def __init__(
        self,
        settings: KafkaSettings,
        transactional_id: str,
        *,
        transaction_timeout_ms: int = 60_000,
        init_timeout_s: float = 60.0,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        self.transactional_id = transactional_id
        self._config: dict[str, Any] = {
            **settings.base(),
            "transactional.id": transactional_id,
            "enable.idempotence": True,
            "transaction.timeout.ms": transaction_timeout_ms,
            "linger.ms": 5,
            **(extra or {}),
        }
        self._init_timeout_s = init_timeout_s
        self._producer: Producer | None = None
        self._in_txn = False
        self._delivery_error: KafkaError | None = None
        self._failed_delivery = ""  # " to <topic> (the record at <origin>)" of that error
        self._last_offsets: dict[TopicPartition, int] = {}
        self.txn_bytes = 0  # key + value bytes produced in the open transaction

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Create the producer and fence any older incarnation (``init_transactions``)."""
        self._producer = Producer(self._config)
        self._init()

    @retrying(attempts=4)
    def _init(self) -> None:
        try:
            self._init_transactions()
        except KafkaException as e:
            err = kafka_error(e)
            if err is not None and err.code() == KafkaError._TIMED_OUT:
                raise BrokerUnavailableError(
                    f"init_transactions for {self.transactional_id} timed out after "
                    f"{self._init_timeout_s:.0f}s: is the broker at "
                    f"{self._config['bootstrap.servers']} up and is its transaction log "
                    "replicated (transaction.state.log.replication.factor <= brokers)?"
                ) from e
            if err is not None and not err.retriable():
                raise self._translate(e) from e
            raise
        log.info("producer %s initialised (older incarnations fenced)", self.transactional_id)

    def _init_transactions(self) -> None:
        """``init_transactions`` in short waits, ``init_timeout_s`` in all.

        Why: a restart's InitProducerId finds the older incarnation's transaction open; the
        coordinator starts aborting it and answers CONCURRENT_TRANSACTIONS, and librdkafka
        asks again only after a fixed 500 ms (``rd_kafka_idemp_pid_timer_restart``), while
        the abort takes milliseconds. A new call after that error asks again at once; a call
        that merely timed out resumes the request in flight (librdkafka's contract), so
        nothing is sent twice. bench.restart: fenced 0.54 s -> 0.06 s median (load ~14).
        """
        deadline = time.monotonic() + self._init_timeout_s
        while True:
            wait_s = min(_INIT_WAIT_S, deadline - time.monotonic())
            try:
                self._p.init_transactions(max(wait_s, 0.001))
                return
            except KafkaException as e:
                err = kafka_error(e)
                if err is None or time.monotonic() >= deadline:
                    raise
                if err.code() == KafkaError._TIMED_OUT:
                    continue  # the request is still in flight: wait on
                if err.fatal() or not err.retriable():
                    raise
                # CONCURRENT_TRANSACTIONS: the abort takes milliseconds. Others (the
                # coordinator moving or loading): librdkafka would wait, so do we, briefly.
                time.sleep(_INIT_PAUSE_S.get(err.code(), 0.1))

    def close(self) -> None:
        """Abort anything still open (so read_committed readers are not held back until the
        transaction times out) and drop the producer."""
        if self._producer is not None and self._in_txn:
            try:
                self._producer.abort_transaction(5)
            except KafkaException as e:  # fenced or broker gone: the broker aborts it later
                log.info("abort on close of %s: %s", self.transactional_id, e)
        if self._producer is not None:
            try:
                self._serve(self._producer.flush, 0)
            except KafkaException as e:  # the fatal error that ended the process, seen again
                log.info("flush on close of %s: %s", self.transactional_id, e)
            self._producer = None
        self._in_txn = False

    @property
    def _p(self) -> Producer:
        if self._producer is None:
            raise SpillwayError(f"producer {self.transactional_id} used before start()")
        return self._producer

    @property
    def in_transaction(self) -> bool:
        """True between :meth:`begin` and commit/abort."""
        return self._in_txn

    # -- transaction -------------------------------------------------------------------

    def begin(self) -> None:
        """Open a transaction; everything produced until :meth:`commit` belongs to it."""
        try:
            self._p.begin_transaction()
        except KafkaException as e:
            raise self._translate(e) from e
        self._in_txn = True
        self._delivery_error = None
        self.txn_bytes = 0

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
        """Queue one message inside the open transaction; blocks briefly when the queue is full.

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
        """Queue ``(key, value)`` messages to ``topic`` inside the open transaction, placed by
        librdkafka's partitioner (by key), without per-message delivery reports.

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
            raise self._translate(e) from e
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
                raise self._translate(e) from e
        raise TransactionAbortedError(
            f"producer {self.transactional_id}: local queue stayed full for 50 s; broker too slow"
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
                f"producer {self.transactional_id}: {remaining} messages not delivered within "
                f"{timeout_s:.0f}s; transaction aborted"
            )
        self._raise_delivery_error()

    def last_offset(self, tp: TopicPartition) -> Offset | None:
        """The highest offset acknowledged for ``tp`` by this producer (after :meth:`flush`)."""
        off = self._last_offsets.get(tp)
        return None if off is None else Offset(off)

    def send_offsets(self, positions: Mapping[TopicPartition, Offset], group_metadata: Any) -> None:
        """Add consumer positions (next offset to read) to the open transaction."""
        if not positions:
            return
        tps = [CkTopicPartition(tp.topic, tp.partition, int(off)) for tp, off in positions.items()]
        try:
            self._send_offsets(tps, group_metadata)
        except KafkaException as e:
            raise self._translate(e) from e

    # Retriable errors (the coordinator moved after a broker died: _TRANSPORT,
    # NOT_COORDINATOR) are retried, as librdkafka's contract for this call says.
    @retrying(attempts=4)
    def _send_offsets(self, tps: list[CkTopicPartition], group_metadata: Any) -> None:
        producer = self._p
        call_within(
            SEND_OFFSETS_DEADLINE_S,
            lambda: producer.send_offsets_to_transaction(
                tps, group_metadata, SEND_OFFSETS_TIMEOUT_S
            ),
            f"send_offsets_to_transaction of {self.transactional_id}",
        )

    def commit(self, timeout_s: float = 30.0) -> None:
        """Commit the open transaction: outputs become visible to read_committed readers."""
        self._raise_delivery_error()
        try:
            self._commit(timeout_s)
        except KafkaException as e:
            err = kafka_error(e)
            if err is not None and err.code() == KafkaError._TIMED_OUT:
                log.error(
                    "commit of %s timed out; recreating the producer (outcome unknown until the "
                    "checkpoint is re-read)",
                    self.transactional_id,
                )
                self._recreate()
                raise TransactionAbortedError(
                    f"commit of {self.transactional_id} timed out after {timeout_s:.0f}s; the "
                    "producer was recreated; restart the subtask from its last checkpoint"
                ) from e
            if err is not None and err.txn_requires_abort():
                # A message the broker refused: its delivery report names the topic and the
                # record's origin, and tells a too-large record (deterministic) apart.
                with contextlib.suppress(KafkaException, SystemError):
                    self._serve(self._p.poll, 0)
                if self._delivery_error is not None:
                    self._raise_delivery_error()
            raise self._translate(e) from e
        self._in_txn = False

    # A timed-out commit is not retried: its outcome is unknown, and a late commit could
    # end a later transaction. commit() recreates the producer instead (DESIGN §8).
    @retrying(attempts=4, except_codes=frozenset({KafkaError._TIMED_OUT}))
    def _commit(self, timeout_s: float) -> None:
        self._p.commit_transaction(timeout_s)

    def abort(self, timeout_s: float = 30.0) -> None:
        """Abort the open transaction: nothing produced in it will ever be visible."""
        try:
            self._p.abort_transaction(timeout_s)
        except KafkaException as e:
            err = kafka_error(e)
            if err is not None and (err.fatal() or is_fenced(err)):
                raise ProducerFencedError(
                    f"producer {self.transactional_id} was fenced while aborting: {err.str()}"
                ) from e
            raise
        finally:
            self._in_txn = False

    # -- internals ---------------------------------------------------------------------

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

    @staticmethod
    def _serve(call: Callable[[float], int], timeout_s: float) -> int:
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
            if inner is None:
                raise
            raise inner from e

    def _raise_delivery_error(self) -> None:
        err = self._delivery_error
        if err is None:
            return
        if is_fenced(err):
            raise ProducerFencedError(f"producer {self.transactional_id} fenced: {err.str()}")
        if err.fatal():
            raise SpillwayError(
                f"producer {self.transactional_id}: fatal {err.name()}: {err.str()}"
            )
        self._abort_quietly()
        if err.code() in _TOO_LARGE:
            raise RecordTooLargeError(
                f"producer {self.transactional_id}: the broker refused a message"
                f"{self._failed_delivery} as too large ({err.str()}); raise that topic's "
                "max.message.bytes, or make the record smaller"
            )
        raise TransactionAbortedError(
            f"producer {self.transactional_id}: a message{self._failed_delivery} could not be "
            f"delivered ({err.str()}); transaction aborted"
        )

    def _abort_quietly(self) -> None:
        if self._in_txn:
            try:
                self.abort()
            except KafkaException as e:
                log.warning("abort of %s failed: %s", self.transactional_id, e)

    def _original_fatal(self, err: KafkaError) -> KafkaError:
        # After a fatal error (e.g. fencing found by a background produce request) librdkafka
        # fails later calls with a bare _FATAL; abort_transaction raises the original error,
        # which tells a fenced zombie (stop quietly) from other fatal causes.
        try:
            self._p.abort_transaction(1)
        except KafkaException as e:
            inner = kafka_error(e)
            if inner is not None and inner.fatal():
                return inner
        return err

    def _recreate(self) -> None:
        if self._producer is not None:
            try:  # serve pending callbacks; nothing is committed here
                self._serve(self._producer.flush, 0)
            except KafkaException as e:
                log.info("flush before recreating %s: %s", self.transactional_id, e)
        self._producer = None
        self._in_txn = False
        time.sleep(0.1)
        self.start()

    def _translate(self, e: KafkaException) -> SpillwayError:
        err = kafka_error(e)
        if err is None:
            return SpillwayError(str(e))
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
                f"producer {self.transactional_id} was fenced by a newer incarnation "
                f"({err.name()}: {err.str()}); this process must stop"
            )
        if err.fatal():
            self._in_txn = False
            return SpillwayError(
                f"producer {self.transactional_id} hit a fatal error {err.name()}: {err.str()} "
                "(e.g. missing ACLs for the transactional id, or a transaction the broker "
                "timed out); fix the cause and restart the job"
            )
        if err.txn_requires_abort():
            self._abort_quietly()
            return TransactionAbortedError(
                f"transaction of {self.transactional_id} aborted after {err.name()}: {err.str()}"
            )
        return SpillwayError(f"producer {self.transactional_id}: {err.name()}: {err.str()}")


class IdempotentProducer(TransactionalProducer):
    """A producer without transactions, for the at-least-once guarantee.

    Same interface as :class:`TransactionalProducer` so channel writers and sinks take
    either, but every message is visible as soon as the broker has it: ``begin``,
    ``send_offsets`` and ``abort`` do nothing and ``commit`` only flushes. Idempotence
    still keeps broker-side retries from writing a message twice; what repeats under this
    guarantee is what a restarted subtask re-sends after its last checkpoint.
    """

    def __init__(self, settings: KafkaSettings, client_id: str) -> None:
        super().__init__(settings, client_id)
        del self._config["transactional.id"]
        del self._config["transaction.timeout.ms"]
        self._config["client.id"] = client_id

    def start(self) -> None:
        """Create the producer (no fencing: there is no transactional id)."""
        self._producer = Producer(self._config)

    def begin(self) -> None:
        """Nothing to open; writes are visible when delivered."""
        self._delivery_error = None

    def send_offsets(self, positions: Mapping[TopicPartition, Offset], group_metadata: Any) -> None:
        """Nothing to add: there is no transaction."""

    def commit(self, timeout_s: float = 30.0) -> None:
        """Wait until everything produced so far is acknowledged (raise if any failed)."""
        self.flush(timeout_s)

    def abort(self, timeout_s: float = 30.0) -> None:
        """Cannot take anything back: what was delivered stays visible."""
