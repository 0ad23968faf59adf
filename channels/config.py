"""Typed configuration for Kafka access and channels, validated in one place.

Client settings the user passes through (security among them) reach librdkafka unchanged;
:meth:`KafkaSettings.redacted` is what may be logged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from channels.errors import ConfigError

_SECRET_HINTS = ("password", "secret", "key", "token", "jaas")


@dataclass(frozen=True)
class KafkaSettings:
    """Where the broker is and how topics are created.

    ``client`` is merged into every producer, consumer and admin client config, so
    ``security.protocol``, ``sasl.*`` and ``ssl.*`` work as they do in librdkafka.
    """

    bootstrap_servers: str
    client: Mapping[str, Any] = field(default_factory=dict)
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

    def base(self) -> dict[str, Any]:
        """The librdkafka settings shared by every client."""
        # librdkafka logs retries it handles itself (coordinator loading, ...) at
        # warning level; Spillway logs what matters, so default to errors only.
        return {"bootstrap.servers": self.bootstrap_servers, "log_level": 3, **self.client}

    def redacted(self) -> dict[str, Any]:
        """:meth:`base` with secret-looking values masked, safe to log."""
        return {
            k: ("***" if any(h in k.lower() for h in _SECRET_HINTS) else v)
            for k, v in self.base().items()
        }


@dataclass(frozen=True)
class ChannelSettings:
    """How records are batched into Kafka messages.

    ``max_batch_bytes`` bounds one Kafka message (and so the largest record); it must stay
    below the broker's ``message.max.bytes`` (1 MiB by default). ``linger_s`` bounds how
    long a record may wait in a batch before it is written — independent of the
    checkpoint interval, so spilling is continuous.
    """

    max_batch_bytes: int = 256 * 1024
    linger_s: float = 0.05

    def __post_init__(self) -> None:
        if not 1024 <= self.max_batch_bytes <= 16 * 1024 * 1024:
            raise ConfigError(
                f"max_batch_bytes must be between 1 KiB and 16 MiB, got {self.max_batch_bytes}"
            )
        if not 0 <= self.linger_s <= 60:
            raise ConfigError(f"linger_s must be between 0 and 60 seconds, got {self.linger_s}")
