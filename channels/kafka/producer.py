"""The transactional producer of one subtask, with Spillway's error policy.

Policy (docs/architecture.md, Kafka transactions; librdkafka's transactional API contract):

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
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import TopicPartition as CkTopicPartition

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import (
    BrokerUnavailableError,
    ProducerFencedError,
    TransactionAbortedError,
)
from spillway.channels.ids import Offset, TopicPartition
from spillway.channels.kafka.producerbase import ProducerBase
from spillway.channels.kafka.producerbase import pending_kafka_exception as pending_kafka_exception
from spillway.channels.kafka.retry import is_fenced, kafka_error, retrying

log = logging.getLogger("spillway.producer")

# init_transactions is called in steps this long (see TransactionalProducer._init_transactions),
# again after a step that timed out or ended in a retriable error.
_INIT_WAIT_S = 0.02
_INIT_PAUSE_S = {KafkaError.CONCURRENT_TRANSACTIONS: 0.005}  # before asking again; else 0.1 s

T = TypeVar("T")

# 15 s: a killed broker is fenced after broker.session.timeout.ms (9 s) and its groups'
# coordinators move then; a call still waiting past that is better abandoned and the
# subtask redone within its attempt (spillway.recovery.runtime.redo) than waited for.
SEND_OFFSETS_TIMEOUT_S = 15.0
# librdkafka's send_offsets_to_transaction() can block past its timeout while the group
# coordinator is down (confluentinc/librdkafka#5456, #5511: its coordinator request timer
# is never checked). Found by make compose-test: a subtask hung for minutes after one of
# three brokers was killed; seen again with librdkafka 2.16.0 on a local three-node
# quorum (tests/integration/test_broker_loss.py: two of eight subtasks stuck past 45 s
# after one node was killed for 4 s). Past this deadline the call is abandoned.
SEND_OFFSETS_DEADLINE_S = SEND_OFFSETS_TIMEOUT_S + 5.0


def call_within(deadline_s: float, call: Callable[[], T], what: str) -> T:
    """``call()`` run in a helper thread; :class:`TransactionAbortedError` past the deadline.

    For client calls that may ignore their own timeout. A call still running at the
    deadline is abandoned in its (daemon) thread; the caller must then give up the
    producer, as it does after any aborted transaction: the subtask is redone within its
    attempt (a new producer of the same transactional id fences this one) or restarts.
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
            "confluentinc/librdkafka#5456); the subtask goes on from its last checkpoint"
        )
    ok, value = outcome[0]
    if not ok:
        raise value
    result: T = value
    return result


class TransactionalProducer(ProducerBase):
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
        config: dict[str, Any] = {
            **settings.base(),
            "transactional.id": transactional_id,
            "enable.idempotence": True,
            "transaction.timeout.ms": transaction_timeout_ms,
            "linger.ms": 5,
            **(extra or {}),
        }
        super().__init__(config, transactional_id)
        self.transactional_id = transactional_id
        self._init_timeout_s = init_timeout_s

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Create the producer and fence any older incarnation (``init_transactions``)."""
        super().start()
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
        super().close()

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
    # end a later transaction. commit() recreates the producer instead.
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

    def _abort_quietly(self) -> None:
        if self._in_txn:
            try:
                self.abort()
            except KafkaException as e:
                log.warning("abort of %s failed: %s", self.transactional_id, e)

    def _fatal_behind_bare_system_error(self) -> KafkaError | None:
        # The call that raised has failed either way, so aborting the open transaction to
        # learn the fatal error costs nothing; a healthy producer just aborts (no error).
        try:
            self._p.abort_transaction(1)
        except KafkaException as e:
            inner = kafka_error(e)
            if inner is not None and (inner.fatal() or is_fenced(inner)):
                return inner
        finally:
            self._in_txn = False
        return None

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
