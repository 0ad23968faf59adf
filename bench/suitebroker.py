"""The benchmarks' throw-away local broker: started for one run, stopped and deleted after.

Used by ``make bench`` (:mod:`bench.suite`) and by the benchmarks run on their own
(:mod:`bench.kstreamsb3`, :mod:`bench.sssb3`, :mod:`bench.windowpeers`,
:mod:`bench.budget`).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

from bench.measure import MeasureError


def start_broker(stack: contextlib.ExitStack) -> tuple[str, int, Path]:
    """A throw-away broker in a temporary directory on free ports: (bootstrap, pid, log.dirs).

    Started before it returns; ``stack`` stops it and deletes its directory when it
    closes. Raises :class:`bench.measure.MeasureError` if the started broker has no PID
    (its CPU could not be measured).
    """
    from spillway.devtools.localbroker import BrokerConfig, LocalBroker, free_ports

    data_dir = Path(tempfile.mkdtemp(prefix="spillway-bench-suite-"))
    stack.callback(shutil.rmtree, data_dir, ignore_errors=True)
    port, controller_port = free_ports(2)
    broker = LocalBroker(BrokerConfig(data_dir, port=port, controller_port=controller_port))
    broker.start()
    stack.callback(broker.stop)
    pid = broker.status().pid
    if pid is None:
        raise MeasureError("the benchmark's broker started but has no PID file")
    return broker.bootstrap, pid, broker.config.log_dirs
