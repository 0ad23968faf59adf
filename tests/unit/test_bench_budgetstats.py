"""bench.budgetstats: py-spy samples put in stages, and the per-record budget."""

from __future__ import annotations

import pytest

from bench import budgetstats as b

WORKER = (
    'process 1:"python -m spillway run x";'
    'process 7:"python -m spillway.spark_jobs.spark.daemon pyspark.worker"'
)
DRIVER = 'process 1:"python /v/bin/spillway run bench.b1job:pipeline"'


def test_roles_by_command_line() -> None:
    assert b.role_of("python -m spillway.spark_jobs.spark.daemon pyspark.worker") == "worker"
    java = (
        "/usr/lib/jvm/java-17/bin/java -cp x"
        " --conf spark.python.daemon.module=spillway.spark_jobs.spark.daemon"
    )
    assert b.role_of(java) == "jvm"
    assert b.role_of("/v/bin/python /v/bin/spillway run bench.b1job:pipeline") == "driver"
    assert b.role_of("bash spark-class") == "other"


def test_the_innermost_frame_that_names_a_stage_decides() -> None:
    # pyarrow under the channel decoder counts as decoding
    frames = [
        "main (worker.py:1)",
        "Processor.step (recovery/runtime/processor.py:85)",
        "Decoders._decode_arrow (channels/wire/envelope.py:275)",
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
        f"{WORKER};Processor.step (recovery/runtime/processor.py:85);"
        "parse (bench/workload.py:58) 7",
        f"{WORKER};AssignedConsumer.consume (channels/kafka/consumer.py:65) 3",
        f"{WORKER};Heartbeat._run (recovery/observe/heartbeat.py:107);"
        "Condition.wait (threading.py:331) 50",
        f"{DRIVER};run_on_spark (spark_jobs/spark/driver.py:224) 40",
        f"{WORKER};<module> (x.py:1);_compile_bytecode (<frozen importlib._bootstrap>:729) 10",
    ]
    assert b.stage_samples(lines) == {
        "user functions": 7,
        "consume (client)": 3,
        b.STARTUP: 10,
    }


def test_budget_is_the_slope_shared_out_by_samples_without_start_up() -> None:
    small = {"cpu_s": {"worker": 4.0, "jvm": 6.0, "driver": 1.0}, "broker_cpu_s": 1.0}
    big = {"cpu_s": {"worker": 12.0, "jvm": 8.0, "driver": 1.5}, "broker_cpu_s": 2.5}
    slope = b.slope(small, big, 1_000_000)
    assert slope["cpu_s"] == pytest.approx({"worker": 8.0, "jvm": 2.0, "driver": 0.5})
    samples = {b.STARTUP: 20, "user functions": 60, "consume (client)": 20}
    out = b.budget(slope, samples, 1_000_000)
    assert out["us_per_record"] == pytest.approx(
        {"worker": 8.0, "jvm": 2.0, "driver": 0.5, "broker": 1.5}
    )
    assert out["worker_stages_us"] == pytest.approx(
        {"user functions": 6.0, "consume (client)": 2.0}
    )
    assert (out["worker_samples"], out["startup_samples"]) == (80, 20)
    assert out["total_us"] == pytest.approx(12.0)


def test_functions_by_innermost_frame_without_line_numbers_waits_or_imports() -> None:
    lines = [
        f"{WORKER};main (worker.py:1);Decoders._decode_arrow (channels/wire/envelope.py:275) 6",
        f"{WORKER};main (worker.py:1);Decoders._decode_arrow (channels/wire/envelope.py:267) 2",
        f"{WORKER};main (worker.py:1);parse (bench/workload.py:58) 4",
        f"{WORKER};main (worker.py:1);Condition.wait (threading.py:331) 50",
        f"{WORKER};main (worker.py:1);_find_and_load (<frozen importlib._bootstrap>:1) 9",
        f"{DRIVER};main (spark_jobs/spark/driver.py:1);parse (bench/workload.py:58) 7",
    ]
    samples = b.function_samples(lines)
    assert samples == {
        "Decoders._decode_arrow (channels/wire/envelope.py)": 8,
        "parse (bench/workload.py)": 4,
    }
    assert b.top_functions(6.0, samples, 1) == {
        "Decoders._decode_arrow (channels/wire/envelope.py)": pytest.approx(4.0)
    }
    assert b.top_functions(6.0, {}, 3) == {}
