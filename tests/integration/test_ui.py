"""``spillway ui``: the page's JSON API during a real job with a SIGKILLed subtask.

The page reads Kafka only (run in its own process, it knows nothing of the job but its
id): the test checks that the restart of the killed subtask shows with every phase in
order, the operator graph with each subtask's state, the checkpoints of both attempts,
replay debt and lag samples, and that the job's output is still exactly the reference.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from spillway.examples import clicks
from spillway.recovery.observe.phases import PHASES
from tests.integration.conftest import RECORDS
from tests.integration.uijob import (
    KILLED,
    OPERATORS,
    SUBTASKS,
    clicks_with_a_kill,
    killed_caught_up,
    read_output,
    spillway,
)

pytestmark = [pytest.mark.broker, pytest.mark.extended]


@pytest.mark.spark
def test_the_page_s_json_shows_the_restart_its_phases_the_graph_and_the_checkpoints(
    kafka_bootstrap: str, unique: str, clicks_env: Path, tmp_path: Path
) -> None:
    with clicks_with_a_kill(kafka_bootstrap, unique, tmp_path) as job:
        snap = job.wait_for("the restart caught up", killed_caught_up)
        # Exactly one restart, of the killed subtask, attempt 1 replacing attempt 0.
        assert [(r["subtask"], r["attempt"], r["previous_attempt"]) for r in snap["restarts"]] == [
            (KILLED, 1, 0)
        ]
        r = snap["restarts"][0]
        # Every phase but `killed` (known only to a killer), in order, none going back.
        assert list(r["phases"]) == [p for p in PHASES if p != "killed"]
        times = list(r["phases"].values())
        assert times == sorted(times)
        assert r["previous_last_seen"] is not None
        assert r["previous_last_seen"] <= times[0]
        assert [p for p, _ in r["steps"]] == list(r["phases"])[1:]
        assert r["replay_basis"] == "read"
        assert sum(v[2] for v in r["replay"].values()) > 0
        # The graph: operators in plan order, the three channels, every subtask.
        graph = snap["graph"]
        assert [(o["name"], o["parallelism"]) for o in graph["operators"]] == OPERATORS
        assert [(e["from"], e["to"], e["topic"]) for e in graph["edges"]] == [
            (a, b, f"spillway.{unique}.ch.{a}.{b}")
            for a, b in (("clicks", "enrich"), ("enrich", "count"), ("count", "out"))
        ]
        rows = {s["name"]: s for s in snap["subtasks"]}
        assert list(rows) == SUBTASKS
        assert {n: s["restarts"] for n, s in rows.items()} == {
            n: (1 if n == KILLED else 0) for n in SUBTASKS
        }
        # The killed subtask committed at least two checkpoints in attempt 0 (it died in its
        # third that read records; one that read nothing is not counted), with no gap.
        first = _ids(snap, KILLED, 0)
        assert len(first) >= 2
        assert first == list(range(first[0], first[0] + len(first)))
        assert snap["series"], "no replay debt / lag samples"

        assert job.driver.wait(300) == 0, job.driver_log.read_text()[-3000:]
        final = job.wait_for(
            "every subtask finished",
            lambda s: {x["state"] for x in s["subtasks"]} == {"finished"},
        )
        assert len(final["restarts"]) == 1
        finals = {c["subtask"] for c in final["checkpoints"] if c["finished"]}
        assert finals == set(SUBTASKS)
        ck = [(c["subtask"], c["attempt"]) for c in final["checkpoints"]]
        assert _ids(final, KILLED, 0) == first
        # Attempt 1 went on checkpointing, to its final one, from the id that never committed.
        assert _ids(final, KILLED, 1)[0] == first[-1] + 1
        assert {a for s, a in ck if s != KILLED} == {0}
        assert {s["name"]: (s["replay_debt"], s["lag"]) for s in final["subtasks"]} == {
            n: (0, 0) for n in SUBTASKS
        }
        # A second page on the same port: a clear error, exit 2.
        busy = spillway(
            "ui", "--job", unique, "--bootstrap", kafka_bootstrap, "--port", str(job.port)
        )
        assert busy.returncode == 2
        assert busy.stderr == (
            f"spillway: error: --port {job.port}: cannot serve the page on 127.0.0.1:{job.port} "
            "(Address already in use); choose a free port, or --port 0 for any free one\n"
        )
        job.ui.terminate()
        assert job.ui.wait(30) == 0, job.ui_log.read_text()[-3000:]
    assert read_output(clicks_env) == clicks.reference(RECORDS)


def test_the_page_of_a_job_never_submitted_fails_as_status_does(
    kafka_bootstrap: str, unique: str
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ui = spillway("ui", "--job", unique, "--bootstrap", kafka_bootstrap, "--port", str(port))
    status = spillway("status", "--job", unique, "--bootstrap", kafka_bootstrap)
    assert (ui.returncode, status.returncode) == (2, 2)
    assert (
        ui.stderr
        == status.stderr
        == (
            f"spillway: error: job {unique} was never submitted to {kafka_bootstrap}; "
            "check --job and --bootstrap\n"
        )
    )


def _ids(snap: dict[str, Any], subtask: str, attempt: int) -> list[int]:
    """The checkpoint ids the page shows for one attempt of one subtask, in order."""
    ours = (subtask, attempt)
    return sorted(int(c["id"]) for c in snap["checkpoints"] if (c["subtask"], c["attempt"]) == ours)
