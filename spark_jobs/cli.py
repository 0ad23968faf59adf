"""``spillway run MODULE:PIPELINE --job-id ID``: run a job on Spark through pyspark.

The terminal shows the progress line, warnings and errors, and at the end a summary
(:mod:`spillway.spark_jobs.spark.summary`; ``--json``: one JSON line per subtask's final
result instead); the rest goes to the run's log file (:mod:`spillway.spark_jobs.spark.runlog`),
named at start.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any

from spillway.channels.config import MAX_RECORD_BYTES, KafkaSettings
from spillway.channels.errors import ConfigError
from spillway.channels.modes import CHECKPOINT_MODES, CODECS, GUARANTEES, choose
from spillway.channels.naming import job_id
from spillway.recovery.cli import add_bootstrap, add_pipeline_conf, client_settings
from spillway.recovery.control.autopolicy import AutoscalePolicy
from spillway.recovery.control.savepoint import check_savepoint
from spillway.recovery.job.jobconf import forwarded_env, parse_conf, parse_env_names
from spillway.spark_jobs.autoscale.cli import parse_bounds
from spillway.spark_jobs.autoscale.loop import Autoscaler
from spillway.spark_jobs.spark.taskslots import StartSlots, start_slots


def add_parser(subparsers: Any) -> None:
    """Add ``run`` (also used by ``spark-submit spark_jobs/run.py``)."""
    p = subparsers.add_parser("run", help="run a pipeline on Spark, one task per subtask")
    p.add_argument("pipeline", help="MODULE:PIPELINE, e.g. spillway.examples.clicks:pipeline")
    p.add_argument("--job-id", required=True, help="stays the same across restarts of the job")
    p.add_argument(
        "--master", default=None, help="Spark master (default: from spark-submit, else local[N,F])"
    )
    p.add_argument("--task-attempts", type=int, default=4, help="attempts per subtask (F)")
    p.add_argument(
        "--slots",
        type=int,
        default=None,
        metavar="N",
        help="task slots for the job: local[N,F] in local mode, spark.cores.max=N on a "
        "cluster; at least the job's subtasks if it is unbounded, the rest is room for "
        "spillway rescale (default: one per subtask)",
    )
    p.add_argument(
        "--checkpoint-interval", type=float, default=1.0, help="seconds between checkpoints"
    )
    _add_restart_options(p)
    _add_checkpoint_options(p)
    p.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="N",
        help="serve Prometheus metrics of the run on http://HOST:N/metrics (driver)",
    )
    p.add_argument(
        "--metrics-host", default="127.0.0.1", help="address the metrics endpoint binds to"
    )
    p.add_argument(
        "--autoscale",
        action="append",
        default=[],
        metavar="OP=MIN:MAX",
        help="while the job runs, scale OP between MIN and MAX subtasks as spillway autoscale "
        "does (its default settings); repeatable; give room with --slots",
    )
    p.add_argument(
        "--progress",
        choices=("auto", "on", "off"),
        default="auto",
        help="progress line on stderr (auto: on; redrawn in place on a terminal, "
        "a plain line every 10 s otherwise)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print each subtask's final result as a JSON line instead of the summary",
    )
    p.add_argument(
        "--log-dir",
        default=".spillway/logs",
        help="where the run's log file goes (Spark's and the subtasks' logs, INFO lines); "
        "with --verbose they also stay on the terminal",
    )
    p.add_argument("--replication-factor", type=int, default=1)
    p.add_argument("--min-insync-replicas", type=int, default=1)
    add_pipeline_conf(p, env=True)
    add_bootstrap(p)
    p.set_defaults(run=_run)


def _add_restart_options(p: Any) -> None:
    """Where a run starts: a rewind, a savepoint, other widths, changed code."""
    p.add_argument(
        "--from-checkpoint",
        type=int,
        default=None,
        metavar="N",
        help="rewind the whole (stopped) job to completed global checkpoint N first; "
        "what the previous run did after N is ignored (see spillway checkpoints)",
    )
    p.add_argument(
        "--from-savepoint",
        default=None,
        metavar="N|latest",
        help="start the stopped job from a savepoint: completed global checkpoint N (rewound "
        "to first, as --from-checkpoint), or 'latest' (every subtask's latest checkpoint); "
        "with --parallelism, operators whose width changes are rescaled from it",
    )
    p.add_argument(
        "--parallelism",
        action="append",
        default=[],
        metavar="OP=N",
        help="run operator OP with N subtasks instead of the pipeline's width (repeatable); "
        "on a stopped job whose last run had another width, OP is rescaled",
    )
    p.add_argument(
        "--allow-dropped-state",
        action="store_true",
        help="restart with changed code even if it drops state: a removed stateful "
        "operator, one made stateless, a removed channel (docs/operating.md, Upgrades)",
    )


def _add_checkpoint_options(p: Any) -> None:
    """Bad records, checkpoints, guarantees and the channels' encoding and limits."""
    p.add_argument(
        "--dead-letter",
        action="store_true",
        help="divert bad records to spillway.<job>.dlq instead of stopping the job",
    )
    p.add_argument(
        "--checkpoint-mode",
        choices=CHECKPOINT_MODES,
        default="interval",
        help="unaligned / aligned: also take numbered global checkpoints (barriers in-band)",
    )
    p.add_argument(
        "--guarantee",
        choices=GUARANTEES,
        default="exactly-once",
        help="at-least-once: outputs without transactions (faster; a restart repeats outputs "
        "sent after the last checkpoint downstream, nothing is lost)",
    )
    p.add_argument(
        "--channel-codec",
        choices=CODECS,
        default="arrow",
        help="encoding of channel batches: arrow = Arrow IPC where a channel's schema is flat "
        "(primitive fields), Avro elsewhere; avro = Avro everywhere. Readers take both",
    )
    p.add_argument(
        "--max-record-bytes",
        type=int,
        default=MAX_RECORD_BYTES,
        help="largest record, and keyed-state value, a job carries, encoded (one larger "
        "than a message is split over several, in channels and changelogs; at most and by "
        "default 64 MiB); a larger one stops the job",
    )
    p.add_argument(
        "--transaction-timeout-ms",
        type=int,
        default=60_000,
        help="transaction.timeout.ms of every subtask's producer (<= the broker's "
        "transaction.max.timeout.ms); a subtask stalled longer is aborted by the broker",
    )
    p.add_argument(
        "--global-interval", type=float, default=2.0, help="seconds between global checkpoints"
    )


def _run(args: argparse.Namespace) -> int:
    from spillway.spark_jobs.spark.driver import job_extent, run_on_spark
    from spillway.spark_jobs.spark.jobconfig import JobConfig
    from spillway.spark_jobs.spark.runlog import run_log
    from spillway.spark_jobs.spark.summary import RunSummary
    from spillway.spark_jobs.spark.summary import render as render_summary

    # As `python -m` and uvicorn's --app-dir do: a pipeline module in the current directory
    # (a checkout's chaos/ or tests/, a user's project) imports with the installed command,
    # on the driver and, through spark.executorEnv.PYTHONPATH, in every task.
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    if args.task_attempts < 1:
        raise ConfigError(f"--task-attempts must be >= 1, got {args.task_attempts}")
    conf = parse_conf(args.conf)
    forward_env = parse_env_names(args.env)
    forwarded_env(forward_env)  # each must be set here, before anything starts
    client = client_settings(args)
    rewind_to = _rewind_to(args)
    if args.from_savepoint is not None or rewind_to is not None:
        # Before the log file and Spark: a savepoint that does not exist is one line on
        # stderr, not a started job (nor, for 'latest', a silent start from scratch).
        by_number = args.from_savepoint is not None and args.from_savepoint != "latest"
        check_savepoint(
            KafkaSettings(args.bootstrap, client=client),
            job_id(args.job_id),
            args.from_savepoint if rewind_to is None else str(rewind_to),
            "--from-savepoint" if rewind_to is None or by_number else "--from-checkpoint",
        )
    submitted = "SPARK_ENV_LOADED" in os.environ or bool(os.environ.get("SPILLWAY_SPARK_SUBMIT"))
    slots = StartSlots(args.master, None)
    if args.slots is not None or (args.master is None and not submitted):
        n, bounded = job_extent(
            args.pipeline, args.job_id, conf, parse_parallelism(args.parallelism)
        )
        slots = start_slots(args.master, args.slots, n, bounded, args.task_attempts, submitted)
    config = JobConfig(
        pipeline=args.pipeline,
        job_id=args.job_id,
        bootstrap=args.bootstrap,
        master=slots.master,
        cores_max=slots.cores_max,
        task_attempts=args.task_attempts,
        checkpoint_interval_s=args.checkpoint_interval,
        replication_factor=args.replication_factor,
        min_insync_replicas=args.min_insync_replicas,
        client=client,
        dead_letter=args.dead_letter,
        checkpoint_mode=choose(args.checkpoint_mode, CHECKPOINT_MODES, "--checkpoint-mode"),
        global_interval_s=args.global_interval,
        guarantee=choose(args.guarantee, GUARANTEES, "--guarantee"),
        transaction_timeout_ms=args.transaction_timeout_ms,
        channel_codec=choose(args.channel_codec, CODECS, "--channel-codec"),
        max_record_bytes=args.max_record_bytes,
        conf=conf,
        forward_env=forward_env,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        progress=args.progress != "off",
        parallelism=parse_parallelism(args.parallelism),
        allow_dropped_state=args.allow_dropped_state,
    )
    summaries: list[RunSummary] = []
    scaling = _autoscaler(args, KafkaSettings(args.bootstrap, client=client))
    with run_log(args.job_id, verbose=args.verbose, directory=Path(args.log_dir)) as log_file:
        print(f"spillway run {args.job_id}: log in {log_file}", file=sys.stderr, flush=True)
        try:
            results = run_on_spark(
                config,
                rewind_to=rewind_to,
                on_running=scaling.start if scaling else None,
                on_summary=summaries.append,
            )
        finally:
            if scaling:
                scaling.stop()
    if args.json:
        for r in results:
            print(json.dumps(r.__dict__))
    else:
        for summary in summaries:
            summary.log_file = str(log_file)
            print(render_summary(summary))
    failed = [r for r in results if r.status not in ("finished", "skipped", "stopped", "fenced")]
    return 1 if failed else 0


class _Scaling:
    """``--autoscale``: an :class:`Autoscaler` on a thread of the driver, from when every
    operator runs until the run ends."""

    def __init__(self, scaler: Autoscaler) -> None:
        self._scaler = scaler
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="autoscale", daemon=True)

    def start(self, _runs: object) -> None:
        """Start measuring (``run_on_spark``'s ``on_running``: never blocks)."""
        self._thread.start()

    def stop(self) -> None:
        """Stop and wait for a decision under way to be answered or time out."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self._scaler.answer_timeout_s + 15)

    def _run(self) -> None:
        try:
            self._scaler.run(self._stop)
        except Exception:  # the autoscaler must never take the job down
            logging.getLogger("spillway.autoscale").exception("the autoscaler stopped")


def _autoscaler(args: argparse.Namespace, settings: KafkaSettings) -> _Scaling | None:
    if not args.autoscale:
        return None
    policy = AutoscalePolicy(parse_bounds(args.autoscale))
    return _Scaling(Autoscaler(settings, job_id(args.job_id), policy))


def parse_parallelism(values: list[str]) -> dict[str, int]:
    """``["OP=N", ...]`` as ``{OP: N}``; :class:`ConfigError` naming a malformed one."""
    out: dict[str, int] = {}
    for v in values:
        name, sep, n = v.partition("=")
        if not sep or not name or not n.strip().isdigit() or int(n) < 1:
            raise ConfigError(f"--parallelism {v!r}: expected OP=N with N >= 1, e.g. count=4")
        if name in out:
            raise ConfigError(f"--parallelism names operator {name!r} twice")
        out[name] = int(n)
    return out


def _rewind_to(args: argparse.Namespace) -> int | None:
    """The global checkpoint to rewind to first (--from-checkpoint or --from-savepoint N)."""
    savepoint = args.from_savepoint
    if savepoint is None or savepoint == "latest":
        return args.from_checkpoint  # type: ignore[no-any-return]
    if args.from_checkpoint is not None:
        raise ConfigError("give --from-savepoint or --from-checkpoint, not both")
    if not savepoint.isdigit():
        raise ConfigError(
            f"--from-savepoint {savepoint!r}: expected a completed global checkpoint number "
            "(spillway checkpoints --job ID lists them) or 'latest'"
        )
    return int(savepoint)


def main(argv: list[str] | None = None) -> int:
    """``spark-submit spark_jobs/run.py ...``: ``spillway run`` alone, same options and output."""
    from spillway.recovery.commands import run_command

    # prog "spillway": its errors read as those of `spillway run`, which it is.
    parser = argparse.ArgumentParser(prog="spillway")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    return run_command(parser, ["run", *(sys.argv[1:] if argv is None else argv)])
