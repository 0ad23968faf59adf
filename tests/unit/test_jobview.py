"""The page's JSON, folded from scripted Kafka documents (no broker), and its HTTP server."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from spillway.channels.errors import ConfigError
from spillway.recovery.job.plandoc import PlanDoc
from spillway.recovery.observe.jobview import JobView, edges_of
from spillway.spark_jobs.ui.server import make_server, serve_in_thread

JOB = "j1"
RUN = "r1"
T0 = 1000.0


def plan() -> PlanDoc:
    ch = f"spillway.{JOB}.ch"
    return PlanDoc.from_json(
        {
            "version": 1,
            "operators": [
                {
                    "name": "src",
                    "parallelism": 1,
                    "kind": "source",
                    "stateful": False,
                    "checkpoint_topic": f"spillway.{JOB}.ckpt.src",
                    "inputs": [],
                },
                {
                    "name": "count",
                    "parallelism": 2,
                    "kind": "transform",
                    "stateful": True,
                    "checkpoint_topic": f"spillway.{JOB}.ckpt.count",
                    "inputs": [{"topic": f"{ch}.src.count", "partitions": 2}],
                },
            ],
        },
        "test",
    )


def ev(
    kind: str, op: str, index: int, attempt: int, pid: int, t: float, **kw: Any
) -> dict[str, Any]:
    return {
        "event": kind,
        "operator": op,
        "index": index,
        "attempt": attempt,
        "run": RUN,
        "pid": pid,
        "host": "h",
        "time": t,
        **kw,
    }


def beat(op: str, index: int, attempt: int, pid: int, t: float, **kw: Any) -> dict[str, Any]:
    return {
        "operator": op,
        "index": index,
        "attempt": attempt,
        "run": RUN,
        "pid": pid,
        "host": "h",
        "time": t,
        **kw,
    }


def view_with_a_restart() -> JobView:
    v = JobView(JOB, plan(), RUN, T0)
    for op, i, pid in (("src", 0, 10), ("count", 0, 11), ("count", 1, 12)):
        v.event(ev("fencing", op, i, 0, pid, T0 + 1))
        v.event(ev("started", op, i, 0, pid, T0 + 1.1, phases={"fenced": T0 + 1}))
    v.heartbeat(beat("count", 0, 0, 11, T0 + 2.0, records_in=50, checkpointed={}, positions={}))
    # count[0] is killed after T0 + 2.0; Spark notices and retries it.
    v.event(
        {
            "event": "task-retried",
            "run": RUN,
            "time": T0 + 3.1,
            "pid": 1,
            "retried": {"operator": "count", "index": 0, "attempt": 1},
            "spark_noticed": T0 + 3.0,
            "scheduled": T0 + 3.05,
        }
    )
    v.event(ev("fencing", "count", 0, 1, 21, T0 + 3.5))
    phases = {
        "python_started": T0 + 3.2,
        "imported": T0 + 3.3,
        "fenced": T0 + 3.5,
        "restored": T0 + 3.6,
    }
    v.event(
        ev(
            "started",
            "count",
            0,
            1,
            21,
            T0 + 3.6,
            phases=phases,
            replay={"spillway.j1.ch.src.count[0]": [5, 9, 0]},
            replay_basis="read",
        )
    )
    v.event(
        ev(
            "caught-up",
            "count",
            0,
            1,
            21,
            T0 + 3.9,
            phases={**phases, "caught_up": T0 + 3.9},
            replay={"spillway.j1.ch.src.count[0]": [5, 9, 40]},
            replay_basis="read",
        )
    )
    return v


def test_a_restart_has_its_phases_in_order_spark_s_included_and_the_old_attempt_s_last_sign() -> (
    None
):
    snap = view_with_a_restart().snapshot(T0 + 4)
    assert len(snap["restarts"]) == 1
    r = snap["restarts"][0]
    assert (r["subtask"], r["attempt"], r["pid"], r["previous_attempt"]) == ("count[0]", 1, 21, 0)
    assert r["previous_last_seen"] == T0 + 2.0  # its last heartbeat
    assert list(r["phases"]) == [
        "spark_noticed",
        "scheduled",
        "python_started",
        "imported",
        "fenced",
        "restored",
        "caught_up",
    ]
    assert r["phases"]["spark_noticed"] == T0 + 3.0
    assert r["caught_up"] is True
    assert r["replay"] == {"spillway.j1.ch.src.count[0]": [5, 9, 40]}
    assert [p for p, _ in r["steps"]] == list(r["phases"])[1:]
    assert r["start"] == T0 + 2.0
    rows = {s["name"]: s for s in snap["subtasks"]}
    assert {n: s["restarts"] for n, s in rows.items()} == {
        "src[0]": 0,
        "count[0]": 1,
        "count[1]": 0,
    }
    assert snap["graph"]["edges"] == [
        {"from": "src", "to": "count", "topic": "spillway.j1.ch.src.count"}
    ]
    assert [(o["name"], o["parallelism"]) for o in snap["graph"]["operators"]] == [
        ("src", 1),
        ("count", 2),
    ]


def test_a_rerun_that_finds_the_subtask_finished_is_no_restart() -> None:
    v = JobView(JOB, plan(), RUN, T0)
    v.event(ev("fencing", "src", 0, 0, 10, T0 + 1))
    v.event(ev("finished", "src", 0, 0, 10, T0 + 2, phases={}))
    v.event(ev("fencing", "src", 0, 1, 11, T0 + 3))
    v.event(ev("skipped", "src", 0, 1, 11, T0 + 3.1, checkpoint=4))
    assert v.snapshot(T0 + 4)["restarts"] == []


def test_checkpoints_of_this_run_only_and_global_ones_in_order() -> None:
    v = JobView(JOB, plan(), RUN, T0)
    v.checkpoint("count", 1, 3, T0 - 5, 0, False, None)  # an earlier run's
    v.checkpoint("count", 1, 7, T0 + 1.5, 0, False, None)
    v.checkpoint("count", 0, 8, T0 + 2.5, 1, True, 2)
    v.global_checkpoint({"id": 2, "start": T0 + 2.4, "end": T0 + 2.6, "duration_s": 0.2})
    snap = v.snapshot(T0 + 3)
    assert snap["checkpoints"] == [
        {
            "subtask": "count[1]",
            "id": 7,
            "time": T0 + 1.5,
            "attempt": 0,
            "finished": False,
            "global": None,
        },
        {
            "subtask": "count[0]",
            "id": 8,
            "time": T0 + 2.5,
            "attempt": 1,
            "finished": True,
            "global": 2,
        },
    ]
    assert snap["global_checkpoints"] == [
        {"id": 2, "start": T0 + 2.4, "end": T0 + 2.6, "duration_s": 0.2}
    ]


def test_samples_record_replay_debt_and_lag_per_subtask_over_time() -> None:
    v = JobView(JOB, plan(), RUN, T0)
    v.event(ev("fencing", "count", 0, 0, 11, T0 + 1))
    v.event(ev("started", "count", 0, 0, 11, T0 + 1.1))
    tp = "spillway.j1.ch.src.count[0]"
    v.heartbeat(beat("count", 0, 0, 11, T0 + 2, checkpointed={tp: 10}, positions={tp: 25}))
    v.ends({tp: 40})
    v.sample(T0 + 2.5)
    v.heartbeat(beat("count", 0, 0, 11, T0 + 3, checkpointed={tp: 30}, positions={tp: 40}))
    v.sample(T0 + 3.5)
    series = v.snapshot(T0 + 4)["series"]
    assert [(p["time"], p["debt"].get("count[0]"), p["lag"].get("count[0]")) for p in series] == [
        (T0 + 2.5, 30, 15),
        (T0 + 3.5, 10, 0),
    ]


def test_other_runs_are_left_out_and_a_newer_submission_starts_afresh() -> None:
    v = JobView(JOB, plan(), RUN, T0)
    v.event({"event": "submitted", "run": "r0", "time": T0 - 100, "plan": plan().to_json()})
    v.event({**ev("fencing", "count", 0, 0, 5, T0 - 90), "run": "r0"})
    v.event({**ev("fencing", "count", 0, 1, 6, T0 - 80), "run": "r0"})
    v.event(ev("fencing", "count", 0, 0, 11, T0 + 1))
    assert v.snapshot(T0 + 2)["restarts"] == []
    assert v.run_id == RUN
    v.event({"event": "submitted", "run": "r2", "time": T0 + 10, "plan": plan().to_json()})
    snap = v.snapshot(T0 + 11)
    assert (snap["run"], snap["submitted"]) == ("r2", T0 + 10)
    assert {s["state"] for s in snap["subtasks"]} == {"not started"}


def test_edges_come_from_channel_topic_names_only() -> None:
    doc = plan().to_json()
    doc["operators"][0]["inputs"] = [{"topic": "users-own-topic", "partitions": 1}]
    assert edges_of(JOB, PlanDoc.from_json(doc, "test")) == [
        {"from": "src", "to": "count", "topic": "spillway.j1.ch.src.count"}
    ]


def test_the_server_serves_the_page_and_the_snapshot_and_names_a_port_in_use() -> None:
    snap = view_with_a_restart().snapshot(T0 + 4)
    server = make_server(0, lambda: snap)
    stop = serve_in_thread(server)
    port = server.server_port
    try:
        base = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(f"{base}/api/snapshot", timeout=10) as r:
            assert json.loads(r.read()) == json.loads(json.dumps(snap))
        with urllib.request.urlopen(f"{base}/", timeout=10) as r:
            html = r.read().decode()
        assert "/api/snapshot" in html
        assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")  # nothing remote
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"{base}/nope", timeout=10)
        assert e.value.code == 404
        with pytest.raises(ConfigError) as err:
            make_server(port, lambda: snap)
        assert str(err.value) == (
            f"--port {port}: cannot serve the page on 127.0.0.1:{port} (Address already in use); "
            "choose a free port, or --port 0 for any free one"
        )
    finally:
        stop()


def test_a_port_out_of_range_is_named() -> None:
    with pytest.raises(ConfigError) as err:
        make_server(70000, dict)
    assert (
        str(err.value) == "--port 70000: not a TCP port; choose one in 0..65535 (0: any free one)"
    )
