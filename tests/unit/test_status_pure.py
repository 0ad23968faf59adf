"""Status bookkeeping without a broker: events → rows, the liveness rule, the recorded plan."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from spillway.channels.errors import ConfigError
from spillway.channels.ids import (
    JobId,
    Offset,
    OperatorName,
    SubtaskId,
    TopicPartition,
)
from spillway.channels.routing.keygroups import DEFAULT_MAX_PARALLELISM
from spillway.offsets.checkpoint import Checkpoint
from spillway.recovery.job.loader import load_plan
from spillway.recovery.job.plandoc import PlanDoc
from spillway.recovery.observe.heartbeat import LOST_AFTER_S, Heartbeat
from spillway.recovery.observe.status import (
    SubtaskStatus,
    as_json,
    fold_events,
    liveness,
    newest_heartbeats,
    render,
    subtask_row,
)
from tests.unit.checkpointfakes import checkpoint

JOB = JobId("j")
T0 = 1_700_000_000.0


def ev(kind: str, t: float, attempt: int = 0, pid: int = 100, run: str = "r1", **kw: Any) -> dict:
    return {
        "event": kind,
        "operator": "count",
        "index": 0,
        "attempt": attempt,
        "run": run,
        "pid": pid,
        "host": "h",
        "time": t,
        **kw,
    }


def beat(t: float, attempt: int = 0, pid: int = 100, run: str = "r1") -> dict:
    return {k: v for k, v in ev("x", t, attempt, pid, run).items() if k != "event"}


def row(events: list[dict], beats: list[dict] | None, now: float, ckpt: Checkpoint | None = None):
    logs = fold_events([{"event": "submitted", "time": T0}, *events])
    return subtask_row(
        JOB,
        "count",
        0,
        ["spillway.j.ch.enrich.count"],
        logs.get("count[0]"),
        ckpt,
        {TopicPartition("spillway.j.ch.enrich.count", 0): 50},
        None if beats is None else newest_heartbeats(beats),
        now,
    )


def test_a_restart_that_failed_before_started_counts() -> None:
    events = [
        ev("fencing", T0, 0),
        ev("started", T0 + 1, 0),
        ev("fencing", T0 + 5, 1, pid=101),
        ev("failed", T0 + 6, 1, pid=101, error="boom"),  # attempt 1 never started
        ev("fencing", T0 + 7, 2, pid=102),
        ev("started", T0 + 8, 2, pid=102),
    ]
    log = fold_events(events)["count[0]"]
    assert (log.state, log.restarts) == ("running", 2)
    assert log.incarnation == ("r1", 2, 102, "h")


def test_a_superseded_zombie_does_not_change_the_state() -> None:
    events = [
        ev("fencing", T0, 0),
        ev("started", T0 + 1, 0),
        ev("fencing", T0 + 5, 1, pid=101),
        ev("failed", T0 + 6, 0, error="fenced"),  # the old attempt learns it was fenced
        ev("checkpointed", T0 + 7, 1, pid=101, checkpoint=3),  # not a state change
    ]
    log = fold_events(events)["count[0]"]
    assert (log.state, log.incarnation, log.last_event) == (
        "restoring",
        ("r1", 1, 101, "h"),
        T0 + 7,
    )
    assert log.restarts == 1


def test_a_rerun_that_skipped_a_finished_subtask_is_no_restart() -> None:
    events = [
        ev("fencing", T0, 0),
        ev("started", T0 + 1, 0),
        ev("finished", T0 + 2, 0),
        ev("fencing", T0 + 10, 0, pid=200, run="r2"),
        ev("skipped", T0 + 11, 0, pid=200, run="r2"),
    ]
    log = fold_events(events)["count[0]"]
    assert (log.state, log.restarts) == ("finished", 0)


@pytest.mark.parametrize(
    ("state", "age", "expected"),
    [
        ("running", LOST_AFTER_S + 0.1, "lost"),
        ("restoring", LOST_AFTER_S + 0.1, "lost"),
        ("running", LOST_AFTER_S - 0.1, "running"),
        ("finished", 1000.0, "finished"),
        ("stopped", 1000.0, "stopped"),
        ("failed", 1000.0, "failed"),
        ("not started", 1000.0, "not started"),
    ],
)
def test_liveness_rule(state: str, age: float, expected: str) -> None:
    assert liveness(state, T0, T0 + age, LOST_AFTER_S) == expected
    if state in ("running", "restoring"):
        assert liveness(state, None, T0, LOST_AFTER_S) == "lost"  # never seen alive


def test_heartbeats_of_the_current_incarnation_keep_it_alive() -> None:
    events = [ev("fencing", T0, 0), ev("started", T0 + 1, 0)]
    now = T0 + 60
    alive = row(events, [beat(T0 + 30), beat(now - 1)], now)
    assert (alive.state, alive.seen_age_s, alive.host, alive.pid) == ("running", 1.0, "h", 100)
    dead = row(events, [beat(T0 + 30)], now)
    assert (dead.state, dead.seen_age_s) == ("lost", 30.0)


def test_heartbeats_of_another_process_do_not_count() -> None:
    # attempt 1 took over; only the fenced attempt 0 (a zombie) still beats.
    events = [ev("fencing", T0, 0), ev("started", T0 + 1, 0), ev("fencing", T0 + 2, 1, pid=101)]
    now = T0 + 60
    r = row(events, [beat(now - 1, 0, pid=100)], now)
    assert (r.state, r.attempt, r.pid) == ("lost", 1, 101)


def test_without_a_heartbeat_topic_liveness_is_not_judged() -> None:
    r = row([ev("fencing", T0, 0), ev("started", T0 + 1, 0)], None, T0 + 3600)
    assert r.state == "running"


def test_a_finished_checkpoint_wins_and_has_no_debt() -> None:
    sub = SubtaskId(JOB, OperatorName("count"), 0)
    done = checkpoint(sub, 7, "fp", finished=True, wall_time=T0 + 2)
    r = row([ev("fencing", T0, 0), ev("started", T0 + 1, 0)], [], T0 + 100, done)
    assert (r.state, r.checkpoint, r.checkpoint_age_s, r.replay_debt) == ("finished", 7, 98.0, {})
    tp = TopicPartition("spillway.j.ch.enrich.count", 0)
    mid = checkpoint(sub, 3, "fp", inputs={tp: Offset(20)}, wall_time=T0 + 2)
    r = row([ev("fencing", T0, 0), ev("started", T0 + 1, 0)], [beat(T0 + 99)], T0 + 100, mid)
    assert (r.state, r.replay_debt) == ("running", {str(tp): 30})


def test_never_started_subtask() -> None:
    r = row([], [], T0)
    assert (r.state, r.attempt, r.host, r.pid, r.restarts) == ("not started", None, None, None, 0)


def test_the_recorded_plan_round_trips_and_describes_the_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CLICKS_PARALLELISM", "3")
    plan = load_plan("spillway.examples.clicks:pipeline", "c")
    doc = PlanDoc.of(plan)
    back = PlanDoc.from_json(json.loads(json.dumps(doc.to_json())), "test")
    assert back == doc
    assert [(o.name, o.parallelism, o.stateful) for o in doc.operators] == [
        ("clicks", 3, False),
        ("enrich", 3, False),
        ("count", 3, True),
        ("out", 3, False),
    ]
    count = doc.operators[2]
    assert count.checkpoint_topic == "spillway.c.ckpt.count"
    # A keyed input has a partition per key group (was 3, the parallelism, before them).
    assert [(i.topic, i.partitions) for i in count.inputs] == [
        ("spillway.c.ch.enrich.count", DEFAULT_MAX_PARALLELISM)
    ]
    assert count.max_parallelism == DEFAULT_MAX_PARALLELISM
    assert doc.subtask_count() == 12


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"version": 2, "operators": []}, "version 2 is not 1"),
        ({"version": 1, "operators": [{"name": "a"}]}, "malformed plan description (KeyError"),
    ],
)
def test_a_bad_recorded_plan_is_a_clear_error(doc: dict, message: str) -> None:
    with pytest.raises(ConfigError, match="^the event: .*" + message.replace("(", r"\(")):
        PlanDoc.from_json(doc, "the event")


class FakeProducer:
    """Records produce/poll calls; a flush here would be a blocking wait in the subtask."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes]] = []
        self.polls: list[float] = []

    def produce(self, topic: str, value: bytes, key: bytes, on_delivery: Any = None) -> None:
        self.sent.append((topic, value, key))

    def poll(self, timeout: float) -> int:
        self.polls.append(timeout)
        return 0

    def flush(self, timeout: float) -> int:
        raise AssertionError("a heartbeat must not wait for delivery")


def test_heartbeat_sends_identity_and_time_without_waiting() -> None:
    producer = FakeProducer()
    hb = Heartbeat(
        producer,  # type: ignore[arg-type]  # the two calls a heartbeat makes
        "spillway.j.heartbeats",
        b"j/count[0]",
        lambda: {"pid": 5},
        every_s=0.01,
    )
    hb.start()
    for _ in range(500):
        if len(producer.sent) >= 3:
            break
        time.sleep(0.01)
    hb.stop()
    n = len(producer.sent)
    assert n >= 3
    topic, value, key = producer.sent[0]
    doc = json.loads(value)
    assert (topic, key, doc["pid"]) == ("spillway.j.heartbeats", b"j/count[0]", 5)
    assert isinstance(doc["time"], float)
    assert set(producer.polls) == {0}  # serves delivery reports, never blocks
    time.sleep(0.05)
    assert len(producer.sent) == n  # stopped


def test_only_a_fencing_event_of_another_process_announces_a_newer_incarnation() -> None:
    from spillway.channels.ids import JobId, OperatorName, SubtaskId
    from spillway.recovery.observe.events import announces_newer

    s = SubtaskId(JobId("j"), OperatorName("gen"), 0)
    base = {"operator": "gen", "index": 0, "pid": 2, "time": 11.0}
    assert announces_newer({**base, "event": "fencing"}, s, pid=1, since=10.0)
    # Other events of another process (the zombie's last words) are not a new copy of it.
    assert not announces_newer({**base, "event": "failed"}, s, pid=1, since=10.0)
    assert not announces_newer({**base, "event": "fencing"}, s, pid=2, since=10.0)  # itself
    assert not announces_newer({**base, "event": "fencing"}, s, pid=1, since=12.0)  # older
    assert not announces_newer({**base, "event": "fencing", "index": 1}, s, pid=1, since=10.0)


def test_restarts_after_failures_are_counted_apart_from_planned_ones() -> None:
    events = [
        ev("fencing", T0, 0),
        ev("started", T0 + 1, 0),
        ev("fencing", T0 + 2, 1, pid=101),  # Spark retried the killed attempt 0: a failure
        ev("started", T0 + 3, 1, pid=101),
        ev("failed", T0 + 4, 1, pid=101, error="boom"),
        ev("fencing", T0 + 5, 2, pid=102),  # after a failed attempt: a failure
        ev("started", T0 + 6, 2, pid=102),
        ev("stopped", T0 + 7, 2, pid=102),  # a live upgrade or rescale stops it first ...
        ev("fencing", T0 + 8, 0, pid=103),  # ... then starts it again: planned
        ev("started", T0 + 9, 0, pid=103),
        ev("stopped", T0 + 10, 0, pid=103),  # SIGTERM: a clean stop
        ev("fencing", T0 + 20, 0, pid=200, run="r2"),  # the next run: planned
        ev("started", T0 + 21, 0, pid=200, run="r2"),
    ]
    log = fold_events(events)["count[0]"]
    assert (log.state, log.restarts, log.planned_restarts) == ("running", 2, 2)


def test_a_subtask_fenced_by_the_driver_restarts_planned_and_the_fencing_is_no_restart() -> None:
    # A rescale (or rewind) from a savepoint after a run that ended without a clean stop:
    # the driver fences every subtask first (an event with `by`, no run or attempt).
    driver_fence = {"event": "fencing", "operator": "count", "index": 0, "by": "rescale"}
    events = [
        ev("fencing", T0, 0),
        ev("started", T0 + 1, 0),  # its run was killed: no stopped event
        {**driver_fence, "pid": 999, "time": T0 + 10},
        ev("fencing", T0 + 11, 0, pid=200, run="r2"),
        ev("started", T0 + 12, 0, pid=200, run="r2"),
    ]
    log = fold_events(events)["count[0]"]
    assert (log.state, log.restarts, log.planned_restarts) == ("running", 0, 1)
    # Without the driver's fencing the same run after a killed one follows a failure.
    log = fold_events([e for e in events if "by" not in e])["count[0]"]
    assert (log.restarts, log.planned_restarts) == (1, 0)


def test_drained_partitions_owe_nothing() -> None:
    sub = SubtaskId(JOB, OperatorName("count"), 0)
    tp = TopicPartition("spillway.j.ch.enrich.count", 0)
    stopped = checkpoint(sub, 3, "fp", inputs={tp: Offset(49)}, wall_time=T0 + 2)
    events = [ev("fencing", T0, 0), ev("started", T0 + 1, 0), ev("stopped", T0 + 3, 0)]
    logs = fold_events([{"event": "submitted", "time": T0}, *events])

    def at(drained: list[TopicPartition]) -> dict[str, int]:
        return subtask_row(
            JOB, "count", 0, [tp.topic], logs["count[0]"], stopped, {tp: 50}, None, T0 + 9,
            drained=drained,
        ).replay_debt  # fmt: skip

    assert at([]) == {str(tp): 1}  # the offset past position 49: a marker, or a record
    assert at([tp]) == {str(tp): 0}  # found to be only a transaction marker


def test_the_table_shows_one_debt_per_subtask_and_the_two_restart_counts() -> None:
    rows = [
        SubtaskStatus("j/count[0]", "running", 2, 7, 1.5, {"t.a[0]": 30, "t.b[1]": 12}, None,
                      1, 2, "h", 100, 0.4),
        SubtaskStatus("j/src[0]", "stopped", 0, 3, 9.0, {}, None, 0, 0, "h", 101, 8.0),
        SubtaskStatus("j/out[0]", "stopped", 0, 4, 9.0, {"t.c[0]": 0}, None, 0, 1, None,
                      None, None),
    ]  # fmt: skip
    assert render(rows).splitlines() == [
        f"{'subtask':40} {'state':12} {'attempt':>7} {'host:pid':24} {'seen s':>6} "
        f"{'ckpt':>6} {'age s':>7} {'restarts':>8} {'planned':>7} {'redos':>5} "
        f"{'replay debt':>11}",
        f"{'j/count[0]':40} {'running':12} {'2':>7} {'h:100':24} {'0.4':>6} {'7':>6} "
        f"{'1.5':>7} {'1':>8} {'2':>7} {'0':>5} {'42':>11}",
        f"{'j/src[0]':40} {'stopped':12} {'0':>7} {'h:101':24} {'8.0':>6} {'3':>6} "
        f"{'9.0':>7} {'0':>8} {'0':>7} {'0':>5} {'-':>11}",
        f"{'j/out[0]':40} {'stopped':12} {'0':>7} {'-':24} {'-':>6} {'4':>6} "
        f"{'9.0':>7} {'0':>8} {'1':>7} {'0':>5} {'0':>11}",
    ]
    # Per partition only in --json.
    assert as_json(rows)[0]["replay_debt"] == {"t.a[0]": 30, "t.b[1]": 12}
    assert (as_json(rows)[0]["restarts"], as_json(rows)[0]["planned_restarts"]) == (1, 2)


def test_a_redo_within_an_attempt_is_counted_apart_and_is_no_restart() -> None:
    events = [
        ev("fencing", T0, 0),
        ev("started", T0 + 1, 0),
        ev("failed", T0 + 5, 0, error="TransactionAbortedError: leaders moved"),
        ev("redo", T0 + 6, 0, redo=1, error="TransactionAbortedError: leaders moved"),
        ev("fencing", T0 + 6.1, 0),  # the redo's runner: same process, same attempt
        ev("started", T0 + 7, 0),
    ]
    log = fold_events(events)["count[0]"]
    assert (log.state, log.restarts, log.planned_restarts, log.redos) == ("running", 0, 0, 1)
    r = row(events, None, T0 + 8)
    assert (r.restarts, r.redos) == (0, 1)
    assert "redos" in render([r]).splitlines()[0]
