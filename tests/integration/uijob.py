"""A clicks job with one SIGKILLed subtask, and ``spillway ui`` following it (child processes).

Shared by the page's JSON API test (``make test``) and its browser test (``make soak``,
``make ui-test``).
count[0] kills itself with SIGKILL while taking its third checkpoint, after producing and
before committing; Spark retries it alone (``local[8,2]``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId
from spillway.recovery.observe.events import last_submission
from tests.integration.conftest import RECORDS

REF = "spillway.examples.clicks:pipeline"
OPERATORS = [("clicks", 2), ("enrich", 2), ("count", 2), ("out", 2)]
SUBTASKS = [f"{op}[{i}]" for op, p in OPERATORS for i in range(p)]
KILLED = "count[0]"


def read_output(out: Path) -> dict[str, tuple[str, int]]:
    """The job's output files as page -> (section, views); a repeated page fails."""
    rows: dict[str, tuple[str, int]] = {}
    for f in sorted((out / "out").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            assert r["page"] not in rows, f"duplicate output row for {r['page']}"
            rows[r["page"]] = (r["section"], r["views"])
    return rows


def free_port() -> int:
    """A port on loopback nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spillway(*argv: str) -> subprocess.CompletedProcess[str]:
    """A ``spillway`` command line in a child process."""
    cmd = [sys.executable, "-m", "spillway.cli", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)


def wait_until(what: str, check: Callable[[], bool], guard_s: float = 300.0) -> None:
    """Poll ``check()`` until true (the guard only stops a hang; no timing is asserted)."""
    t0 = time.monotonic()
    while not check():
        assert time.monotonic() - t0 < guard_s, f"still not {what} after {guard_s} s"
        time.sleep(0.5)


@dataclass
class UiJob:
    """The running job's driver and the ``spillway ui`` process that follows it."""

    job: str
    port: int
    driver: subprocess.Popen[bytes]
    ui: subprocess.Popen[bytes]
    driver_log: Path
    ui_log: Path

    @property
    def url(self) -> str:
        """The page."""
        return f"http://127.0.0.1:{self.port}/"

    def snapshot(self) -> dict[str, Any] | None:
        """``/api/snapshot`` (None while the server does not answer yet)."""
        assert self.ui.poll() is None, self.ui_log.read_text()[-3000:]
        try:
            with urllib.request.urlopen(f"{self.url}api/snapshot", timeout=10) as r:
                doc: dict[str, Any] = json.loads(r.read())
                return doc
        except OSError:
            return None

    def wait_for(self, what: str, check: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The first snapshot for which ``check`` holds."""
        got: list[dict[str, Any]] = []

        def ok() -> bool:
            snap = self.snapshot()
            if snap is not None and check(snap):
                got.append(snap)
                return True
            return False

        wait_until(what, ok)
        return got[0]


def killed_caught_up(snap: dict[str, Any]) -> bool:
    """The restart of the killed subtask caught up, Spark's phases included."""
    return any(
        r["subtask"] == KILLED and r["caught_up"] and "spark_noticed" in r["phases"]
        for r in snap["restarts"]
    )


@contextmanager
def clicks_with_a_kill(bootstrap: str, job: str, tmp_path: Path) -> Iterator[UiJob]:
    """Run the clicks job with count[0] killed once, and ``spillway ui`` once it was submitted.

    Stops both processes (by pid) on the way out.
    """
    driver_log, ui_log = tmp_path / "driver.log", tmp_path / "ui.log"
    cmd = [sys.executable, "-m", "spillway.cli", "run", REF, "--job-id", job]
    cmd += ["--bootstrap", bootstrap, "--master", "local[8,2]"]
    env = {
        **os.environ,
        "CLICKS_RATE": str(RECORDS / 2 / 12),  # about 12 s of input
        "SPILLWAY_CRASH_AT": "count:0:after-produce-read:0:3",
    }
    ui: subprocess.Popen[bytes] | None = None
    with open(driver_log, "wb") as out:
        driver = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:

        def submitted() -> bool:
            assert driver.poll() is None, driver_log.read_text()[-3000:]
            try:
                return last_submission(KafkaSettings(bootstrap), JobId(job)) is not None
            except Exception:  # the event topic appears once the driver created it
                return False

        wait_until("submitted", submitted)
        port = free_port()
        ui_cmd = [sys.executable, "-m", "spillway.cli", "ui", "--job", job]
        ui_cmd += ["--bootstrap", bootstrap, "--port", str(port), "--every", "0.5"]
        with open(ui_log, "wb") as out:
            ui = subprocess.Popen(ui_cmd, stdout=out, stderr=subprocess.STDOUT)
        yield UiJob(job, port, driver, ui, driver_log, ui_log)
    finally:
        for p in (ui, driver):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM) if p is ui else p.kill()
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
