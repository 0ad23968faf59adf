"""Pure helpers of ``make bench``: /proc parsing, perf-tool output, jar filtering, output checks."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from bench import kafkatools, kstreams, latency, procstat, sparkkafka, workload

# A real /proc/<pid>/stat line, with a command name that has a space and a ')' in it.
STAT = (
    "4242 (java (x) y) S 4200 4242 4200 0 -1 4194560 31 0 0 0 "
    "150 25 7 3 20 0 31 0 12345 2147483648 5000 18446744073709551615"
    " 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0"
)


def test_parse_stat_counts_fields_after_the_last_parenthesis() -> None:
    s = procstat.parse_stat(STAT)
    assert (s.pid, s.ppid, s.utime, s.stime, s.cutime, s.cstime, s.rss_pages) == (
        4242,
        4200,
        150,
        25,
        7,
        3,
        5000,
    )
    assert s.cpu_ticks == 185


def test_parse_stat_rejects_a_line_that_is_not_a_stat_line() -> None:
    with pytest.raises(ValueError, match="not a /proc"):
        procstat.parse_stat("hello")
    with pytest.raises(ValueError, match="fields"):
        procstat.parse_stat("1 (x) S 0 1 2")


def test_tree_of_follows_parents_transitively_and_nothing_else() -> None:
    parents = {1: 0, 10: 1, 11: 10, 12: 11, 20: 1, 30: 99}
    assert procstat.tree_of(10, parents) == {10, 11, 12}
    assert procstat.tree_of(30, parents) == {30}


def test_cpu_seconds_sums_own_and_reaped_children_time() -> None:
    s = procstat.parse_stat(STAT)
    assert procstat.cpu_seconds([s, s]) == pytest.approx(2 * 185 / procstat.CLOCK_TICKS)


def test_the_tools_of_this_machine_report_what_proc_says() -> None:
    me = procstat.read_tree(os.getpid())
    assert me
    assert procstat.cpu_seconds(me) > 0


PRODUCER_OUT = """\
91540 records sent, 18308.0 records/sec (3.49 MB/sec), 1401.2 ms avg latency, 2400.0 ms max latency.
1000000 records sent, 251256.281407 records/sec (47.92 MB/sec), 95.13 ms avg latency, \
612.00 ms max latency, 71 ms 50th, 272 ms 95th, 401 ms 99th, 590 ms 99.9th.
"""
CONSUMER_OUT = """\
start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, \
rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
2026-11-22 10:12:10:123, 2026-11-22 10:12:13:456, 190.7349, 57.2, 1000000, 300030.0, \
1805, 1528, 124.8, 654450.3
"""


def test_parse_producer_takes_the_final_summary() -> None:
    f = kafkatools.parse_producer(PRODUCER_OUT)
    assert (f.records, f.records_per_s, f.p50_ms, f.p99_ms) == (1_000_000, 251256.281407, 71, 401)


def test_parse_consumer_reads_columns_by_name() -> None:
    f = kafkatools.parse_consumer(CONSUMER_OUT)
    assert (f.records, f.records_per_s, f.fetch_records_per_s) == (1_000_000, 300030.0, 654450.3)


def test_unreadable_tool_output_is_an_error_quoting_it() -> None:
    with pytest.raises(kafkatools.ToolError, match="no ProducerPerformance summary"):
        kafkatools.parse_producer("Exception in thread main")
    with pytest.raises(kafkatools.ToolError, match="no ConsumerPerformance result"):
        kafkatools.parse_consumer("WARN nothing")


def test_connector_jars_leave_out_what_pyspark_ships() -> None:
    assert sparkkafka.artifact("kafka-clients-3.9.2.jar") == "kafka-clients"
    assert sparkkafka.artifact("spark-sql-kafka-0-10_2.13-4.2.0.jar") == "spark-sql-kafka-0-10_2.13"
    assert sparkkafka.artifact("hadoop-client-api-3.4.1.jar") == "hadoop-client-api"
    jars = ["kafka-clients-3.9.2.jar", "snappy-java-1.1.10.5.jar", "commons-pool2-2.13.1.jar"]
    shipped = ["snappy-java-1.1.10.8.jar", "spark-core_2.13-4.3.0.jar"]
    want = ["commons-pool2-2.13.1.jar", "kafka-clients-3.9.2.jar"]
    assert sparkkafka.missing(jars, shipped) == want


def test_events_are_exactly_200_bytes_and_parse_to_their_page() -> None:
    for i in (0, 1, 12_345, 10**9):
        e = workload.make_event(i)
        assert len(workload.encode(e)) == workload.RECORD_BYTES
        view = workload.parse(e)
        assert view["page"].startswith(f"/{view['section']}/")
        assert "?" not in view["page"]


def test_judge_accepts_a_complete_output_and_names_what_is_wrong() -> None:
    expected = Counter({"/a/1": 2, "/b/2": 1})
    ok = workload.judge([("/a/1", 1), ("/b/2", 1), ("/a/1", 2)], expected)
    assert (ok.messages, ok.final_counts_ok, ok.every_update_once) == (3, True, True)
    dup = workload.judge([("/a/1", 1), ("/a/1", 1), ("/b/2", 1), ("/a/1", 2)], expected)
    assert (dup.final_counts_ok, dup.every_update_once) == (True, False)
    short = workload.judge([("/a/1", 1), ("/b/2", 1)], expected)
    assert not short.final_counts_ok
    assert "/a/1" in short.problem
    # Spark's update mode: one row per page and micro-batch, final counts still right.
    batches = workload.judge([("/a/1", 2), ("/b/2", 1)], expected)
    assert (batches.final_counts_ok, batches.every_update_once) == (True, False)


def test_hop_latencies_follow_each_record_and_skip_warmup_and_stragglers() -> None:
    sent = {0: 10.0, 1: 20.0, 2: 20.5, 3: 21.0}
    seen = [
        {0: 10.1, 1: 20.5, 2: 21.0, 3: 21.5},
        {0: 10.2, 1: 20.6, 2: 21.2},  # 3 never got past parse: left out
        {0: 10.3, 1: 21.6, 2: 21.7},
        {0: 10.4, 1: 21.7, 2: 21.9},
    ]
    out = latency.hop_latencies(sent, seen, after=15.0)  # 0 is warm-up
    assert out["source"] == pytest.approx([0.5, 0.5])
    assert out["parse"] == pytest.approx([0.1, 0.2])
    assert out["count"] == pytest.approx([1.0, 0.5])
    assert out["sink"] == pytest.approx([0.1, 0.2])
    assert out["end-to-end"] == pytest.approx([1.7, 1.4])


def test_output_rows_are_checked_field_by_field_and_key_by_key() -> None:
    good = workload.encode({"page": "/a/1", "section": "a", "views": 1})
    assert workload.row_problem(b"/a/1", good) == ""
    assert "key" in workload.row_problem(b"/a/2", good)
    extra = workload.encode({"page": "/a/1", "section": "a", "views": 1, "x": 0})
    assert "fields" in workload.row_problem(b"/a/1", extra)
    wrong_section = workload.encode({"page": "/a/1", "section": "b", "views": 1})
    assert "section" in workload.row_problem(b"/a/1", wrong_section)
    text_views = workload.encode({"page": "/a/1", "section": "a", "views": "1"})
    assert "integer" in workload.row_problem(b"/a/1", text_views)
    assert "JSON" in workload.row_problem(b"/a/1", b"{not json")


def test_check_rows_fails_a_run_with_one_malformed_row_among_right_ones() -> None:
    def row(page: str, views: int) -> tuple[bytes, bytes]:
        return page.encode(), workload.encode({"page": page, "section": "a", "views": views})

    expected = Counter({"/a/1": 2})
    ok = workload.check_rows([row("/a/1", 1), row("/a/1", 2)], expected)
    assert (ok.messages, ok.final_counts_ok, ok.every_update_once, ok.fields_ok) == (
        2,
        True,
        True,
        True,
    )
    bad = workload.check_rows([row("/a/1", 1), row("/a/1", 2), (b"/a/1", b"[]")], expected)
    assert (bad.messages, bad.final_counts_ok, bad.fields_ok) == (3, False, False)
    assert "message 2" in bad.problem


def test_kstreams_command_passes_the_job_and_a_fixed_heap_with_parallel_gc() -> None:
    home = Path("/cache/kstreams-x")
    cmd = kstreams.command(home, "b:1", "in", "out", 10, 0.5, "/s", "app", 1, java=Path("j"))
    assert cmd[0] == "j"
    assert cmd[1 : cmd.index("-cp")] == [
        "-Xms256m",
        "-Xmx256m",
        "-XX:+UseParallelGC",
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
    ]
    assert cmd[cmd.index("-cp") + 1] == "/cache/kstreams-x/app.jar:/cache/kstreams-x/lib/*"
    assert cmd[-8:] == ["b:1", "in", "out", "10", "500", "/s", "app", "1"]
    with pytest.raises(ValueError, match="commit interval"):
        kstreams.command(home, "b:1", "in", "out", 10, 0.0, "/s", "app", java=Path("j"))


def test_kstreams_digest_changes_with_a_source_or_the_kafka_version() -> None:
    files = [("pom.xml", b"a"), ("src/A.java", b"b")]
    d = kstreams.source_digest(files, "4.4.0")
    assert d == kstreams.source_digest(list(reversed(files)), "4.4.0")
    assert d != kstreams.source_digest([("pom.xml", b"a"), ("src/A.java", b"c")], "4.4.0")
    assert d != kstreams.source_digest(files, "4.3.0")


def test_kstreams_b3_figures_find_recovery_duplicates_and_gaps() -> None:
    from bench import kstreamsb3

    s = kstreamsb3.Settings(base_s=10.0, after_s=10.0)
    kill = 100.0
    seen = []
    # 0.1 s latency before the kill, 2 s for the first 3 s after it, then 0.1 s again.
    for seq in range(200):
        t = 90.0 + seq * 0.1
        lat = 2.0 if kill <= t < kill + 3 else 0.1
        seen.append((t, seq, int((t - lat) * 1000), "/a/1", seq + 1))
    f = kstreamsb3.figures(seen, 200, kill, s)
    assert f["baseline_latency_q90_s"] == pytest.approx(0.1, abs=0.002)
    assert f["back_within_10pct_s"] == pytest.approx(3.0)
    assert f["max_latency_after_kill_s"] == pytest.approx(2.0, abs=0.002)
    assert (f["duplicates"], f["missing"], f["every_update_once"]) == (0, 0, True)
    twice = kstreamsb3.figures([*seen, seen[5]], 201, kill, s)
    assert (twice["duplicates"], twice["missing"], twice["every_update_once"]) == (1, 1, False)


def test_kstreams_traced_command_ends_with_the_flag() -> None:
    cmd = kstreams.command(
        Path("/h"), "b:1", "in", "out", 0, 1.0, "/s", "app", 1, java=Path("j"), traced=True
    )
    assert cmd[-3:] == ["app", "1", "traced"]


def test_kstreams_b3_summary_counts_rounds_not_back_and_judges_outputs() -> None:
    from bench import kstreamsb3

    def r(back: float | None, dup: int = 0) -> dict[str, object]:
        return {
            "back_within_10pct_s": back,
            "max_latency_after_kill_s": 9.0,
            "baseline_latency_q90_s": 1.0,
            "every_update_once": True,
            "duplicates": dup,
            "missing": 0,
        }

    s = kstreamsb3.summarise(
        [
            {"standby-0": r(10.0), "standby-1": r(4.0)},
            {"standby-0": r(None), "standby-1": r(6.0, 1)},
        ]
    )
    assert s["standby-0"]["back_within_10pct_s"]["median"] == 10.0
    assert (s["standby-0"]["not_back"], s["standby-0"]["output_exact"]) == (1, True)
    assert s["standby-1"]["back_within_10pct_s"]["median"] == 5.0
    assert not s["standby-1"]["output_exact"]
