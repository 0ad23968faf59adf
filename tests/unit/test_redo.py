"""Redo within a Spark attempt (spillway.recovery.runtime.redo): which errors are redone,
and the bounds on redos and stall, with the clock passed in."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from spillway.channels.errors import (
    BrokerUnavailableError,
    ConfigError,
    ProducerFencedError,
    RecordError,
    RegistryUnavailableError,
    SpillwayError,
    TransactionAbortedError,
    UndecidedTransactionError,
)
from spillway.recovery.runtime.redo import RedoBounds, RedoBudget, Verdict, redoable


def _from_kafka(code: int) -> SpillwayError:
    """A plain SpillwayError raised from a KafkaException of ``code``, as the producer's
    fallback translation does."""
    try:
        raise KafkaException(KafkaError(code))
    except KafkaException as cause:
        try:
            raise SpillwayError("producer p: error") from cause
        except SpillwayError as e:
            return e


def test_transaction_errors_of_a_changing_cluster_are_redone() -> None:
    assert redoable(TransactionAbortedError("aborted"))
    assert redoable(UndecidedTransactionError("undecided"))
    assert redoable(BrokerUnavailableError("init_transactions timed out"))
    assert redoable(_from_kafka(KafkaError.NOT_COORDINATOR))
    assert redoable(_from_kafka(KafkaError._TRANSPORT))


def test_deterministic_fenced_and_foreign_errors_are_never_redone() -> None:
    assert not redoable(RecordError("bad record"))
    assert not redoable(ConfigError("bad option"))
    assert not redoable(ProducerFencedError("a newer incarnation"))
    assert not redoable(RegistryUnavailableError("registry down"))
    assert not redoable(SpillwayError("no cause"))
    assert not redoable(_from_kafka(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    assert not redoable(RuntimeError("not ours"))


def test_a_deterministic_subclass_of_a_redone_kind_is_not_redone() -> None:
    class Deterministic(TransactionAbortedError):
        deterministic = True

    assert not redoable(Deterministic("same every time"))
    budget = RedoBudget()
    assert budget.decide(Deterministic("x"), 10.0, None).verdict is Verdict.FAIL
    assert budget.redos == 0


def test_redos_are_bounded_per_attempt() -> None:
    budget = RedoBudget(RedoBounds(max_redos=2, max_stall_s=1000.0))
    now = 100.0
    first = budget.decide(TransactionAbortedError("a"), now, None)
    assert (first.verdict, first.redo) == (Verdict.REDO, 1)
    # The redo's runner resumed at 103 and ran until it failed again at 150.
    second = budget.decide(TransactionAbortedError("b"), 150.0, 103.0)
    assert (second.verdict, second.redo) == (Verdict.REDO, 2)
    third = budget.decide(TransactionAbortedError("c"), 200.0, 152.0)
    assert third.verdict is Verdict.FAIL
    assert "2 redos" in third.reason
    assert budget.redos == 2


def test_stall_counts_from_each_failure_until_the_next_runner_resumed() -> None:
    budget = RedoBudget(RedoBounds(max_redos=10, max_stall_s=100.0))
    budget.decide(TransactionAbortedError("a"), 0.0, None)
    # That runner resumed 30 s after the failure, then failed much later: 30 s of stall.
    d = budget.decide(TransactionAbortedError("b"), 500.0, 30.0)
    assert d.verdict is Verdict.REDO
    assert d.stall_s == 30.0
    # This one never resumed (the broker still gone): its whole life is stall.
    d = budget.decide(TransactionAbortedError("c"), 560.0, None)
    assert d.verdict is Verdict.REDO
    assert d.stall_s == 90.0
    d = budget.decide(TransactionAbortedError("d"), 571.0, None)
    assert d.verdict is Verdict.FAIL
    assert "stalled 101.0s" in d.reason


def test_the_pause_before_a_redo_doubles_up_to_its_bound() -> None:
    budget = RedoBudget(RedoBounds(max_redos=10, max_stall_s=1e9, pause_s=0.5, max_pause_s=2.0))
    pauses = [
        budget.decide(TransactionAbortedError("x"), float(t), float(t)).pause_s for t in range(5)
    ]
    assert pauses == [0.5, 1.0, 2.0, 2.0, 2.0]


def test_a_failure_that_is_not_redone_leaves_the_budget_as_it_was() -> None:
    budget = RedoBudget(RedoBounds(max_redos=1))
    assert budget.decide(RecordError("bad"), 1.0, None).verdict is Verdict.FAIL
    assert budget.decide(TransactionAbortedError("a"), 2.0, None).verdict is Verdict.REDO


def test_a_runner_that_ran_healthy_starts_a_new_episode_with_the_bounds_whole() -> None:
    budget = RedoBudget(RedoBounds(max_redos=2, max_stall_s=100.0, healthy_s=30.0))
    assert budget.decide(TransactionAbortedError("a"), 0.0, None).redo == 1
    # Resumed at 5, committed checkpoints, failed 40 s later: a new episode.
    d = budget.decide(TransactionAbortedError("b"), 45.0, 5.0, committed=12)
    assert (d.verdict, d.redo, d.stall_s) == (Verdict.REDO, 1, 0.0)
    assert budget.decide(TransactionAbortedError("c"), 50.0, 46.0, committed=1).redo == 2
    # Resumed and committed, but only 4 s before failing: the episode goes on, bound hit.
    d = budget.decide(TransactionAbortedError("d"), 55.0, 51.0, committed=1)
    assert d.verdict is Verdict.FAIL
    assert (budget.redos, budget.total) == (2, 3)


def test_a_runner_that_committed_nothing_never_ends_the_episode() -> None:
    budget = RedoBudget(RedoBounds(max_redos=1, healthy_s=30.0))
    assert budget.decide(TransactionAbortedError("a"), 0.0, None).verdict is Verdict.REDO
    # Ran 100 s after resuming without a checkpoint: no proof the cluster works again.
    d = budget.decide(TransactionAbortedError("b"), 101.0, 1.0, committed=0)
    assert d.verdict is Verdict.FAIL
