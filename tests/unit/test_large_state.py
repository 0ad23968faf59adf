"""Keyed-state values larger than one changelog message: written as parts (the channels'
split), restored exactly, and never torn by compaction, whatever part of the log the
cleaner has reached (a fake partition log and a model of Kafka's log cleaner; no broker).
A value past the limit: a deterministic error naming the record, or its dead letter."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, cast

import pytest

from spillway.channels.errors import RecordError, RecordTooLargeError, SpillwayError
from spillway.channels.ids import JobId, Offset, OperatorName, SubtaskId, TopicPartition
from spillway.channels.wire.spanning import read_mark
from spillway.recovery.job.origins import Same, TopicOffset
from spillway.recovery.restore.state import ChangelogState, part_key
from spillway.recovery.runtime.failures import run_diverting
from spillway.spark_jobs.operators.operators import KeyedAggregateLogic

TP = TopicPartition("job.changelog.count", 0)
PART = 1024  # bytes of one changelog message value, as max_batch_bytes bounds a channel's


@dataclass
class Rec:
    off: int
    k: bytes
    v: bytes | None
    h: list[tuple[str, bytes]] | None

    def offset(self) -> int:
        return self.off

    def partition(self) -> int:
        return TP.partition

    def key(self) -> bytes:
        return self.k

    def value(self) -> bytes | None:
        return self.v

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self.h


class Log:
    """One changelog partition: the producer appends to it, the restore reads it, and
    :meth:`clean` removes what Kafka's log cleaner may remove."""

    def __init__(self) -> None:
        self.records: list[Rec] = []
        self.end = 0
        self._next = 0

    # the producer's side (TransactionalProducer.produce)
    def produce(
        self,
        topic: str,
        partition: int,
        key: bytes,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        assert (topic, partition) == (TP.topic, TP.partition)
        self.records.append(Rec(self.end, key, value, headers))
        self.end += 1

    # the restore consumer's side (AssignedConsumer)
    def watermarks(self, tp: TopicPartition) -> tuple[int, int]:
        return (self.records[0].off if self.records else self.end), self.end

    def assign(self, starts: dict[TopicPartition, Offset]) -> None:
        self._next = int(starts[TP])

    def consume(self, n: int, timeout: float) -> list[Rec]:
        out = [r for r in self.records if r.off >= self._next][: min(n, 3)]
        self._next = out[-1].off + 1 if out else self.end
        return out

    def position(self, tp: TopicPartition) -> int:
        return self._next

    def clean(self, first_dirty: int, map_end: int) -> None:
        """One pass of the cleaner: the offset map holds the latest offset of each key in
        [first_dirty, map_end); every record below map_end whose key has a later offset in
        the map goes (a partial pass: the map need not reach the log's end)."""
        latest = {r.k: r.off for r in self.records if first_dirty <= r.off < map_end}
        self.records = [
            r for r in self.records if not (r.off < map_end and latest.get(r.k, -1) > r.off)
        ]

    def live_keys(self) -> set[bytes]:
        """Keys whose latest record is not a tombstone."""
        last: dict[bytes, bytes | None] = {}
        for r in self.records:
            last[r.k] = r.v
        return {k for k, v in last.items() if v is not None}


def state() -> ChangelogState:
    return ChangelogState(TP, part_bytes=PART, max_value_bytes=64 * PART)


def restored(log: Log, upto: int | None = None) -> dict[Any, Any]:
    s = state()
    s.restore(cast(Any, log), Offset(log.end if upto is None else upto))
    return dict(s.items())


def big(tag: str, n: int) -> str:
    return (tag * n)[:n]


def test_a_large_value_goes_as_parts_then_its_head_and_restores_exactly() -> None:
    log = Log()
    s = state()
    value = {"payload": big("abcdefg", 10_000), "n": 3}
    s.put("k", value)
    s.put("small", [1, 2])
    assert s.flush_to(cast(Any, log)) == 2
    parts = log.records[:-2]
    text_bytes = len('{"payload":"","n":3}') + 10_000
    assert len(parts) == -(-text_bytes // PART) == 10
    for i, r in enumerate(parts):
        assert r.v is not None
        assert len(r.v) <= PART + 1
        mark = read_mark(r.h)
        assert (mark.index, mark.count, mark.size) == (i, 10, text_bytes)
    head, small = log.records[-2:]
    assert head.k == b'"k"'
    assert head.v is not None
    assert len(head.v) == 33
    assert parts[0].k == part_key(head.v[1:], 0)
    assert (small.k, small.v, small.h) == (b'"small"', b"[1,2]", None)  # small: as before
    assert restored(log) == {"k": value, "small": [1, 2]}


def test_new_versions_tombstone_the_old_parts_and_restore_the_latest() -> None:
    log = Log()
    s = state()
    history: list[dict[Any, Any]] = []
    steps: list[tuple[str, Any]] = [
        ("put", big("x", 5000)),  # 5 parts
        ("put", big("y", 3000)),  # 3 parts: the first value's 5 are tombstoned
        ("put", 7),  # small: the 3 parts go
        ("put", big("z", 2500)),
        ("delete", None),
    ]
    for op, v in steps:
        if op == "put":
            s.put("k", v)
        else:
            s.delete("k")
        s.put("other", len(history))
        s.flush_to(cast(Any, log))
        history.append(dict(s.items()))
        assert restored(log) == history[-1]
    # Only the plain key is live at the end: every part was tombstoned.
    assert log.live_keys() == {b'"other"'}
    # A restore to any earlier checkpoint gives that checkpoint's state.
    ends = [i + 1 for i, r in enumerate(log.records) if r.k == b'"other"']
    for end, expected in zip(ends, history, strict=True):
        assert restored(log, end) == expected


def test_no_clean_of_the_log_ever_leaves_a_torn_or_stale_value() -> None:
    """Every cleaner pass, and every second pass after it, over a log where two keys'
    large values are replaced, shrink, turn small and are deleted: the restore is always
    the latest state, and never meets a head without its parts."""
    log = Log()
    s = state()
    values = [big("a", 4000), big("b", 1500), 9, big("c", 6000), big("d", 2100)]
    for i, v in enumerate(values):
        s.put("k1", v)
        s.put("k2", values[-1 - i])
        if i == len(values) - 1:
            s.delete("k2")
        s.flush_to(cast(Any, log))
    final = dict(s.items())
    assert final == {"k1": values[-1]}
    original = list(log.records)
    cuts = range(log.end + 1)
    for first, second in itertools.combinations_with_replacement(cuts, 2):
        log.records = list(original)
        log.clean(0, first)
        log.clean(first, second)
        assert restored(log) == final, (first, second)


def test_a_value_over_the_limit_is_refused_naming_the_key() -> None:
    s = state()
    with pytest.raises(RecordTooLargeError, match=r"state value of 65540 bytes for key 'k'"):
        s.put("k", {"v": ["x" * (64 * PART - 6)]})  # encoded at put: fails in the call
    assert s.get("k") is None
    assert s.dirty_count() == 0
    # A flat value is encoded at the checkpoint; its strings' size is checked at put.
    with pytest.raises(RecordTooLargeError, match=r"state value of 65543 bytes for key 'flat'"):
        s.put("flat", [1, "y" * (64 * PART + 1)])
    s.put("flat", [1, "\n" * (64 * PART // 2)])  # escaped: twice as long as its characters
    with pytest.raises(RecordTooLargeError, match=r"state value of 65542 bytes for key 'flat'"):
        s.flush_to(cast(Any, Log()))
    with pytest.raises(RecordTooLargeError, match=r"state key of 1002 bytes"):
        s.put("z" * 1000, 1)


def test_a_head_without_its_parts_is_reported_as_a_foreign_changelog() -> None:
    log = Log()
    s = state()
    s.put("k", big("q", 3000))
    s.flush_to(cast(Any, log))
    log.records = log.records[1:]  # the first part is gone: not something Kafka does
    with pytest.raises(SpillwayError) as info:
        restored(log)
    assert str(info.value).startswith(
        'changelog job.changelog.count[0]@3: the large value of state key "k" lacks its first part'
    )


def test_a_rewind_tombstones_the_parts_the_abandoned_run_wrote() -> None:
    log = Log()
    s = state()
    s.put("k", big("r", 2000))
    s.flush_to(cast(Any, log))
    checkpoint = log.end
    s.put("k", big("s", 4000))  # the abandoned run's value, past the checkpoint
    s.put("gone", big("t", 1500))
    s.flush_to(cast(Any, log))
    rewound = state()
    rewound.restore(cast(Any, log), Offset(checkpoint), rewrite=True)
    assert dict(rewound.items()) == {"k": big("r", 2000)}
    rewound.flush_to(cast(Any, log))
    assert restored(log) == {"k": big("r", 2000)}
    # Live: "k", its new head's parts, and nothing of the abandoned run.
    head = [r for r in log.records if r.k == b'"k"'][-1]
    assert head.v is not None
    assert log.live_keys() == {b'"k"', part_key(head.v[1:], 0), part_key(head.v[1:], 1)}


@dataclass
class _Ctx:
    subtask: SubtaskId
    state: ChangelogState
    watermark: int | None = None


class _DeadLetters:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send(self, **letter: Any) -> None:
        self.sent.append(letter)


def _keeping_aggregate() -> tuple[KeyedAggregateLogic, ChangelogState]:
    """A keyed aggregate whose state keeps every text of its key (it grows per record)."""
    s = state()
    logic = KeyedAggregateLogic(
        lambda r: r["key"], list, lambda acc, r: [*acc, r["text"]], lambda k, a: {}, "final"
    )
    logic.open(cast(Any, _Ctx(SUBTASK, s)))
    return logic, s


SUBTASK = SubtaskId(JobId("j"), OperatorName("count"), 1)
ORIGIN = TopicOffset("spillway.j.ch.events.count", 3, 41)
RECORDS = [{"key": "k", "text": "a" * 40 * PART}, {"key": "k", "text": "b" * 30 * PART}]


def test_a_record_that_makes_a_state_value_too_large_stops_the_job_naming_it() -> None:
    logic, _ = _keeping_aggregate()
    with pytest.raises(RecordError) as info:
        run_diverting(logic.process, RECORDS, Same(ORIGIN), SUBTASK, "count", None)
    assert info.value.deterministic
    assert info.value.origin == "spillway.j.ch.events.count[3]@41"
    text = str(info.value)
    assert "failed on the record at spillway.j.ch.events.count[3]@41 (record 2 of 2" in text
    assert "RecordTooLargeError: state value of 71687 bytes for key 'k'" in text


def test_with_dead_letters_that_record_is_diverted_with_its_origin() -> None:
    logic, s = _keeping_aggregate()
    dead = _DeadLetters()
    run_diverting(logic.process, RECORDS, Same(ORIGIN), SUBTASK, "count", cast(Any, dead))
    assert s.get("k") == ["a" * 40 * PART]  # the first record alone fits
    assert [(d["stage"], d["origin"], d["record"]) for d in dead.sent] == [
        ("process", ORIGIN, RECORDS[1])
    ]
    assert isinstance(dead.sent[0]["error"], RecordTooLargeError)
