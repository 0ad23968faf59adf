"""The Spillway exception tree. Every error carries its *recovery scope*.

::

    SpillwayError                  root; ``scope`` says what must restart
    ├── ConfigError                bad configuration or option          JOB: fix, resubmit
    │   ├── RescaleError           a parallelism change refused         JOB
    │   ├── EvolutionError         a topology change refused (report)   JOB
    │   ├── SavepointNotFoundError no such savepoint (--from-savepoint) JOB
    │   ├── AuthenticationError    the broker rejected our credentials  JOB
    │   └── AuthorizationError     an ACL is missing                    JOB
    ├── PipelineDefinitionError    bad pipeline graph                   JOB
    ├── TopologyMismatchError      topics/checkpoints of another graph  JOB
    ├── BrokerUnavailableError     no broker answers                    JOB
    ├── RegistryUnavailableError   the schema registry fails a request  SUBTASK
    ├── RecordError                one record cannot be carried         SUBTASK
    │   ├── RecordTooLargeError
    │   └── SchemaMismatchError
    ├── TransactionAbortedError    the open transaction was aborted     SUBTASK: from checkpoint
    ├── ProducerFencedError        a newer incarnation took over        ZOMBIE: this process stops
    ├── RetentionGapError          data a checkpoint needs is deleted   JOB: operator action
    ├── CheckpointFormatError      a checkpoint record cannot be read   SUBTASK
    └── JobAbortedError            a subtask failed deterministically   JOB: fix, resubmit

Subtask-scoped errors name the subtasks to restart, like Kafka Streams'
``TaskCorruptedException``: only those restart, the rest of the job keeps running.

``deterministic`` errors (a bad record, a wrong setting, a missing topic) would happen
again on every retry: the runtime does not retry them but stops the job at once
(:class:`JobAbortedError`), where a transient error (broker gone, fenced without a newer
incarnation, a killed process) restarts only the subtask.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from spillway.channels.ids import SubtaskId


class Scope(enum.Enum):
    """What has to restart (or be fixed) after the error."""

    ZOMBIE = "zombie"  # this process is stale; stop it, nothing else restarts
    SUBTASK = "subtask"  # restart the named subtasks from their own checkpoints
    JOB = "job"  # the job cannot continue until a person fixes something


class SpillwayError(Exception):
    """Root of every error Spillway raises on purpose."""

    scope: Scope = Scope.JOB
    deterministic: bool = False  # True: a retry meets the same error (see module docstring)

    def __init__(self, message: str, *, subtasks: Iterable[SubtaskId] = ()) -> None:
        super().__init__(message)
        self.subtasks: frozenset[SubtaskId] = frozenset(subtasks)


class ConfigError(SpillwayError):
    """A configuration value or command-line option is wrong; the message names it and the fix."""

    deterministic = True


class RescaleError(ConfigError):
    """A change of parallelism that cannot be done soundly (spillway.recovery.restore.rescale says
    which
    and why); the message names the operator and what to do instead."""


class EvolutionError(ConfigError):
    """A restart with changed code and topology refused: the message is the compatibility
    report (spillway.recovery.job.evolution), naming each change and what to do."""


class SavepointNotFoundError(ConfigError):
    """``--from-savepoint`` (or ``--from-checkpoint``) names a savepoint that does not exist:
    the job never ran at that broker, or it has no such completed global checkpoint. Refused
    before anything starts; the message names what exists and what to do."""


class UpgradeError(ConfigError):
    """A live upgrade refused: the operator's new definition differs from the running one
    in name, kind, key groups, input or output channels or their schemas (the message
    names each change); the old code keeps running."""


class AuthenticationError(ConfigError):
    """The broker rejected the client's credentials (SASL or TLS); fix them and resubmit."""


class AuthorizationError(ConfigError):
    """The broker denied an operation: an ACL the job needs is missing (docs/security.md)."""


class PipelineDefinitionError(SpillwayError):
    """The pipeline graph is invalid (cycle, dangling operator, bad parallelism, ...)."""

    deterministic = True


class TopologyMismatchError(SpillwayError):
    """Existing topics or checkpoints belong to a different topology than the one submitted."""

    deterministic = True


class BrokerUnavailableError(SpillwayError):
    """No Kafka broker answered at the configured bootstrap servers."""


class RegistryUnavailableError(SpillwayError):
    """The schema registry did not answer, or failed a request; retried with the subtask."""

    scope = Scope.SUBTASK


class UndecidedTransactionError(SpillwayError):
    """A transaction on a checkpoint partition stayed undecided past the wait: its outcome
    (and so the latest checkpoint) cannot be known yet. Retried with the subtask."""

    scope = Scope.SUBTASK


class RecordError(SpillwayError):
    """One record cannot be written or read; the subtask stops before committing past it.

    ``origin``: where the record came from, as ``topic[partition]@offset`` or
    ``file:line``, when known.
    """

    scope = Scope.SUBTASK
    deterministic = True  # the same record fails the same way on every attempt

    def __init__(
        self, message: str, *, subtasks: Iterable[SubtaskId] = (), origin: str | None = None
    ) -> None:
        super().__init__(message, subtasks=subtasks)
        self.origin = origin


class RecordTooLargeError(RecordError):
    """A record's encoded size exceeds the channel's maximum message size."""


class SchemaMismatchError(RecordError):
    """A record does not match the channel's Avro schema, or a message cannot be decoded with it."""


class TransactionAbortedError(SpillwayError):
    """The subtask's open transaction was aborted; restart it from its last checkpoint."""

    scope = Scope.SUBTASK


class ProducerFencedError(SpillwayError):
    """A newer incarnation of this subtask fenced this producer. Fatal for this process only."""

    scope = Scope.ZOMBIE


class RetentionGapError(SpillwayError):
    """Channel data needed by a checkpoint was deleted by retention; replay would lose records."""

    deterministic = True


class CheckpointFormatError(SpillwayError):
    """A checkpoint record has an unknown version or is corrupt."""

    scope = Scope.SUBTASK


class PositionRegressionError(SpillwayError):
    """A checkpoint would move an input position backwards: a runtime bug, caught before the
    commit. The subtask restarts from its last committed checkpoint."""

    scope = Scope.SUBTASK


class JobAbortedError(SpillwayError):
    """A subtask failed with a deterministic error; the driver stopped the whole job at once.

    The message is the subtask's own (operator[index], origin, what was wrong, the fix).
    """
