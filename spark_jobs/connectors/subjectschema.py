"""One schema under one subject of a schema registry, as a writer of the Confluent wire
format uses it: asked about before the job starts (the subject's compatibility rule), and
registered (or found) on first use for the 5-byte header every value starts with.

Both registry writers keep one: Avro
(:class:`~spillway.spark_jobs.connectors.confluentavro.RegistryAvroWriter`) and JSON Schema
(:class:`~spillway.spark_jobs.connectors.confluentjson.RegistryJsonWriter`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from spillway.channels.errors import PipelineDefinitionError
from spillway.spark_jobs.connectors.registry import (
    RegistryClient,
    RegistryConfig,
    SchemaId,
    SchemaKind,
)

MAGIC = 0
"""The wire format's first byte."""

HEADER_BYTES = 5
"""The magic byte and the schema id (4 bytes, big-endian)."""


class SubjectRegistry(Protocol):
    """What a writer asks of a registry
    (:class:`~spillway.spark_jobs.connectors.registry.RegistryClient` is one)."""

    def register(self, subject: str, schema: str, kind: SchemaKind = "AVRO") -> SchemaId:
        """Register ``schema`` (text of ``kind``) under ``subject`` (or find it there); its id."""
        ...

    def compatible(
        self, subject: str, schema: str, kind: SchemaKind = "AVRO"
    ) -> tuple[bool, list[str]]:
        """Whether ``subject``'s compatibility rule admits ``schema``, with its reasons."""
        ...


class SubjectSchema:
    """The schema ``text`` of ``kind`` under ``subject`` in ``registry``.

    Picklable (the client is made on first use, by ``connect``: a module-level callable,
    :class:`RegistryClient` unless a test fakes it).
    """

    def __init__(
        self,
        text: str,
        kind: SchemaKind,
        registry: RegistryConfig,
        subject: str,
        connect: Callable[[RegistryConfig], SubjectRegistry] = RegistryClient,
    ) -> None:
        self.text, self.kind, self.registry, self.subject = text, kind, registry, subject
        self.connect = connect
        self._client: SubjectRegistry | None = None
        self._header: bytes | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("text", "kind", "registry", "subject", "connect")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def check(self, where: str, what: str) -> None:
        """``PipelineDefinitionError`` naming ``where`` if the subject's compatibility rule
        refuses the schema (``what``, for the message; the registry's reasons included)."""
        ok, reasons = self._connect().compatible(self.subject, self.text, self.kind)
        if not ok:
            raise PipelineDefinitionError(
                f"{where}: the schema registry's compatibility rule for subject "
                f"{self.subject!r} refuses {what}"
                + (f": {'; '.join(reasons)}" if reasons else "")
            )

    def header(self) -> bytes:
        """Magic byte and the schema's id under the subject (registered on first use)."""
        if self._header is None:
            schema_id = self._connect().register(self.subject, self.text, self.kind)
            self._header = bytes([MAGIC]) + int(schema_id).to_bytes(4, "big")
        return self._header

    def _connect(self) -> SubjectRegistry:
        if self._client is None:
            self._client = self.connect(self.registry)
        return self._client
