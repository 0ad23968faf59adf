"""Metrics from events and heartbeats, their Prometheus form, and the progress line."""

from __future__ import annotations

import io
import socket
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from spillway.channels.errors import ConfigError
from spillway.channels.ids import JobId, OperatorName, SubtaskId
from spillway.recovery.job.plandoc import InputDoc, OperatorDoc, PlanDoc
from spillway.recovery.observe.metrics import JobMetrics, Snapshot, SubtaskMetrics
from spillway.spark_jobs.connectors.sources import FileSource, GeneratorSource
from spillway.spark_jobs.spark.metrics_http import SnapshotCollector, families, serve
from spillway.spark_jobs.spark.progress import ProgressLine, percent_done, render

CH = "spillway.j.src-count"
PLAN = PlanDoc(
    (
        OperatorDoc("src", 2, "source", False, "spillway.j.ckpt.src", ()),
        OperatorDoc("count", 1, "reduce", True, "spillway.j.ckpt.count", (InputDoc(CH, 1),)),
    )
)
RUN = "r1"


@dataclass
class FakeContext:
    subtask: SubtaskId
    state: Any = None


def ev(kind: str, op: str, i: int, attempt: int, pid: int, **kw: Any) -> dict[str, Any]:
    """An event-log document as EventLog.emit writes it."""
    return {"event": kind, "operator": op, "index": i, "attempt": attempt, "run": RUN,
            "pid": pid, "host": "h", "time": 100.0 + attempt, **kw}  # fmt: skip


def beat(op: str, i: int, attempt: int, pid: int, t: float, **kw: Any) -> dict[str, Any]:
    """A heartbeat document with livestats fields."""
    return {"operator": op, "index": i, "attempt": attempt, "run": RUN, "pid": pid,
            "host": "h", "time": t, **kw}  # fmt: skip


def test_restart_replay_and_counts_across_incarnations() -> None:
    m = JobMetrics(PLAN, RUN)
    m.event(ev("fencing", "count", 0, 0, 10))
    m.event(ev("started", "count", 0, 0, 10, replay={}))
    m.heartbeat(
        beat("count", 0, 0, 10, 101, records_in=500, records_out=5, checkpoints=3, busy_s=2.5)
    )
    # attempt 0 is SIGKILLed; attempt 1 restores and replays 120 records of partition 0
    m.event(ev("fencing", "count", 0, 1, 11))
    m.event(ev("started", "count", 0, 1, 11, replay={f"{CH}[0]": [400, 520, 0]}))
    m.heartbeat(
        beat(
            "count", 0, 1, 11, 103.0,
            records_in=200, records_out=2, checkpoints=1, busy_s=0.75, checkpoint=7,
            checkpoint_time=102.5,
            checkpoint_s=0.02, commit_s=0.01, state_keys=42,
            checkpointed={f"{CH}[0]": 600}, positions={f"{CH}[0]": 610},
            replay={f"{CH}[0]": [400, 520, 120]},
        )
    )  # fmt: skip
    m.heartbeat(beat("count", 0, 0, 10, 99, records_in=400))  # late, older: ignored
    m.ends({f"{CH}[0]": 650})
    m.event({"event": "fencing", "operator": "count", "index": 0, "run": "other", "pid": 1})
    m.read_until(104.0)
    snap = m.snapshot(now=104.0)
    c = {s.name: s for s in snap.subtasks}["count[0]"]
    assert (c.state, c.restarts) == ("running", 1)
    assert (c.records_in, c.records_out, c.checkpoints, c.busy_s) == (700, 7, 4, 3.25)
    assert c.replayed == {f"{CH}[0]": 120}
    assert c.replay_debt == {f"{CH}[0]": 50}
    assert c.lag == {f"{CH}[0]": 40}
    assert (c.checkpoint, c.checkpoint_age_s, c.checkpoint_s, c.commit_s) == (7, 1.5, 0.02, 0.01)
    assert c.state_keys == 42
    assert not c.source
    src = {s.name: s for s in snap.subtasks}["src[1]"]
    assert (src.state, src.restarts, src.records_in, src.source) == ("not started", 0, 0, True)
    # count[0]'s newest sign of life is its heartbeat at 103.0: lost if the reader had
    # caught up 5 s later (LOST_AFTER_S) and read nothing newer
    m.read_until(108.0)
    assert m.snapshot(now=108.0).subtasks[2].state == "running"
    m.read_until(108.1)
    assert m.snapshot(now=108.1).subtasks[2].state == "lost"


def test_finished_subtask_owes_nothing_and_is_done() -> None:
    m = JobMetrics(PLAN, RUN)
    for i in range(2):
        m.event(ev("fencing", "src", i, 0, 20 + i))
        m.event(ev("started", "src", i, 0, 20 + i, replay={}))
        m.heartbeat(beat("src", i, 0, 20 + i, 101, records_in=10, progress=[10, 50]))
    m.event(ev("finished", "src", 0, 0, 20, records_in=50, records_out=50, replay={}))
    m.read_until(105.0)
    snap = m.snapshot(now=105.0)
    s0, s1 = snap.subtasks[0], snap.subtasks[1]
    assert (s0.state, s0.records_in, s0.progress) == ("finished", 50, (50, 50))
    assert (s1.state, s1.records_in, s1.progress) == ("running", 10, (10, 50))
    # count[0] has no progress report: a bound is known only for the sources
    assert percent_done(snap) == 60.0


def test_global_checkpoint_durations() -> None:
    m = JobMetrics(PLAN, RUN)
    m.global_checkpoint({"id": 2, "duration_s": 0.3})
    m.global_checkpoint({"id": 1, "duration_s": 0.1})
    m.global_checkpoint({"id": 2, "duration_s": 0.3})  # read twice: counted once
    m.global_checkpoint({"note": "not a summary"})
    assert m.snapshot(1.0).global_durations_s == [0.1, 0.3]


def scrape(snap: Snapshot) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector("j", lambda: snap))
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def test_prometheus_text() -> None:
    s = SubtaskMetrics("count", 0, state="running", restarts=2, records_in=7, checkpoint=3,
                       checkpoint_s=0.5, replay_debt={"t[0]": 4}, replayed={"t[0]": 9},
                       busy_s=1.25)  # fmt: skip
    got = scrape(Snapshot([s], [0.2, 3.0], read_at=time.time()))
    lab = (("index", "0"), ("job_id", "j"), ("operator", "count"))
    part = tuple(sorted((*lab, ("partition", "t[0]"))))
    assert got[("spillway_subtask_restarts_total", lab)] == 2
    assert got[("spillway_subtask_records_in_total", lab)] == 7
    assert got[("spillway_subtask_busy_seconds_total", lab)] == 1.25
    assert got[("spillway_subtask_checkpoint_id", lab)] == 3
    assert got[("spillway_subtask_checkpoint_duration_seconds", lab)] == 0.5
    assert got[("spillway_subtask_replay_debt_offsets", part)] == 4
    assert got[("spillway_subtask_replayed_records_total", part)] == 9
    assert got[("spillway_subtask_state", tuple(sorted((*lab, ("state", "running")))))] == 1
    assert ("spillway_subtask_commit_latency_seconds", lab) not in got  # unknown: no sample
    h = "spillway_global_checkpoint_duration_seconds"
    assert got[(f"{h}_bucket", (("job_id", "j"), ("le", "0.25")))] == 1
    assert got[(f"{h}_bucket", (("job_id", "j"), ("le", "+Inf")))] == 2
    assert got[(f"{h}_count", (("job_id", "j"),))] == 2
    assert got[(f"{h}_sum", (("job_id", "j"),))] == 3.2
    assert len(families("j", Snapshot([], []))) == 15


def snap_of(records: int, restarts: int = 0, progress: tuple[int, int] | None = None) -> Snapshot:
    src = SubtaskMetrics("src", 0, state="running", records_in=records, checkpoints=4,
                         restarts=restarts, source=True, progress=progress)  # fmt: skip
    sink = SubtaskMetrics("sink", 0, state="finished", records_in=records * 2, checkpoints=2)
    return Snapshot([src, sink], [], read_at=time.time())


def test_render_line() -> None:
    line = render("clicks", snap_of(12_000, 1, (12_000, 48_000)), snap_of(2_000), 2.0)
    assert line == (
        "clicks: 12,000 records (5,000/s) · 6 checkpoints · 1 restart · "
        "1/2 subtasks finished · 25% done"
    )
    lost = snap_of(1, 1)
    lost.subtasks[0].state = "lost"
    assert render("c", lost, None, 0.0) == (
        "c: 1 records (0/s) · 6 checkpoints · 1 restart · 1 lost · 1/2 subtasks finished"
    )
    assert render("c", Snapshot(snap_of(3).subtasks, [0.1, 0.2]), None, 0.0) == (
        "c: 3 records (0/s) · 6 checkpoints · 2 global · 0 restarts · 1/2 subtasks finished"
    )


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_line_redraws_on_a_terminal_and_prints_lines_elsewhere() -> None:
    tty, plain = Tty(), io.StringIO()
    for out in (tty, plain):
        p = ProgressLine("j", lambda: snap_of(5), out=out, every_s=3600, plain_every_s=3600)
        p.start()
        p.stop()
    assert tty.getvalue() == (
        "\rj: 5 records (0/s) · 6 checkpoints · 0 restarts · 1/2 subtasks finished\x1b[K\r\n"
    )
    assert plain.getvalue() == (
        "[progress] j: 5 records (0/s) · 6 checkpoints · 0 restarts · 1/2 subtasks finished\n"
    )


def test_bounded_sources_report_progress_in_their_own_units(tmp_path: Path) -> None:
    gen = GeneratorSource(lambda i: {"i": i}, 10, 3)
    gen.open(FakeContext(SubtaskId(JobId("j"), OperatorName("src"), 1)), {})
    assert gen.progress() == (0, 3)  # indices 1, 4, 7
    assert [r["i"] for r in gen.read(2) or []] == [1, 4]
    assert gen.progress() == (2, 3)
    gen.read(5)
    assert gen.progress() == (3, 3)
    unbounded = GeneratorSource(lambda i: {"i": i}, None, 1)
    unbounded.open(FakeContext(SubtaskId(JobId("j"), OperatorName("src"), 0)), {})
    assert unbounded.progress() is None
    for n in range(3):
        (tmp_path / f"{n}.jsonl").write_text('{"x": 1}\n')
    files = FileSource(str(tmp_path / "*.jsonl"), "jsonl", 1)
    files.open(FakeContext(SubtaskId(JobId("j"), OperatorName("src"), 0)), {})
    assert files.progress() == (0, 3)
    while files.read(100) is not None:
        pass
    assert files.progress() == (3, 3)


def test_progress_rate_is_measured_between_renewed_snapshots() -> None:
    def at(t: float, records: int) -> Snapshot:
        s = snap_of(records)
        s.time = t
        return s

    feed = iter([at(10.0, 0), at(10.0, 0), at(12.0, 10), at(12.0, 10), at(13.0, 10)])
    out = io.StringIO()
    p = ProgressLine("j", lambda: next(feed), out=out, every_s=3600, plain_every_s=3600)
    p.start()  # first snapshot: the rate's origin
    for _ in range(3):
        p._draw()
    p.stop()
    rates = [line.split("(")[1].split(")")[0] for line in out.getvalue().splitlines()]
    assert rates == ["0/s", "5/s", "5/s", "0/s"]


class _Msg:
    def __init__(self, p: int, off: int) -> None:
        self.p, self.off = p, off

    def partition(self) -> int:
        return self.p

    def offset(self) -> int:
        return self.off

    def value(self) -> bytes:
        return b'{"n": 1}'


class _Topic:
    """Stands in for Admin and AssignedConsumer: partitions 0-1 hold offsets [10, 30)."""

    batches: ClassVar[list[list[_Msg]]] = []

    def __init__(self, *_a: Any) -> None:
        pass

    def partition_counts(self) -> dict[str, int]:
        return {"in": 2}

    def watermarks(self, tp: Any) -> tuple[int, int]:
        return 10, 30

    def assign(self, starts: Any) -> None:
        pass

    def consume(self, n: int, timeout: float) -> list[_Msg]:
        return _Topic.batches.pop(0) if _Topic.batches else []

    def position(self, tp: Any) -> int | None:
        return None


def test_bounded_kafka_source_progress_counts_offsets_up_to_its_fixed_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import spillway.spark_jobs.connectors.sources as sources

    monkeypatch.setattr(sources, "Admin", _Topic)
    monkeypatch.setattr(sources, "AssignedConsumer", _Topic)
    _Topic.batches = [[_Msg(0, o) for o in range(10, 20)] + [_Msg(1, 10)]]
    src = sources.KafkaTopicSource("in", 1, True)
    src.open(FakeKafkaContext(SubtaskId(JobId("j"), OperatorName("src"), 0)), {})
    assert src.progress() == (0, 40)
    assert len(src.read(100) or []) == 11
    assert src.progress() == (11, 40)
    # Restarted from that position: the same units, from the same log start.
    again = sources.KafkaTopicSource("in", 1, True)
    again.open(FakeKafkaContext(SubtaskId(JobId("j"), OperatorName("src"), 0)), src.position())
    assert again.progress() == (11, 40)
    assert sources.KafkaTopicSource("in", 1, False).progress() is None


@dataclass
class FakeKafkaContext:
    subtask: SubtaskId
    kafka: Any = None


def test_serve_answers_on_loopback_and_a_taken_port_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"--metrics-port {port}: cannot serve metrics"):
            serve(lambda: snap_of(3), "j", "127.0.0.1", port)
    stop = serve(lambda: snap_of(3), "j", "127.0.0.1", port)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
    finally:
        stop()
    assert 'spillway_subtask_records_in_total{index="0",job_id="j",operator="src"} 3.0' in text
