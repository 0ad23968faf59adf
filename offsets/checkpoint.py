"""The per-subtask checkpoint record, format version 3.

A record is keyed by ``subtask`` and ``checkpoint_id``; the rest is grouped by the part
that contributes it: ``meta`` (:class:`CheckpointMeta`: ``topology``, ``attempt``,
``wall_time``, ``global_id``, ``finished``, ``handed_over``, ``rewound_from``, ``owned``),
``reader`` (:class:`ReaderPositions`: ``inputs``, ``skip``, ``partial``, ``ended``,
``channel_watermarks``, ``widths``, ``discard``), ``writers`` (:class:`WriterCounts`:
``outputs``, ``output_marks``), ``state`` (:class:`StatePositions`: ``changelogs``,
``rewrite_state``), ``operator`` (:class:`OperatorProgress`: ``watermark``, ``set_aside``),
and the ``source``'s and ``sink``'s own positions. The serialised form has one JSON object
per part under the same names.

Contract:

* ``inputs[tp]`` is the **next offset to read** on input partition ``tp`` (Kafka's
  committed-offset convention). Everything below it has been processed and its effects
  (outputs, state changes) are in this checkpoint's transaction or earlier ones.
* ``outputs[topic]`` counts the records written to each partition of an output channel
  since the job began (output sequence numbers).
* ``ended`` / ``channel_watermarks``: end-of-stream and watermarks already received per
  input partition and upstream writer, which a restart would otherwise not see again.
* ``source``: a source's own position (generator count, file row, ...);
  ``sink``: what a sink's prepare phase recorded (files to publish, ...). Each is
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
  other checkpoint.

The record is JSON so that ``kafka-console-consumer`` shows it. A reader accepts format
:data:`VERSION` only: nothing of an older format is converted. Another version is refused
with a message naming the version found and the one read, and what to do (reset the job,
or run it under a new job id).
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

VERSION = 3  # the format this code writes, and the only one it reads


@dataclass(frozen=True)
class CheckpointMeta:
    """What the checkpoint is: the graph that took it, when, and where it stands in the job's
    life (``topology``, ``attempt``, ``wall_time``, ``global_id``, ``finished``,
    ``handed_over``, ``rewound_from``, ``owned``; see the module docstring)."""

    topology: str
    attempt: int = 0
    wall_time: float = 0.0
    global_id: int | None = None  # the global checkpoint this belongs to, if any
    finished: bool = False
    handed_over: bool = False
    rewound_from: int | None = None
    owned: Ownership = field(default_factory=Ownership)


@dataclass(frozen=True)
class ReaderPositions:
    """Where the subtask's reader stands on its input partitions (``inputs``, ``skip``,
    ``partial``, ``ended``, ``channel_watermarks``, ``widths``, ``discard``)."""

    inputs: Mapping[TopicPartition, Offset] = field(default_factory=dict)
    skip: Mapping[TopicPartition, Mapping[int, int]] = field(default_factory=dict)
    partial: Mapping[TopicPartition, tuple[int, int]] = field(default_factory=dict)
    ended: Mapping[TopicPartition, frozenset[int]] = field(default_factory=dict)
    channel_watermarks: Mapping[TopicPartition, Mapping[int, int]] = field(default_factory=dict)
    widths: Mapping[TopicPartition, int] = field(default_factory=dict)
    discard: Mapping[TopicPartition, Mapping[int, Spans]] = field(default_factory=dict)


@dataclass(frozen=True)
class WriterCounts:
    """What the subtask's writers have written per output channel (``outputs``,
    ``output_marks``)."""

    outputs: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    output_marks: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class StatePositions:
    """Where the operator's keyed state lies in its changelog (``changelogs``,
    ``rewrite_state``)."""

    changelogs: Mapping[TopicPartition, Offset] = field(default_factory=dict)
    rewrite_state: bool = False


@dataclass(frozen=True)
class OperatorProgress:
    """The operator's own progress (``watermark``, ``set_aside``)."""

    watermark: int | None = None
    set_aside: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Checkpoint:
    """A subtask's committed snapshot of positions (never of in-flight data), grouped by the
    part that contributes each: ``meta``, ``reader``, ``writers``, ``state``, ``operator``,
    and the ``source``'s and ``sink``'s own positions (``None`` without one)."""

    subtask: SubtaskId
    checkpoint_id: CheckpointId
    meta: CheckpointMeta
    reader: ReaderPositions = field(default_factory=ReaderPositions)
    writers: WriterCounts = field(default_factory=WriterCounts)
    state: StatePositions = field(default_factory=StatePositions)
    operator: OperatorProgress = field(default_factory=OperatorProgress)
    source: Mapping[str, Any] | None = None
    sink: Mapping[str, Any] | None = None

    def changelog_positions(self) -> dict[TopicPartition, Offset]:
        """Next offset per owned changelog partition (a copy of ``state.changelogs``)."""
        return dict(self.state.changelogs)

    def to_bytes(self) -> bytes:
        """Serialize (versioned JSON, one object per part)."""
        m, r, w, st, op = self.meta, self.reader, self.writers, self.state, self.operator
        doc = {
            "v": VERSION,
            "subtask": {
                "job": self.subtask.job,
                "operator": self.subtask.operator,
                "index": self.subtask.index,
            },
            "id": int(self.checkpoint_id),
            "meta": {
                "topology": m.topology,
                "attempt": m.attempt,
                "wall_time": m.wall_time,
                "global": m.global_id,
                "finished": m.finished,
                "handed_over": m.handed_over,
                "rewound_from": m.rewound_from,
                "owned": m.owned.to_json(),
            },
            "reader": {
                "inputs": [[tp.topic, tp.partition, int(o)] for tp, o in sorted(r.inputs.items())],
                "skip": _per_writer(r.skip),
                "partial": [
                    [tp.topic, tp.partition, o, d] for tp, (o, d) in sorted(r.partial.items())
                ],
                "ended": [
                    [tp.topic, tp.partition, sorted(ws)] for tp, ws in sorted(r.ended.items())
                ],
                "channel_watermarks": _per_writer(r.channel_watermarks),
                "widths": [[tp.topic, tp.partition, n] for tp, n in sorted(r.widths.items())],
                "discard": [
                    [
                        tp.topic,
                        tp.partition,
                        {str(k): [list(s) for s in v] for k, v in sorted(per.items())},
                    ]
                    for tp, per in sorted(r.discard.items())
                ],
            },
            "writers": {
                "outputs": {t: list(c) for t, c in sorted(w.outputs.items())},
                "output_marks": {t: list(c) for t, c in sorted(w.output_marks.items())},
            },
            "state": {
                "changelogs": [
                    [tp.topic, tp.partition, int(o)] for tp, o in sorted(st.changelogs.items())
                ],
                "rewrite_state": st.rewrite_state,
            },
            "operator": {"watermark": op.watermark, "set_aside": dict(op.set_aside)},
            "source": _plain(self.source),
            "sink": _plain(self.sink),
        }
        return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()

    @staticmethod
    def from_bytes(data: bytes, *, where: str = "") -> Checkpoint:
        """Parse a checkpoint record; :class:`CheckpointFormatError` if corrupt or of a
        format version other than :data:`VERSION` (the message names the version found, the
        one read, and what to do)."""
        try:
            doc = json.loads(data)
            version = doc["v"]
        except (ValueError, KeyError, TypeError) as e:
            raise CheckpointFormatError(f"corrupt checkpoint record {where}: {e}") from e
        if version != VERSION:
            whose = _whose(doc)
            raise CheckpointFormatError(
                f"checkpoint of {whose or 'an unknown subtask'}{f' {where}' if where else ''} "
                f"has format version {version!r}; this version of Spillway reads format "
                f"{VERSION} only. Older formats are not converted: reset the job with "
                f"`spillway reset --job {whose.job if whose else 'JOB'}` (its state and "
                "positions are lost), or run it under a new --job-id",
                subtasks=[whose] if whose else [],
            )
        try:
            s, m, r = doc["subtask"], doc["meta"], doc["reader"]
            w, st, op = doc["writers"], doc["state"], doc["operator"]
            return Checkpoint(
                subtask=SubtaskId(JobId(s["job"]), OperatorName(s["operator"]), s["index"]),
                checkpoint_id=CheckpointId(doc["id"]),
                meta=CheckpointMeta(
                    topology=m["topology"],
                    attempt=m["attempt"],
                    wall_time=m["wall_time"],
                    global_id=m["global"],
                    finished=bool(m["finished"]),
                    handed_over=bool(m["handed_over"]),
                    rewound_from=m["rewound_from"],
                    owned=Ownership.from_json(m["owned"], where),
                ),
                reader=ReaderPositions(
                    inputs={TopicPartition(t, p): Offset(o) for t, p, o in r["inputs"]},
                    skip=_read_per_writer(r["skip"]),
                    partial={TopicPartition(t, p): (o, d) for t, p, o, d in r["partial"]},
                    ended={TopicPartition(t, p): frozenset(ws) for t, p, ws in r["ended"]},
                    channel_watermarks=_read_per_writer(r["channel_watermarks"]),
                    widths={TopicPartition(t, p): int(n) for t, p, n in r["widths"]},
                    discard={
                        TopicPartition(t, p): {
                            int(k): tuple((int(a), int(b)) for a, b in v) for k, v in per.items()
                        }
                        for t, p, per in r["discard"]
                    },
                ),
                writers=WriterCounts(
                    outputs={t: tuple(c) for t, c in w["outputs"].items()},
                    output_marks={t: tuple(c) for t, c in w["output_marks"].items()},
                ),
                state=StatePositions(
                    changelogs={TopicPartition(t, p): Offset(o) for t, p, o in st["changelogs"]},
                    rewrite_state=bool(st["rewrite_state"]),
                ),
                operator=OperatorProgress(
                    watermark=op["watermark"],
                    set_aside={str(k): int(v) for k, v in op["set_aside"].items()},
                ),
                source=doc["source"],
                sink=doc["sink"],
            )
        except (KeyError, TypeError, ValueError) as e:
            raise CheckpointFormatError(f"corrupt checkpoint record {where}: {e!r}") from e

    def reader_state(self) -> ReaderState:
        """The end-of-stream and watermark state a restored reader continues from."""
        r = self.reader
        return ReaderState(
            ended={tp: set(w) for tp, w in r.ended.items()},
            watermarks={tp: dict(m) for tp, m in r.channel_watermarks.items()},
            skip={tp: dict(m) for tp, m in r.skip.items()},
            discard={tp: dict(m) for tp, m in r.discard.items()},
            widths=dict(r.widths),
        )

    def check_topology(self, fingerprint: str) -> None:
        """Raise :class:`TopologyMismatchError` unless ``fingerprint`` took this checkpoint."""
        if self.meta.topology != fingerprint:
            raise TopologyMismatchError(
                f"checkpoint {self.checkpoint_id} of {self.subtask} was taken by topology "
                f"{self.meta.topology[:12]}, but the submitted job has topology "
                f"{fingerprint[:12]}: the pipeline changed. Run it under a new --job-id, or "
                "resubmit the old pipeline",
                subtasks=[self.subtask],
            )


def _per_writer(m: Mapping[TopicPartition, Mapping[int, int]]) -> list[Any]:
    """``{tp: {writer: n}}`` as JSON: ``[[topic, partition, {"writer": n}], ...]``."""
    return [
        [tp.topic, tp.partition, {str(k): v for k, v in sorted(per.items())}]
        for tp, per in sorted(m.items())
    ]


def _read_per_writer(doc: Any) -> dict[TopicPartition, dict[int, int]]:
    """:func:`_per_writer`'s form parsed back."""
    return {TopicPartition(t, p): {int(k): int(v) for k, v in per.items()} for t, p, per in doc}


def _plain(position: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if position is None else dict(position)


def _whose(doc: Any) -> SubtaskId | None:
    """The subtask a checkpoint document names, if it names one."""
    try:
        named = doc.get("subtask", doc)  # format 3; 1 and 2 named it at the top
        job, operator = JobId(str(named["job"])), OperatorName(str(named["operator"]))
        return SubtaskId(job, operator, int(named["index"]))
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def check_forward(previous: Mapping[TopicPartition, Offset], checkpoint: Checkpoint) -> None:
    """Raise :class:`PositionRegressionError` if an input position of ``checkpoint`` lies
    below the one of the checkpoint before it (``previous``): positions only move forward."""
    back = {
        tp: (int(previous[tp]), int(off))
        for tp, off in checkpoint.reader.inputs.items()
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
