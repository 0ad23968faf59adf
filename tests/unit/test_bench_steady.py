"""Pure helpers of B1s (bench.steady, bench.steadyrun) and the tree sampler's bookkeeping."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import ceiling, kafkatools, procstat, steady, steadyrun


def test_fit_splits_fixed_cost_from_per_record_cost() -> None:
    line = steady.fit([(1_000, 12.0), (5_000, 20.0)])
    assert line.fixed == pytest.approx(10.0)
    assert line.per_record == pytest.approx(0.002)
    assert line.per_unit == pytest.approx(500.0)


def test_fit_is_least_squares_over_repeated_sizes() -> None:
    line = steady.fit([(0, 1.0), (0, 3.0), (10, 12.0), (10, 14.0)])
    assert (line.fixed, line.per_record) == (pytest.approx(2.0), pytest.approx(1.1))


def test_fit_needs_two_sizes_and_a_rising_cost_has_a_rate() -> None:
    with pytest.raises(ValueError, match="two input sizes"):
        steady.fit([(5, 1.0), (5, 2.0)])
    assert steady.fit([(1, 2.0), (2, 1.0)]).per_unit is None


def test_merge_latest_keeps_the_highest_own_ticks_per_pid() -> None:
    def stat(pid: int, ut: int, st: int, cut: int) -> procstat.Stat:
        return procstat.Stat(pid, 1, ut, st, cut, 0, 0)

    latest: dict[int, int] = {}
    procstat.merge_latest(latest, [stat(10, 5, 1, 0), stat(11, 2, 0, 0)])
    # 11 exited and was reaped into 10's cutime: 10's own time is what counts, 11 stays.
    procstat.merge_latest(latest, [stat(10, 7, 1, 3)])
    assert latest == {10: 8, 11: 2}


def _run(records: int, cpu: float, broker: float, seconds: float, ok: bool = True) -> dict:
    return {
        "records": records,
        "cpu_s": cpu,
        "broker_cpu_s": broker,
        "seconds": seconds,
        "peak_rss_bytes": records,
        "output": {"every_update_once": ok, "fields_ok": True},
    }


def test_fit_round_counts_the_broker_and_fails_on_a_wrong_output() -> None:
    f = steadyrun.fit_round([_run(1000, 9.0, 1.0, 20.0), _run(3000, 12.0, 2.0, 24.0)])
    assert f["fixed_cpu_s"] == pytest.approx(8.0)
    assert f["cpu_us_per_record"] == pytest.approx(2000.0)
    assert f["per_cpu_s"] == pytest.approx(500.0)
    assert (f["fixed_s"], f["records_per_s"]) == (pytest.approx(18.0), pytest.approx(500.0))
    assert (f["peak_rss_bytes"], f["output_ok"]) == (3000, True)
    bad = steadyrun.fit_round([_run(1000, 9.0, 1.0, 20.0), _run(3000, 12.0, 2.0, 24.0, False)])
    assert not bad["output_ok"]


def test_summarise_takes_ratios_to_the_orjson_loop_round_by_round() -> None:
    def fits(mine: float, base: float) -> dict:
        common = {k: 1.0 for k in steadyrun.FIGURES} | {"output_ok": True}
        return {
            "fits": {
                "spillway-run": {**common, "per_cpu_s": mine},
                "handwritten-orjson": {**common, "per_cpu_s": base},
            }
        }

    s = steadyrun.summarise([fits(50.0, 100.0), fits(90.0, 100.0), fits(40.0, 50.0)])
    r = s["ratios"]["spillway-run/handwritten-orjson"]
    assert (r["median"], r["low"], r["high"]) == (0.8, 0.5, 0.9)
    assert s["engines"]["spillway-run"]["per_cpu_s"]["median"] == 50.0


def test_spillway_runs_through_the_installed_command_with_its_settings() -> None:
    cmd = steadyrun.command("spillway-run-chained", "b:1", "in", "out", 5, "job", 1.0, "/w")
    assert cmd[0].endswith("/spillway")
    assert cmd[1:3] == ["run", "bench.b1job:pipeline"]
    assert "chaining=true" in cmd
    assert cmd[cmd.index("--job-id") + 1] == "job"
    peer = steadyrun.command("quix", "b:1", "in", "out", 5, "job", 1.0, "/w")
    assert peer[1:4] == ["-m", "bench.peers", "quix"]
    with pytest.raises(ValueError, match="unknown"):
        steadyrun.command("sss", "b:1", "in", "out", 5, "job", 1.0, "/w")


def test_ceiling_fit_leaves_the_fixed_jvm_start_out_of_the_per_record_cost() -> None:
    runs = [
        {"records": 1_000_000, "cpu_s": 4.0, "broker_cpu_s": 1.0},
        {"records": 5_000_000, "cpu_s": 12.0, "broker_cpu_s": 5.0},
    ]
    f = ceiling.fit_tool(runs)
    assert f["cpu_us_per_record"] == pytest.approx(3.0)
    assert f["per_cpu_s"] == pytest.approx(333_333.33)
    assert f["fixed_cpu_s"] == pytest.approx(2.0)
    s = ceiling.summarise([{"fits": {"raw-produce": f}}, {"fits": {"raw-produce": f}}])
    assert set(s) == {"raw-produce"}
    assert s["raw-produce"]["fixed_cpu_s"]["median"] == pytest.approx(2.0)


def test_tuned_producer_command_adds_its_properties_after_acks() -> None:
    cmd = kafkatools.producer_command(Path("/lib"), "b:1", "t", 10, 200, kafkatools.TUNED_PRODUCER)
    assert cmd[-3:] == ["acks=all", "linger.ms=10", "batch.size=262144"]


def test_wire_bytes_sums_log_segments_of_the_channel_topics_only(tmp_path: Path) -> None:
    def segment(directory: str, name: str, size: int) -> None:
        (tmp_path / directory).mkdir(exist_ok=True)
        (tmp_path / directory / name).write_bytes(b"x" * size)

    segment("spillway.j.ch.a.b-0", "00000000000000000000.log", 100)
    segment("spillway.j.ch.a.b-0", "00000000000000000000.index", 999)
    segment("spillway.j.ch.a.b-1", "00000000000000000000.log", 50)
    segment("spillway.j.ch.b.c-0", "00000000000000000000.log", 7)
    segment("spillway.j.changelog.c-0", "00000000000000000000.log", 1000)
    segment("spillway.j2.ch.a.b-0", "00000000000000000000.log", 1000)
    got = steadyrun.wire_bytes(tmp_path, "spillway.j.ch.")
    assert got == {"spillway.j.ch.a.b": 150, "spillway.j.ch.b.c": 7}


def test_ready_lines_may_say_how_many_records_came_before_the_window() -> None:
    import io

    from bench import measure

    fields = measure._expect(io.StringIO("log noise\nREADY 12.5 50000\n"), "READY", None, "x")  # type: ignore[arg-type]
    assert fields == ["READY", "12.5", "50000"]
    assert measure._expect(io.StringIO("DONE 13.0\n"), "DONE", None, "x") == ["DONE", "13.0"]  # type: ignore[arg-type]


def test_b1c_ratios_carry_their_targets_and_stateless_output_is_checked_exactly() -> None:
    from bench import columnarjob, columnarrun

    def fits(columnar: float, quix: float) -> dict:
        common = {k: 1.0 for k in steadyrun.FIGURES} | {"output_ok": True}
        return {
            "fits": {
                "spillway-columnar": {**common, "per_cpu_s": columnar},
                "quix": {**common, "per_cpu_s": quix},
            }
        }

    s = columnarrun.summarise([fits(60.0, 20.0), fits(30.0, 20.0)])
    assert s["ratios"] == {
        "spillway-columnar/quix": {
            "median": 2.25,
            "low": 1.5,
            "high": 3.0,
            "runs": 2,
            "target": 5.0,
        }
    }
    rows = [(None, v) for v in columnarjob.stateless_reference(50)]
    assert columnarrun.check_stateless(rows, 50)["every_update_once"]
    wrong = columnarrun.check_stateless(rows[1:] + rows[:1] * 2, 50)
    assert (wrong["every_update_once"], wrong["problem"]) == (False, "1 extra, 0 missing")
    cmd = columnarrun.command("spillway-stateless-records", "b:1", "in", "out", 5, "j", 1.0, "/w")
    assert cmd[1:3] == ["run", "bench.columnarjob:stateless"]
    assert cmd[-2:] == ["--conf", "path=records"]


def test_b1s_round_runs_each_engine_at_its_own_sizes_in_a_rotating_order() -> None:
    topics = {300: "t300", 1_000: "t1000", 1_500: "t1500", 5_000: "t5000"}
    calls: list[tuple[str, str, int]] = []

    def run(engine: str, topic: str, records: int) -> dict[str, Any]:
        calls.append((engine, topic, records))
        cpu = 1.0 + records * (2e-6 if engine == "slow" else 1e-6)
        output = {"every_update_once": True, "fields_ok": True, "problem": ""}
        return {
            "records": records,
            "cpu_s": cpu,
            "broker_cpu_s": 0.0,
            "seconds": cpu,
            "peak_rss_bytes": 1,
            "output": output,
        }

    sizes_of = {"fast": (1_000, 5_000), "slow": (300, 1_500)}
    r = steadyrun.b1s_round(("fast", "slow"), topics, 1, run, lambda _: None, sizes_of)
    assert calls == [
        ("slow", "t300", 300),
        ("slow", "t1500", 1_500),
        ("fast", "t1000", 1_000),
        ("fast", "t5000", 5_000),
    ]
    assert round(r["fits"]["slow"]["cpu_us_per_record"], 6) == 2.0
    assert round(r["fits"]["fast"]["cpu_us_per_record"], 6) == 1.0
