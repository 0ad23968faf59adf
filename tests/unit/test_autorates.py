"""What the autoscaler measures per operator between two metric snapshots (no I/O)."""

from __future__ import annotations

from spillway.recovery.control.autopolicy import Measurement
from spillway.recovery.control.autorates import measure, upstreams
from spillway.recovery.job.plandoc import InputDoc, OperatorDoc, PlanDoc
from spillway.recovery.observe.metrics import Snapshot, SubtaskMetrics

CH1, CH2 = "spillway.j.ch.src.slow", "spillway.j.ch.slow.sink"
PLAN = PlanDoc(
    (
        OperatorDoc("src", 1, "source", False, "spillway.j.ckpt.src", ()),
        OperatorDoc("slow", 2, "reduce", True, "spillway.j.ckpt.slow", (InputDoc(CH1, 8),), 8),
        OperatorDoc("sink", 1, "sink", False, "spillway.j.ckpt.sink", (InputDoc(CH2, 1),)),
    )
)


def sub(op: str, i: int, rin: int, rout: int, busy: float, lag: int = 0,
        state: str = "running") -> SubtaskMetrics:  # fmt: skip
    return SubtaskMetrics(op, i, state=state, records_in=rin, records_out=rout, busy_s=busy,
                          lag={f"t[{i}]": lag})  # fmt: skip


def snap(t: float, *subs: SubtaskMetrics) -> Snapshot:
    return Snapshot(list(subs), [], t)


def test_upstreams_come_from_the_channel_names() -> None:
    assert upstreams("j", PLAN) == {"src": [], "slow": ["src"], "sink": ["slow"]}


def test_a_saturated_operator_is_sized_for_its_sources_rate_its_readers_for_the_demand() -> None:
    before = snap(100.0, sub("src", 0, 0, 1000, 0.0), sub("slow", 0, 400, 200, 4.0),
                  sub("slow", 1, 400, 200, 4.0), sub("sink", 0, 400, 400, 0.4))  # fmt: skip
    # 10 s: src wrote 3000 (300/s); slow processed 1000 in 10 busy s (100 per busy s,
    # always busy: its lag grew) and wrote half as many; the sink read them in 0.5 busy s
    after = snap(110.0, sub("src", 0, 0, 4000, 0.0), sub("slow", 0, 900, 450, 9.0, lag=30),
                 sub("slow", 1, 900, 450, 9.0, lag=20), sub("sink", 0, 900, 900, 0.9))  # fmt: skip
    got = measure("j", PLAN, before, after)
    assert got == {
        "slow": Measurement("slow", 110.0, 2, 300.0, 100.0, 50, 8),
        # DS2: the sink's demand is slow's input rate times slow's selectivity (1/2),
        # not the 50 rec/s slow passes on while it is too narrow
        "sink": Measurement("sink", 110.0, 1, 150.0, 1000.0, 0, None),
    }


def test_operators_not_all_running_or_idle_are_not_measured() -> None:
    restoring = sub("slow", 1, 0, 0, 0.0, state="restoring")
    before = snap(0.0, sub("src", 0, 0, 0, 0.0), sub("slow", 0, 0, 0, 0.0), restoring,
                  sub("sink", 0, 5, 5, 0.0))  # fmt: skip
    after = snap(5.0, sub("src", 0, 0, 10, 0.0), sub("slow", 0, 5, 5, 0.1),
                 sub("slow", 1, 5, 5, 0.1), sub("sink", 0, 5, 5, 0.0))  # fmt: skip
    # slow[1] was restoring at the start; the sink processed nothing (no busy time)
    assert measure("j", PLAN, before, after) == {}
    assert measure("j", PLAN, after, after) == {}  # an empty window


def test_rates_divide_by_the_time_between_the_heartbeats_the_counters_came_from() -> None:
    # Snapshots 5.25 s apart whose counters come from heartbeats 6 s apart (src) and 5 s
    # apart (slow): src wrote 1200 records in those 6 s, 200/s (not 1200 / 5.25 = 228.6)
    def beat(m: SubtaskMetrics, t: float) -> SubtaskMetrics:
        m.beat_time = t
        return m

    before = snap(100.0, beat(sub("src", 0, 0, 1000, 0.0), 99.1),
                  beat(sub("slow", 0, 0, 0, 0.0), 99.5), beat(sub("slow", 1, 0, 0, 0.0), 99.5),
                  beat(sub("sink", 0, 0, 0, 0.0), 99.5))  # fmt: skip
    after = snap(105.25, beat(sub("src", 0, 0, 2200, 0.0), 105.1),
                 beat(sub("slow", 0, 500, 500, 2.0), 104.5),
                 beat(sub("slow", 1, 500, 500, 2.0), 104.5),
                 beat(sub("sink", 0, 0, 0, 0.0), 104.5))  # fmt: skip
    assert measure("j", PLAN, before, after)["slow"].input_rate == 200.0
    # Without a newer heartbeat at the end, the snapshots' own times count
    stale = snap(105.25, beat(sub("src", 0, 0, 2050, 0.0), 99.1),
                 *after.subtasks[1:])  # fmt: skip
    assert measure("j", PLAN, before, stale)["slow"].input_rate == 1050 / 5.25
