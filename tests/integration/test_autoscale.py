"""The autoscaler on a running job (real Spark, real broker): the input rate steps up 3x
and back down (tests/integration/autoscalejobs.py).

The autoscaler, given bounds 1..4 for the bottleneck ``count``, must scale it up during
the high step and back to 1 after it, by live rescale, with at most 2 decisions per
step; every decision is an ``autoscale-decided`` event answered by a ``rescaled`` one;
count's backlog returns under the lag target within :data:`LAG_BOUND_S` of each change;
and the output equals the plain-Python reference exactly.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId
from spillway.recovery.cli import main as recovery_main
from spillway.recovery.control.autopolicy import AutoscalePolicy, Bounds, Measurement, Settings
from spillway.recovery.observe.events import read_events
from spillway.spark_jobs.autoscale.loop import Autoscaler
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from spillway.spark_jobs.spark.opruns import OperatorRuns
from tests.integration.autoscalejobs import RECORDS
from tests.integration.keygroupjobs import read_output, reference

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.soak]

REF = "tests.integration.autoscalejobs:stepped_count"
SETTINGS = Settings(target_utilisation=0.8, cooldown_s=20, down_after_s=10, lag_target=200)
WINDOW_S = 5.0
# After a rescale is answered, count's backlog is back under the lag target within this
# (docs/operating.md states it): the new subtasks start, then drain what piled up.
LAG_BOUND_S = 30.0


def test_the_bottleneck_is_scaled_up_for_a_3x_step_and_back_down(
    kafka_bootstrap: str,
    unique: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("SPILLWAY_TEST_OUT", str(tmp_path / "out"))
    settings = KafkaSettings(kafka_bootstrap)
    job = JobId(unique)
    measured: list[Measurement] = []
    errors: list[BaseException] = []
    stop = threading.Event()
    scaler = Autoscaler(
        settings,
        job,
        AutoscalePolicy({"count": Bounds(1, 4)}, SETTINGS),
        window_s=WINDOW_S,
        on_measure=measured.append,
    )

    def scale() -> None:
        try:
            scaler.run(stop)
        except BaseException as e:  # reported by the test's thread, below
            errors.append(e)

    thread = threading.Thread(target=scale, daemon=True)

    def on_running(_runs: OperatorRuns) -> None:
        thread.start()

    t0 = time.time()
    results = run_on_spark(
        JobConfig(REF, unique, kafka_bootstrap, master="local[8,3]"), on_running=on_running
    )
    stop.set()
    thread.join(60)
    assert not thread.is_alive()
    assert errors == []
    assert {r.status for r in results} == {"finished"}
    assert read_output(tmp_path / "out") == reference(RECORDS)

    events = list(read_events(settings, job))
    decided = [e for e in events if e.get("event") == "autoscale-decided"]
    answers = {e["request"]: e for e in events if e.get("event") == "rescaled"}
    with capsys.disabled():
        _print_run(t0, decided, answers, measured)
    # Up during the high step, back to 1 after it; at most 2 decisions each way.
    steps = [(e["previous"], e["parallelism"], e["reason"]) for e in decided]
    ups = [s for s in steps if s[1] > s[0]]
    downs = [s for s in steps if s[1] < s[0]]
    assert steps == ups + downs, steps
    assert 1 <= len(ups) <= 2, steps
    assert 1 <= len(downs) <= 2, steps
    assert {r for *_, r in ups} == {"scale-up"}
    assert {r for *_, r in downs} == {"scale-down"}
    assert (steps[0][0], steps[-1][1]) == (1, 1)
    assert max(p for _, p, _ in steps) >= 2
    assert all(e["target"] == "count" for e in decided)
    # Every decision carries its inputs and was applied by a live rescale.
    for e in decided:
        assert set(e["measured"]) == {
            "parallelism", "input_rate", "true_rate", "backlog", "max_parallelism"
        }  # fmt: skip
        answer = answers[e["request"]]
        assert (answer["previous"], answer["parallelism"]) == (e["previous"], e["parallelism"])
    # After each change, count's backlog is back under the target within the bound.
    for e in decided:
        done = answers[e["request"]]["time"]
        after = [m for m in measured if m.time > done and m.parallelism == e["parallelism"]]
        assert after, f"no measurement after the rescale to {e['parallelism']}"
        under = [m.time for m in after if m.backlog <= SETTINGS.lag_target]
        assert under, (e, [m.backlog for m in after])
        with capsys.disabled():
            print(f"  {e['previous']} -> {e['parallelism']}: backlog under the target "
                  f"{under[0] - done:.1f}s after the answer")  # fmt: skip
        assert under[0] - done <= LAG_BOUND_S, (e, [m.backlog for m in after])

    capsys.readouterr()
    assert recovery_main(["status", "--job", unique, "--bootstrap", kafka_bootstrap]) == 0
    shown = [line for line in capsys.readouterr().out.splitlines() if "autoscale:" in line]
    with capsys.disabled():
        print(*shown, sep="\n")
    assert len(shown) == len(decided)
    assert shown[-1].startswith("autoscale: count ")
    assert shown[-1].endswith(", applied")


def _print_run(
    t0: float,
    decided: list[dict[str, Any]],
    answers: dict[str, dict[str, Any]],
    measured: list[Measurement],
) -> None:
    """The run's measurements and decisions, for the docs and for a failing run."""
    print()
    for m in measured:
        print(
            f"  t={m.time - t0:6.1f}s p={m.parallelism} input={m.input_rate:6.1f}/s "
            f"true={m.true_rate:6.1f}/busy s backlog={m.backlog}"
        )
    for e in decided:
        done = answers.get(e["request"], {}).get("time")
        took = f"{done - e['time']:.1f}s" if done else "no answer"
        print(f"  decided t={e['time'] - t0:.1f}s {e['previous']} -> {e['parallelism']} "
              f"{e['reason']} {e['measured']} rescaled after {took}")  # fmt: skip
