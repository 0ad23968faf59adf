"""What a channel reader carries across a restart besides its offsets (pure data).

A module of its own so that offsets/ (the checkpoint format) can use these types without
importing the reader and, through it, the Kafka consumer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spillway.channels.ids import TopicPartition

__all__ = ["ReaderState", "Spans"]

Spans = tuple[tuple[int, int], ...]  # [start, end) offset ranges, ascending


@dataclass
class ReaderState:
    """What a reader must carry across a restart besides its offsets (stored in checkpoints)."""

    ended: dict[TopicPartition, set[int]] = field(default_factory=dict)
    watermarks: dict[TopicPartition, dict[int, int]] = field(default_factory=dict)
    # Messages of writer w in tp below skip[tp][w] were processed although the checkpointed
    # position of tp is lower (aligned: other channels were held back; any mode: the
    # position stays at the first part of an incomplete record, spillway.channels.wire.spanning).
    skip: dict[TopicPartition, dict[int, int]] = field(default_factory=dict)
    # Whole-job rewinds: messages of writer w in tp with start <= offset < end, for each
    # (start, end) span, were written by a run the job rewound away from; dropped unread.
    discard: dict[TopicPartition, dict[int, Spans]] = field(default_factory=dict)
    # Writers that announced they are idle, until they send data or a watermark again.
    # Not checkpointed: idle writers repeat the announcement while they stay idle.
    idle: dict[TopicPartition, set[int]] = field(default_factory=dict)
    # Writers per partition announced in-band by a live rescale of the upstream operator
    # (envelope.Kind.WIDTH); absent: the upstream parallelism of the plan.
    widths: dict[TopicPartition, int] = field(default_factory=dict)
