"""A Confluent Schema Registry client: schemas by id, subjects' registration and checks.

It speaks the Confluent Schema Registry REST API (Confluent's registry, Apicurio's
``/apis/ccompat/v7``, Karapace, Redpanda) over the standard library's HTTP client, with
the settings :class:`RegistryConfig` passes through, as the Kafka client's are:
``basic.auth.user.info`` (``USER:PASSWORD``), ``ssl.ca.location``,
``ssl.certificate.location``, ``ssl.key.location`` and ``ssl.key.password``. Secret
values are remembered for :func:`~spillway.channels.config.scrub_secrets` and never
appear in a repr, a log line or an error.
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NewType

from spillway.channels.config import remember_secrets
from spillway.channels.errors import (
    AuthenticationError,
    AuthorizationError,
    ConfigError,
    PipelineDefinitionError,
    RegistryUnavailableError,
)
from spillway.spark_jobs.modes import REGISTRY_FORMATS, RegistryFormat, SinkValueFormat, ValueFormat

SchemaId = NewType("SchemaId", int)
"""A schema's id in the registry: the 4 bytes after the magic byte of the wire format."""

SchemaKind = Literal["AVRO", "JSON", "PROTOBUF"]
"""A schema's ``schemaType`` in the registry's API (absent means ``AVRO``)."""

SETTINGS = (
    "basic.auth.user.info",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
)
_SECRETS = ("basic.auth.user.info", "ssl.key.password")
_MASK = "[hidden]"
_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
_SCHEMA_NOT_FOUND = (40403, 40401, 40402)  # schema, subject, version not found


@dataclass(frozen=True)
class RegistryConfig:
    """Where the schema registry is and how to reach it.

    ``url``: the API's base URL (``http://host:8081``, or Apicurio's
    ``http://host:8080/apis/ccompat/v7``). ``client``: the settings of :data:`SETTINGS`
    (basic auth, TLS), named as confluent-kafka's registry client names them.
    ``timeout_s`` bounds each HTTP request.
    """

    url: str
    client: Mapping[str, str] = field(default_factory=dict, repr=False)
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        parsed = urllib.parse.urlsplit(self.url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError(
                f"registry url must be http(s)://HOST[:PORT][/PATH], got {self.url!r}"
            )
        if parsed.username is not None or parsed.password is not None:
            raise ConfigError(
                "registry url must not hold credentials; pass "
                "client={'basic.auth.user.info': 'USER:PASSWORD'}"
            )
        unknown = sorted(set(self.client) - set(SETTINGS))
        if unknown:
            raise ConfigError(f"unknown registry settings {unknown}; known: {list(SETTINGS)}")
        user_info = self.client.get("basic.auth.user.info")
        if user_info is not None and ":" not in user_info:
            raise ConfigError("registry setting basic.auth.user.info must be USER:PASSWORD")
        if not self.timeout_s > 0:
            raise ConfigError(f"registry timeout_s must be > 0, got {self.timeout_s}")
        remember_secrets(str(self.client[k]) for k in _SECRETS if self.client.get(k))

    def __repr__(self) -> str:
        shown = {k: (_MASK if k in _SECRETS else v) for k, v in self.client.items()}
        return f"RegistryConfig(url={self.url!r}, client={shown!r}, timeout_s={self.timeout_s})"


def check_registry_format(
    where: str, value_format: ValueFormat | SinkValueFormat, registry: object, verb: str
) -> RegistryFormat:
    """``value_format`` as a :data:`~spillway.spark_jobs.modes.RegistryFormat`; refuse a
    ``registry`` argument that is not a :class:`RegistryConfig`, or a value format the
    registry path does not frame (``verb``: "read" or "written", for the message)."""
    if not isinstance(registry, RegistryConfig):
        raise PipelineDefinitionError(
            f"{where}: registry must be a RegistryConfig, got {type(registry).__name__}"
        )
    for fmt in REGISTRY_FORMATS:
        if value_format == fmt:
            return fmt
    raise PipelineDefinitionError(
        f'{where}: with a registry, value_format must be "avro", "json-schema" or "protobuf" '
        f"(the formats {verb} with one), got {value_format!r}"
    )


class SchemaNotFound(LookupError):
    """The registry has no such schema id, subject or version (its 404)."""


class _Conflict(ConfigError):
    """The registry refused a request as conflicting with its state (its 409)."""


class RegistryClient:
    """Requests to one registry; schemas fetched by id are cached (ids never change)."""

    def __init__(self, config: RegistryConfig) -> None:
        self.config = config
        self._base = config.url.rstrip("/")
        self._headers = {"Accept": _CONTENT_TYPE, "Content-Type": _CONTENT_TYPE}
        if user_info := config.client.get("basic.auth.user.info"):
            token = base64.b64encode(user_info.encode()).decode("ascii")
            self._headers["Authorization"] = f"Basic {token}"
        self._ssl = _ssl_context(config.client) if self._base.startswith("https:") else None
        self._by_id: dict[SchemaId, tuple[str, str]] = {}  # id → (schemaType, text)

    def schema(self, schema_id: SchemaId) -> str:
        """The Avro schema text of ``schema_id``; :class:`SchemaNotFound` if the registry has
        none, or only a schema of another kind under that id."""
        return self._of_kind(schema_id, "AVRO")

    def json_schema(self, schema_id: SchemaId) -> str:
        """The JSON Schema text of ``schema_id``; :class:`SchemaNotFound` as :meth:`schema`."""
        return self._of_kind(schema_id, "JSON")

    def protobuf_schema(self, schema_id: SchemaId) -> str:
        """The Protobuf schema of ``schema_id`` as a base64 ``FileDescriptorProto`` (the
        registry's ``format=serialized``); :class:`SchemaNotFound` as :meth:`schema`."""
        return self._of_kind(schema_id, "PROTOBUF")

    def _of_kind(self, schema_id: SchemaId, kind: SchemaKind) -> str:
        known = self._by_id.get(schema_id)
        if known is None:
            # A Protobuf schema is asked for as a serialized descriptor, not .proto text.
            query = "?format=serialized" if kind == "PROTOBUF" else ""
            answer = self._request("GET", f"/schemas/ids/{int(schema_id)}{query}")
            known = str(answer.get("schemaType", "AVRO")), str(answer["schema"])
            if known[0] != "PROTOBUF" or kind == "PROTOBUF":  # else its text is .proto
                self._by_id[schema_id] = known
        if known[0] != kind:
            raise SchemaNotFound(f"schema id {schema_id} is a {known[0]} schema, not {kind}")
        return known[1]

    def register(self, subject: str, schema: str, kind: SchemaKind = "AVRO") -> SchemaId:
        """Register ``schema`` (text of ``kind``) under ``subject`` (or find it there); its id."""
        path, body = f"/subjects/{_quote(subject)}/versions", {"schema": schema, "schemaType": kind}
        try:
            answer = self._request("POST", path, body)
        except _Conflict:
            # Another subtask registered the subject's first version at the same moment
            # (Apicurio answers the loser 409): registering again finds that version.
            answer = self._request("POST", path, body)
        schema_id = SchemaId(int(answer["id"]))
        self._by_id[schema_id] = kind, schema
        return schema_id

    def compatible(
        self, subject: str, schema: str, kind: SchemaKind = "AVRO"
    ) -> tuple[bool, list[str]]:
        """Whether ``subject``'s compatibility rule admits ``schema`` (text of ``kind``) as
        its next version, with the registry's reasons when not; a subject with no version
        admits any."""
        try:
            answer = self._request(
                "POST",
                f"/compatibility/subjects/{_quote(subject)}/versions/latest?verbose=true",
                {"schema": schema, "schemaType": kind},
            )
        except SchemaNotFound:
            return True, []
        messages = answer.get("messages") or []
        return bool(answer.get("is_compatible")), [str(m) for m in messages]

    def set_compatibility(self, subject: str, level: str) -> None:
        """Set ``subject``'s compatibility rule (``BACKWARD``, ``FULL``, ``NONE``, ...)."""
        self._request("PUT", f"/config/{_quote(subject)}", {"compatibility": level})

    def _request(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self._base + path, data=data, method=method, headers=self._headers
        )
        where = f"schema registry {self._base}"
        try:
            with urllib.request.urlopen(
                request, timeout=self.config.timeout_s, context=self._ssl
            ) as answer:
                return dict(json.loads(answer.read() or b"{}"))
        except urllib.error.HTTPError as e:
            detail = _error_body(e)
            if e.code == 401:
                raise AuthenticationError(f"{where} refused the credentials (401)") from None
            if e.code == 403:
                raise AuthorizationError(f"{where} refused {method} {path} (403)") from None
            if e.code == 404 and detail.get("error_code", 40403) in _SCHEMA_NOT_FOUND:
                raise SchemaNotFound(str(detail.get("message", "not found"))) from None
            if e.code == 409:
                raise _Conflict(
                    f"{where}: {method} {path} refused (409): {detail.get('message', '')}"
                ) from None
            if e.code == 422:
                raise ConfigError(
                    f"{where}: {method} {path} refused ({e.code}): {detail.get('message', '')}"
                ) from None
            raise RegistryUnavailableError(
                f"{where}: {method} {path} failed ({e.code}): {detail.get('message', '')}"
            ) from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            reason = getattr(e, "reason", e)
            raise RegistryUnavailableError(f"{where} cannot be reached: {reason}") from None


def _quote(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def _error_body(e: urllib.error.HTTPError) -> dict[str, Any]:
    try:
        body = json.loads(e.read() or b"{}")
    except (ValueError, OSError):
        return {}
    return dict(body) if isinstance(body, dict) else {}


def _ssl_context(settings: Mapping[str, str]) -> ssl.SSLContext:
    """TLS as the settings say: a CA file to trust, a client certificate and its key."""
    context = ssl.create_default_context(cafile=settings.get("ssl.ca.location"))
    certificate = settings.get("ssl.certificate.location")
    if certificate:
        context.load_cert_chain(
            certificate, settings.get("ssl.key.location"), settings.get("ssl.key.password")
        )
    return context
