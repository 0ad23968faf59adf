"""``topics create``, ``jobs`` and ``reset``: a cluster's housekeeping.

What belongs to which job and how a job's state is read:
:mod:`spillway.recovery.control.housekeeping`; the cluster I/O:
:mod:`spillway.recovery.control.clusterjobs`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from spillway.channels.config import KafkaSettings, parse_client_settings
from spillway.channels.naming import job_id
from spillway.recovery.cli import add_bootstrap, client_settings, kafka_settings
from spillway.recovery.control.clusterjobs import (
    check_not_running,
    create_topics,
    delete_resources,
    job_resources,
    list_jobs,
)
from spillway.recovery.control.housekeeping import describe_reset, render_jobs
from spillway.recovery.observe.heartbeat import LOST_AFTER_S

EXIT_DECLINED = 1


def add_parser(subparsers: Any) -> None:
    """Add ``topics create``, ``jobs`` and ``reset`` to a command line."""
    tp = subparsers.add_parser("topics", help="create the input and output topics of a pipeline")
    tsub = tp.add_subparsers(dest="topics_command", metavar="ACTION", required=True)
    cr = tsub.add_parser(
        "create",
        help="create topics (idempotent: an existing topic with the same partition count is fine)",
    )
    cr.add_argument("topics", nargs="+", metavar="TOPIC")
    cr.add_argument("--partitions", type=int, required=True)
    cr.add_argument(
        "--replication", type=int, default=None, help="replication factor (default: the broker's)"
    )
    cr.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="topic config of a new topic, e.g. retention.ms=-1; repeatable",
    )
    add_bootstrap(cr)
    cr.set_defaults(run=_create)

    jb = subparsers.add_parser("jobs", help="the Spillway jobs on a cluster and their state")
    jb.add_argument("--json", action="store_true", help="machine-readable output")
    _add_lost_after(jb)
    add_bootstrap(jb)
    jb.set_defaults(run=_jobs)

    rs = subparsers.add_parser(
        "reset", help="delete a stopped job's internal topics and consumer groups (start over)"
    )
    rs.add_argument("--job", required=True)
    rs.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    _add_lost_after(rs)
    add_bootstrap(rs)
    rs.set_defaults(run=_reset)


def _add_lost_after(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--lost-after",
        type=float,
        default=LOST_AFTER_S,
        metavar="S",
        help="a job whose newest heartbeat is at most S seconds old is running "
        "(default %(default)s)",
    )


def _create(args: argparse.Namespace) -> int:
    settings = KafkaSettings(args.bootstrap, client=client_settings(args))
    config = parse_client_settings(args.config, "--config")
    plan = create_topics(settings, args.topics, args.partitions, args.replication, config)
    for name in args.topics:
        how = "created" if name in plan.create else "exists"
        print(f"{name}: {how} ({args.partitions} partitions)")
    return 0


def _jobs(args: argparse.Namespace) -> int:
    rows = list_jobs(kafka_settings(args), args.lost_after)
    if args.json:
        print(json.dumps([r.as_json() for r in rows], indent=2))
    else:
        print(render_jobs(rows))
    return 0


def _reset(args: argparse.Namespace) -> int:
    settings = kafka_settings(args)
    job = job_id(args.job)
    resources = job_resources(settings, job)
    check_not_running(settings, resources, args.lost_after)
    for line in describe_reset(resources):
        print(line)
    if not resources.topics and not resources.groups:
        return 0
    if not args.yes and not _confirmed(f"delete them? type the job id ({job}) to confirm: ", job):
        print("nothing deleted")
        return EXIT_DECLINED
    # Again right before deleting: the job may have been started while we asked.
    check_not_running(settings, resources, args.lost_after)
    delete_resources(settings, resources)
    print(
        f"deleted {len(resources.topics)} topics and {len(resources.groups)} consumer groups "
        f"of job {job}"
    )
    return 0


def _confirmed(prompt: str, job: str) -> bool:
    print(prompt, end="", flush=True)
    answer = sys.stdin.readline()
    return answer.strip() == job
