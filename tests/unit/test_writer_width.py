"""A live rescale's in-band writer count (envelope.Kind.WIDTH) at the reader, without a
broker: ends, watermarks and idleness count exactly the announced writers, and the count
survives a restart through the checkpoint."""

from __future__ import annotations

from typing import Any, cast

from spillway.channels.ids import JobId, Offset, OperatorName, SubtaskId
from spillway.channels.reader import ChannelReader, InputChannel
from spillway.channels.wire.envelope import Kind
from spillway.offsets.checkpoint import Checkpoint
from tests.unit.channelfakes import SCHEMA, TP, Msg, ScriptedConsumer
from tests.unit.checkpointfakes import checkpoint


def reader_of(upstream: int) -> tuple[ChannelReader, ScriptedConsumer]:
    consumer = ScriptedConsumer()
    reader = ChannelReader(cast(Any, consumer), [InputChannel(TP.topic, 0, SCHEMA, upstream)])
    reader.start()
    return reader, consumer


def feed(reader: ChannelReader, consumer: ScriptedConsumer, *msgs: Msg) -> None:
    consumer.pending = list(msgs)
    reader.poll()


def test_scaling_in_leaves_retired_writers_out() -> None:
    reader, consumer = reader_of(4)
    feed(reader, consumer, *(Msg(i, i, Kind.WATERMARK, 10 * (i + 1)) for i in range(4)))
    assert reader.watermark() == 10
    # Writers 0..3 stopped; the rescale says 1 writer from here on.
    feed(reader, consumer, Msg(4, 0, Kind.WIDTH, 1), Msg(5, 0, Kind.WATERMARK, 70))
    assert reader.watermark() == 70
    assert not reader.finished()
    feed(reader, consumer, Msg(6, 0, Kind.END_OF_STREAM, 0))
    assert reader.finished()  # retired writers 1..3 never ended, and need not


def test_scaling_out_waits_for_the_new_writers() -> None:
    reader, consumer = reader_of(2)
    feed(reader, consumer, Msg(0, 0, Kind.WIDTH, 4))
    feed(reader, consumer, *(Msg(1 + i, i, Kind.END_OF_STREAM, 0) for i in range(2)))
    assert not reader.finished()  # writers 2 and 3 are still to end
    feed(reader, consumer, Msg(3, 0, Kind.WATERMARK, 5), Msg(4, 2, Kind.WATERMARK, 9))
    assert reader.watermark() is None  # writer 3 has not reported one
    feed(reader, consumer, Msg(5, 3, Kind.IDLE, 0))
    assert reader.watermark() == 9
    feed(reader, consumer, *(Msg(6 + i, 2 + i, Kind.END_OF_STREAM, 0) for i in range(2)))
    assert reader.finished()


def test_the_width_is_checkpointed_and_restored() -> None:
    reader, consumer = reader_of(2)
    feed(reader, consumer, Msg(0, 0, Kind.WIDTH, 3))
    sub = SubtaskId(JobId("j"), OperatorName("o"), 0)
    ckpt = checkpoint(sub, 1, "fp", widths=dict(reader.state.widths))
    again = Checkpoint.from_bytes(ckpt.to_bytes())
    assert again.reader.widths == {TP: 3}
    restored, consumer = reader_of(2)
    restored.start({TP: Offset(1)}, again.reader_state())
    feed(restored, consumer, *(Msg(1 + i, i, Kind.END_OF_STREAM, 0) for i in range(2)))
    assert not restored.finished()
    feed(restored, consumer, Msg(3, 2, Kind.END_OF_STREAM, 0))
    assert restored.finished()
