"""The soak's bookkeeping (chaos.soakstats) and schedule (chaos.soak.SoakConfig) on fakes."""

from __future__ import annotations

from chaos.soak import CHECKPOINT_BOUND, SoakConfig
from chaos.soakstats import (
    Growth,
    ProcessKind,
    Sample,
    TopicGroup,
    TopicSize,
    add_partition,
    classify,
    max_fds,
    partition_dir_topic,
    render,
    rss_growth,
    summarize,
    topic_group,
    unbounded_checkpoints,
)

MIB = 2**20
DAEMON = ("/w/.venv/bin/python3", "-m", "pyspark.daemon")


def test_topic_groups_follow_the_project_naming() -> None:
    assert topic_group("spillway.job-1.ckpt.fold") == TopicGroup.CHECKPOINT
    assert topic_group("spillway.job-1.changelog.fold") == TopicGroup.CHANGELOG
    assert topic_group("spillway.job-1.ch.gen.weigh") == TopicGroup.CHANNELS
    assert topic_group("spillway.job-1.events") == TopicGroup.OTHER
    assert topic_group("job-1.out") == TopicGroup.OTHER
    assert topic_group("__transaction_state") == TopicGroup.OTHER
    assert topic_group("other.job.ckpt.fold") == TopicGroup.OTHER


def test_partition_directories_name_their_topic() -> None:
    assert partition_dir_topic("spillway.j.ckpt.fold-1") == "spillway.j.ckpt.fold"
    assert partition_dir_topic("__consumer_offsets-3") == "__consumer_offsets"
    assert partition_dir_topic("__cluster_metadata-0") == "__cluster_metadata"
    assert partition_dir_topic("spillway.j.ch.a.b-0.3f2a-delete") is None
    assert partition_dir_topic("meta.properties") is None
    assert partition_dir_topic("-0") is None


def test_processes_are_classified_by_command_line_and_parent() -> None:
    java = ("/usr/lib/jvm/bin/java", "-cp", "x", "org.apache.spark.deploy.SparkSubmit")
    driver = ("/w/.venv/bin/python", "-m", "spillway.cli", "run", "chaos.pipeline:pipeline")
    assert classify(driver, ("/bin/bash",), broker=False) == ProcessKind.DRIVER_PYTHON
    assert classify(java, driver, broker=False) == ProcessKind.DRIVER_JVM
    assert classify(DAEMON, java, broker=False) == ProcessKind.PYTHON_DAEMON
    assert classify(DAEMON, DAEMON, broker=False) == ProcessKind.PYTHON_WORKER
    own = ("/w/.venv/bin/python", "-m", "spillway.spark_jobs.spark.daemon")
    assert classify(own, java, broker=False) == ProcessKind.PYTHON_DAEMON
    assert classify(own, own, broker=False) == ProcessKind.PYTHON_WORKER
    assert classify(("python", "daemon"), java, broker=False) == ProcessKind.PYTHON_WORKER
    assert classify(("java", "kafka.Kafka"), (), broker=True) == ProcessKind.BROKER_JVM
    assert classify(("/bin/sh", "-c", "x"), java, broker=False) == ProcessKind.OTHER
    assert classify((), (), broker=False) == ProcessKind.OTHER


def _sample(t: float, worker_mib: int, fds: int = 10, ckpt: TopicSize | None = None) -> Sample:
    topics = {TopicGroup.CHECKPOINT: ckpt} if ckpt is not None else {}
    return Sample(
        t,
        {"python-worker": worker_mib * MIB, "driver-jvm": 500 * MIB},
        {"python-worker": 8, "driver-jvm": 1},
        {"python-worker": fds, "driver-jvm": 300},
        topics,
    )


def test_growth_compares_windows_after_warm_up() -> None:
    # Warm-up (t < 60) grows from 50 to 100 MiB and does not count; then 100/102 in the
    # first 30 s window (mean 101) and 110/112 in the last (mean 111).
    samples = [_sample(0, 50), _sample(30, 100), _sample(60, 100), _sample(80, 102)]
    samples += [_sample(100, 104), _sample(200, 110), _sample(220, 112)]
    g = rss_growth(samples, warmup_s=60, window_s=30)
    assert g["python-worker"] == Growth(101 * MIB, 111 * MIB, 112 * MIB)
    assert round(g["python-worker"].ratio, 4) == round(111 / 101 - 1, 4)
    assert g["driver-jvm"].ratio == 0.0
    assert rss_growth(samples, warmup_s=500, window_s=30) == {}


def test_growth_over_names_only_the_kinds_past_the_limit() -> None:
    samples = [_sample(60, 100), _sample(200, 115)]
    s = summarize(samples, warmup_s=60, window_s=30)
    assert list(s.growth_over(0.10)) == ["python-worker"]
    assert s.growth_over(0.20) == {}
    assert s.procs_end == {"python-worker": 8, "driver-jvm": 1}


def test_max_fds_is_the_most_any_sample_held() -> None:
    assert max_fds([_sample(0, 1, fds=10), _sample(5, 1, fds=40), _sample(9, 1, fds=20)]) == {
        "python-worker": 40,
        "driver-jvm": 300,
    }


def test_partitions_add_up_per_group() -> None:
    size = add_partition(TopicSize(), 100, 0, 0)  # an empty, unpruned partition first
    size = add_partition(size, 50, 400, 900)
    assert size == TopicSize(150, 500, 500, 0, 2)
    size = add_partition(TopicSize(), 10, 400, 900)
    assert add_partition(size, 10, 300, 350) == TopicSize(20, 550, 500, 300, 2)


def test_checkpoints_must_be_pruned_and_bounded() -> None:
    pruned = TopicSize(0, 800, 400, 1200, 2)
    unpruned = TopicSize(0, 800, 400, 0, 2)
    too_long = TopicSize(0, 3000, 2000, 5, 2)
    ok = [_sample(0, 1), _sample(60, 1, ckpt=pruned), _sample(120, 1, ckpt=pruned)]
    assert unbounded_checkpoints(ok, 1000, warmup_s=60) == []
    assert unbounded_checkpoints([_sample(120, 1, ckpt=unpruned)], 1000, 60) == [
        "a checkpoint partition was never pruned (log start 0 at the end)"
    ]
    assert unbounded_checkpoints([*ok, _sample(130, 1, ckpt=too_long)], 1000, 60) == [
        "a checkpoint partition retained 2000 offsets at 130s (bound 1000)"
    ]
    assert unbounded_checkpoints([_sample(0, 1)], 1000, 60) == ["no sample saw a checkpoint topic"]


def test_render_states_rss_topics_and_exactness() -> None:
    samples = [_sample(60, 100, ckpt=TopicSize(MIB, 10, 5, 3, 2)), _sample(200, 110)]
    lines = render(summarize(samples, 60, 30), lost=0, duplicated=0, restarts=4)
    assert lines[0] == "duration 200s, 2 samples, warm-up 60s"
    assert lines[1].startswith("rss driver-jvm")
    assert "+10.0%" in lines[2]
    assert lines[4].startswith("topics checkpoint disk 1.0 MiB -> 1.0 MiB, retained 10 -> 10")
    assert lines[-1] == "restarts 4, lost 0, duplicated 0"


def test_a_soak_kills_round_robin_every_interval_until_the_sources_stop() -> None:
    five = SoakConfig(minutes=5, rate=1000, kill_every_s=60)
    assert five.records == 300_000
    assert five.kill_times() == [60, 120, 180, 240]
    assert five.kill_targets() == [("gen", 0), ("weigh", 0), ("fold", 0), ("sink", 0)]
    assert (five.warmup_s, five.window_s) == (60, 30)
    hour = SoakConfig()
    assert len(hour.kill_times()) == 19
    assert hour.kill_times()[-1] == 3420
    assert hour.kill_targets()[8] == ("gen", 0)
    assert hour.kill_targets()[4] == ("gen", 1)
    assert (hour.warmup_s, hour.window_s) == (300, 300)
    # the Spark tasks get enough attempts: 19 kills over 8 subtasks, 3 at most each
    assert hour.profile().max_kills_per_subtask == 3
    assert hour.profile().faults == ()
    assert CHECKPOINT_BOUND == 1020
