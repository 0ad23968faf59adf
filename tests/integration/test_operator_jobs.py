"""One operator stopped and started again while the others keep running (real Spark, real
broker): every operator is a Spark job of its own (spillway.spark_jobs.spark.opruns)."""

from __future__ import annotations

import glob
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, OperatorName
from spillway.examples import clicks
from spillway.offsets.store import CheckpointStore
from spillway.recovery.observe.events import read_events
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from spillway.spark_jobs.spark.opruns import OperatorRuns
from tests.integration.conftest import RECORDS

pytestmark = [pytest.mark.broker, pytest.mark.spark]

REF = "spillway.examples.clicks:pipeline"


def read_output(out: Path) -> dict[str, tuple[str, int]]:
    rows: dict[str, tuple[str, int]] = {}
    for f in sorted(glob.glob(str(out / "out" / "*.jsonl"))):
        for line in Path(f).read_text().splitlines():
            r = json.loads(line)
            assert r["page"] not in rows, f"duplicate output row for {r['page']}"
            rows[r["page"]] = (r["section"], r["views"])
    return rows


def latest_ids(store: CheckpointStore) -> list[int | None]:
    return [None if (c := store.latest(i)) is None else int(c.checkpoint_id) for i in range(2)]


def wait_until(what: str, ready: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 120
    while not ready():
        assert time.monotonic() < deadline, f"not before the deadline: {what}"
        time.sleep(0.2)


def test_stopped_operator_restarts_alone_while_the_others_keep_running(
    kafka_bootstrap: str, unique: str, clicks_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLICKS_RATE", str(RECORDS / 2 / 10))  # about 10 s of input
    settings = KafkaSettings(kafka_bootstrap)
    count = CheckpointStore(settings, JobId(unique), OperatorName("count"), 2)
    enrich = CheckpointStore(settings, JobId(unique), OperatorName("enrich"), 2)
    seen: dict[str, list[Any]] = {}
    errors: list[BaseException] = []

    def operate(runs: OperatorRuns) -> None:
        try:
            wait_until("count's first checkpoints", lambda: None not in latest_ids(count))
            seen["stopped"] = runs.stop_operator("count")
            # The stop checkpoints' commit markers may still be on their way when the
            # subtasks have ended: wait until no transaction on their partitions is
            # undecided, as a restoring subtask does, before reading them.
            for i in range(2):
                count.settle(i)
            seen["stop_checkpoints"] = latest_ids(count)
            at_stop = latest_ids(enrich)
            # While count is stopped, enrich keeps running and commits newer checkpoints.
            wait_until(
                "enrich checkpointing while count is stopped",
                lambda: all(
                    n is not None and (b is None or n > b)
                    for n, b in zip(latest_ids(enrich), at_stop, strict=True)
                ),
            )
            seen["held_count_checkpoints"] = latest_ids(count)
            runs.start_operator("count")
        except BaseException as e:  # reported by the test's thread, below
            errors.append(e)

    def on_running(runs: OperatorRuns) -> None:
        threading.Thread(target=operate, args=(runs,), daemon=True).start()

    results = run_on_spark(
        JobConfig(REF, unique, kafka_bootstrap, master="local[8,2]"), on_running=on_running
    )
    assert errors == []
    assert read_output(clicks_env) == clicks.reference(RECORDS)
    assert [(r["subtask"], r["status"]) for r in seen["stopped"]] == [
        (f"{unique}/count[{i}]", "stopped") for i in range(2)
    ]
    # Nothing ran count while it was held; its new job resumed from the stop's checkpoints.
    assert seen["held_count_checkpoints"] == seen["stop_checkpoints"]
    by_subtask = {r.subtask.split("/")[1]: r for r in results}
    for i, ckpt in enumerate(seen["stop_checkpoints"]):
        assert by_subtask[f"count[{i}]"].restored_from == ckpt
        assert by_subtask[f"count[{i}]"].status == "finished"
    assert {r.status for r in results} == {"finished"}

    events: dict[str, list[str]] = {}
    for e in read_events(settings, JobId(unique)):
        if "operator" in e:
            events.setdefault(f"{e['operator']}[{e['index']}]", []).append(e["event"])
    starts = {k: v.count("started") for k, v in events.items()}
    assert starts == {
        "clicks[0]": 1,
        "clicks[1]": 1,
        "enrich[0]": 1,
        "enrich[1]": 1,
        "count[0]": 2,
        "count[1]": 2,
        "out[0]": 1,
        "out[1]": 1,
    }
    assert {k for k, v in events.items() if "stopped" in v} == {"count[0]", "count[1]"}
    count.close()
    enrich.close()
