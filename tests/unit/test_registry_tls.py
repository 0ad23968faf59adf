"""The registry client over TLS, with a client certificate and basic auth, against a
registry double on loopback that requires both: the settings reach the connection as
confluent-kafka's registry client names them, and a missing CA, a missing client
certificate or a wrong password each fail with a clear error that never shows a secret.

Certificates are made with the ``openssl`` command for each test run."""

from __future__ import annotations

import base64
import json
import re
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from spillway.channels.errors import AuthenticationError, RegistryUnavailableError
from spillway.spark_jobs.connectors.registry import RegistryClient, RegistryConfig, SchemaId

USER_INFO = "alice:pw-tls-4711"
KEY_PASSWORD = "kp-tls-0815"
SCHEMA = '{"type": "string"}'


@dataclass(frozen=True)
class Pki:
    """A CA, a server certificate for 127.0.0.1 and a client certificate with an
    encrypted key, all signed by the CA."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def openssl(*args: str | Path, cwd: Path) -> None:
    subprocess.run(["openssl", *map(str, args)], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            "/CN=test-ca", "-keyout", "ca.key", "-out", "ca.crt", cwd=d)  # fmt: skip
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
            "-keyout", "server.key", "-out", "server.csr", cwd=d)  # fmt: skip
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", "server.ext", "-out", "server.crt",
            cwd=d)  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-subj", "/CN=spillway-test-client",
            "-passout", f"pass:{KEY_PASSWORD}", "-keyout", "client.key", "-out", "client.csr",
            cwd=d)  # fmt: skip
    openssl("x509", "-req", "-in", "client.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-out", "client.crt", cwd=d)  # fmt: skip
    return Pki(d / "ca.crt", d / "server.crt", d / "server.key", d / "client.crt", d / "client.key")


@dataclass
class Seen:
    """What the registry double saw of the requests that reached it."""

    client_names: list[str]
    authorizations: list[str]


@pytest.fixture
def registry(pki: Pki) -> Iterator[tuple[str, Seen]]:
    """An https registry on loopback that requires a client certificate of the test CA
    and ``USER_INFO``, serving schema id 1; its base URL and what it saw."""
    seen = Seen([], [])
    expected = "Basic " + base64.b64encode(USER_INFO.encode()).decode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            peer = self.connection.getpeercert()  # type: ignore[attr-defined]
            subject = dict(pair[0] for pair in peer["subject"])
            seen.client_names.append(subject["commonName"])
            seen.authorizations.append(self.headers.get("Authorization", ""))
            if self.headers.get("Authorization") != expected:
                self._answer(401, {"error_code": 40101, "message": "Unauthorized"})
            elif self.path == "/schemas/ids/1":
                self._answer(200, {"schema": SCHEMA})
            else:
                self._answer(404, {"error_code": 40403, "message": "Schema not found"})

        def _answer(self, status: int, body: dict[str, object]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass  # the test asserts on what the client raises, not the server's log

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    context.load_verify_locations(pki.ca)
    context.verify_mode = ssl.CERT_REQUIRED
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def settings(pki: Pki, **changes: str | None) -> dict[str, str]:
    client = {
        "basic.auth.user.info": USER_INFO,
        "ssl.ca.location": str(pki.ca),
        "ssl.certificate.location": str(pki.client_cert),
        "ssl.key.location": str(pki.client_key),
        "ssl.key.password": KEY_PASSWORD,
    }
    for name, value in changes.items():
        key = name.replace("_", ".")
        if value is None:
            del client[key]
        else:
            client[key] = value
    return client


def test_a_schema_is_fetched_over_mutual_tls_with_basic_auth(
    pki: Pki, registry: tuple[str, Seen]
) -> None:
    url, seen = registry
    client = RegistryClient(RegistryConfig(url, settings(pki)))
    assert client.schema(SchemaId(1)) == SCHEMA
    assert seen.client_names == ["spillway-test-client"]
    assert seen.authorizations == ["Basic " + base64.b64encode(USER_INFO.encode()).decode()]


def test_without_the_ca_the_server_is_not_trusted(pki: Pki, registry: tuple[str, Seen]) -> None:
    url, seen = registry
    client = RegistryClient(RegistryConfig(url, settings(pki, ssl_ca_location=None)))
    with pytest.raises(RegistryUnavailableError, match=r"cannot be reached.*CERTIFICATE_VERIFY"):
        client.schema(SchemaId(1))
    assert seen.client_names == []


def test_without_a_client_certificate_the_server_refuses_the_connection(
    pki: Pki, registry: tuple[str, Seen]
) -> None:
    url, seen = registry
    config = RegistryConfig(
        url,
        settings(pki, ssl_certificate_location=None, ssl_key_location=None, ssl_key_password=None),
    )
    unreachable = re.escape(f"schema registry {url} cannot be reached")
    with pytest.raises(RegistryUnavailableError, match=unreachable):
        RegistryClient(config).schema(SchemaId(1))
    assert seen.client_names == []


def test_a_wrong_password_is_an_authentication_error_that_shows_no_secret(
    pki: Pki, registry: tuple[str, Seen]
) -> None:
    url, _seen = registry
    wrong = "alice:not-the-password-1234"
    config = RegistryConfig(url, settings(pki, basic_auth_user_info=wrong))
    with pytest.raises(AuthenticationError, match=r"refused the credentials \(401\)") as caught:
        RegistryClient(config).schema(SchemaId(1))
    shown = f"{caught.value} {config!r}"
    for secret in (wrong, "not-the-password-1234", KEY_PASSWORD):
        assert secret not in shown
