"""Whole-job rewind to a global checkpoint on Spark: exactly-once output, clear refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, TopicPartition
from spillway.channels.kafka.admin import Admin
from spillway.cli import main
from spillway.examples import clicks
from spillway.recovery.control.globalckpt import read_completed
from spillway.recovery.job.loader import load_plan
from spillway.recovery.observe.events import read_events
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from tests.integration.support import output_files, paced_clicks, read_output

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.extended]

REF = "spillway.examples.clicks:pipeline"
RECORDS = 40_000


def test_rewind_to_an_older_global_checkpoint_is_exactly_once(
    kafka_bootstrap: str,
    unique: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    paced_clicks(monkeypatch, tmp_path, RECORDS, seconds=12)
    # The first run fails half-way for good (one attempt per task): its channels end in
    # records written after the checkpoints it completed, with no end-of-stream.
    monkeypatch.setenv("SPILLWAY_CRASH_AT", "count:0:after-commit:0:6")
    config = JobConfig(
        REF,
        unique,
        kafka_bootstrap,
        master="local[8,1]",
        task_attempts=1,
        checkpoint_mode="unaligned",
        global_interval_s=1.0,
    )
    with pytest.raises(Exception, match=r"failed 1 times"):
        run_on_spark(config)
    monkeypatch.delenv("SPILLWAY_CRASH_AT")
    reference = clicks.reference(RECORDS)
    before = output_files(tmp_path)

    settings = KafkaSettings(kafka_bootstrap)
    job = JobId(unique)
    completed = read_completed(settings, job)
    # The job runs again from there, over channels that already hold what the first run
    # wrote after it (checked below). Reading those records again would double counts.
    assert completed, "no global checkpoint completed before the failure"
    n = completed[0]["id"]

    common = ["--job-id", unique, "--bootstrap", kafka_bootstrap, "--master", "local[8,4]"]
    unaligned = ["--checkpoint-mode", "unaligned"]
    rc = main(["run", REF, *common, *unaligned, "--json", "--from-checkpoint", str(n)])
    out = capsys.readouterr()
    assert rc == 0, out.err[-3000:]

    assert read_output(tmp_path) == reference  # no page twice, every count exact
    after = output_files(tmp_path)
    assert set(after) - set(before)  # a complete output now, where the failed run left less
    rewound = [e for e in read_events(settings, job) if e["event"] == "rewound"]
    assert len(rewound) == 1
    assert rewound[0]["to"] == n
    spans = [s for per in rewound[0]["discard"].values() for w in per.values() for s in w]
    assert sum(end - start for start, end in spans) > 0  # the first run's later data was there
    results = [json.loads(line) for line in out.out.splitlines() if line.startswith("{")]
    assert {r["restored_from"] for r in results} == set(rewound[0]["checkpoints"].values())
    assert all(r["status"] == "finished" for r in results)

    # Refusals: an unknown id, and a checkpoint whose channel data retention deleted.
    rc = main(["run", REF, *common, "--from-checkpoint", "9999"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "has no completed global checkpoint 9999 (retained: " in err
    later = [
        c["id"]
        for c in read_completed(settings, job)
        if c["id"] > completed[-1]["id"] and "count[0]" not in c["finished"]
    ]
    n = later[0]  # a checkpoint of the rewound run at which count[0] still had input to read
    plan = load_plan(REF, unique)
    edge = plan.inputs_of("count")[0]
    tp = TopicPartition(plan.topic_of(edge), 0)
    admin = Admin(settings)
    _, high = admin.watermarks([tp])[tp]
    admin.delete_records_before({tp: high})
    rc = main(["run", REF, *common, "--from-checkpoint", str(n)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "cannot rewind to global checkpoint" in err
    assert f"must re-read {tp} from offset" in err
    assert "retention deleted the log below" in err
    assert read_output(tmp_path) == reference  # a refused rewind changes nothing
