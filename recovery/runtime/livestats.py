"""What a running subtask adds to its heartbeats: counters it already keeps, no new per-record work.

The heartbeat thread calls :meth:`LiveStats.doc` about once a second. Everything in it is
either a counter the runner keeps anyway (records in and out, the replay bookkeeping) or
a few numbers recorded once per checkpoint (:meth:`LiveStats.checkpointed`). The driver's
metrics (:mod:`spillway.recovery.observe.metrics`) and the progress line are built from these docs.

Fields (all optional for readers; older heartbeats have none of them):

- ``records_in``, ``records_out``, ``checkpoints``: this incarnation's counts so far;
- ``busy_s``: this incarnation's seconds spent processing input records so far;
- ``checkpoint``, ``checkpoint_time``, ``checkpoint_s``, ``commit_s``: the last checkpoint's
  id, wall time, duration (flush to commit) and the commit's latency;
- ``checkpointed``: per input partition, the next offset to read in the last checkpoint
  (what a restart resumes from); ``positions``: the reader's current next offsets;
- ``replay``: per input partition ``[from, to, replayed records]`` (as in ``started``);
- ``state_keys``: keys held in keyed state; ``progress``: ``[done, total]`` of a bounded
  source (its own units: records, offsets or files).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from spillway.channels.ids import Offset, TopicPartition

if TYPE_CHECKING:
    from spillway.channels.reader import ChannelReader
    from spillway.recovery.job.plan import Source
    from spillway.recovery.restore.state import ChangelogState
    from spillway.recovery.runtime.options import SubtaskResult


class LiveStats:
    """Per-checkpoint numbers of one incarnation, and the heartbeat doc built from them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the heartbeat thread reads what the loop writes
        self._ckpt: dict[str, Any] = {}

    def checkpointed(
        self,
        checkpoint: int,
        wall_time: float,
        duration_s: float,
        commit_s: float,
        inputs: Mapping[TopicPartition, Offset],
    ) -> None:
        """Record a committed checkpoint (called once per checkpoint, after the commit)."""
        doc = {
            "checkpoint": checkpoint,
            "checkpoint_time": wall_time,
            "checkpoint_s": round(duration_s, 6),
            "commit_s": round(commit_s, 6),
            "checkpointed": {str(tp): int(o) for tp, o in inputs.items()},
        }
        with self._lock:
            self._ckpt = doc

    def doc(
        self,
        result: SubtaskResult,
        reader: ChannelReader | None,
        state: ChangelogState | None,
        source: Source | None,
    ) -> dict[str, Any]:
        """The heartbeat fields now (reads counters; never blocks the subtask's loop)."""
        with self._lock:
            out: dict[str, Any] = dict(self._ckpt)
        out.update(
            records_in=result.records_in,
            records_out=result.records_out,
            checkpoints=result.checkpoints,
            busy_s=round(result.busy_s, 6),
            replay={tp: list(v) for tp, v in list(result.replay.items())},
        )
        if reader is not None:
            # RuntimeError: the loop changed the reader's dicts meanwhile; the next beat has them.
            with contextlib.suppress(RuntimeError):
                out["positions"] = {str(tp): int(o) for tp, o in reader.positions().items()}
        if state is not None:
            out["state_keys"] = len(state)
        progress = getattr(source, "progress", None)
        if callable(progress):
            done_total = progress()
            if done_total is not None:
                out["progress"] = [int(done_total[0]), int(done_total[1])]
        return out
