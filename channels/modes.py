"""The runtime's modes as types: each a ``Literal`` defined here once, parsed once where it enters.

A mode enters as a string from the command line, a submission record or a public API call;
:func:`choose` turns it into its ``Literal`` type there (or raises :class:`ConfigError` naming
the bad value and the allowed ones), and everything after takes the typed value, so mypy
proves that no unchecked string reaches a comparison.

:class:`ReaderModes` is how a subtask's channel reader behaves, one object instead of four
booleans.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeVar, get_args

from spillway.channels.errors import ConfigError, SpillwayError

# Exactly-once: outputs are written in the checkpoint's transaction. At-least-once: without
# transactions, so a restart repeats downstream what followed the last checkpoint.
Guarantee = Literal["exactly-once", "at-least-once"]
GUARANTEES: tuple[Guarantee, ...] = get_args(Guarantee)

# Interval: each subtask checkpoints on its own clock. Aligned / unaligned: also numbered
# global checkpoints, triggered by barriers in-band (held back channels, or none).
CheckpointMode = Literal["interval", "aligned", "unaligned"]
CHECKPOINT_MODES: tuple[CheckpointMode, ...] = get_args(CheckpointMode)

# Encoding of channel batches (spillway.channels.wire.envelope.writer_codec): Arrow IPC where a
# channel's schema is flat and Avro elsewhere, or Avro everywhere.
Codec = Literal["arrow", "avro"]
CODECS: tuple[Codec, ...] = get_args(Codec)

# What a reader does with a message it cannot decode: fail the subtask, or deliver it with its
# error set (for the dead-letter channel).
BadMessages = Literal["fail", "deliver"]

# How a reader delivers data messages: records as dicts, or one Arrow batch per message.
RecordForm = Literal["rows", "batches"]

# How records are routed on a channel (spillway.channels.routing.partitioners): writer subtask
# i to reader subtask i; by the key's key group; round robin (into slots, if the reader has
# them); every record to every reader subtask.
Routing = Literal["forward", "hash", "rebalance", "broadcast"]
ROUTINGS: tuple[Routing, ...] = get_args(Routing)

_Mode = TypeVar("_Mode", bound=str)


def choose(
    value: object,
    allowed: tuple[_Mode, ...],
    what: str,
    error: type[SpillwayError] = ConfigError,
) -> _Mode:
    """``value`` as one of ``allowed`` (a mode's ``Literal`` values); else ``error`` (by default
    :class:`ConfigError`) whose message names ``what``, the bad value and the allowed ones."""
    for mode in allowed:
        if value == mode:
            return mode
    raise error(f"{what} must be one of {', '.join(map(repr, allowed))}, got {value!r}")


@dataclass(frozen=True)
class ReaderModes:
    """How a subtask's channel reader behaves (spillway.channels.reader.ChannelReader).

    ``bad``: ``"deliver"`` returns an undecodable data message as a delivery with its error
    set (for a dead-letter channel) instead of raising.

    ``checkpoints``: ``"aligned"`` holds back a channel (partition, writer) that delivered
    barrier n until barrier n has come on every channel.

    ``form``: ``"batches"`` delivers data messages as Arrow batches (for batch operators).

    ``guarantee``: the upstream writers' guarantee. Under at-least-once a restarted writer may
    leave a record's parts incomplete and send it again; under exactly-once that is an error.
    """

    bad: BadMessages = "fail"
    checkpoints: CheckpointMode = "interval"
    form: RecordForm = "rows"
    guarantee: Guarantee = "exactly-once"

    @property
    def aligned(self) -> bool:
        """Whether barriers hold channels back (aligned checkpoints)."""
        return self.checkpoints == "aligned"

    @property
    def resends(self) -> bool:
        """Whether an upstream writer may send a record's parts again."""
        return self.guarantee == "at-least-once"


# A reader's modes unless a subtask says otherwise: raise on bad messages, interval checkpoints,
# rows, exactly-once upstream.
DEFAULT_READER_MODES = ReaderModes()
