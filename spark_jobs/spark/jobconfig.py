"""The settings of one ``spillway run``: what the driver needs to launch a job on Spark.

A module of its own because both the driver and what it does before a run
(:mod:`spillway.spark_jobs.spark.submit`) read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spillway.channels.config import MAX_RECORD_BYTES, ChannelSettings, KafkaSettings
from spillway.channels.errors import ConfigError
from spillway.channels.modes import CheckpointMode, Codec, Guarantee
from spillway.recovery.restore.rescale import Rescale
from spillway.recovery.runtime.runner import RunOptions


@dataclass(frozen=True)
class JobConfig:
    """Everything a job run needs besides the pipeline itself."""

    pipeline: str  # "module:attribute"
    job_id: str
    bootstrap: str
    master: str | None = None  # None: whatever spark-submit configured
    task_attempts: int = 4
    checkpoint_interval_s: float = 1.0
    replication_factor: int = 1
    min_insync_replicas: int = 1
    client: Mapping[str, Any] = field(default_factory=dict, repr=False)  # may hold secrets
    transaction_timeout_ms: int = 60_000
    # Environment variables with these prefixes are captured when the job is submitted and
    # set in every task before the pipeline is built there: one Spark JVM may outlive the
    # environment it was started with, and cluster executors never had it.
    # The pipeline adds its own (Pipeline(env_prefixes=...)).
    env_prefixes: tuple[str, ...] = ("SPILLWAY_",)
    dead_letter: bool = False
    # "unaligned" / "aligned": numbered global checkpoints too
    checkpoint_mode: CheckpointMode = "interval"
    global_interval_s: float = 2.0
    # How long a global checkpoint may take before the coordinator gives up on it. Aligned
    # checkpoints wait for barriers behind the backlog, so this is generous.
    global_timeout_s: float = 600.0
    keep_global: int = 10  # completed global checkpoints kept, i.e. rewindable to
    # "at-least-once" writes outputs without transactions (see RunOptions.guarantee):
    # cheaper, but a restarted subtask repeats downstream what it sent after its checkpoint.
    guarantee: Guarantee = "exactly-once"
    channel_codec: Codec = "arrow"  # see ChannelSettings.codec
    max_record_bytes: int = MAX_RECORD_BYTES  # see ChannelSettings.max_record_bytes
    # Pipeline settings (--conf; spillway.recovery.job.jobconf), seen by the pipeline on the driver
    # and
    # in every task; may hold secrets. And variables of the submitter's environment that
    # every task gets (--env), besides those with env_prefixes.
    conf: Mapping[str, str] = field(default_factory=dict, repr=False)
    forward_env: tuple[str, ...] = ()
    # Driver-side views of the run (spillway.spark_jobs.spark.observe): Prometheus metrics on
    # metrics_host:metrics_port (None: off) and the progress line on stderr.
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    progress: bool = False
    # Operator name -> parallelism instead of the pipeline's (a rescale,
    # spillway.recovery.control.savepoint).
    parallelism: Mapping[str, int] = field(default_factory=dict)
    # Restart with changed code even where it drops state (spillway.recovery.job.evolution).
    allow_dropped_state: bool = False
    # spark.cores.max: --slots on a cluster (spillway.spark_jobs.spark.taskslots); None: unset
    cores_max: int | None = None

    def settings(self) -> KafkaSettings:
        """Kafka settings of this run."""
        return KafkaSettings(
            self.bootstrap,
            client=dict(self.client),
            replication_factor=self.replication_factor,
            min_insync_replicas=self.min_insync_replicas,
        )

    def options(
        self,
        from_checkpoint: int | None = None,
        run_id: str | None = None,
        generation: int = 0,
        rescale: Rescale | None = None,
    ) -> RunOptions:
        """Per-subtask runtime options of this run (``generation``: of the operator's job)."""
        if self.checkpoint_interval_s <= 0:
            raise ConfigError(
                f"--checkpoint-interval must be > 0, got {self.checkpoint_interval_s}"
            )
        return RunOptions(
            checkpoint_interval_s=self.checkpoint_interval_s,
            transaction_timeout_ms=self.transaction_timeout_ms,
            channel=ChannelSettings(
                codec=self.channel_codec, max_record_bytes=self.max_record_bytes
            ),
            from_checkpoint=from_checkpoint,
            run_id=run_id,
            dead_letter=self.dead_letter,
            checkpoint_mode=self.checkpoint_mode,
            keep_global=self.keep_global,
            guarantee=self.guarantee,
            generation=generation,
            rescale=rescale,
        )
