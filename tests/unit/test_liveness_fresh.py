"""Liveness from fresh data only: a subtask is lost only if it was silent for the limit
before the reader's newest catch-up; slow reads elsewhere never age a heartbeat, and a
stale feed gives no verdict."""

from __future__ import annotations

import io
import json
import threading
from typing import Any

from spillway.channels.ids import JobId, TopicPartition
from spillway.recovery.job.plandoc import InputDoc, OperatorDoc, PlanDoc
from spillway.recovery.observe.heartbeat import LOST_AFTER_S, heartbeats_topic
from spillway.recovery.observe.metrics import UNKNOWN, JobMetrics, Snapshot, SubtaskMetrics, as_of
from spillway.recovery.observe.status import SubtaskLog, subtask_row
from spillway.spark_jobs.spark.metrics_http import EndsProbe, MetricsFeed
from spillway.spark_jobs.spark.progress import ProgressLine, percent_done

JOB = JobId("j")
RUN = "r1"
CH = "spillway.j.ch.src.count"
PLAN = PlanDoc(
    (
        OperatorDoc("src", 1, "source", False, "spillway.j.ckpt.src", ()),
        OperatorDoc("count", 2, "reduce", True, "spillway.j.ckpt.count", (InputDoc(CH, 2),)),
    )
)


def started(op: str, i: int, t: float) -> list[dict[str, Any]]:
    inc = {"operator": op, "index": i, "attempt": 0, "run": RUN, "pid": 10 + i, "host": "h"}
    return [{**inc, "event": "fencing", "time": t}, {**inc, "event": "started", "time": t}]


def beat(op: str, i: int, t: float) -> dict[str, Any]:
    return {"operator": op, "index": i, "attempt": 0, "run": RUN, "pid": 10 + i, "host": "h",
            "time": t, "records_in": 5}  # fmt: skip


def live_metrics(t: float) -> JobMetrics:
    """Every subtask started at ``t`` - 10 and sent a heartbeat at ``t``."""
    m = JobMetrics(PLAN, RUN)
    for op, n in (("src", 1), ("count", 2)):
        for i in range(n):
            for e in started(op, i, t - 10):
                m.event(e)
            m.heartbeat(beat(op, i, t))
    return m


def test_heartbeats_are_judged_when_read_not_when_the_snapshot_is_made() -> None:
    m = live_metrics(100.0)
    m.read_until(100.5)
    # The snapshot comes 4 s after the read (a slow query between them): still running.
    assert {s.state for s in m.snapshot(now=104.5).subtasks} == {"running"}
    # 6 s after the read the feed itself is stale: no verdict, never "lost".
    assert {s.state for s in m.snapshot(now=106.6).subtasks} == {UNKNOWN}
    # A reader that caught up again and found nothing newer: silent for the limit, lost.
    m.read_until(100.0 + LOST_AFTER_S + 0.1)
    assert {s.state for s in m.snapshot(now=105.2).subtasks} == {"lost"}


def test_no_verdict_before_the_reader_ever_caught_up() -> None:
    m = live_metrics(100.0)
    assert {s.state for s in m.snapshot(now=100.0).subtasks} == {UNKNOWN}


def test_as_of_leaves_fresh_snapshots_and_finished_subtasks_alone() -> None:
    subs = [
        SubtaskMetrics("a", 0, state="running"),
        SubtaskMetrics("a", 1, state="lost"),
        SubtaskMetrics("a", 2, state="finished"),
    ]
    snap = Snapshot(subs, [], time=50.0, read_at=50.0)
    assert as_of(snap, 50.0 + LOST_AFTER_S) is snap
    stale = as_of(snap, 50.0 + LOST_AFTER_S + 0.1)
    assert [s.state for s in stale.subtasks] == [UNKNOWN, UNKNOWN, "finished"]
    assert [s.state for s in snap.subtasks] == ["running", "lost", "finished"]  # a copy


class Msg:
    def __init__(self, topic: str, doc: dict[str, Any]) -> None:
        self._topic, self._value = topic, json.dumps(doc).encode()

    def topic(self) -> str:
        return self._topic

    def value(self) -> bytes:
        return self._value


class FakeReader:
    """The heartbeat topic: each consume returns what was queued (then nothing)."""

    def __init__(self) -> None:
        self.queued: list[Msg] = []

    def assign(self, starts: Any) -> None:
        pass

    def consume(self, max_messages: int, timeout_s: float) -> list[Msg]:
        out, self.queued = self.queued[:max_messages], self.queued[max_messages:]
        return out

    def watermarks(self, tp: TopicPartition, timeout_s: float = 10.0) -> tuple[int, int]:
        return 0, 0

    def close(self) -> None:
        pass


def test_a_slow_offsets_query_never_turns_fresh_heartbeats_into_lost() -> None:
    """The bug this guards against: 65 end-offset queries (5-6 s) between reading the heartbeats
    and taking the snapshot made every subtask lost. The query now runs on the probe's own
    thread: here it takes 6 s of the feed's clock each time it is called, and the feed's
    rounds never call it."""
    clock = [1000.0]
    calls = []

    def slow_ends() -> dict[str, int]:
        calls.append(clock[0])
        clock[0] += 6.0
        return {f"{CH}[0]": 10}

    reader = FakeReader()
    feed = MetricsFeed(
        None,  # type: ignore[arg-type]  # no Kafka: reader and ends are given
        JOB, PLAN, RUN, reader=reader, ends=slow_ends, clock=lambda: clock[0],
    )  # fmt: skip
    reader.queued = [Msg("spillway.j.events", e) for e in started("src", 0, 990.0)]
    reader.queued += [Msg("spillway.j.events", e) for i in (0, 1) for e in started("count", i, 990)]
    for _ in range(5):  # five rounds, a second apart, each with fresh heartbeats
        clock[0] += 1.0
        reader.queued += [
            Msg(heartbeats_topic(JOB), beat(op, i, clock[0] - 0.2))
            for op, i in (("src", 0), ("count", 0), ("count", 1))
        ]
        feed.update()
        assert {s.state for s in feed.snapshot().subtasks} == {"running"}
    assert calls == []  # the probe thread was never started: no round waited for it


def test_the_ends_probe_answers_at_once_while_its_query_is_under_way() -> None:
    release, asked = threading.Event(), threading.Event()

    def blocked() -> dict[str, int]:
        asked.set()
        release.wait()
        return {"t[0]": 7}

    probe = EndsProbe(blocked, every_s=3600)
    probe.start()
    assert asked.wait(30)
    assert probe.latest() == {}  # the query is still running: no waiting, no value yet
    release.set()
    probe.stop()
    assert probe.latest() == {"t[0]": 7}


def test_status_judges_liveness_at_the_time_the_heartbeats_were_read() -> None:
    inc = (RUN, 0, 10, "h")
    log = SubtaskLog(state="running", incarnation=inc, last_event=90.0)
    beats = {("count[0]", inc): 100.0}
    # Heartbeats read at 100.5, the row made at 107 (slow checkpoint and offset reads).
    row = subtask_row(
        JOB, "count", 0, [CH], log, None, {}, beats, now=107.0, read_at=100.5,
        owned=[TopicPartition(CH, 0)],
    )  # fmt: skip
    assert (row.state, row.seen_age_s) == ("running", 7.0)
    dead = subtask_row(
        JOB, "count", 0, [CH], log, None, {}, beats, now=107.0, read_at=105.6,
        owned=[TopicPartition(CH, 0)],
    )  # fmt: skip
    assert dead.state == "lost"


def test_the_progress_line_shows_no_lost_subtask_from_a_stale_snapshot() -> None:
    subs = [
        SubtaskMetrics("src", 0, state="lost", source=True, records_in=3),
        SubtaskMetrics("out", 0, state="running"),
    ]
    snap = Snapshot(subs, [], time=10.0, read_at=10.0)
    out = io.StringIO()
    line = ProgressLine("j", lambda: snap, out=out, every_s=3600, plain_every_s=3600,
                        clock=lambda: 10.0 + LOST_AFTER_S + 1)  # fmt: skip
    line.start()
    line.stop()
    text = out.getvalue()
    assert "lost" not in text
    assert "2 unknown" in text


def test_a_source_without_a_bound_yet_is_not_done() -> None:
    src = SubtaskMetrics("src", 0, state="running", source=True, progress=(0, 0))
    assert percent_done(Snapshot([src], [])) is None  # files not listed / ends not fixed yet
    src.state = "finished"
    assert percent_done(Snapshot([src], [])) == 100.0  # an empty input, read to its end
