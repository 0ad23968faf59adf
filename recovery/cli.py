"""``replay`` and ``status`` (``spillway replay ...`` or ``python -m spillway.recovery replay
...``)."""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Mapping
from typing import Any

from spillway.channels.acls import job_acls, kafka_acls_commands
from spillway.channels.config import KafkaSettings, parse_client_settings, read_client_settings
from spillway.channels.errors import ConfigError
from spillway.channels.kafka.admin import Admin
from spillway.channels.modes import CHECKPOINT_MODES, choose
from spillway.channels.naming import job_id
from spillway.recovery.control.autopolicy import describe_decisions
from spillway.recovery.control.globalckpt import read_completed, savepoint
from spillway.recovery.control.liverescale import (
    await_answer,
    latest_shape,
    request_rescale,
    request_upgrade,
)
from spillway.recovery.control.upgrade import describe_upgrades
from spillway.recovery.job.jobconf import parse_conf, recorded_conf
from spillway.recovery.job.loader import load_plan
from spillway.recovery.job.plandoc import PlanDoc
from spillway.recovery.observe.events import last_submission
from spillway.recovery.observe.heartbeat import LOST_AFTER_S
from spillway.recovery.observe.rescalephases import describe_rescales
from spillway.recovery.observe.status import as_json, job_status, plan_of, render, submission
from spillway.recovery.replay import replay_subtask
from spillway.recovery.restore.handover import describe_unmarked
from spillway.recovery.restore.rescale import Rescale, describe

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def add_bootstrap(parser: argparse.ArgumentParser) -> None:
    """The Kafka options every job command takes: ``--bootstrap`` and client settings."""
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("SPILLWAY_BOOTSTRAP", DEFAULT_BOOTSTRAP),
        help="Kafka bootstrap servers (default: $SPILLWAY_BOOTSTRAP, else %(default)s)",
    )
    parser.add_argument(
        "--kafka-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="librdkafka client setting (e.g. security.protocol=SASL_SSL); repeatable",
    )
    parser.add_argument(
        "--kafka-config-file",
        default=os.environ.get("SPILLWAY_KAFKA_CONFIG_FILE"),
        metavar="PATH",
        help="properties file of librdkafka client settings, one KEY=VALUE per line; keeps "
        "passwords off the command line (default: $SPILLWAY_KAFKA_CONFIG_FILE)",
    )


def add_pipeline_conf(parser: argparse.ArgumentParser, *, env: bool) -> None:
    """``--conf KEY=VALUE`` (and, with ``env``, ``--env NAME``): see
    :mod:`spillway.recovery.job.jobconf`."""
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="pipeline setting, read by the pipeline with spillway.conf(KEY) on the driver and "
        "in every task; repeatable",
    )
    if env:
        parser.add_argument(
            "--env",
            action="append",
            default=[],
            metavar="NAME",
            help="forward this environment variable of yours to every task; repeatable",
        )


def client_settings(args: argparse.Namespace) -> dict[str, str]:
    """The client settings of ``--kafka-config-file`` overridden by ``--kafka-config`` items."""
    client = read_client_settings(args.kafka_config_file) if args.kafka_config_file else {}
    client.update(parse_client_settings(args.kafka_config))
    return client


def kafka_settings(args: argparse.Namespace) -> KafkaSettings:
    """Settings from the command line, checked against the broker.

    Fails at once with a clear error if no broker answers or it rejects the credentials.
    """
    settings = KafkaSettings(args.bootstrap, client=client_settings(args))
    Admin(settings).check_reachable()
    return settings


def add_parser(subparsers: Any) -> None:
    """Add ``replay`` and ``status`` to a command line."""
    rp = subparsers.add_parser("replay", help="run one subtask from its checkpoint, outside Spark")
    rp.add_argument("--job", required=True)
    rp.add_argument("--operator", required=True)
    rp.add_argument("--subtask", type=int, required=True, help="subtask index")
    rp.add_argument("--checkpoint", type=int, default=None, help="a retained checkpoint id")
    rp.add_argument("--pipeline", default=None, help="MODULE:PIPELINE (default: as submitted)")
    rp.add_argument(
        "--allow-duplicates", action="store_true", help="allow rewinding to an older checkpoint"
    )
    add_pipeline_conf(rp, env=False)
    add_bootstrap(rp)
    rp.set_defaults(run=_replay)

    ck = subparsers.add_parser("checkpoints", help="completed global checkpoints of a job")
    ck.add_argument("--job", required=True)
    ck.add_argument("--last", type=int, default=10, help="how many (newest), default %(default)s")
    ck.add_argument("--json", action="store_true", help="machine-readable output")
    add_bootstrap(ck)
    ck.set_defaults(run=_checkpoints)

    sp = subparsers.add_parser("savepoint", help="take a global checkpoint of a running job now")
    sp.add_argument("--job", required=True)
    sp.add_argument("--timeout", type=float, default=120.0)
    add_bootstrap(sp)
    sp.set_defaults(run=_savepoint)

    rs = subparsers.add_parser(
        "rescale", help="change one operator's parallelism while the job runs (keyed inputs)"
    )
    rs.add_argument("--job", required=True)
    rs.add_argument("--operator", required=True)
    rs.add_argument("--parallelism", type=int, required=True)
    rs.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the answer")
    add_bootstrap(rs)
    rs.set_defaults(run=_rescale)

    ug = subparsers.add_parser(
        "upgrade", help="restart one operator of a running job with the code now deployed"
    )
    ug.add_argument("--job", required=True)
    ug.add_argument("--operator", required=True)
    ug.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the answer")
    add_bootstrap(ug)
    ug.set_defaults(run=_upgrade)

    ac = subparsers.add_parser("acls", help="the Kafka ACLs a job needs, as kafka-acls commands")
    ac.add_argument("--job", required=True)
    ac.add_argument("--principal", required=True, help="e.g. User:spillway")
    ac.add_argument("--bootstrap", default="BROKER:9092", help="printed into the commands")
    ac.set_defaults(run=_acls)

    st = subparsers.add_parser("status", help="state of every subtask and channel of a job")
    st.add_argument("--job", required=True)
    st.add_argument(
        "--pipeline",
        default=None,
        help="MODULE:PIPELINE: build the plan here instead of using the one recorded at "
        "submission (only for jobs submitted by versions that did not record it)",
    )
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.add_argument(
        "--lost-after",
        type=float,
        default=LOST_AFTER_S,
        metavar="S",
        help="a restoring or running subtask not heard from (event or heartbeat) for S "
        "seconds is shown as lost (default %(default)s)",
    )
    add_bootstrap(st)
    st.set_defaults(run=_status)


def _replay(args: argparse.Namespace) -> int:
    conf = parse_conf(args.conf)
    result = replay_subtask(
        kafka_settings(args),
        args.job,
        args.operator,
        args.subtask,
        pipeline=args.pipeline,
        checkpoint=args.checkpoint,
        allow_duplicates=args.allow_duplicates,
        conf=conf,
    )
    print(json.dumps(result.__dict__, indent=2))
    return 0 if result.status in ("finished", "skipped", "stopped") else 1


def _checkpoints(args: argparse.Namespace) -> int:
    rows = read_completed(kafka_settings(args), job_id(args.job))[-args.last :]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(
        f"{'id':>5} {'completed (UTC)':20} {'duration s':>10} {'bytes':>10} {'spilled':>12}"
        "  subtasks"
    )
    for r in rows:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(r["end"]))
        fin = f" ({len(r['finished'])} finished)" if r["finished"] else ""
        print(
            f"{r['id']:>5} {when:20} {r['duration_s']:>10.3f} {r.get('bytes', 0):>10} "
            f"{r.get('spilled_bytes', 0):>12}  {len(r['subtasks'])}{fin}"
        )
    if not rows:
        print(
            "no completed global checkpoints (is the job running with --checkpoint-mode unaligned?)"
        )
    return 0


def _savepoint(args: argparse.Namespace) -> int:
    settings = kafka_settings(args)
    sub = last_submission(settings, job_id(args.job))
    if sub is None or "run" not in sub:
        raise ConfigError(f"job {args.job!r} was never submitted to {args.bootstrap}")
    mode = choose(
        sub.get("checkpoint_mode", "interval"),
        CHECKPOINT_MODES,
        f"the checkpoint mode job {args.job!r} was submitted with",
    )
    if mode == "interval":
        raise ConfigError(
            f"job {args.job!r} runs in {mode!r} mode; "
            "savepoints need --checkpoint-mode unaligned or aligned"
        )
    subtasks = [s.split("/", 1)[1] for s in sub["subtasks"]]
    done = savepoint(settings, job_id(args.job), str(sub["run"]), subtasks, args.timeout)
    print(f"savepoint {done['id']} complete: {len(done['subtasks'])} subtasks")
    return 0


def _rescale(args: argparse.Namespace) -> int:
    settings = kafka_settings(args)
    job = job_id(args.job)
    request = request_rescale(settings, job, args.operator, args.parallelism)
    answer = _answer(settings, args, "rescale", request)
    print(
        f"{args.operator}: {answer.get('previous')} -> {answer.get('parallelism')} subtasks "
        f"(rescale {answer['rescale']['number']}; stopped after {answer.get('stopped_s')} s)"
    )
    return 0


def _upgrade(args: argparse.Namespace) -> int:
    settings = kafka_settings(args)
    request = request_upgrade(settings, job_id(args.job), args.operator)
    answer = _answer(settings, args, "upgrade", request)
    print(
        f"{args.operator}: restarted with the code of {answer.get('path')} "
        f"({answer.get('parallelism')} subtasks; stopped after {answer.get('stopped_s')} s)"
    )
    return 0


def _answer(
    settings: KafkaSettings, args: argparse.Namespace, what: str, request: str
) -> Mapping[str, Any]:
    """The driver's positive answer to a rescale or upgrade request; else ConfigError."""
    job = job_id(args.job)
    answer = await_answer(settings, job, request, args.timeout)
    if answer is None:
        raise ConfigError(
            f"{what} request {request} of job {job}: no answer from the driver in "
            f"{args.timeout:.0f} s; is the job running? (spillway status --job {job})"
        )
    if answer["event"] == f"{what}-failed":
        raise ConfigError(f"{what} of {args.operator} refused: {answer.get('error')}")
    return answer


def _acls(args: argparse.Namespace) -> int:
    for line in kafka_acls_commands(job_acls(job_id(args.job), args.principal), args.bootstrap):
        print(line)
    return 0


def _status(args: argparse.Namespace) -> int:
    settings = kafka_settings(args)
    job = job_id(args.job)
    events, submitted = submission(settings, job)
    shape = latest_shape(events) or submitted  # the plan as a live rescale left it
    submitted = {**submitted, "plan": shape.get("plan"), "rescale": shape.get("rescale")}
    if args.pipeline is None:
        plan = plan_of(job, submitted)
    else:  # explicit: imports the pipeline here, in this process's environment
        plan = PlanDoc.of(load_plan(args.pipeline, args.job, conf=recorded_conf(submitted)))
    rows = job_status(settings, job, plan, events, lost_after=args.lost_after)
    print(json.dumps(as_json(rows), indent=2) if args.json else render(rows))
    if not args.json and submitted.get("rescale"):
        rescale = Rescale.from_json(submitted["rescale"], f"the submitted event of job {job}")
        print(describe(rescale, {op.name: op.parallelism for op in plan.operators}))
    if not args.json:
        lines = describe_upgrades(events) + describe_decisions(events) + describe_unmarked(events)
        for line in lines + describe_rescales(events):
            print(line)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m spillway.recovery``: ``replay`` and ``status`` without the rest of the CLI."""
    from spillway.recovery.commands import run_command

    parser = argparse.ArgumentParser(prog="python -m spillway.recovery")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    return run_command(parser, argv)
