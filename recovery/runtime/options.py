"""A subtask's runtime settings and the result of one incarnation (plain data)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spillway.channels.config import ChannelSettings
from spillway.channels.modes import CheckpointMode, Guarantee

if TYPE_CHECKING:
    from spillway.recovery.restore.rescale import Rescale


@dataclass(frozen=True)
class RunOptions:
    """Per-subtask runtime settings (one place, with defaults)."""

    checkpoint_interval_s: float = 1.0
    keep_checkpoints: int = 5
    keep_global: int = 10  # global checkpoints a job can still be rewound to
    poll_records: int = 2000  # records a source emits per step
    poll_messages: int = 8  # channel messages (batches of records) a reader takes per step
    transaction_timeout_ms: int = 60_000
    channel: ChannelSettings = field(default_factory=ChannelSettings)
    from_checkpoint: int | None = None
    allow_rewind: bool = False  # from_checkpoint older than the latest: outputs repeat downstream
    run_id: str | None = None  # honour stop requests of this run (SIGTERM to the driver)
    dead_letter: bool = False  # bad records go to the job's dead-letter channel, not fail
    # "unaligned" / "aligned": numbered global checkpoints too
    checkpoint_mode: CheckpointMode = "interval"
    watermark_interval_s: float = 0.2
    # Unaligned mode: records a subtask processes between looks for a checkpoint trigger,
    # so a checkpoint need not wait for a whole channel message (~1000 records).
    trigger_chunk: int = 256
    # "exactly-once": outputs are written in the checkpoint's transaction. "at-least-once":
    # outputs go out without a transaction and are flushed before the checkpoint commits,
    # so a restart re-sends (duplicates) what followed the last checkpoint, loses nothing.
    guarantee: Guarantee = "exactly-once"
    # The generation of the operator's Spark job (spillway.spark_jobs.spark.opjobs): stop requests
    # for this operator name one generation, so a restarted job ignores the one that ended it.
    generation: int = 0
    # The job's latest rescale (spillway.recovery.restore.rescale): a subtask of an operator it
    # changed continues from the handed-over checkpoints until it has checkpointed itself.
    rescale: Rescale | None = None


@dataclass
class SubtaskResult:
    """What one incarnation did; returned to the Spark driver and logged as an event."""

    subtask: str
    attempt: int
    status: str
    restored_from: int | None = None
    checkpoints: int = 0
    records_in: int = 0
    # Records written to its output channels, or, for a sink, rows the sink wrote (replays
    # included: what this incarnation wrote)
    records_out: int = 0
    # Seconds spent running the operator on input records and writing its outputs (not
    # waiting for input): records_in / busy_s is its true processing rate (an autoscaler's)
    busy_s: float = 0.0
    replay: dict[str, list[int]] = field(default_factory=dict)  # tp -> [from, to, records]
    replay_basis: str | None = None  # spillway.recovery.restore.progress: "read" or "upper-bound"
    source_replay: dict[str, Any] = field(default_factory=dict)  # what its source re-reads
    restore_s: float = 0.0
    catchup_s: float | None = None
    # e.g. late records, job totals
    set_aside: dict[str, int] = field(default_factory=dict)
    error: str | None = None  # status "failed": the one line the job stops with
    # Redos within this attempt (spillway.recovery.runtime.redo), set by the task body
    redos: int = 0
    # spillway.recovery.observe.phases, wall times
    phases: dict[str, float] = field(default_factory=dict)
