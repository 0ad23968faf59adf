"""Where one subtask's outputs go: its channel writers, then a chained sink.

Every path through a subtask (:mod:`spillway.recovery.runtime.path`) writes through one
:class:`Outputs`; only the form differs — records, or Arrow record batches (a batch
operator's output, or a batch source's read) — and each path knows its form when it is
built, so nothing here looks at what it is given to tell the form.

The contract, the same for both forms:

* a call writes one operator call's (or one read's) output; an empty one writes nothing
  and passes no crash point;
* before anything is written, the crash point ``before_output`` is passed (where an
  injected crash falls: after the input was consumed, before any output);
* ``result.records_out`` grows by the rows the channel writers took; a sink chained at the
  end of the subtask then writes the same rows;
* rows a writer refuses (a :class:`~spillway.channels.errors.RecordError`) fail the
  subtask with an error naming the first refused one and its origin, or, with dead
  letters, are diverted (stage ``emit``, with their origins) while the rest is written. A
  batch a writer refuses is split into rows for that;
* rows the sink refuses as too large for its topic (a
  :class:`~spillway.recovery.runtime.sinklimit.SinkRefusal`, before it wrote any) fail the
  subtask with an error naming the first and its origin, or, with dead letters, are
  diverted (stage ``sink``, with their origins) while the sink writes the rest.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from spillway.channels.errors import RecordError, RecordTooLargeError
from spillway.channels.ids import SubtaskId
from spillway.channels.wire.batchread import ArrowRows, one_batch
from spillway.channels.writer import ChannelWriter
from spillway.recovery.job.origins import Listed, Origins
from spillway.recovery.job.plan import Record, Sink
from spillway.recovery.runtime.batchpath import rows_of, write_batches
from spillway.recovery.runtime.crashpoints import CrashPoints
from spillway.recovery.runtime.deadletter import DeadLetters
from spillway.recovery.runtime.failures import emit_failure, sink_failure
from spillway.recovery.runtime.options import SubtaskResult
from spillway.recovery.runtime.sinklimit import SinkRefusal


class Outputs:
    """Writes one subtask's outputs to its channel writers and its chained sink."""

    def __init__(
        self,
        subtask: SubtaskId,
        operator: str,
        writers: Sequence[ChannelWriter],
        sink: Sink | None,
        dead_letters: DeadLetters | None,
        crash: CrashPoints,
        result: SubtaskResult,
    ) -> None:
        """``writers``: one per output channel; ``sink``: the chain's end, if any;
        ``dead_letters``: where refused rows go (None: they fail the subtask)."""
        self._subtask = subtask
        self._operator = operator
        self._writers = list(writers)
        self._sink = sink
        self._dead_letters = dead_letters
        self._crash = crash
        self.result = result

    def records(self, recs: list[Record], origins: Origins) -> None:
        """Write ``recs`` (``origins``: where each came from, if known)."""
        if not recs:
            return
        if self._crash.armed:
            self._crash.before_output()
        self._write_records(recs, origins)

    def batches(self, batches: list[pa.RecordBatch], origins: Origins) -> None:
        """Write ``batches`` (one call's output, one schema) as one Arrow batch
        (``origins``: where each row came from, if known)."""
        if not batches:
            return
        if self._crash.armed:
            self._crash.before_output()
        batch = one_batch(batches, batches[0].schema)
        try:
            self.result.records_out += write_batches(self._writers, [batch])
        except RecordError:  # name or divert the rows a writer refuses, one by one
            self._write_records(rows_of(batches), origins)
            return
        if self._sink is not None:  # a sink chained behind a batch operator
            self._to_sink(ArrowRows(batch), origins)

    def sink_alone(self, records: Sequence[Record], origins: Origins) -> None:
        """A sink alone in its subtask writes one message's ``records`` as they arrived
        (:class:`ArrowRows` for a sink that takes batches); they are its output
        (``origins``: where each came from)."""
        if self._crash.armed and records:
            self._crash.before_output()
        # a sink's output: the rows it wrote
        self.result.records_out += self._to_sink(records, origins)

    def _write_records(self, recs: list[Record], origins: Origins) -> None:
        try:
            self._write_all(recs)  # all-or-nothing per writer call
        except RecordError as e:
            if self._dead_letters is None:
                raise emit_failure(
                    self._subtask, self._operator, recs, origins, e, self._write_all
                ) from e
            recs, origins = self._write_good(recs, origins, self._dead_letters)
        self.result.records_out += len(recs)
        if self._sink is not None:  # the end of a chain
            self._to_sink(recs, origins)

    def _to_sink(self, records: Sequence[Record], origins: Origins) -> int:
        """The sink writes ``records`` but those it refuses as too large (dead-lettered, or
        the subtask fails naming the first); how many it wrote."""
        assert self._sink is not None
        try:
            self._sink.write(records)
            return len(records)
        except SinkRefusal as e:
            if self._dead_letters is None:
                raise sink_failure(self._subtask, self._operator, records, origins, e) from e
            refused = dict(e.refused)
        rows = list(records)  # ArrowRows: the rows as records, for the dead letters
        for k, reason in refused.items():
            self._dead_letters.send(
                stage="sink",
                error=RecordTooLargeError(reason),
                origin=origins.at(k),
                record=rows[k],
            )
        good = [r for k, r in enumerate(rows) if k not in refused]
        if good:
            self._sink.write(good)  # nothing left that it refuses
        return len(good)

    def _write_good(
        self, recs: list[Record], origins: Origins, dead_letters: DeadLetters
    ) -> tuple[list[Record], Origins]:
        """Write ``recs`` one by one, dead-lettering those refused; the written ones and
        their origins."""
        good, kept = [], []
        for k, r in enumerate(recs):
            try:
                self._write_all([r])
                good.append(r)
                kept.append(origins.at(k))
            except RecordError as e1:
                dead_letters.send(stage="emit", error=e1, origin=origins.at(k), record=r)
        return good, Listed(kept)

    def _write_all(self, records: list[Record]) -> None:
        for w in self._writers:
            w.write_many(records)
