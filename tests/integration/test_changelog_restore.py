"""ChangelogState.restore against the real broker: transactions, tombstones, whole batches."""

from __future__ import annotations

from typing import Any, cast

import pytest

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import Offset, TopicPartition
from spillway.channels.kafka.admin import Admin, TopicSpec
from spillway.channels.kafka.consumer import AssignedConsumer
from spillway.channels.kafka.producer import TransactionalProducer
from spillway.recovery.restore.state import CHANGELOG_TOPIC_CONFIG, ChangelogState

pytestmark = pytest.mark.broker

KEYS = 2500  # more than one consume batch (1000), and not a multiple of it


def _checkpoint(producer: TransactionalProducer, state: ChangelogState, *, abort: bool) -> None:
    producer.begin()
    state.flush_to(producer)
    if abort:
        # Written first, so the log really holds the aborted records a restore must skip
        # (an abort can otherwise purge them unsent; it also failed now and then with
        # INVALID_TXN_STATE when messages were still in flight).
        producer.flush()
        producer.abort()
    else:
        producer.commit()


def _flushed(state: ChangelogState) -> dict[bytes, bytes | None]:
    """What the next checkpoint would write to the changelog: key -> value (None: tombstone)."""
    written: dict[bytes, bytes | None] = {}

    class _Recorder:
        def produce(self, topic: str, partition: int, key: bytes, value: bytes | None) -> None:
            assert key not in written
            written[key] = value

    state.flush_to(cast(Any, _Recorder()))
    return written


def _restored(
    settings: KafkaSettings, tp: TopicPartition, group: str, upto: int, *, rewrite: bool
) -> tuple[ChangelogState, int]:
    consumer = AssignedConsumer(settings, group)
    try:
        state = ChangelogState(tp)
        return state, state.restore(consumer, Offset(upto), timeout_s=60, rewrite=rewrite)
    finally:
        consumer.close()


@pytest.mark.parametrize("rewrite", [False, True])
def test_restore_rebuilds_exactly_the_committed_state_below_upto(
    kafka_bootstrap: str, unique: str, rewrite: bool
) -> None:
    settings = KafkaSettings(kafka_bootstrap)
    tp = TopicPartition(f"{unique}-changelog", 0)
    Admin(settings).ensure_topics([TopicSpec(tp.topic, 1, CHANGELOG_TOPIC_CONFIG)])
    producer = TransactionalProducer(settings, f"{unique}-txn")
    producer.start()
    try:
        live = ChangelogState(tp)
        for i in range(KEYS):
            live.put(("k", i), {"v": i})
        _checkpoint(producer, live, abort=False)
        for i in range(0, KEYS, 3):
            live.delete(("k", i))
        for i in range(1, KEYS, 3):
            live.put(("k", i), [i, "again"])
        _checkpoint(producer, live, abort=False)
        # The checkpoint's changelog position, as the runner keeps it: after its last record.
        last = producer.last_offset(tp)
        assert last is not None
        upto = last + 1
        # Past `upto`: an aborted transaction, then a run that a rewind abandons.
        ghost = ChangelogState(tp)
        for i in range(400):
            ghost.put(("aborted", i), i)
        _checkpoint(producer, ghost, abort=True)
        ghost = ChangelogState(tp)
        ghost.put(("k", 1), "abandoned")
        ghost.delete(("k", 2))
        for i in range(300):
            ghost.put(("z", i), i)
        _checkpoint(producer, ghost, abort=False)
    finally:
        producer.close()

    state, n = _restored(settings, tp, f"{unique}-restore", upto, rewrite=rewrite)

    expected = dict(live.items())
    assert len(expected) == KEYS - len(range(0, KEYS, 3))
    assert n == KEYS + len(range(0, KEYS, 3)) + len(range(1, KEYS, 3))
    assert dict(state.items()) == expected
    assert state.get(("k", 0)) is None
    assert state.get(("k", 1)) == [1, "again"]
    if not rewrite:
        assert _flushed(state) == {}
        return
    # Every live key as it was at `upto`, and a tombstone for each key only the abandoned
    # run wrote; the aborted transaction was never read (read_committed).
    rewritten = ChangelogState(tp)
    for k, v in expected.items():
        rewritten.put(k, v)
    for i in range(300):
        rewritten.delete(("z", i))
    assert _flushed(state) == _flushed(rewritten)
