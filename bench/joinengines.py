"""The interval-join workload in each engine (:mod:`bench.windowpeers`, kind ``interval``).

Workload: the windows benchmark's page-view events (:mod:`bench.winengines`) as the left
input, and a second, sparser topic of page views (:func:`right_events`) as the right
one, both one partition, event time ``ts`` increasing. Key = page. Each left record ``l``
joins every right record ``r`` of its page with ``l.ts - backward <= r.ts <= l.ts +
forward``; one output row per pair ``{"key", "l", "r"}`` (the two ``seq``), exactly-once,
to an output topic keyed by page.

``spillway``  :func:`pipeline`: read_kafka left and right (bounded, event time ``ts``)
              → ``connect(...).key_by(page, page).interval_join(lower=-backward,
              upper=forward)`` → write_kafka, chained (sources | join+sink).
``quix``      Quix Streams: each input ``group_by(page)`` (a repartition topic, as
              Spillway's keyed channel), then ``left.join_interval(right, backward_ms,
              forward_ms)`` → ``to_topic``, ``exactly-once``. Quix consumes co-partitioned
              topics in timestamp order, which its join needs: a right record that
              arrived after a left one it precedes would be missed.

Both wait at their first record for the gate file, as in :mod:`bench.winengines`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import workload
from bench.peers import EVENT_SCHEMA
from bench.winengines import (
    ENV_PREFIX,
    WinConfig,
    _Gated,
    _say,
    page_of,
    quix_app,
    quix_gate,
    quix_input,
)

RIGHT_SALT = 10**9  # right event j is workload.make_event(RIGHT_SALT + j): other pages
PAIR_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "PagePair",
    "fields": [
        {"name": "key", "type": "string"},
        {"name": "l", "type": "long"},
        {"name": "r", "type": "long"},
    ],
}


def right_events(n: int, base_ms: int, step_ms: int) -> list[dict[str, Any]]:
    """``n`` right events, ``step_ms`` apart from ``base_ms`` (``seq`` 0..n-1)."""
    out = []
    for j in range(n):
        e = workload.make_event(RIGHT_SALT + j)
        e.update(seq=j, ts=base_ms + j * step_ms)
        out.append(e)
    return out


def _ts(event: Mapping[str, Any]) -> int:
    return int(event["ts"])


def _pair(left: Mapping[str, Any], right: Mapping[str, Any]) -> dict[str, Any]:
    return {"key": page_of(left), "l": int(left["seq"]), "r": int(right["seq"])}


def _row_key(row: Mapping[str, Any]) -> str:
    return str(row["key"])


def _config() -> tuple[WinConfig, str]:
    """The run's configuration; for ``interval`` ``size_ms`` is the backward and
    ``hop_ms`` the forward bound, and ``SPILLWAY_WINBENCH_RIGHT`` the right topic."""
    return WinConfig.from_env(), os.environ[ENV_PREFIX + "RIGHT"]


def pipeline() -> Any:
    """The Spillway job of the configuration in the environment (``spillway run``)."""
    from spillway.spark_jobs.api.pipeline import Pipeline, connect

    cfg, right_topic = _config()
    p = Pipeline("bench-join", chaining=True)
    common: dict[str, Any] = dict(schema=EVENT_SCHEMA, bounded=True, timestamp=_ts)
    left = p.read_kafka("left", cfg.input, **common)
    right = p.read_kafka("right", right_topic, **common)
    joined = connect(left, right).key_by(page_of, page_of).interval_join(
        "join", lower=-cfg.size_ms, upper=cfg.hop_ms, left_time=_ts, right_time=_ts,
        result=_pair, schema=PAIR_SCHEMA, parallelism=1,
    )  # fmt: skip
    joined.write_kafka("sink", cfg.output, key=_row_key, parallelism=1)
    return _Gated(_Gated(p, "left", cfg.gate), "right", cfg.gate)


def run_quix(
    cfg: WinConfig, right_topic: str, bootstrap: str, name: str, workdir: str, pairs: int
) -> None:
    """Quix Streams' interval join; returns once ``pairs`` rows are out and committed."""
    app = quix_app(bootstrap, name, workdir)
    gate = quix_gate(cfg.gate)

    def side(topic: str, tag: str) -> Any:
        return quix_input(app, topic, gate).group_by(page_of, name=f"page-{tag}")

    left, right = side(cfg.input, "l"), side(right_topic, "r")
    joined = left.join_interval(
        right, how="inner", on_merge=_pair, backward_ms=cfg.size_ms, forward_ms=cfg.hop_ms
    )
    joined.to_topic(app.topic(cfg.output, value_serializer="json", key_serializer="str"))
    # A join that misses pairs would never reach the count: stop 60 s after the last
    # message instead (the output check then says what is missing).
    app.run(count=pairs, timeout=60.0, collect=False)
    _say("DONE")
    sys.stdin.read()  # the benchmark closes our stdin once it has sampled us


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.joinengines quix ...`` (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m bench.joinengines", description=__doc__)
    ap.add_argument("engine", choices=("quix",))
    ap.add_argument("--kind", choices=("interval",), required=True)
    ap.add_argument("--size-ms", type=int, required=True, help="backward bound")
    ap.add_argument("--hop-ms", type=int, required=True, help="forward bound")
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--right", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--gate", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--windows", type=int, required=True, help="output rows to wait for")
    a = ap.parse_args(argv)
    cfg = WinConfig(a.kind, a.size_ms, a.hop_ms, a.input, a.output, Path(a.gate))
    run_quix(cfg, a.right, a.bootstrap, a.name, a.workdir, a.windows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
