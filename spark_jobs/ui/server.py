"""The page's HTTP server: ``/`` (one static page, everything inline) and ``/api/...`` JSON.

stdlib ``http.server``: two routes and a JSON body need no framework, and a new
dependency would ship to every user of the CLI. Bound to loopback only; the page talks
to nothing but this server.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.resources import files
from typing import Any

from spillway.channels.errors import ConfigError

HOST = "127.0.0.1"


def page() -> bytes:
    """The page (``page.html`` next to this module)."""
    return files("spillway.spark_jobs.ui").joinpath("page.html").read_bytes()


def make_server(
    port: int, snapshot: Callable[[], dict[str, Any]], host: str = HOST
) -> ThreadingHTTPServer:
    """A server on ``host:port`` (0: any free port) serving ``snapshot()`` at ``/api/snapshot``.

    :class:`ConfigError` naming the port if it cannot be bound (in use, say).
    """
    if not 0 <= port <= 65535:
        raise ConfigError(
            f"--port {port}: not a TCP port; choose one in 0..65535 (0: any free one)"
        )
    body = page()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path in ("/", "/index.html"):
                self._send(200, "text/html; charset=utf-8", body)
            elif path == "/api/snapshot":
                self._send(200, "application/json", json.dumps(snapshot()).encode())
            else:
                err = {"error": f"no such page {path!r}; try / or /api/snapshot"}
                self._send(404, "application/json", json.dumps(err).encode())

        def _send(self, code: int, kind: str, data: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one request a second per open page: not worth a log line each

    try:
        server = ThreadingHTTPServer((host, port), Handler)
    except OSError as e:
        raise ConfigError(
            f"--port {port}: cannot serve the page on {host}:{port} ({e.strerror or e}); "
            "choose a free port, or --port 0 for any free one"
        ) from None
    server.daemon_threads = True
    return server


def serve_in_thread(server: ThreadingHTTPServer) -> Callable[[], None]:
    """Serve in a background thread; returns the function that stops it."""
    thread = threading.Thread(target=server.serve_forever, name="ui http", daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(5)

    return stop
