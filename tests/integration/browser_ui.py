"""``spillway ui`` in a real browser: headless Chromium (Debian's package) loads the page
during a clicks job with count[0] SIGKILLed, and the restart must appear in the DOM.

Not collected from the directory (the file name does not match ``test_*.py``): ``make
soak`` and ``make ui-test`` install Chromium when missing and run this file. The screenshot
goes to ``$UI_SCREENSHOT`` (``make ui-test``: ``docs/ui.png``, shown in the README).

Chromium is kept on loopback: every request goes through a proxy address on 127.0.0.1
where nothing listens, except 127.0.0.1 itself (which Chromium never proxies), and its
background services (updates, sync, metrics) are switched off.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.uijob import KILLED, SUBTASKS, clicks_with_a_kill, wait_until

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.soak]

CHROMIUM = "chromium"
WINDOW = "1280,1500"


def chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Headless Chromium with ``args``, loopback only, a fresh profile in ``profile``."""
    exe = shutil.which(CHROMIUM)
    assert exe is not None, "no chromium on PATH: run `make ui-test` (it installs Debian's)"
    flags = [
        "--headless",
        "--no-sandbox",  # as root in a container there is no user namespace to sandbox in
        "--disable-gpu",
        f"--user-data-dir={profile}",
        "--proxy-server=http://127.0.0.1:9",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        "--disable-domain-reliability",
        "--no-first-run",
        "--no-pings",
        f"--window-size={WINDOW}",
        "--virtual-time-budget=4000",  # lets the page fetch its JSON and draw
    ]
    return subprocess.run(
        [exe, *flags, *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_headless_chromium_shows_the_restart_of_the_killed_subtask(
    kafka_bootstrap: str, unique: str, clicks_env: Path, tmp_path: Path
) -> None:
    shot = Path(os.environ.get("UI_SCREENSHOT", str(tmp_path / "ui.png"))).resolve()
    with clicks_with_a_kill(kafka_bootstrap, unique, tmp_path) as job:
        dom: list[str] = []

        def restart_in_dom() -> bool:
            got = chromium(tmp_path / "profile", "--dump-dom", job.url)
            assert got.returncode == 0, got.stderr[-3000:]
            dom[:] = [got.stdout]
            # The restart's heading as drawn (the script's own text also says "caught up"),
            # once Spark's phases, from the driver's event, came too.
            title = re.escape(f'<div class="title">{KILLED} attempt 1 (') + r"[^)]*\): caught up "
            return bool(re.search(title, got.stdout)) and 'data-phase="spark_noticed"' in got.stdout

        wait_until("the restart shown", restart_in_dom)
        html = dom[0]
        assert 'data-loaded="true"' in html
        restarts = re.findall(
            r'<div class="restart" data-subtask="([^"]+)" data-attempt="(\d+)"', html
        )
        assert restarts == [(KILLED, "1")]
        # Every subtask in the graph, and the killed one drawn with its restart.
        boxes = re.findall(r'<g class="subtask" data-subtask="([^"]+)" data-state="([^"]+)"', html)
        assert [b for b, _ in boxes] == SUBTASKS
        assert f"[0] {dict(boxes)[KILLED]} ↻1" in html
        for phase in ("spark_noticed", "fenced", "restored", "caught_up"):
            assert f'data-phase="{phase}"' in html
        # The screenshot once the restarted attempt committed a checkpoint: more to see.
        job.wait_for(
            "the restarted attempt checkpointed",
            lambda snap: any(
                c["subtask"] == KILLED and c["attempt"] == 1 for c in snap["checkpoints"]
            ),
        )
        shot.parent.mkdir(parents=True, exist_ok=True)
        got = chromium(tmp_path / "profile", f"--screenshot={shot}", job.url)
        assert got.returncode == 0, got.stderr[-3000:]
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert job.driver.wait(300) == 0, job.driver_log.read_text()[-3000:]
