"""The per-subtask checkpoint record, format version 2.

Contract:

* ``inputs[tp]`` is the **next offset to read** on input partition ``tp`` (Kafka's
  committed-offset convention). Everything below it has been processed and its effects
  (outputs, state changes) are in this checkpoint's transaction or earlier ones.
* ``outputs[topic]`` counts the records written to each partition of an output channel
  since the job began (output sequence numbers).
* ``ended`` / ``channel_watermarks``: end-of-stream and watermarks already received per
  input partition and upstream writer, which a restart would otherwise not see again.
* ``source_position``: a source's own position (generator count, file row, ...);
  ``sink_position``: what a sink's prepare phase recorded (files to publish, ...). Each is
  ``None`` for an operator without a source or sink.
* ``finished``: the final checkpoint of a subtask whose inputs all ended (FLIP-147); a
  restarted job does not run it again.
* ``topology``: fingerprint of the job graph; restoring into another graph is an error.
* ``global_id``: the numbered global checkpoint this record belongs to; ``None`` for
  checkpoints a subtask takes on its own clock.
* ``skip``: per input partition and writer, messages below this offset were processed
  although they lie at or past ``inputs[tp]`` (aligned mode: other channels of the
  partition were held back at the checkpoint; any mode: ``inputs[tp]`` stays at the first
  part of a record that spans messages, not yet complete); a restored reader skips them.
* ``partial[tp] = (offset, done)``: unaligned mode, a checkpoint taken inside a channel
  message — ``inputs[tp]`` is that message's offset and its first ``done`` records were
  already processed; a restore skips them.
* ``output_marks[topic][j]``: the offset after the last message this subtask had written to
  partition j of an output channel (its high-water mark there). A whole-job rewind to
  this checkpoint discards this subtask's messages at or past it.
* ``discard[tp][w]``: ``(start, end)`` spans — messages of upstream writer w in ``tp`` with
  ``start <= offset < end`` for a span belong to a run that a rewind abandoned; a reader drops them
  (they were written after the checkpoint the job rewound to).
* ``rewound_from``: set on the checkpoint a rewind writes for each subtask (a copy of its
  part of global checkpoint ``rewound_from``); ``rewrite_state``: the changelog holds
  records of the abandoned run past ``changelog``, so the restored subtask rewrites its
  whole state at its next checkpoint.
* ``owned``: the partitions this subtask owned when it took the checkpoint, per topic (its
  input channels' and its changelog's; ``spillway.channels.routing.keygroups.Ownership``): a restore
  reads the checkpoints of the previous owners of the partitions it owns now.
* ``changelogs[tp]``: per owned changelog partition, the next offset after the last
  record written there up to and including this checkpoint (a keyed operator's state
  lies in one partition per key group); restoring state replays the changelog below it.
  Empty: the operator keeps no state or has written none yet.
* ``widths[tp]``: the number of upstream writers of input partition ``tp`` that a live
  rescale of the upstream operator announced in-band (absent: the plan's parallelism).
* ``set_aside[kind]``: input records the operator did not use (``"late"`` records of a
  window) since the job began; dead-lettered, with ``--dead-letter``, in the same
  transactions.
* ``handed_over``: the last checkpoint of a subtask whose operator alone was stopped
  while the job ran, for a live rescale or upgrade (docs/architecture.md, Handover): its owner's
  last word on its partitions, which the new subtasks continue from. False on every
  other checkpoint, and in records written before the mark existed.

The record is JSON so that ``kafka-console-consumer`` shows it. A reader accepts the
versions in :data:`READS` and refuses others with a message naming them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spillway.channels.errors import (
    CheckpointFormatError,
    PositionRegressionError,
    TopologyMismatchError,
)
from spillway.channels.ids import (
    CheckpointId,
    JobId,
    Offset,
    OperatorName,
    SubtaskId,
    TopicPartition,
)
from spillway.channels.progress import ReaderState, Spans
from spillway.channels.routing.keygroups import Ownership

VERSION = 2
READS = (VERSION,)  # format versions this code reads


@dataclass(frozen=True)
class Checkpoint:
    """A subtask's committed snapshot of positions (never of in-flight data)."""

    subtask: SubtaskId
    checkpoint_id: CheckpointId
    topology: str
    inputs: Mapping[TopicPartition, Offset] = field(default_factory=dict)
    outputs: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    ended: Mapping[TopicPartition, frozenset[int]] = field(default_factory=dict)
    channel_watermarks: Mapping[TopicPartition, Mapping[int, int]] = field(default_factory=dict)
    watermark: int | None = None
    source_position: Mapping[str, Any] | None = None
    sink_position: Mapping[str, Any] | None = None
    finished: bool = False
    wall_time: float = 0.0
    attempt: int = 0
    global_id: int | None = None  # the global checkpoint this belongs to, if any
    skip: Mapping[TopicPartition, Mapping[int, int]] = field(default_factory=dict)
    output_marks: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    discard: Mapping[TopicPartition, Mapping[int, Spans]] = field(default_factory=dict)
    rewound_from: int | None = None
    rewrite_state: bool = False
    partial: Mapping[TopicPartition, tuple[int, int]] = field(default_factory=dict)
    set_aside: Mapping[str, int] = field(default_factory=dict)
    owned: Ownership = field(default_factory=Ownership)
    changelogs: Mapping[TopicPartition, Offset] = field(default_factory=dict)
    widths: Mapping[TopicPartition, int] = field(default_factory=dict)
    handed_over: bool = False

    def changelog_positions(self) -> dict[TopicPartition, Offset]:
        """Next offset per owned changelog partition (a copy of ``changelogs``)."""
        return dict(self.changelogs)

    @property
    def source(self) -> Mapping[str, Any]:
        """The source's position (empty for an operator without a source)."""
        return self.source_position or {}

    def to_bytes(self) -> bytes:
        """Serialize (versioned JSON)."""
        doc = {
            "v": VERSION,
            "job": self.subtask.job,
            "operator": self.subtask.operator,
            "index": self.subtask.index,
            "id": int(self.checkpoint_id),
            "topology": self.topology,
            "inputs": [[tp.topic, tp.partition, int(o)] for tp, o in sorted(self.inputs.items())],
            "outputs": {t: list(c) for t, c in sorted(self.outputs.items())},
            "ended": [[tp.topic, tp.partition, sorted(w)] for tp, w in sorted(self.ended.items())],
            "channel_watermarks": [
                [tp.topic, tp.partition, {str(w): v for w, v in sorted(m.items())}]
                for tp, m in sorted(self.channel_watermarks.items())
            ],
            "watermark": self.watermark,
            "source_position": _plain(self.source_position),
            "sink_position": _plain(self.sink_position),
            "finished": self.finished,
            "wall_time": self.wall_time,
            "attempt": self.attempt,
            "global": self.global_id,
            "skip": [
                [tp.topic, tp.partition, {str(w): o for w, o in sorted(m.items())}]
                for tp, m in sorted(self.skip.items())
            ],
            "output_marks": {t: list(m) for t, m in sorted(self.output_marks.items())},
            "discard": [
                [
                    tp.topic,
                    tp.partition,
                    {str(w): [list(s) for s in v] for w, v in sorted(m.items())},
                ]
                for tp, m in sorted(self.discard.items())
            ],
            "rewound_from": self.rewound_from,
            "partial": [
                [tp.topic, tp.partition, o, d] for tp, (o, d) in sorted(self.partial.items())
            ],
            "rewrite_state": self.rewrite_state,
            "set_aside": dict(self.set_aside),
            "owned": self.owned.to_json(),
            "changelogs": [
                [tp.topic, tp.partition, int(o)] for tp, o in sorted(self.changelogs.items())
            ],
            "widths": [[tp.topic, tp.partition, n] for tp, n in sorted(self.widths.items())],
            "handed_over": self.handed_over,
        }
        return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()

    @staticmethod
    def from_bytes(data: bytes, *, where: str = "") -> Checkpoint:
        """Parse a checkpoint record; :class:`CheckpointFormatError` if corrupt or of a
        format version not in :data:`READS` (the message names the versions read)."""
        try:
            doc = json.loads(data)
            version = doc["v"]
        except (ValueError, KeyError, TypeError) as e:
            raise CheckpointFormatError(f"corrupt checkpoint record {where}: {e}") from e
        if version not in READS:
            whose = _whose(doc)
            raise CheckpointFormatError(
                f"checkpoint of {whose or 'an unknown subtask'}{f' {where}' if where else ''} "
                f"has format version {version}; this version of Spillway reads format "
                f"{' and '.join(map(str, READS))} only. Run the job with the Spillway version "
                "that wrote it, or under a new --job-id",
                subtasks=[whose] if whose else [],
            )
        try:
            return Checkpoint(
                subtask=SubtaskId(JobId(doc["job"]), OperatorName(doc["operator"]), doc["index"]),
                checkpoint_id=CheckpointId(doc["id"]),
                topology=doc["topology"],
                inputs={TopicPartition(t, p): Offset(o) for t, p, o in doc["inputs"]},
                outputs={t: tuple(c) for t, c in doc["outputs"].items()},
                ended={TopicPartition(t, p): frozenset(w) for t, p, w in doc["ended"]},
                channel_watermarks={
                    TopicPartition(t, p): {int(w): v for w, v in m.items()}
                    for t, p, m in doc["channel_watermarks"]
                },
                watermark=doc["watermark"],
                source_position=doc["source_position"],
                sink_position=doc["sink_position"],
                finished=doc["finished"],
                wall_time=doc["wall_time"],
                attempt=doc["attempt"],
                global_id=doc.get("global"),  # absent in records of interval-only jobs
                skip={
                    TopicPartition(t, p): {int(w): o for w, o in m.items()}
                    for t, p, m in doc.get("skip", [])
                },
                # Absent in records written before whole-job rewinds existed.
                output_marks={t: tuple(m) for t, m in doc.get("output_marks", {}).items()},
                discard={
                    TopicPartition(t, p): {
                        int(w): tuple((int(a), int(b)) for a, b in v) for w, v in m.items()
                    }
                    for t, p, m in doc.get("discard", [])
                },
                rewound_from=doc.get("rewound_from"),
                partial={TopicPartition(t, p): (o, d) for t, p, o, d in doc.get("partial", [])},
                rewrite_state=bool(doc.get("rewrite_state", False)),
                # Absent in records written before operators could set records aside.
                set_aside={str(k): int(v) for k, v in doc.get("set_aside", {}).items()},
                owned=Ownership.from_json(doc["owned"], where),
                changelogs={TopicPartition(t, p): Offset(o) for t, p, o in doc["changelogs"]},
                # Absent in records written before live rescaling.
                widths={TopicPartition(t, p): int(n) for t, p, n in doc.get("widths", [])},
                # Absent in records written before the handed-over mark.
                handed_over=bool(doc.get("handed_over", False)),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise CheckpointFormatError(f"corrupt checkpoint record {where}: {e!r}") from e

    def reader_state(self) -> ReaderState:
        """The end-of-stream and watermark state a restored reader continues from."""
        return ReaderState(
            ended={tp: set(w) for tp, w in self.ended.items()},
            watermarks={tp: dict(m) for tp, m in self.channel_watermarks.items()},
            skip={tp: dict(m) for tp, m in self.skip.items()},
            discard={tp: dict(m) for tp, m in self.discard.items()},
            widths=dict(self.widths),
        )

    def check_topology(self, fingerprint: str) -> None:
        """Raise :class:`TopologyMismatchError` unless ``fingerprint`` took this checkpoint."""
        if self.topology != fingerprint:
            raise TopologyMismatchError(
                f"checkpoint {self.checkpoint_id} of {self.subtask} was taken by topology "
                f"{self.topology[:12]}, but the submitted job has topology {fingerprint[:12]}: "
                "the pipeline changed. Run it under a new --job-id, or resubmit the old pipeline",
                subtasks=[self.subtask],
            )


def _plain(position: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if position is None else dict(position)


def _whose(doc: Any) -> SubtaskId | None:
    """The subtask a checkpoint document names, if it names one."""
    try:
        job, operator = JobId(str(doc["job"])), OperatorName(str(doc["operator"]))
        return SubtaskId(job, operator, int(doc["index"]))
    except (KeyError, TypeError, ValueError):
        return None


def check_forward(previous: Mapping[TopicPartition, Offset], checkpoint: Checkpoint) -> None:
    """Raise :class:`PositionRegressionError` if an input position of ``checkpoint`` lies
    below the one of the checkpoint before it (``previous``): positions only move forward."""
    back = {
        tp: (int(previous[tp]), int(off))
        for tp, off in checkpoint.inputs.items()
        if tp in previous and off < previous[tp]
    }
    if back:
        tp, (was, now) = min(back.items())
        raise PositionRegressionError(
            f"{checkpoint.subtask}: checkpoint {checkpoint.checkpoint_id} would move the "
            f"position of {tp} back from {was} to {now}"
            + (f" (and {len(back) - 1} more partitions)" if len(back) > 1 else "")
            + ": a bug in the runtime, not in the job. Nothing was committed; report it",
            subtasks=[checkpoint.subtask],
        )


def fingerprint(description: Mapping[str, Any]) -> str:
    """A stable fingerprint of a JSON-able topology description."""
    canonical = json.dumps(description, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
