"""Consumed messages grouped into one run per partition (spillway.channels.kafka.runs), no
broker."""

from __future__ import annotations

from dataclasses import dataclass

from spillway.channels.kafka.runs import PartitionRun, partition_runs


@dataclass
class Msg:
    p: int
    off: int
    v: bytes | None
    ts: tuple[int, int] = (1, 0)

    def partition(self) -> int:
        return self.p

    def offset(self) -> int:
        return self.off

    def value(self) -> bytes | None:
        return self.v

    def timestamp(self) -> tuple[int, int]:
        return self.ts


def test_one_partition_is_one_run_in_order() -> None:
    runs = partition_runs([Msg(1, 5, b"a"), Msg(1, 6, None), Msg(1, 9, b"c")])
    assert runs == {1: PartitionRun([5, 6, 9], [b"a", None, b"c"])}


def test_interleaved_partitions_split_in_first_seen_order_each_keeping_its_order() -> None:
    msgs = [Msg(2, 10, b"x"), Msg(0, 1, b"a"), Msg(2, 11, b"y"), Msg(0, 2, b"b")]
    runs = partition_runs(msgs, timestamps=True)
    assert list(runs) == [2, 0]
    assert runs[2] == PartitionRun([10, 11], [b"x", b"y"], [(1, 0), (1, 0)])
    assert runs[0] == PartitionRun([1, 2], [b"a", b"b"], [(1, 0), (1, 0)])
    assert partition_runs([]) == {}


def test_below_keeps_the_messages_before_a_bounded_end() -> None:
    run = PartitionRun([3, 4, 5, 6], [b"a", b"b", b"c", b"d"], [(1, 3), (1, 4), (1, 5), (1, 6)])
    assert run.below(7) is run
    assert run.below(5) == PartitionRun([3, 4], [b"a", b"b"], [(1, 3), (1, 4)])
    assert run.below(3) == PartitionRun([], [], [])
    assert PartitionRun([], []).below(0) == PartitionRun([], [])
