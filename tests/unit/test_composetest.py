"""The pure parts of ``make compose-test`` (composetest/): checks, caching, files it writes.

The run itself needs root and starts a Docker engine, so it is not part of the suite;
these pin what it concludes from what it sees.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest

from composetest import cache, checks, composecli, fetch
from composetest.cluster import readme_submit
from spillway.recovery.job.plandoc import VERSION as PLAN_VERSION

JOB = "j1"


def started(subtask: str, attempt: int, host: str, t: float, **extra: Any) -> dict[str, Any]:
    op, _, rest = subtask.partition("[")
    return {
        "event": "started",
        "operator": op,
        "index": int(rest.rstrip("]")),
        "attempt": attempt,
        "host": host,
        "time": t,
        **extra,
    }


def finished(subtask: str, attempt: int, replay: dict[str, list[int]]) -> dict[str, Any]:
    op, _, rest = subtask.partition("[")
    return {
        "event": "finished",
        "operator": op,
        "index": int(rest.rstrip("]")),
        "attempt": attempt,
        "replay": replay,
        "catchup_s": 1.5,
    }


def run_events(
    worker: dict[str, dict[str, list[int]]], broker: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """Subtasks start on w1 (index 0) or w2 (index 1) at t=10; the worker is killed at 100
    and ``worker`` restart on w1 at 104; the broker is killed at 200 and ``broker``
    restart at 230 where they ran."""
    events: list[dict[str, Any]] = [{"event": "submitted", "time": 0.0, "plan": PLAN}]
    for s in checks.subtasks(2):
        events.append(started(s, 0, "w1" if s.endswith("[0]") else "w2", 10.0))
    for s in worker:
        events.append(started(s, 1, "w1", 104.0, restored_from=3, restore_s=0.2))
    for s in broker:
        attempt = 2 if s in worker else 1
        events.append(started(s, attempt, "w1", 230.0, restored_from=5, restore_s=0.1))
    for s in checks.subtasks(2):
        attempt = (s in worker) + (s in broker)
        events.append(finished(s, attempt, worker.get(s, {})))
    return events


def _op(name: str, upstream: str | None, partitions: int) -> dict[str, Any]:
    inputs = (
        []
        if upstream is None
        else [{"topic": f"spillway.{JOB}.ch.{upstream}.{name}", "partitions": partitions}]
    )
    return {
        "name": name,
        "parallelism": 2,
        "kind": "transform",
        "stateful": False,
        "checkpoint_topic": f"spillway.{JOB}.ckpt.{name}",
        "inputs": inputs,
    }


# The example job's recorded plan: count's input is keyed, 32 key groups (16 each).
PLAN = {
    "version": PLAN_VERSION,
    "operators": [
        _op("clicks", None, 0),
        _op("enrich", "clicks", 2),
        _op("count", "enrich", 32),
        _op("out", "count", 2),
    ],
}


FAULTS = checks.Faults("w2", 100.0, frozenset({"count[1]", "clicks[1]"}), 200.0)


def test_localized_recovery_holds() -> None:
    replay = {
        "count[1]": {"spillway.j1.ch.enrich.count[16]": [10, 90, 75]},
        "clicks[1]": {},
    }
    events = run_events(replay)
    assert checks.localized_problems(events, JOB, 2, FAULTS) == []
    assert checks.latest_hosts(events)["count[1]"] == "w1"
    (clicks1, count1) = checks.recoveries(events, killed_at=100.0)
    assert count1.replay == {"spillway.j1.ch.enrich.count[16]": (10, 90, 75)}
    assert count1.started_after_s == pytest.approx(4.0)
    assert "offsets [10, 90) = 75 records" in count1.describe()
    assert "nothing (a source)" in clicks1.describe()


def test_restarts_after_the_broker_loss_are_told_apart() -> None:
    events = run_events({"count[1]": {}, "clicks[1]": {}}, broker=("enrich[0]",))
    assert checks.localized_problems(events, JOB, 2, FAULTS) == []
    assert checks.restarted_between(events, 200.0, 1e12) == {"enrich[0]"}
    (enrich0,) = checks.recoveries(events, 200.0)
    assert enrich0.started_after_s == pytest.approx(30.0)


def test_a_redo_after_the_broker_loss_is_no_restart() -> None:
    # count[1] restarted after the worker kill (attempt 1); after the broker kill it is
    # redone within that attempt: a redo event, then a second started event of attempt 1.
    events = run_events({"count[1]": {}, "clicks[1]": {}})
    redo = {"event": "redo", "operator": "count", "index": 1, "attempt": 1, "time": 228.0}
    events[-4:-4] = [redo, started("count[1]", 1, "w1", 230.0, restored_from=5)]
    assert checks.localized_problems(events, JOB, 2, FAULTS) == []
    assert checks.restarted_between(events, 200.0, 1e12) == set()
    assert checks.recoveries(events, 200.0) == []
    assert [r.subtask for r in checks.recoveries(events, 100.0, 200.0)] == [
        "clicks[1]",
        "count[1]",
    ]
    assert checks.redone_between(events, 200.0) == ["count[1] (attempt 1)"]
    assert checks.redone_between(events, 0.0, 200.0) == []


def test_a_restart_outside_the_lost_set_is_a_problem() -> None:
    events = run_events({"count[1]": {}, "clicks[1]": {}, "enrich[0]": {}})
    (problem,) = checks.localized_problems(events, JOB, 2, FAULTS)
    assert "restarted after the w2 kill: ['clicks[1]', 'count[1]', 'enrich[0]']" in problem


def test_a_restart_on_the_killed_worker_is_a_problem() -> None:
    events = run_events({"count[1]": {}, "clicks[1]": {}})
    for e in events:
        if e.get("event") == "started" and e["attempt"] == 1 and e["operator"] == "count":
            e["host"] = "w2"
    (problem,) = checks.localized_problems(events, JOB, 2, FAULTS)
    assert "count[1] restarted on w2, the worker that was killed" in problem


def test_replaying_another_subtasks_partition_is_a_problem() -> None:
    events = run_events(
        {"count[1]": {"spillway.j1.ch.enrich.count[15]": [0, 5, 5]}, "clicks[1]": {}}
    )
    (problem,) = checks.localized_problems(events, JOB, 2, FAULTS)
    assert (
        "count[1] replayed partitions not its own: ['spillway.j1.ch.enrich.count[15]']" in problem
    )


def test_without_a_recorded_plan_ownership_cannot_be_checked_and_says_so() -> None:
    events = run_events({"count[1]": {}, "clicks[1]": {}})
    del events[0]["plan"]
    assert checks.localized_problems(events, JOB, 2, FAULTS) == [
        f"no submitted event of job {JOB} records its plan"
    ]


def test_output_must_equal_the_reference_exactly() -> None:
    reference = {"/a/1": ("a", 2), "/b/2": ("b", 1)}
    rows: list[dict[str, Any]] = [
        {"page": "/a/1", "section": "a", "views": 2},
        {"page": "/b/2", "section": "b", "views": 1},
    ]
    assert checks.output_problems(rows, reference) == []
    assert "1 duplicate" in checks.output_problems([*rows, rows[0]], reference)[0]
    wrong = [rows[0], {**rows[1], "views": 3}]
    assert "1 with other counts" in checks.output_problems(wrong, reference)[0]
    assert "1 pages missing" in checks.output_problems(rows[:1], reference)[0]


def test_digest_depends_on_every_part_and_its_boundaries() -> None:
    assert cache.digest(["ab", "c"]) != cache.digest(["a", "bc"])
    assert cache.digest(["x"]) == cache.digest([b"x"])
    assert len(cache.digest([])) == 16


def test_fill_once_refills_a_half_made_directory(tmp_path: Path) -> None:
    calls: list[Path] = []

    def fill(target: Path) -> None:
        calls.append(target)
        (target / "f").write_text("x")

    target = tmp_path / "d"
    target.mkdir()
    (target / "stale").write_text("from a run that died")
    assert cache.fill_once(target, fill) == target
    assert cache.fill_once(target, fill) == target
    assert calls == [target]
    assert sorted(p.name for p in target.iterdir()) == [".complete", "f"]


def test_tree_parts_hash_sources_by_content_and_packages_by_size(tmp_path: Path) -> None:
    (tmp_path / "a.whl").write_bytes(b"12345")
    assert cache.tree_parts(tmp_path, content=False) == ["a.whl", "5"]
    assert cache.tree_parts(tmp_path, content=True) == ["a.whl", b"12345"]


def test_wrapper_go_mod_copies_upstreams_exclude_blocks() -> None:
    upstream = (
        "module github.com/docker/compose/v2\n\ngo 1.24.9\n\nrequire (\n\tx v1\n)\n\n"
        "exclude (\n\t// why\n\tgithub.com/a/b v1.0.1\n\tgithub.com/c/d v1.0.2\n)\n"
        "exclude github.com/e/f v0.1.0\n"
    )
    wrapper = composecli.wrapper_go_mod(upstream)
    assert "go 1.24.9\n" in wrapper
    assert f"require {composecli.V2_MODULE} {composecli.V2_VERSION}\n" in wrapper
    assert "exclude (\n\t// why\n\tgithub.com/a/b v1.0.1\n\tgithub.com/c/d v1.0.2\n)\n" in wrapper
    assert "exclude github.com/e/f v0.1.0\n" in wrapper
    assert "\tx v1" not in wrapper


def test_compose_command_names_the_project_and_every_file() -> None:
    cli = composecli.ComposeCli(("/usr/bin/docker-compose",), "1.29.2")
    assert cli.major == 1
    files = [Path("a.yaml"), Path("b.yaml")]
    assert cli.command(files, "up", "-d") == [
        "/usr/bin/docker-compose",
        *("-p", "spillway", "-f", "a.yaml", "-f", "b.yaml", "up", "-d"),
    ]


def test_debian_mirror_is_read_from_apt_sources(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://mirror.example/debian/\nSuites: bookworm\n"
    )
    assert fetch.debian_mirror(tmp_path) == "http://mirror.example/debian"
    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text(
        "deb [arch=amd64] http://other.example/debian bookworm main\n"
    )
    assert fetch.debian_mirror(tmp_path) == "http://other.example/debian"
    (tmp_path / "sources.list").unlink()
    assert fetch.debian_mirror(tmp_path) == "http://deb.debian.org/debian"


def test_the_scenario_runs_the_readmes_spark_submit_line() -> None:
    argv = readme_submit("job-7")
    assert argv[:4] == ["exec", "-T", "spark-master", "spark-submit"]
    readme = (Path(__file__).resolve().parents[2] / "docker" / "README.md").read_text()
    lines = [x for x in readme.splitlines() if x.startswith("docker compose") and "submit" in x]
    documented = shlex.split(lines[0])
    documented[documented.index("--job-id") + 1] = "job-7"
    assert argv[3:] == documented[6:]


def test_runtime_requirements_are_pinned_to_this_venv() -> None:
    pins = fetch.runtime_requirements()
    names = {p.split("==")[0].lower() for p in pins}
    assert {"pyspark", "confluent-kafka", "fastavro", "pyarrow"} <= names
    assert all("==" in p for p in pins)
    assert not names & {"pytest", "mypy"}  # extras stay out of the image
