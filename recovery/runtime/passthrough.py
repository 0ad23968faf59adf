"""The paths without operator logic: what comes in is written out as it came.

:class:`SinkPath` is a sink alone in its subtask, reading a channel: each message's rows go
to the sink as they arrived (records, or :class:`~spillway.channels.wire.batchread.ArrowRows`
for a sink that takes batches) and count as its output. :class:`ForwardRecords` and
:class:`ForwardBatches` write what comes in to the channel writers (and a chained sink)
through :class:`~spillway.recovery.runtime.outputs.Outputs`: a source alone, in the form
its ``read`` returns (records, or record batches for a batch source).

With no operator there is nothing set aside, nothing to emit at a watermark, at a
timer or at the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from spillway.channels.ids import TopicPartition
from spillway.channels.wire.batchread import ArrowRows
from spillway.recovery.job.origins import Origins, Same, TopicOffset
from spillway.recovery.job.plan import Record
from spillway.recovery.runtime.outputs import Outputs
from spillway.recovery.runtime.path import PathParts


class _NoOperator:
    """The operator calls of a path without an operator: none."""

    def poll_done(self) -> None:
        """Nothing is held across messages."""

    def watermark(self, watermark: int) -> None:
        """No operator: nothing to emit (the writers forward the watermark)."""

    def timers(self) -> None:
        """No operator: no timers."""

    def end(self) -> None:
        """No operator: no last outputs."""


class SinkPath(_NoOperator):
    """A sink alone: each message's rows to the sink, as they arrived."""

    def __init__(self, parts: PathParts) -> None:
        """``parts.sink`` must be set (it is the outputs' sink)."""
        assert parts.sink is not None, "a sink path has a sink"
        self._outputs: Outputs = parts.outputs

    def message(self, records: Sequence[Record], tp: TopicPartition, offset: int) -> None:
        """The sink writes ``records`` (its output: the rows it wrote), every one's origin
        the message."""
        self._outputs.sink_alone(records, Same(TopicOffset(tp.topic, tp.partition, offset)))

    def rows(self, read: Sequence[Any]) -> int:
        """Rows are records here."""
        return len(read)

    def read(self, read: list[Any], origins: Origins) -> None:
        """The sink writes what was read, as it writes a message."""
        self._outputs.sink_alone(read, origins)


class ForwardRecords(_NoOperator):
    """Records written out as they came (a record source alone)."""

    def __init__(self, parts: PathParts) -> None:
        """Writes through ``parts.outputs``."""
        self._outputs: Outputs = parts.outputs

    def message(self, records: Sequence[Record], tp: TopicPartition, offset: int) -> None:
        """Write the message's records, every one's origin the message."""
        self._outputs.records(list(records), Same(TopicOffset(tp.topic, tp.partition, offset)))

    def rows(self, read: Sequence[Any]) -> int:
        """A record source reads records."""
        return len(read)

    def read(self, read: list[Any], origins: Origins) -> None:
        """Write what the source read (``origins``: each record's)."""
        self._outputs.records(read, origins)


class ForwardBatches(_NoOperator):
    """Record batches written out as Arrow as they came (a batch source alone)."""

    def __init__(self, parts: PathParts) -> None:
        """Writes through ``parts.outputs``."""
        self._outputs: Outputs = parts.outputs

    def message(self, records: Sequence[Record], tp: TopicPartition, offset: int) -> None:
        """Write the message's batch (``records``: ArrowRows), its rows' origin the
        message."""
        origin = Same(TopicOffset(tp.topic, tp.partition, offset))
        self._outputs.batches([cast(ArrowRows, records).batch], origin)

    def rows(self, read: Sequence[Any]) -> int:
        """A batch source reads record batches."""
        return sum(int(b.num_rows) for b in read)

    def read(self, read: list[Any], origins: Origins) -> None:
        """Write the batches the source read as one (``origins``: each row's)."""
        self._outputs.batches(read, origins)
