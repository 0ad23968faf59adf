"""Housekeeping bookkeeping: whose topics and groups are whose, a job's state from its
heartbeats, what ``topics create`` does; and ``reset``'s prompt and refusal, on fakes."""

from __future__ import annotations

import io
import json
import time

import pytest

from spillway.channels.errors import ConfigError, TopologyMismatchError
from spillway.channels.ids import JobId, OperatorName, SubtaskId
from spillway.channels.naming import changelog_topic, channel_topic, checkpoint_topic
from spillway.cli import main
from spillway.recovery import housekeepcli
from spillway.recovery.control.globalckpt import checkpoints_topic
from spillway.recovery.control.housekeeping import (
    INTERNAL_KINDS,
    CreatePlan,
    JobResources,
    JobRow,
    JobState,
    describe_reset,
    group_job,
    internal_topic_job,
    job_row,
    job_state,
    jobs_on_cluster,
    plan_create,
    record_time,
    refuse_if_running,
    render_jobs,
    resources_of,
)
from spillway.recovery.observe.events import events_topic
from spillway.recovery.observe.heartbeat import heartbeats_topic
from spillway.recovery.restore.progress import progress_topic
from spillway.recovery.runtime.deadletter import dead_letter_topic

JOB = JobId("clicks")
A, B = OperatorName("parse"), OperatorName("count")

# One topic of every kind, named by the functions the runtime names them with.
JOB_TOPICS = sorted(
    [
        channel_topic(JOB, A, B),
        changelog_topic(JOB, B),
        checkpoint_topic(JOB, A),
        checkpoint_topic(JOB, B),
        progress_topic(JOB, A),
        events_topic(JOB),
        heartbeats_topic(JOB),
        checkpoints_topic(JOB),
        dead_letter_topic(JOB),
    ]
)
JOB_GROUPS = sorted(
    [
        SubtaskId(JOB, A, 0).group_id,
        SubtaskId(JOB, B, 1).group_id,
        SubtaskId(JOB, B, 1).group_id + ".restore",
    ]
)
USER_TOPICS = [
    "clicks-in",
    "clicks-out",
    "spillway.clicks.raw",  # under the job's prefix, but of no internal kind
    "spillway.clicks.ch.parse",  # a channel needs two operator names
    "spillway.clicks.events.extra",
    "spillway",
    "spillway.clicks",
    "__consumer_offsets",
]
USER_GROUPS = ["clicks-reader", "spillway-housekeeping", "spillway.clicks", "spillway.bad!id.x"]


def test_every_kind_the_runtime_names_is_internal() -> None:
    kinds = {t.split(".")[2] for t in JOB_TOPICS}
    assert kinds == set(INTERNAL_KINDS)
    assert [internal_topic_job(t) for t in JOB_TOPICS] == [JOB] * len(JOB_TOPICS)


@pytest.mark.parametrize("topic", USER_TOPICS)
def test_user_topics_belong_to_no_job(topic: str) -> None:
    assert internal_topic_job(topic) is None


def test_groups_by_job() -> None:
    assert [group_job(g) for g in JOB_GROUPS] == [JOB] * 3
    assert [group_job(g) for g in USER_GROUPS] == [None] * len(USER_GROUPS)


def test_jobs_on_cluster_splits_by_job_and_leaves_user_names_out() -> None:
    other = JobId("clicks-2")  # a job id the first one is a prefix of
    found = jobs_on_cluster(
        [*USER_TOPICS, *JOB_TOPICS, events_topic(other)],
        [*USER_GROUPS, *JOB_GROUPS, "spillway.only-groups.x.0"],
    )
    assert found == [
        JobResources(JOB, tuple(JOB_TOPICS), tuple(JOB_GROUPS)),
        JobResources(other, (events_topic(other),), ()),
        JobResources(JobId("only-groups"), (), ("spillway.only-groups.x.0",)),
    ]
    assert found[0].has_heartbeats
    assert not found[1].has_heartbeats


def test_resources_of_a_job_without_any() -> None:
    assert resources_of(JobId("gone"), JOB_TOPICS, JOB_GROUPS) == JobResources(
        JobId("gone"), (), ()
    )
    assert resources_of(JOB, [*USER_TOPICS, *JOB_TOPICS], JOB_GROUPS).topics == tuple(JOB_TOPICS)


def test_record_time() -> None:
    assert record_time(json.dumps({"operator": "a", "time": 12.5}).encode(), 99_000) == 12.5
    assert record_time(b"not json", 99_000) == 99.0
    assert record_time(b'{"time": "soon"}', 99_000) == 99.0
    assert record_time(None, None) is None
    assert record_time(b"[]", -1) is None


@pytest.mark.parametrize(
    ("has", "newest", "state"),
    [
        (True, 96.0, JobState.RUNNING),  # 4 s old
        (True, 95.0, JobState.RUNNING),  # exactly lost_after
        (True, 94.9, JobState.STOPPED),
        (True, 130.0, JobState.RUNNING),  # a clock ahead of ours
        (True, None, JobState.STOPPED),  # heartbeats expired
        (False, None, JobState.UNKNOWN),
    ],
)
def test_job_state(has: bool, newest: float | None, state: JobState) -> None:
    assert job_state(has, newest, now=100.0, lost_after=5.0) is state


def test_job_row_and_rendering() -> None:
    res = JobResources(JOB, tuple(JOB_TOPICS), tuple(JOB_GROUPS))
    row = job_row(res, newest_heartbeat=50.0, newest_event=60.0, now=100.0, lost_after=5.0)
    assert row == JobRow(res, JobState.STOPPED, 60.0)
    assert row.as_json() == {
        "job": "clicks",
        "state": "stopped",
        "last_activity": 60.0,
        "last_activity_utc": "1970-01-01 00:01:00",
        "topics": JOB_TOPICS,
        "groups": JOB_GROUPS,
    }
    idle = job_row(JobResources(JobId("x"), (), ("spillway.x.a.0",)), None, None, 100.0, 5.0)
    assert idle == JobRow(idle.resources, JobState.UNKNOWN, None)
    assert render_jobs([row, idle]).splitlines() == [
        "job     state    last activity (UTC)  topics groups",
        "clicks  stopped  1970-01-01 00:01:00       9      3",
        "x       unknown  -                         0      1",
    ]
    assert render_jobs([]) == "no Spillway jobs on this cluster"


def test_refuse_if_running() -> None:
    with pytest.raises(ConfigError) as err:
        refuse_if_running(JOB, 98.0, now=100.0, lost_after=5.0)
    assert str(err.value) == (
        "job clicks is running (last heartbeat 2.0 s ago); stop it first, then reset"
    )
    refuse_if_running(JOB, 90.0, now=100.0, lost_after=5.0)
    refuse_if_running(JOB, None, now=100.0, lost_after=5.0)


def test_describe_reset_lists_everything() -> None:
    res = JobResources(JOB, ("spillway.clicks.events",), ("spillway.clicks.a.0",))
    assert describe_reset(res) == [
        "reset of job clicks deletes 1 topics and 1 consumer groups:",
        "  topic spillway.clicks.events",
        "  group spillway.clicks.a.0",
    ]
    assert describe_reset(JobResources(JOB, (), ())) == [
        "job clicks has no internal topics or consumer groups on this cluster"
    ]


def test_plan_create() -> None:
    existing = {"in": 4, "other": 1}
    assert plan_create(["in", "out"], 4, existing) == CreatePlan(("out",), ("in",))
    assert plan_create(["out"], 4, {}) == CreatePlan(("out",), ())


def test_plan_create_mismatch_names_topic_counts_and_fix() -> None:
    with pytest.raises(TopologyMismatchError) as err:
        plan_create(["in", "out", "x"], 4, {"in": 3, "out": 4, "x": 8})
    assert str(err.value).startswith("topic in has 3, x has 8 partitions, asked for 4: ")
    assert "Pass --partitions matching the existing topic" in str(err.value)


@pytest.mark.parametrize(
    ("names", "partitions", "message"),
    [
        (["in"], 0, "--partitions must be at least 1, got 0"),
        (["bad name"], 1, "invalid topic name 'bad name'"),
        ([".."], 1, "invalid topic name '..'"),
        (["x" * 250], 1, "invalid topic name"),
        (["in", "in"], 1, "topic in given more than once"),
        (["spillway.clicks.events"], 1, "internal topic of job clicks"),
    ],
)
def test_plan_create_refuses(names: list[str], partitions: int, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        plan_create(names, partitions, {})


def test_topics_create_checks_its_arguments_before_asking_the_broker(
    capsys: pytest.CaptureFixture[str],
) -> None:
    started = time.monotonic()
    argv = ["topics", "create", "in", "spillway.clicks.events", "--partitions", "2"]
    assert main([*argv, "--bootstrap", "127.0.0.1:1"]) == 2
    assert capsys.readouterr().err == (
        "spillway: error: spillway.clicks.events is the name of an internal topic of job "
        "clicks; jobs create their internal topics themselves\n"
    )
    assert time.monotonic() - started < 5  # no broker answers there: it was not asked


class FakeCluster:
    """Stands in for clusterjobs in the ``reset`` command: one job, a heartbeat time."""

    def __init__(self, running: bool) -> None:
        self.resources = JobResources(
            JOB, ("spillway.clicks.heartbeats",), ("spillway.clicks.a.0",)
        )
        self.running = running
        self.deleted: list[JobResources] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(housekeepcli, "kafka_settings", lambda args: None)
        monkeypatch.setattr(housekeepcli, "job_resources", lambda s, job: self.resources)
        monkeypatch.setattr(housekeepcli, "check_not_running", self.check)
        monkeypatch.setattr(housekeepcli, "delete_resources", lambda s, r: self.deleted.append(r))

    def check(self, _settings: object, resources: JobResources, lost_after: float) -> None:
        refuse_if_running(resources.job, 99.0 if self.running else 0.0, 100.0, lost_after)


def test_reset_refuses_a_running_job(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeCluster(running=True)
    fake.install(monkeypatch)
    assert main(["reset", "--job", "clicks", "--yes"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "spillway: error: job clicks is running (last heartbeat 1.0 s ago); "
        "stop it first, then reset\n"
    )
    assert fake.deleted == []


@pytest.mark.parametrize(("answer", "code", "deleted"), [("clicks\n", 0, 1), ("y\n", 1, 0)])
def test_reset_asks_with_the_list_first(
    answer: str,
    code: int,
    deleted: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake = FakeCluster(running=False)
    fake.install(monkeypatch)
    monkeypatch.setattr("sys.stdin", io.StringIO(answer))
    assert main(["reset", "--job", "clicks"]) == code
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == describe_reset(fake.resources)
    assert lines[3].startswith("delete them? type the job id (clicks) to confirm: ")
    assert len(fake.deleted) == deleted
    assert lines[3].endswith(
        "deleted 1 topics and 1 consumer groups of job clicks" if deleted else "nothing deleted"
    )
