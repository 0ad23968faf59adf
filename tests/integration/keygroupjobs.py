"""The pipeline of test_key_groups.py: generate → count per key (16 key groups, 3 subtasks)."""

from __future__ import annotations

import glob
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, OperatorName
from spillway.offsets.checkpoint import Checkpoint
from spillway.offsets.store import CheckpointStore
from spillway.recovery.observe.events import last_submission, read_events, record_job_event
from spillway.recovery.runtime.options import SubtaskResult
from spillway.spark_jobs.api.pipeline import Pipeline
from tests.integration.gates import held_generate

if TYPE_CHECKING:  # the driver is not imported where tasks import the pipelines above
    from spillway.spark_jobs.spark.jobconfig import JobConfig
    from spillway.spark_jobs.spark.opruns import OperatorRuns

KEYS = 101  # keys k0..k100: every one of the 16 key groups holds some
MAX_PARALLELISM = 16
EVENT = {
    "type": "record",
    "name": "KeyedEvent",
    "fields": [{"name": "seq", "type": "long"}, {"name": "key", "type": "string"}],
}
COUNT = {
    "type": "record",
    "name": "KeyTotal",
    "fields": [
        {"name": "key", "type": "string"},
        {"name": "n", "type": "long"},
        {"name": "seqs", "type": "long"},
    ],
}


def make_event(i: int) -> dict[str, Any]:
    """Event ``i`` of key ``k{i % KEYS}``."""
    return {"seq": i, "key": f"k{i % KEYS}"}


def add(acc: list[int], r: dict[str, Any]) -> list[int]:
    """Count and sum of seq: a record counted twice or lost changes one of them."""
    return [acc[0] + 1, acc[1] + r["seq"]]


def key_totals() -> Pipeline:
    """generate (p=2, held or paced) → key_by(max_parallelism=16) → count (p=3) → files."""
    return _counted("key-groups", MAX_PARALLELISM, 3, None)


def keyed_count() -> Pipeline:
    """test_rescale.py's: as :func:`key_totals`, 8 key groups, count p=2 (each run
    overrides it), one sink subtask (a rebalance edge, so count's width may change)."""
    return _counted("rescale", 8, 2, 1)


def tagged_count() -> Pipeline:
    """test_evolution.py's next version of :func:`keyed_count`: a map ``tag`` (p=1,
    keys prefixed ``m:``) inserted between count and out."""
    return _counted("rescale", 8, 2, 1, tag=True)


def _counted(
    name: str, groups: int, count_p: int, out_p: int | None, tag: bool = False
) -> Pipeline:
    p = Pipeline(name)
    # Held at the test's gates (tests/integration/gates.py), or paced when a test still
    # sets a rate.
    events = held_generate(
        p,
        "events",
        make=make_event,
        schema=EVENT,
        count=int(os.environ["SPILLWAY_TEST_RECORDS"]),
        parallelism=2,
        rate=float(os.environ.get("SPILLWAY_TEST_RATE", "0")) or None,
    )
    counted = events.key_by(lambda r: r["key"], max_parallelism=groups).aggregate(
        "count",
        init=lambda: [0, 0],
        add=add,
        result=lambda k, acc: {"key": k, "n": acc[0], "seqs": acc[1]},
        schema=COUNT,
        parallelism=count_p,
    )
    if tag:
        counted = counted.map(
            "tag", lambda r: {**r, "key": "m:" + r["key"]}, schema=COUNT, parallelism=1
        )
    counted.write_jsonl("out", os.environ["SPILLWAY_TEST_OUT"], parallelism=out_p)
    return p


def reference(records: int) -> dict[str, tuple[int, int]]:
    """What the job must output: per key, (count, sum of seq)."""
    out: dict[str, list[int]] = {}
    for i in range(records):
        acc = out.setdefault(make_event(i)["key"], [0, 0])
        acc[0], acc[1] = acc[0] + 1, acc[1] + i
    return {k: (n, s) for k, (n, s) in out.items()}


def read_output(out: Path) -> dict[str, tuple[int, int]]:
    """The job's output files under ``out``: per key, (count, sum of seq); a key twice fails."""
    rows: dict[str, tuple[int, int]] = {}
    for f in sorted(glob.glob(str(out / "out" / "*.jsonl"))):
        for line in Path(f).read_text().splitlines():
            r = json.loads(line)
            assert r["key"] not in rows, f"two output rows for key {r['key']}"
            rows[r["key"]] = (r["n"], r["seqs"])
    return rows


def wait_until(what: str, ready: Callable[[], bool], timeout_s: float = 180) -> None:
    """Poll ``ready`` until it holds; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert time.monotonic() < deadline, f"not before the deadline: {what}"
        time.sleep(0.3)


def count_checkpoints(settings: KafkaSettings, job: JobId, p: int) -> list[Checkpoint | None]:
    """The latest checkpoint of each of ``count``'s subtasks 0..p-1 (None: none yet)."""
    store = CheckpointStore(settings, job, OperatorName("count"), p)
    try:
        return [store.latest(i) for i in range(p)]
    finally:
        store.close()


def first_starts(
    events: list[dict[str, Any]], operator: str, width: int, after: float
) -> dict[int, float]:
    """Wall time at which each of ``operator``'s subtasks 0..width-1 first started after
    ``after`` (a live rescale's or upgrade's answer): subtasks not started yet are absent."""
    firsts: dict[int, float] = {}
    for e in events:
        if (e.get("event") == "started" and e.get("operator") == operator
                and e["time"] > after and e["index"] < width):  # fmt: skip
            firsts.setdefault(e["index"], e["time"])
    return firsts


def last_run_starts(settings: KafkaSettings, job: JobId) -> Counter[tuple[str, int]]:
    """How often each (operator[index], attempt) started in the job's last run."""
    submitted = last_submission(settings, job)
    assert submitted is not None
    return Counter(
        (f"{e['operator']}[{e['index']}]", int(e["attempt"]))
        for e in read_events(settings, job)
        if e.get("event") == "started" and e.get("run") == submitted["run"]
    )


def print_pauses(events: list[dict[str, Any]], operator: str) -> None:
    """Measured, not asserted (`pytest -s` shows it): per live rescale of ``operator``,
    seconds from the request to the last new subtask's first started event, and to its
    ``rescaled`` record."""
    for req in (e for e in events if e.get("event") == "rescale-requested"):
        done = next(e for e in events if e.get("event") == "rescaled"
                    and e.get("request") == req["request"])  # fmt: skip
        width = done["parallelism"]
        firsts = first_starts(events, operator, width, done["time"])
        print(
            f"rescale {done['previous']} -> {width}: handed over after "
            f"{done['time'] - req['time']:.1f} s, all {width} new subtasks started after "
            f"{max(firsts.values()) - req['time']:.1f} s"
        )


def run_stopped(
    config: JobConfig, stop_when: Callable[[KafkaSettings], bool] | None
) -> list[SubtaskResult]:
    """Run ``config``'s job on Spark; once ``stop_when`` holds, stop it as SIGTERM to
    `spillway run` does: every subtask checkpoints and stops (None: run to the end)."""
    from spillway.spark_jobs.spark.driver import run_on_spark

    errors: list[BaseException] = []
    settings, job = config.settings(), JobId(config.job_id)

    def operate(runs: OperatorRuns) -> None:
        try:
            assert stop_when is not None
            wait_until("the stop condition", lambda: stop_when(settings))
            submitted = last_submission(settings, job)
            assert submitted is not None
            record_job_event(settings, job, "stop-requested", run=submitted["run"])
            runs.stop_all()
        except BaseException as e:  # reported by the test's thread, below
            errors.append(e)
            runs.stop_all()

    def on_running(runs: OperatorRuns) -> None:
        if stop_when is not None:
            threading.Thread(target=operate, args=(runs,), daemon=True).start()

    results = run_on_spark(config, on_running=on_running)
    assert errors == []
    return results


def run_operated(config: JobConfig, operate: Callable[[], None]) -> list[SubtaskResult]:
    """Run ``config``'s job on Spark with ``operate`` called in a thread of its own once
    its operators run (a test's ``spillway rescale`` and the like); what ``operate``
    raised fails the caller once the job has ended."""
    from spillway.spark_jobs.spark.driver import run_on_spark

    errors: list[BaseException] = []

    def body() -> None:
        try:
            operate()
        except BaseException as e:  # reported in the caller's thread, below
            errors.append(e)

    results = run_on_spark(
        config, on_running=lambda _runs: threading.Thread(target=body, daemon=True).start()
    )
    assert errors == []
    return results
