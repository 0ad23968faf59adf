"""A channel's schema changes between two runs while records of the old schema are still
unread in it (real Spark, real broker; pipelines in schemajobs.py).

v1 writes events ``{seq: int, key}`` into channel events -> count; count is stopped alone
(it checkpoints and ends) while the source keeps writing, then the whole job stops: the
channel holds v1 records count never read. v2 promotes seq to long and adds ``weight``
(default 1; v2's generator writes 2). An incompatible v3 (weight without a default) is
refused first, naming the channel and the field. v2 then runs from the savepoint with
count[0] SIGKILLed at its first checkpoint that read records: every old record must be read with its
writer's schema and resolved (weight 1), every new one read as written (weight 2). The
output equals the plain-Python reference exactly: a record lost, read twice or read with
the wrong weight changes a count, a sum of seq or a sum of weights.

The second test does the same from a numbered savepoint (``--from-savepoint N`` with the
changed code): the job is rewound with the topology that took N, then continues as v2.

v1's source is held at two gates (tests/integration/gates.py) rather than paced: the first
third of the records is read by count; the second third is released once count stopped,
so it stays unread in the channel; the last third waits for v2.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import EvolutionError
from spillway.channels.ids import JobId, OperatorName
from spillway.channels.naming import channel_topic
from spillway.channels.wire.schemaid import schema_id
from spillway.offsets.store import CheckpointStore
from spillway.recovery.control.globalckpt import read_completed
from spillway.recovery.observe.events import last_submission, read_events, record_job_event
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from spillway.spark_jobs.spark.opruns import OperatorRuns
from tests.integration.gates import Gates
from tests.integration.keygroupjobs import count_checkpoints, last_run_starts, wait_until
from tests.integration.schemajobs import V1_ID, V2, channel_events, reference

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.extended]

MODULE = "tests.integration.schemajobs"
RECORDS = 3_000
COMPATIBLE = (
    "ok      channel events -> count: schema changed, compatible under Avro resolution "
    "(records of the old schema still in the channel are resolved to the new one as they "
    "are read)"
)


def read_totals(out: Path) -> dict[str, tuple[int, int, int]]:
    """The job's output rows: per key, (count, sum of seq, sum of weight); a key twice fails."""
    rows: dict[str, tuple[int, int, int]] = {}
    for f in sorted((out / "out").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            assert r["key"] not in rows, f"two output rows for key {r['key']}"
            rows[r["key"]] = (r["n"], r["seqs"], r["weights"])
    return rows


def source_checkpoints(settings: KafkaSettings, job: JobId) -> list[int]:
    """The latest checkpoint id of each events subtask (0: none yet)."""
    store = CheckpointStore(settings, job, OperatorName("events"), 2)
    try:
        return [int(c.checkpoint_id) if (c := store.latest(i)) else 0 for i in range(2)]
    finally:
        store.close()


def run_v1(
    settings: KafkaSettings, config: JobConfig, stop: Callable[[OperatorRuns], None]
) -> None:
    """Run v1 until ``stop`` (in a thread) has stopped it."""
    errors: list[BaseException] = []

    def stopping(runs: OperatorRuns) -> None:
        try:
            stop(runs)
        except BaseException as e:  # reported by the test's thread, below
            errors.append(e)
        finally:
            last = last_submission(settings, JobId(config.job_id))
            record_job_event(
                settings, JobId(config.job_id), "stop-requested", run=last["run"] if last else ""
            )
            runs.stop_all()

    results = run_on_spark(
        config, on_running=lambda runs: threading.Thread(target=stopping, args=(runs,),
                                                         daemon=True).start(),
    )  # fmt: skip
    assert errors == []
    assert "finished" not in {r.status for r in results}  # stopped before its input ended


def check_output(settings: KafkaSettings, job: JobId, out: Path, kept: list[int]) -> None:
    """Every seq once in the channel (old or new schema), and the output the reference."""
    topic = channel_topic(job, OperatorName("events"), OperatorName("count"))
    written = channel_events(settings, topic)
    assert {sid for _, _, _, sid, _ in written} == {V1_ID, schema_id(V2)}
    assert len(kept) == len(set(kept))
    assert read_totals(out) == reference(RECORDS, kept)
    assert last_run_starts(settings, job)[("count[0]", 1)] == 1  # the SIGKILLed reader


JobEnv = tuple[Path, KafkaSettings, JobId, str, Gates]


@pytest.fixture
def job_env(
    kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> JobEnv:
    """The pipelines' environment; the output directory, the settings, the job, the topic
    of channel events -> count, and the source's gates at one and two thirds."""
    out = tmp_path / "out"
    monkeypatch.setenv("SPILLWAY_TEST_OUT", str(out))
    monkeypatch.setenv("SPILLWAY_TEST_RECORDS", str(RECORDS))
    gates = Gates(tmp_path / "gates", monkeypatch, [RECORDS // 3, RECORDS * 2 // 3])
    job = JobId(unique)
    topic = channel_topic(job, OperatorName("events"), OperatorName("count"))
    return out, KafkaSettings(kafka_bootstrap), job, topic, gates


def test_unread_records_of_the_old_schema_are_resolved_after_a_restart(
    kafka_bootstrap: str,
    unique: str,
    job_env: JobEnv,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out, settings, job, topic, gates = job_env

    def stop_count_first(runs: OperatorRuns) -> None:
        wait_until("count state checkpointed", lambda: all(
            c is not None and c.state.changelogs for c in count_checkpoints(settings, job, 2)
        ))  # fmt: skip
        runs.stop_operator("count")
        gates.open(0)  # written while count is stopped: left unread
        before = source_checkpoints(settings, job)
        wait_until("the source checkpointed 3 more times", lambda: all(
            now >= b + 3 for now, b in zip(source_checkpoints(settings, job), before, strict=True)
        ))  # fmt: skip

    # v1 in Avro, so that v2's readers must find the writer schema by the messages' id.
    common: dict[str, Any] = {"master": "local[5,3]", "channel_codec": "avro"}
    run_v1(settings, JobConfig(f"{MODULE}:v1", unique, kafka_bootstrap, **common), stop_count_first)
    saved = count_checkpoints(settings, job, 2)
    starts = {tp.partition: off for c in saved if c for tp, off in c.reader.inputs.items()
              if tp.topic == topic}  # fmt: skip
    unread = channel_events(settings, topic, starts)
    with capsys.disabled():
        print(f"\nv1 records at or past count's checkpointed positions: {len(unread)}")
    assert unread
    assert {sid for _, _, _, sid, _ in unread} == {V1_ID}

    with pytest.raises(EvolutionError) as refused:
        run_on_spark(JobConfig(f"{MODULE}:broken", unique, kafka_bootstrap, **common))
    assert (
        "REFUSED channel events -> count: schema change not readable under Avro resolution: "
        "field 'weight' is new and has no default"
    ) in str(refused.value)

    gates.open_all()  # v2 runs to the end
    monkeypatch.setenv("SPILLWAY_CRASH_AT", "count:0:after-produce-read:0:1")
    results = run_on_spark(JobConfig(f"{MODULE}:v2", unique, kafka_bootstrap, **common))
    assert {r.status for r in results} == {"finished"}
    assert COMPATIBLE in capsys.readouterr().err
    written = channel_events(settings, topic)
    assert sorted(r["seq"] for *_, r in written) == list(range(RECORDS))  # once each
    check_output(settings, job, out, [r["seq"] for *_, sid, r in written if sid == V1_ID])


def test_from_a_numbered_savepoint_with_the_changed_schema(
    kafka_bootstrap: str,
    unique: str,
    job_env: JobEnv,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out, settings, job, topic, gates = job_env
    mode: dict[str, Any] = {
        "master": "local[5,3]", "checkpoint_mode": "unaligned", "global_interval_s": 1.0
    }  # fmt: skip

    def after_two_savepoints(runs: OperatorRuns) -> None:
        wait_until(
            "two completed global checkpoints", lambda: len(read_completed(settings, job)) >= 2
        )
        runs.stop_operator("count")  # records after N stay unread too: the rewind drops them
        gates.open(0)
        before = source_checkpoints(settings, job)
        wait_until("the source checkpointed twice more", lambda: all(
            now >= b + 2 for now, b in zip(source_checkpoints(settings, job), before, strict=True)
        ))  # fmt: skip

    # v1 in Arrow (the default): an Arrow message carries its own schema.
    run_v1(
        settings, JobConfig(f"{MODULE}:v1", unique, kafka_bootstrap, **mode), after_two_savepoints
    )
    n = int(read_completed(settings, job)[0]["id"])

    gates.open_all()  # v2 runs to the end
    monkeypatch.setenv("SPILLWAY_CRASH_AT", "count:0:after-produce-read:0:1")
    results = run_on_spark(JobConfig(f"{MODULE}:v2", unique, kafka_bootstrap, **mode), rewind_to=n)
    assert {r.status for r in results} == {"finished"}
    assert COMPATIBLE in capsys.readouterr().err
    rewound = [e for e in read_events(settings, job) if e.get("event") == "rewound"]
    assert [e["to"] for e in rewound] == [n]
    spans = rewound[0]["discard"]
    assert spans, "v1 wrote records after savepoint N: the rewind must discard them"

    def discarded(partition: int, offset: int, writer: int) -> bool:
        return any(s <= offset < e for s, e in
                   spans.get(f"{topic}[{partition}]", {}).get(str(writer), ()))  # fmt: skip

    kept = [(sid, r["seq"]) for p, off, w, sid, r in channel_events(settings, topic)
            if not discarded(p, off, w)]  # fmt: skip
    assert sorted(seq for _, seq in kept) == list(range(RECORDS))  # once each after the rewind
    check_output(settings, job, out, [seq for sid, seq in kept if sid == V1_ID])
