"""``spillway demo`` / ``make demo``: the click-stream job with one subtask killed part way.

Starts a local broker (unless ``--bootstrap`` is given), runs the click pipeline on Spark
local mode, SIGKILLs the Python process of one subtask of the middle, stateful operator
once it has committed a few checkpoints, and then checks and prints: the output equals a
batch computation of the same input, only the killed subtask restarted, which partitions
it replayed and how many records, and how long recovery took. Exits non-zero if any
check fails.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, OperatorName, TopicPartition
from spillway.devtools.localbroker import BrokerConfig, LocalBroker
from spillway.examples import clicks
from spillway.offsets.store import CheckpointStore
from spillway.recovery.observe.events import read_events
from spillway.recovery.observe.phases import merge, out_of_order, steps
from spillway.recovery.restore.progress import last_mark, progress_topic
from spillway.recovery.runtime.runner import SubtaskResult
from spillway.spark_jobs.spark.summary import RunSummary
from spillway.spark_jobs.spark.summary import render as render_summary


def add_parser(subparsers: Any) -> None:
    """Add ``demo``."""
    p = subparsers.add_parser("demo", help="run the main job with a subtask killed part way")
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--parallelism", type=int, default=2)
    p.add_argument(
        "--kill", default="count:0", help="OPERATOR:INDEX to SIGKILL (default %(default)s)"
    )
    p.add_argument("--kill-after-checkpoints", type=int, default=3)
    p.add_argument(
        "--duration",
        type=float,
        default=20.0,
        help="pace the sources to emit for about this many seconds, so the kill lands mid-stream",
    )
    p.add_argument("--bootstrap", default=None, help="use this broker instead of starting one")
    p.add_argument("--out", default=None, help="output directory (default: a temporary one)")
    p.set_defaults(run=_run)


def _say(msg: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _run(args: argparse.Namespace) -> int:
    from spillway.spark_jobs.spark.runlog import run_log

    job = f"demo-{uuid.uuid4().hex[:8]}"
    # The terminal: the demo's own lines, the progress line, warnings and errors; the rest
    # (Spark's and the subtasks' logs) in the log file (spillway.spark_jobs.spark.runlog).
    with run_log(job, verbose=args.verbose) as log_file:
        _say(f"log of this run: {log_file}")
        return _run_logged(args, job, str(log_file))


def _run_logged(args: argparse.Namespace, job: str, log_file: str) -> int:
    broker: LocalBroker | None = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        broker = LocalBroker(BrokerConfig.with_free_ports(Path(".spillway/demo-broker").absolute()))
        _say("starting a local Kafka broker (first time: Maven resolves Kafka's jars)")
        broker.start()
        bootstrap = broker.bootstrap
        _say(f"broker ready at {bootstrap}")
    try:
        report = run_demo(
            bootstrap,
            records=args.records,
            parallelism=args.parallelism,
            kill=args.kill,
            kill_after=args.kill_after_checkpoints,
            out_dir=args.out or tempfile.mkdtemp(prefix="spillway-demo-"),
            duration_s=args.duration,
            job=job,
            log_file=log_file,
        )
    finally:
        if broker is not None:
            broker.stop()
            _say("broker stopped")
    return 0 if report["ok"] else 1


def run_demo(
    bootstrap: str,
    *,
    records: int,
    parallelism: int,
    kill: str,
    kill_after: int,
    out_dir: str,
    duration_s: float = 20.0,
    job: str | None = None,
    log_file: str | None = None,
) -> dict[str, Any]:
    """Run the job with one kill, check everything, print the run's summary
    (:mod:`spillway.spark_jobs.spark.summary`; ``log_file`` named in it) and a report, and
    return the report."""
    from spillway.spark_jobs.spark.driver import run_on_spark, subtask_count
    from spillway.spark_jobs.spark.jobconfig import JobConfig

    op_name, _, idx = kill.partition(":")
    kill_index = int(idx or 0)
    job = job or f"demo-{uuid.uuid4().hex[:8]}"
    os.environ["CLICKS_RECORDS"] = str(records)
    os.environ["CLICKS_OUT"] = out_dir
    os.environ["CLICKS_PARALLELISM"] = str(parallelism)
    os.environ["CLICKS_RATE"] = str(records / parallelism / duration_s)
    ref = "spillway.examples.clicks:pipeline"
    n = subtask_count(ref, job)
    settings = KafkaSettings(bootstrap)
    config = JobConfig(ref, job, bootstrap, master=f"local[{n},4]", task_attempts=4, progress=True)
    _say(
        f"job {job}: {records:,} clicks over ~{duration_s:.0f}s, parallelism {parallelism}, "
        f"{n} subtasks on Spark local[{n},4]"
    )
    _say(
        f"will SIGKILL {op_name}[{kill_index}] after {kill_after} checkpoints; output in {out_dir}"
    )

    results: list[SubtaskResult] = []
    failure: list[BaseException] = []
    summaries: list[RunSummary] = []

    def drive() -> None:
        try:
            results.extend(run_on_spark(config, on_summary=summaries.append))
        except BaseException as e:
            failure.append(e)

    t0 = time.monotonic()
    thread = threading.Thread(target=drive, name="spark-driver", daemon=True)
    thread.start()
    killed_at, killed_pid = _kill_when_ready(
        settings, JobId(job), op_name, kill_index, parallelism, kill_after, thread
    )
    # the driver draws the progress line meanwhile (spillway.spark_jobs.spark.progress)
    thread.join()
    wall = time.monotonic() - t0
    if failure:
        _say(f"FAILED: the job raised {failure[0]!r}")
        return {"ok": False, "error": repr(failure[0])}
    for summary in summaries:
        summary.log_file = log_file
        print(render_summary(summary))
    return _report(
        settings,
        JobId(job),
        results,
        records,
        out_dir,
        wall,
        op_name,
        kill_index,
        killed_at,
        killed_pid,
    )


def _kill_when_ready(
    settings: KafkaSettings,
    job: JobId,
    op: str,
    index: int,
    parallelism: int,
    after: int,
    thread: threading.Thread,
) -> tuple[float | None, int | None]:
    store = CheckpointStore(settings, job, OperatorName(op), parallelism)
    progress = TopicPartition(progress_topic(job, OperatorName(op)), index)
    pid: int | None = None
    try:
        while thread.is_alive():
            time.sleep(0.05)
            try:
                # The mark first: a checkpoint committed after it covers at least as much,
                # so "read past its checkpoint" below cannot be a checkpoint behind.
                mark = last_mark(store.tail(progress, 1))
                ckpt = store.latest(index)
            except Exception:  # topics may not exist yet while the driver starts
                continue
            if ckpt is None or ckpt.checkpoint_id + 1 < after:
                continue
            if ckpt.meta.finished:
                _say(f"{op}[{index}] finished before the kill; use more --records")
                return None, None
            if pid is None:
                # Looking the pid up takes a while, during which a newer checkpoint may
                # cover what was read: check the mark and checkpoint again before the kill.
                pid = _pid_of(settings, job, op, index)
                continue
            # Kill it once it has read past its checkpoint (its read mark says so), so the
            # restart has something to re-process.
            ahead = mark is not None and any(
                mark.inputs.get(tp, off) > off for tp, off in ckpt.reader.inputs.items()
            )
            if pid is None or not ahead:
                continue
            at = time.time()  # before the call: the death comes after, never before
            os.kill(pid, signal.SIGKILL)
            _say(f"SIGKILLed {op}[{index}] (pid {pid}) after its checkpoint {ckpt.checkpoint_id}")
            return at, pid
    finally:
        store.close()
    return None, None


def _pid_of(settings: KafkaSettings, job: JobId, op: str, index: int) -> int | None:
    pid = None
    for e in read_events(settings, job):
        if e.get("event") == "started" and e.get("operator") == op and e.get("index") == index:
            pid = int(e["pid"])
    return pid


def _print_phases(events: list[dict[str, Any]], started: dict[str, Any], killed: float) -> None:
    """The restart's phases (spillway.recovery.observe.phases), each with the time since the
    previous one."""
    key = (started["operator"], started["index"], started["attempt"])
    mine = [e for e in events if (e.get("operator"), e.get("index"), e.get("attempt")) == key]
    retried = {"operator": key[0], "index": key[1], "attempt": key[2]}
    spark = next((e for e in events if e.get("retried") == retried), {})
    times = merge(
        {"killed": killed},
        {k: spark[k] for k in ("spark_noticed", "scheduled") if spark.get(k) is not None},
        *(e.get("phases") for e in mine if e.get("event") in ("started", "caught-up", "finished")),
    )
    print("restart phases (seconds after the previous one):")
    print("  " + ", ".join(f"{p} +{dt:.3f}" for p, dt in steps(times)))
    inside = started.get("steps") or {}
    print("  steps of the new attempt: " + ", ".join(f"{k} {v:.3f}" for k, v in inside.items()))
    for problem in out_of_order(times):
        print(f"  (clock skew?) {problem}")


def _report(
    settings: KafkaSettings,
    job: JobId,
    results: list[SubtaskResult],
    records: int,
    out_dir: str,
    wall: float,
    op: str,
    index: int,
    killed_at: float | None,
    killed_pid: int | None,
) -> dict[str, Any]:
    events = list(read_events(settings, job))
    starts = [e for e in events if e.get("event") == "started"]
    restarted = sorted({f"{e['operator']}[{e['index']}]" for e in starts if e["attempt"] > 0})
    target = f"{op}[{index}]"
    recovery = [
        e for e in starts if e["attempt"] > 0 and f"{e['operator']}[{e['index']}]" == target
    ]
    final = next((r for r in results if r.subtask.endswith(f"/{target}")), None)

    out, duplicates = _read_output(out_dir)
    _say("computing the batch reference ...")
    ref = clicks.reference(records)
    total_in = sum(r.records_in for r in results if r.subtask.split("/")[1].startswith(op + "["))

    checks = {
        "a subtask was killed": killed_at is not None,
        f"{target} restarted": bool(recovery),
        f"no subtask other than {target} restarted": restarted in ([target], []) and bool(recovery),
        "output equals the batch reference": out == ref,
        "no duplicate output rows": duplicates == 0,
        "every subtask finished": all(r.status in ("finished", "skipped") for r in results)
        and bool(results),
    }
    print()
    print("=" * 72)
    print(
        f"Spillway demo, job {job}: {records:,} records in {wall:.1f}s "
        f"({records / wall:,.0f} records/s end to end, sources paced)"
    )
    if killed_at is not None:
        print(f"killed: {target} (pid {killed_pid})")
    if recovery and final is not None and killed_at is not None:
        _print_recovery(events, recovery[-1], final, killed_at, op, target, total_in)
    print(f"subtasks restarted: {', '.join(restarted) or 'none'}")
    print(
        f"output: {len(out)} pages, {sum(v for _, v in out.values()):,} views; reference: "
        f"{len(ref)} pages, {sum(v for _, v in ref.values()):,} views"
    )
    for name, ok in checks.items():
        print(f"  [{'ok' if ok else 'FAILED'}] {name}")
    print("=" * 72)
    return {
        "ok": all(checks.values()),
        "checks": checks,
        "restarted": restarted,
        "wall_s": wall,
        "replay": final.replay if final else {},
    }


def _read_output(out_dir: str) -> tuple[dict[str, tuple[str, int]], int]:
    """The demo's output rows by page, and how many rows repeated a page already seen."""
    out: dict[str, tuple[str, int]] = {}
    duplicates = 0
    for f in sorted(glob.glob(os.path.join(out_dir, "out", "*.jsonl"))):
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                r = json.loads(line)
                duplicates += r["page"] in out
                out[r["page"]] = (r["section"], r["views"])
    return out, duplicates


def _print_recovery(
    events: list[dict[str, Any]],
    rec: dict[str, Any],
    final: SubtaskResult,
    killed_at: float,
    op: str,
    target: str,
    total_in: int,
) -> None:
    """Print how the killed subtask's restart went: timing, phases and what it re-processed."""
    restart_s = rec["time"] - killed_at
    catchup = final.catchup_s or 0.0
    print(
        f"restarted as attempt {rec['attempt']} {restart_s:.2f}s after the kill "
        f"(restore {rec['restore_s']:.2f}s, from checkpoint {rec['restored_from']})"
    )
    print(
        f"caught up with its inputs {catchup:.2f}s later: recovery took {restart_s + catchup:.2f}s"
    )
    _print_phases(events, rec, killed_at)
    replayed = 0
    for tp, (start, end, n) in sorted(final.replay.items(), key=lambda kv: _by_partition(kv[0])):
        print(f"  re-processed {tp}: offsets [{start}, {end}) = {n:,} records")
        replayed += n
    basis = {
        "read": "up to what the killed attempt had read (its last read mark)",
        "upper-bound": "an upper bound: up to the partition ends at the restart",
    }.get(str(final.replay_basis), "nothing to re-process")
    print(
        f"re-processed {replayed:,} records of the {total_in:,} that {op} read "
        f"({100 * replayed / max(total_in, 1):.1f}%), only from {target}'s own partitions; "
        f"{basis}"
    )


def _by_partition(tp: str) -> tuple[str, int]:
    """``topic[partition]`` in partition order (``count[2]`` before ``count[10]``)."""
    topic, _, rest = tp.rpartition("[")
    return (topic, int(rest.rstrip("]"))) if rest.rstrip("]").isdigit() else (tp, -1)
