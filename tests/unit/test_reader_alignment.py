"""Aligned-mode reader bookkeeping with a scripted consumer (no broker)."""

from __future__ import annotations

from typing import Any, cast

from spillway.channels.ids import Offset
from spillway.channels.reader import ChannelReader, InputChannel, ReaderModes, ReaderState
from spillway.channels.wire.envelope import Kind
from tests.unit.channelfakes import SCHEMA, TP, Msg
from tests.unit.readerfakes import ScriptedConsumer, data

ALIGNED = ReaderModes(checkpoints="aligned")


def barrier(off: int, w: int, n: int) -> Msg:
    return Msg(off, w, Kind.BARRIER, n)


LOG = [
    data(0, 0, 1),
    data(1, 1, 101),
    barrier(2, 0, 7),  # writer 0 reaches barrier 7 first: its channel is held
    data(3, 0, 2),  # held
    data(4, 1, 102),  # processed
    data(5, 0, 3),  # held
    barrier(6, 1, 7),  # alignment complete
    data(7, 1, 103),
]


def reader_on(log: list[Msg]) -> ChannelReader:
    consumer = ScriptedConsumer(log)
    r = ChannelReader(cast(Any, consumer), [InputChannel(TP.topic, 0, SCHEMA, 2)], ALIGNED)
    return r


def values(deliveries: list[Any]) -> list[int]:
    return [rec["v"] for d in deliveries for rec in d.records]


def test_held_channel_waits_for_alignment_and_flows_after_release() -> None:
    r = reader_on(LOG)
    r.start({TP: Offset(0)})
    assert values(r.poll(5, 0)) == [1, 101, 102]  # writer 0's 2 and 3 are held
    assert r.aligned() is None
    assert r.positions() == {TP: 2}  # the held barrier itself is not yet processed
    got = values(r.poll(5, 0))
    assert r.aligned() == 7
    r.consume_barrier(7)
    assert r.positions() == {TP: 3}  # checkpoint 7 resumes at the first held message
    assert r.skip_state() == {TP: {1: 7}}  # writer 1 was processed up to its barrier
    r.release(7)
    got += values(r.poll(5, 0)) + values(r.poll(5, 0))
    assert got == [2, 3, 103]  # held messages first, in offset order


def test_restore_mid_alignment_neither_loses_nor_repeats() -> None:
    r = reader_on(LOG)
    r.start({TP: Offset(0)})
    first = values(r.poll(5, 0))  # [1, 101, 102], writer 0 held at its barrier
    checkpoint = (r.positions(), r.skip_state())  # a local checkpoint during alignment
    assert checkpoint == ({TP: 2}, {TP: {1: 5}})

    again = reader_on(LOG)
    again.start(checkpoint[0], ReaderState(skip=checkpoint[1]))
    rest: list[int] = []
    for _ in range(6):
        rest += values(again.poll(5, 0))
        n = again.aligned()
        if n is not None:
            again.consume_barrier(n)
            again.release(n)
    assert sorted(first + rest) == [1, 2, 3, 101, 102, 103]  # each record exactly once


def test_released_messages_not_yet_processed_keep_the_position_back() -> None:
    r = reader_on(LOG)
    r.start({TP: Offset(0)})
    r.poll(5, 0)
    r.poll(5, 0)
    n = r.aligned()
    assert n == 7
    r.consume_barrier(n)
    r.release(n)
    # A checkpoint taken now, before the released messages are polled, must re-read them.
    assert r.positions() == {TP: 3}
    assert r.skip_state() == {TP: {1: 7}}
