"""bench.budgetstats: py-spy samples put in stages, and the per-record budget."""

from __future__ import annotations

import pytest

from bench import budgetstats as b

WORKER = (
    'process 1:"python -m spillway run x";process 7:"python -m spark_jobs.daemon pyspark.worker"'
)
DRIVER = 'process 1:"python /v/bin/spillway run bench.b1job:pipeline"'


def test_roles_by_command_line() -> None:
    assert b.role_of("python -m spark_jobs.daemon pyspark.worker") == "worker"
    assert b.role_of("/usr/lib/jvm/java-17/bin/java -cp x SparkSubmit") == "jvm"
    assert b.role_of("/v/bin/python /v/bin/spillway run bench.b1job:pipeline") == "driver"
    assert b.role_of("bash spark-class") == "other"


def test_the_innermost_frame_that_names_a_stage_decides() -> None:
    # pyarrow under the channel decoder counts as decoding
    frames = [
        "main (worker.py:1)",
        "Processor.step (recovery/processor.py:85)",
        "Decoders._decode_arrow (channels/envelope.py:275)",
        "read_all (pyarrow/ipc.py:9)",
    ]
    assert b.stage_of(frames) == "decode channel messages"
    # the user's function inside the processor loop
    assert b.stage_of([*frames[:2], "parse (bench/workload.py:58)"]) == "user functions"
    assert b.stage_of(frames[:2]) == "subtask loop (reader, processor)"
    assert b.stage_of([*frames[:2], "Condition.wait (threading.py:331)"]) is None
    assert b.stage_of(["main (worker.py:1)"]) == b.OTHER


def test_samples_count_only_the_workers_and_skip_waits() -> None:
    lines = [
        f"{WORKER};Processor.step (recovery/processor.py:85);parse (bench/workload.py:58) 7",
        f"{WORKER};AssignedConsumer.consume (channels/kafka/consumer.py:65) 3",
        f"{WORKER};Heartbeat._run (recovery/heartbeat.py:107);Condition.wait (threading.py:331) 50",
        f"{DRIVER};run_on_spark (spark_jobs/driver.py:224) 40",
        f"{WORKER};<module> (x.py:1);_compile_bytecode (<frozen importlib._bootstrap>:729) 10",
    ]
    assert b.stage_samples(lines) == {
        "user functions": 7,
        "consume (client)": 3,
        b.STARTUP: 10,
    }


def test_budget_takes_start_up_out_and_shares_the_rest_by_samples() -> None:
    measured = {"cpu_s": {"worker": 10.0, "jvm": 2.0, "driver": 1.0}, "broker_cpu_s": 1.5}
    samples = {b.STARTUP: 20, "user functions": 60, "consume (client)": 20}
    out = b.budget(measured, samples, 1_000_000)
    assert out["worker_startup_cpu_s"] == pytest.approx(2.0)  # 20 % of 10 CPU-s
    assert out["us_per_record"] == pytest.approx(
        {"worker": 8.0, "jvm": 2.0, "driver": 1.0, "broker": 1.5}
    )
    assert out["worker_stages_us"] == pytest.approx(
        {"user functions": 6.0, "consume (client)": 2.0}
    )
    assert out["total_us"] == pytest.approx(12.5)
