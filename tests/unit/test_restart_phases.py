"""Restart bookkeeping without a broker: phases, replay ends, read marks, what sources re-read,
Spark's retries, the benchmark's summary, the init_transactions steps and the daemon's cache."""

from __future__ import annotations

import sys
import zipfile
import zipimport
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from bench import restartstats
from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, Offset, OperatorName, SubtaskId, TopicPartition
from spillway.channels.kafka.producer import TransactionalProducer
from spillway.recovery.observe.phases import (
    PHASES,
    PhaseClock,
    merge,
    missing,
    out_of_order,
    render,
    start_time_from,
    steps,
)
from spillway.recovery.restore.progress import (
    READ,
    UPPER_BOUND,
    ReadMark,
    Replay,
    last_mark,
    replay_ends,
)
from spillway.spark_jobs.connectors.sources import FileSource, GeneratorSource, KafkaTopicSource
from spillway.spark_jobs.spark.attempts import TaskAttempt, retries
from spillway.spark_jobs.spark.daemon import forget_zip_finders

A, B = TopicPartition("ch", 0), TopicPartition("ch", 1)


# -- phases ------------------------------------------------------------------------------


def test_phase_clock_keeps_phase_order_and_adds_up_steps() -> None:
    c = PhaseClock()
    c.mark("restored", 12.0)
    c.mark("python_started", 10.0)
    c.mark("fenced", 11.5)
    assert list(c.as_dict()) == ["python_started", "fenced", "restored"]
    c.step("history", 0.25)
    c.step("history", 0.5)
    c.lap("state")
    assert c.steps_dict()["history"] == 0.75
    assert list(c.steps_dict()) == ["history", "state"]
    with pytest.raises(ValueError, match="unknown restart phase 'warm'"):
        c.mark("warm")
    with pytest.raises(ValueError, match="unknown step 'coffee'"):
        c.step("coffee", 1.0)


def test_steps_are_measured_from_the_previous_recorded_phase() -> None:
    times = {"killed": 100.0, "scheduled": 100.5, "imported": 101.0, "restored": 101.25}
    assert steps(times) == [("scheduled", 0.5), ("imported", 0.5), ("restored", 0.25)]
    assert missing(times, PHASES[:3]) == ["spark_noticed"]
    assert "killed" in render(times)
    assert render({}) == "no phases"


def test_out_of_order_names_the_phase_that_went_back_in_time() -> None:
    assert out_of_order({"fenced": 5.0, "restored": 5.0, "caught_up": 6.0}) == []
    bad = out_of_order({"scheduled": 5.0, "python_started": 4.9, "imported": 5.1})
    assert len(bad) == 1
    assert bad[0].startswith("python_started at 4.900 is before scheduled at 5.000")


def test_merge_takes_each_phase_from_the_first_record_that_has_it() -> None:
    spark = {"spark_noticed": 1.0, "scheduled": 2.0}
    attempt = {"scheduled": 9.0, "fenced": 3.0, "bogus": 7.0}
    assert merge(None, spark, attempt) == {"spark_noticed": 1.0, "scheduled": 2.0, "fenced": 3.0}


def test_process_start_time_from_proc_stat() -> None:
    # Field 22 (start time, ticks since boot) counted past a command holding ") (".
    fields = ["S"] + ["0"] * 18 + ["12345"] + ["0"] * 30
    stat = "4242 (we ) (ird) " + " ".join(fields)
    # Up 200.00 s at wall time 1000: the process started 123.45 s after boot.
    assert start_time_from(stat, 200.0, 1000.0, 100) == pytest.approx(1000.0 - (200.0 - 123.45))
    assert start_time_from("4242 no parenthesis", 200.0, 1000.0, 100) is None
    assert start_time_from("4242 (x) S 1", 200.0, 1000.0, 100) is None


# -- replay ends and read marks ----------------------------------------------------------


def _mark(inputs: dict[TopicPartition, int], source: dict[str, Any] | None = None) -> ReadMark:
    return ReadMark(0, 77, 5.0, {tp: Offset(o) for tp, o in inputs.items()}, source)


def test_replay_ends_at_what_the_dead_attempt_had_read() -> None:
    start = {A: Offset(10), B: Offset(20)}
    ends = {A: 500, B: 900}
    assert replay_ends(start, ends, _mark({A: 40, B: 20}), restarted=True) == ({A: 40}, READ)


def test_without_a_usable_mark_the_partition_end_is_an_upper_bound() -> None:
    start = {A: Offset(10), B: Offset(20)}
    ends = {A: 500, B: 20}
    upper = ({A: 500}, UPPER_BOUND)
    assert replay_ends(start, ends, None, restarted=True) == upper
    assert replay_ends(start, ends, _mark({A: 5, B: 30}), restarted=True) == upper  # stale
    assert replay_ends(start, ends, _mark({A: 40}), restarted=True) == upper  # B unknown
    assert replay_ends(start, ends, None, restarted=False) == ({}, None)  # a first start


def test_replay_counts_only_records_below_the_ends() -> None:
    r = Replay({A: Offset(10), B: Offset(20)}, {A: 13}, READ)
    assert r.pending
    r.count(A, 11, 100)
    r.count(A, 13, 50)  # read for the first time
    r.count(B, 25, 7)  # nothing to re-read there
    assert r.figure == {"ch[0]": [10, 13, 100]}
    assert not r.done({A: Offset(12)})
    assert r.done({A: Offset(13), B: Offset(21)})
    assert not Replay({}, {}, None).pending


def test_read_marks_round_trip_and_junk_is_ignored() -> None:
    m = _mark({TopicPartition("spillway.j.ch.a.b", 3): 41}, {"next": 9})
    again = ReadMark.from_bytes(m.to_bytes())
    assert again == m

    class Msg:
        def __init__(self, v: bytes) -> None:
            self.v = v

        def value(self) -> bytes:
            return self.v

    assert last_mark([Msg(m.to_bytes()), Msg(b"{not json")]) == m  # type: ignore[list-item]
    assert ReadMark.from_bytes(b'{"v": 2}') is None
    assert last_mark([]) is None


# -- what sources re-read ----------------------------------------------------------------


def test_generator_rereads_an_index_range() -> None:
    g = GeneratorSource(lambda i: {"i": i}, None, parallelism=3)
    assert g.reread({"next": 4}, {"next": 13}) == {"index": [4, 13], "records": 3}  # 4 7 10
    assert g.reread({"next": 13}, {"next": 13}) is None


def test_files_reread_lines_across_files() -> None:
    f = FileSource("*.jsonl", "jsonl", parallelism=1)
    files = ["a.jsonl", "b.jsonl", "c.jsonl"]
    assert f.reread({"files": files, "file": 0, "row": 5}, {"file": 0, "row": 9}) == {
        "lines": [["a.jsonl", 6, 10]]
    }
    across = f.reread({"files": files, "file": 0, "row": 5}, {"files": files, "file": 2, "row": 3})
    assert across == {"lines": [["a.jsonl", 6, None], ["b.jsonl", 1, None], ["c.jsonl", 1, 4]]}
    assert f.reread({"files": files, "file": 1, "row": 0}, {"file": 1, "row": 0}) is None
    csv = FileSource("*.csv", "csv", parallelism=1)
    assert csv.reread({"files": ["x.csv"], "file": 0, "row": 0}, {"file": 0, "row": 2}) == {
        "lines": [["x.csv", 2, 4]]  # line 1 is the header
    }
    pq = FileSource("*.parquet", "parquet", parallelism=1)
    assert pq.reread({"files": ["p"], "file": 0, "row": 0}, {"file": 0, "row": 8}) == {
        "rows": [["p", 0, 8]]
    }


def test_kafka_source_rereads_offsets_per_partition() -> None:
    k = KafkaTopicSource("orders", parallelism=2, bounded=False)
    since = {"offsets": {"0": 10, "2": 7}, "ends": {}}
    until = {"offsets": {"0": 15, "2": 7}, "ends": {}}
    assert k.reread(since, until) == {"topic": "orders", "offsets": {"0": [10, 15]}}
    assert k.reread(until, until) is None


# -- Spark's retries, the benchmark's figures --------------------------------------------


def test_retries_pair_each_failed_attempt_with_the_next() -> None:
    tasks = [
        TaskAttempt(3, 0, 10.0, 20.0, "FAILED", "crashed"),
        TaskAttempt(3, 1, 20.1, None, "RUNNING"),
        TaskAttempt(4, 0, 10.0, 25.0, "FAILED"),  # not retried yet
        TaskAttempt(5, 0, 10.0, None, "RUNNING"),
    ]
    assert retries(tasks) == [(tasks[0], tasks[1])]


def test_restart_record_joins_killer_spark_and_attempt() -> None:
    ev = {"operator": "count", "index": 0, "attempt": 2}
    events = [
        {"event": "task-retried", "retried": ev, "spark_noticed": 100.02, "scheduled": 100.03},
        {
            **ev,
            "event": "started",
            "phases": {"python_started": 100.05, "imported": 100.2, "fenced": 100.3},
            "steps": {"fence": 0.1},
            "replay": {},
            "replay_basis": READ,
        },
        {**ev, "event": "caught-up", "phases": {"restored": 100.4, "caught_up": 100.6}},
        {**ev, "attempt": 1, "event": "started", "phases": {"restored": 50.0}},
    ]
    r = restartstats.restart_of(events, "count", 0, 2, killed=100.0)
    assert r["kill_to_processing_s"] == pytest.approx(0.4)
    assert r["kill_to_caught_up_s"] == pytest.approx(0.6)
    assert list(r["phases"]) == list(PHASES)
    assert r["out_of_order"] == []
    s = restartstats.summarise([r, {**r, "kill_to_processing_s": 0.8}])
    assert s["kill_to_processing_s"]["median"] == pytest.approx(0.6)
    assert s["dominant"] == "imported"  # 0.15 s, the largest step up to processing
    assert any("dominant phase: imported" in line for line in restartstats.render(s))


# -- init_transactions steps, the daemon's importer cache --------------------------------


class _Init:
    """A producer whose init_transactions answers from a script of errors, then succeeds."""

    def __init__(self, *errors: int) -> None:
        self.errors = list(errors)
        self.waits: list[float] = []

    def init_transactions(self, timeout: float) -> None:
        self.waits.append(timeout)
        if self.errors:
            code = self.errors.pop(0)
            raise KafkaException(KafkaError(code, "scripted", retriable=True))


def test_init_transactions_asks_again_at_once_after_concurrent_transactions() -> None:
    p = TransactionalProducer(KafkaSettings("127.0.0.1:1"), "spillway.j.op.0")
    fake = _Init(KafkaError._TIMED_OUT, KafkaError.CONCURRENT_TRANSACTIONS)
    p._producer = fake  # type: ignore[assignment]
    p._init()
    # Three short calls on the same client, none of them a wait for librdkafka's 500 ms.
    assert len(fake.waits) == 3
    assert max(fake.waits) <= 0.02


def test_daemon_forgets_zip_importers_only(tmp_path: Path) -> None:
    archive = tmp_path / "pkgs.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("pkg/__init__.py", "")
    key = str(archive / "pkg")
    sys.path_importer_cache[key] = zipimport.zipimporter(str(archive))
    sys.path_importer_cache[str(tmp_path)] = None
    try:
        assert forget_zip_finders() >= 1
        assert key not in sys.path_importer_cache
        assert str(tmp_path) in sys.path_importer_cache
    finally:
        sys.path_importer_cache.pop(key, None)
        sys.path_importer_cache.pop(str(tmp_path), None)


def test_subtask_ids_name_the_progress_partition() -> None:
    from spillway.recovery.restore.progress import ProgressLog

    log = ProgressLog(KafkaSettings("127.0.0.1:1"), SubtaskId(JobId("j"), OperatorName("op"), 2))
    assert log.tp == TopicPartition("spillway.j.progress.op", 2)
    assert log.due(1e9)


def test_source_replay_spans_the_reread_and_catches_up_once() -> None:
    from spillway.recovery.restore.progress import SourceReplay

    g = GeneratorSource(lambda i: {"i": i}, None, parallelism=2)
    g._next = 4  # restored at index 4; the dead attempt had emitted up to 10
    r = SourceReplay(g, {"next": 10})
    assert r.span == {"index": [4, 10], "records": 3, "basis": READ}
    assert r.pending
    assert not r.caught_up()
    g.read(2)  # 4, 6
    assert not r.caught_up()
    g.read(5)  # 8, 10, ...
    assert r.caught_up()
    assert not r.pending
    assert not r.caught_up()
    assert not SourceReplay(g, None).pending  # no mark: nothing known to re-read
    assert not SourceReplay(g, {"next": 2}).pending  # it had read less than restored
