"""Typed configuration for Kafka access and channels, validated in one place.

Client settings the user passes through (security among them) reach librdkafka unchanged;
:meth:`KafkaSettings.redacted` is what may be logged, and :func:`scrub_secrets` masks the
values of secret settings wherever they might end up in text (errors, events).
"""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spillway.channels.errors import ConfigError
from spillway.channels.modes import Codec

_SECRET_HINTS = ("password", "secret", "key", "token", "jaas")
_MASK = "***"

# Values of secret settings seen in this process. Text that leaves the process (error
# messages, event records) goes through scrub_secrets, so a secret that slipped into a
# message — say, a password pasted into the wrong setting — is masked there too.
_known_secrets: set[str] = set()


def is_secret(key: str) -> bool:
    """True for settings whose values must never be shown (passwords, keys, tokens, JAAS)."""
    return any(h in key.lower() for h in _SECRET_HINTS)


def scrub_secrets(text: str) -> str:
    """``text`` with the value of every secret setting this process has seen masked."""
    for secret in sorted(_known_secrets, key=len, reverse=True):
        # Also its JSON-escaped form: event records are JSON text.
        for form in {secret, json.dumps(secret)[1:-1]}:
            text = text.replace(form, _MASK)
    return text


def remember_secrets(values: Iterable[str]) -> None:
    """Mask these values from now on wherever :func:`scrub_secrets` is applied."""
    _known_secrets.update(v for v in values if v)


class SecretFilter(logging.Filter):
    """A handler filter that masks known secret values in the message and its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Always lets the record through, scrubbed."""
        if not _known_secrets:
            return True
        record.msg, record.args = scrub_secrets(record.getMessage()), None
        if record.exc_info and not record.exc_text:
            # The formatter uses exc_text when it is set; set it scrubbed.
            record.exc_text = scrub_secrets("".join(traceback.format_exception(*record.exc_info)))
        return True


def scrub_logging() -> None:
    """Add :class:`SecretFilter` to every handler of the root logger (once)."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, SecretFilter) for f in handler.filters):
            handler.addFilter(SecretFilter())


def parse_client_settings(items: Iterable[str], origin: str = "--kafka-config") -> dict[str, str]:
    """``KEY=VALUE`` items (``#`` comments and blank lines ignored) as a dict.

    The format of a librdkafka / Java client properties file. :class:`ConfigError` names
    a malformed item by ``origin`` and line, never by its value (it may hold a secret).
    """
    out: dict[str, str] = {}
    for n, raw in enumerate(items, 1):
        item = raw.strip()
        if not item or item.startswith("#"):
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{origin} item {n} must look like KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def read_client_settings(path: Path | str) -> dict[str, str]:
    """Client settings from a properties file (one ``KEY=VALUE`` per line)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read Kafka client settings file {path}: {e.strerror}") from e
    return parse_client_settings(text.splitlines(), f"{path}: line")


@dataclass(frozen=True)
class KafkaSettings:
    """Where the broker is and how topics are created.

    ``client`` is merged into every producer, consumer and admin client config, so
    ``security.protocol``, ``sasl.*`` and ``ssl.*`` work as they do in librdkafka.
    """

    bootstrap_servers: str
    # repr=False: a dataclass repr would show passwords; __repr__ below masks them.
    client: Mapping[str, Any] = field(default_factory=dict, repr=False)
    replication_factor: int = 1
    min_insync_replicas: int = 1
    request_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if not self.bootstrap_servers.strip():
            raise ConfigError(
                "bootstrap_servers is empty: pass --bootstrap HOST:PORT or set SPILLWAY_BOOTSTRAP"
            )
        if self.replication_factor < 1:
            raise ConfigError(f"replication_factor must be >= 1, got {self.replication_factor}")
        if not 1 <= self.min_insync_replicas <= self.replication_factor:
            raise ConfigError(
                f"min_insync_replicas must be in 1..replication_factor "
                f"({self.replication_factor}), got {self.min_insync_replicas}"
            )
        for reserved in ("transactional.id", "isolation.level", "enable.auto.commit", "group.id"):
            if reserved in self.client:
                raise ConfigError(
                    f"client setting {reserved!r} is managed by Spillway per subtask; remove it"
                )
        _known_secrets.update(str(v) for k, v in self.client.items() if is_secret(k) and v)

    def __repr__(self) -> str:
        return (
            f"KafkaSettings(bootstrap_servers={self.bootstrap_servers!r}, "
            f"client={self.redacted_client()!r}, replication_factor={self.replication_factor}, "
            f"min_insync_replicas={self.min_insync_replicas})"
        )

    def base(self) -> dict[str, Any]:
        """The librdkafka settings shared by every client."""
        # librdkafka logs retries it handles itself (coordinator loading, ...) at
        # warning level; Spillway logs what matters, so default to errors only.
        return {"bootstrap.servers": self.bootstrap_servers, "log_level": 3, **self.client}

    def redacted(self) -> dict[str, Any]:
        """:meth:`base` with secret-looking values masked, safe to log."""
        return {k: (_MASK if is_secret(k) else v) for k, v in self.base().items()}

    def redacted_client(self) -> dict[str, Any]:
        """The pass-through client settings with secret values masked."""
        return {k: (_MASK if is_secret(k) else v) for k, v in self.client.items()}


# The largest record a channel carries (its encoded size, framing included), split over
# messages (spillway.channels.wire.spanning). What bounds it: the reader holds a record's parts,
# their join and the decoded record at once (about 3x the record), per writer with a record
# under way in each partition; all parts go into one transaction, which must commit
# within transaction.timeout.ms. Each part is one message of at most
# max_batch_bytes, so the broker's message.max.bytes, a topic's max.message.bytes, the
# producer's message.max.bytes and the consumer's fetch sizes need only admit one batch.
# Keyed state keeps the same bound for a value, split the same way in its changelog
# (spillway.recovery.restore.state).
MAX_RECORD_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ChannelSettings:
    """How records are batched into Kafka messages.

    ``max_batch_bytes`` bounds one Kafka message; it must stay below the broker's
    ``message.max.bytes`` (1 MiB by default). A record larger than a message is split over
    consecutive messages (spillway.channels.wire.spanning) up to ``max_record_bytes`` (at most 64
    MiB),
    its encoded size; a larger one is refused. ``linger_s`` bounds how
    long a record may wait in a batch before it is written — independent of the
    checkpoint interval, so spilling is continuous.
    """

    max_batch_bytes: int = 256 * 1024
    linger_s: float = 0.05
    # "arrow": Arrow IPC batches where the channel's schema is flat, Avro elsewhere;
    # "avro": Avro everywhere. Readers decode both (spillway.channels.wire.envelope).
    codec: Codec = "arrow"
    max_record_bytes: int = MAX_RECORD_BYTES

    def __post_init__(self) -> None:
        if not 1024 <= self.max_batch_bytes <= 16 * 1024 * 1024:
            raise ConfigError(
                f"max_batch_bytes must be between 1 KiB and 16 MiB, got {self.max_batch_bytes}"
            )
        if not self.max_batch_bytes <= self.max_record_bytes <= MAX_RECORD_BYTES:
            raise ConfigError(
                f"max_record_bytes must be between max_batch_bytes ({self.max_batch_bytes}) "
                f"and 64 MiB, got {self.max_record_bytes}"
            )
        if not 0 <= self.linger_s <= 60:
            raise ConfigError(f"linger_s must be between 0 and 60 seconds, got {self.linger_s}")
