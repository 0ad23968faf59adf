"""``spillway ui --job ID [--port N]``: serve the live status page of a job."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

from spillway.channels.errors import ConfigError
from spillway.channels.naming import job_id
from spillway.recovery.cli import add_bootstrap, kafka_settings
from spillway.recovery.observe.jobview import JobView
from spillway.recovery.observe.status import plan_of, submission
from spillway.spark_jobs.ui.feed import UiFeed
from spillway.spark_jobs.ui.server import HOST, make_server

DEFAULT_PORT = 8650


def add_parser(subparsers: Any) -> None:
    """Add ``ui`` to a command line."""
    p = subparsers.add_parser(
        "ui", help="a live status page of a job (read from Kafka only), on 127.0.0.1"
    )
    p.add_argument("--job", required=True)
    p.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help="port on 127.0.0.1 (default %(default)s; 0: any free port)",
    )
    p.add_argument(
        "--every", type=float, default=1.0, metavar="S", help="read Kafka every S seconds"
    )
    add_bootstrap(p)
    p.set_defaults(run=_ui)


def _ui(args: argparse.Namespace) -> int:
    if args.every <= 0:
        raise ConfigError(f"--every {args.every}: must be a positive number of seconds")
    settings = kafka_settings(args)
    job = job_id(args.job)
    # The same check and message as `spillway status` (ConfigError: exit 2).
    _events, submitted = submission(settings, job)
    plan = plan_of(job, submitted)
    run = submitted.get("run")
    t = submitted.get("time")
    view = JobView(
        str(job),
        plan,
        str(run) if run is not None else None,
        float(t) if isinstance(t, int | float) else None,
    )
    server = make_server(args.port, lambda: feed.snapshot())
    feed = UiFeed(settings, job, view, every_s=args.every)
    feed.start()
    # SIGTERM stops serving like Ctrl-C does, and the command exits 0.
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"job {job}: http://{HOST}:{server.server_port}/ (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
    finally:
        server.server_close()
        feed.stop()
    return 0
