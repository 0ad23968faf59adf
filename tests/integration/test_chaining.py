"""Chained operators on real Spark: fused forward edges leave no channel, and a killed
chain restarts alone and resumes exactly (output equal to the batch reference)."""

from __future__ import annotations

import json
from collections import Counter
from functools import partial
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId
from spillway.channels.routing.keygroups import DEFAULT_MAX_PARALLELISM, key_group_range
from spillway.examples import clicks
from spillway.recovery.observe.events import read_events
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from tests.integration.conftest import RECORDS
from tests.integration.gates import Gates, committed, started
from tests.integration.pipelines import make_event, tag
from tests.integration.support import read_output, starts

pytestmark = [pytest.mark.broker, pytest.mark.spark]

# The clicks example, its source held at the tests' gates (tests/integration/gates.py).
REF = "tests.integration.gates:held_clicks"


def channel_topics(admin: AdminClient, job: str) -> set[str]:
    prefix = f"spillway.{job}.ch."
    return {t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix)}


def test_chained_clicks_keep_one_channel_and_recover_exactly(
    kafka_bootstrap: str,
    unique: str,
    clicks_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    admin: AdminClient,
) -> None:
    # clicks→enrich and count→out are fused; only the keyed edge is a channel. The count
    # chain dies after its 2nd commit, the source chain before its 2nd commit, and count[1]
    # between its final commit and publishing its file.
    monkeypatch.setenv("CLICKS_CHAINING", "1")
    monkeypatch.setenv(
        "SPILLWAY_CRASH_AT",
        "count:0:after-commit:0:2,clicks:1:before-commit:0:2,count:1:after-final-commit:0",
    )
    # The source holds at a third and two thirds of its input: the second third runs once
    # both chains to be killed committed a checkpoint (their 2nd, where they die, has
    # records of it), the last once both restarted; the kills come mid-stream.
    gates = Gates(clicks_env.parent / "gates", monkeypatch, [RECORDS // 3, RECORDS * 2 // 3])
    settings, job, killed = KafkaSettings(kafka_bootstrap), JobId(unique), ["count[0]", "clicks[1]"]
    results = run_on_spark(
        JobConfig(REF, unique, kafka_bootstrap, master="local[4,4]"),
        on_running=gates.on_running(
            ("both committed", partial(committed, settings, job, killed, 0, 2)),
            ("both restarted", partial(started, settings, job, killed, 1)),
        ),
    )
    assert gates.missed == []
    assert read_output(clicks_env) == clicks.reference(RECORDS)
    by_subtask = {r.subtask.split("/")[1]: (r.attempt, r.status) for r in results}
    assert by_subtask == {
        "clicks[0]": (0, "finished"),
        "clicks[1]": (1, "finished"),
        "count[0]": (1, "finished"),
        "count[1]": (1, "skipped"),
    }
    assert channel_topics(admin, unique) == {f"spillway.{unique}.ch.clicks.count"}
    # The restarted count chain replayed only its own partition of the one channel.
    restarted = [e for e in starts(kafka_bootstrap, unique) if e["attempt"] > 0]
    # (count[1]'s retry found its final checkpoint, published its file and skipped.)
    assert sorted(f"{e['operator']}[{e['index']}]" for e in restarted) == [
        "clicks[1]",
        "count[0]",
    ]
    # (Whether anything was left to replay depends on how far the sources had got when it
    # restarted; what it replays is only ever its own partitions: with key groups, the
    # range of count[0], no longer partition 0 alone.)
    replay = next(e["replay"] for e in restarted if e["operator"] == "count" and e["index"] == 0)
    own = key_group_range(0, 2, DEFAULT_MAX_PARALLELISM)
    assert set(replay) <= {f"spillway.{unique}.ch.clicks.count[{g}]" for g in own}


def test_a_source_to_sink_chain_resumes_both_positions(
    kafka_bootstrap: str,
    unique: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    admin: AdminClient,
) -> None:
    # One chain from source to files: the checkpoint holds the source's position and the
    # sink's; a restart after a commit, and one between the final commit and publishing,
    # must neither repeat nor lose a row.
    records = 12_000
    out = tmp_path / "out"
    monkeypatch.setenv("SPILLWAY_TEST_RECORDS", str(records))
    monkeypatch.setenv("SPILLWAY_TEST_OUT", str(out))
    monkeypatch.setenv(
        "SPILLWAY_CRASH_AT", "events:0:after-commit:0:2,events:1:after-final-commit:0"
    )
    # Held at a third and two thirds of the input: the second third runs once events[0]
    # committed a checkpoint (its 2nd, where it dies, has rows), the last once it restarted.
    gates = Gates(tmp_path / "gates", monkeypatch, [records // 3, records * 2 // 3])
    settings, job = KafkaSettings(kafka_bootstrap), JobId(unique)
    config = JobConfig(
        "tests.integration.pipelines:chained_etl", unique, kafka_bootstrap, master="local[2,4]"
    )
    results = run_on_spark(
        config,
        on_running=gates.on_running(
            ("events[0] committed", partial(committed, settings, job, ["events[0]"], 0, 2)),
            ("events[0] restarted", partial(started, settings, job, ["events[0]"], 1)),
        ),
    )
    assert gates.missed == []
    rows: Counter[tuple[str, int]] = Counter()
    for f in sorted(out.glob("out/*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            rows[(r["key"], r["score"])] += 1
    expected: Counter[tuple[str, int]] = Counter()
    for i in range(records):
        t = tag(make_event(i))
        if t["score"] > 2:
            expected[(t["key"], t["score"])] += 1
    assert rows == expected
    assert sorted((r.subtask.split("/")[1], r.attempt, r.status) for r in results) == [
        ("events[0]", 1, "finished"),
        ("events[1]", 1, "skipped"),
    ]
    assert channel_topics(admin, unique) == set()
    kinds = [e["event"] for e in read_events(KafkaSettings(kafka_bootstrap), JobId(unique))]
    assert (kinds.count("started"), kinds.count("skipped")) == (3, 1)
