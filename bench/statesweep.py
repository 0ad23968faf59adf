"""``make bench-statesweep``: restore time of a SIGKILLed keyed count against its state size.

For each state size K (default 10³, 10⁴, 10⁵, 10⁶ keys) a job of its own runs with
``spillway run`` on Spark local mode (:func:`pipeline`, 6 subtasks, checkpoint interval
1 s): ``fill`` (2 subtasks) emits K records of K distinct keys as fast as it can and ends;
``tick`` (1 subtask; bounded at 10⁹ records only so that finals are allowed) emits
:data:`TICK_RATE` records/s over the same keys; both → ``key_by`` → ``count``
(``aggregate``, ``emit="final"``, 2 subtasks, so ≈ K/2 keys each) → ``out`` (JSONL files;
nothing is written before the end, which keeps the fill cheap).

Ready to kill: both ``count`` subtasks' heartbeats (:mod:`spillway.recovery.runtime.livestats`) show
``state_keys`` summing to K, and after that ``count[0]``'s current attempt has reported
two more checkpoints (so a committed checkpoint holds every key). Then ``count[0]``'s
Python process (``pid`` of its ``started`` event) gets SIGKILL; the bench waits for the
new attempt's ``caught_up`` and for it to be ready again, ``--kills`` times per size.

Per kill (:func:`bench.restartstats.restart_of`, :mod:`bench.statesweepstats`): kill →
processing (``restored``), kill → caught up, the attempt's ``restore_s`` and its
``state`` step, the changelog records the restore read (from the worker's log line), and
the records and bytes (key + value) of ``count[0]``'s changelog partitions, read by the
bench just before the kill. Stored in ``bench/results/statesweep-<UTC time>.json``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"
ENV_OUT, ENV_KEYS = "SPILLWAY_SS_OUT", "SPILLWAY_SS_KEYS"
SIZES = (1_000, 10_000, 100_000, 1_000_000)
OP, TARGET, PARALLELISM = "count", 0, 2
SUBTASKS = 6  # fill 2, tick 1, count 2, out 1
TICK_RATE = 300.0  # records/s over already-seen keys once (and while) the fill runs
# Bounded only so that the count may emit finals (a job whose input never ends may not):
# 10⁹ records at TICK_RATE outlast any sweep by weeks; the bench stops the job itself.
TICK_COUNT = 10**9
EVENT = {
    "type": "record",
    "name": "SweepEvent",
    "fields": [{"name": "seq", "type": "long"}, {"name": "key", "type": "string"}],
}
TOTAL = {
    "type": "record",
    "name": "SweepTotal",
    "fields": [{"name": "key", "type": "string"}, {"name": "n", "type": "long"}],
}


def pipeline() -> Any:
    """fill (p=2, K records, K keys) + tick (p=1, paced) → count (p=2) → out."""
    from spillway.spark_jobs.api.pipeline import Pipeline

    p = Pipeline("bench-statesweep")
    fill = p.generate(
        "fill", make=make_fill, schema=EVENT, count=int(os.environ[ENV_KEYS]), parallelism=2
    )
    tick = p.generate(
        "tick", make=make_tick, schema=EVENT, count=TICK_COUNT, parallelism=1, rate=TICK_RATE
    )
    fill.union(tick).key_by(_key).aggregate(
        OP, init=_init, add=_add, result=_result, schema=TOTAL, parallelism=PARALLELISM
    ).write_jsonl("out", os.environ[ENV_OUT], parallelism=1)
    return p


def make_fill(i: int) -> dict[str, Any]:
    """Fill record ``i``: key ``k<i>`` (every fill record a new key)."""
    return {"seq": i, "key": f"k{i}"}


def make_tick(i: int) -> dict[str, Any]:
    """Tick record ``i``: one of the K keys, spread over them (a prime stride)."""
    return {"seq": i, "key": f"k{(i * 7919) % int(os.environ[ENV_KEYS])}"}


def _key(r: dict[str, Any]) -> str:
    return str(r["key"])


def _init() -> int:
    return 0


def _add(acc: int, _r: dict[str, Any]) -> int:
    return acc + 1


def _result(k: str, acc: int) -> dict[str, Any]:
    return {"key": k, "n": acc}


def _beats(bootstrap: str, job: str) -> list[dict[str, Any]]:
    from spillway.channels.config import KafkaSettings
    from spillway.channels.errors import SpillwayError
    from spillway.channels.ids import JobId
    from spillway.recovery.observe.heartbeat import read_heartbeats

    try:
        return read_heartbeats(KafkaSettings(bootstrap), JobId(job), SUBTASKS)
    except SpillwayError:  # the driver has not created the job's topics yet
        return []


def _wait_ready(bootstrap: str, job: str, keys: int, attempt: int, timeout_s: float) -> float:
    """Wait until the count holds ``keys`` keys and ``count[0]``'s ``attempt`` has reported
    two checkpoints after that; the wall time the keys were first seen all there."""
    from bench import statesweepstats as st

    deadline = time.monotonic() + timeout_s
    full_at: float | None = None
    base: int | None = None  # count[0]'s checkpoint id when (or first after) it was full
    while time.monotonic() < deadline:
        beats = _beats(bootstrap, job)
        ckpt = st.checkpoint_of(beats, OP, TARGET, attempt)
        if full_at is None and st.filled(beats, OP, PARALLELISM, keys):
            full_at = time.time()
        if full_at is not None and base is None:
            base = ckpt
        # Two checkpoints later: the second one began after the state was full.
        if full_at is not None and base is not None and ckpt is not None and ckpt >= base + 2:
            return full_at
        time.sleep(0.5)
    raise RuntimeError(
        f"job {job}: {OP} did not hold {keys} keys with two checkpoints after "
        f"{timeout_s:.0f} s (heartbeats: {st.state_keys(_beats(bootstrap, job), OP, PARALLELISM)})"
    )


def changelog_of_target(bootstrap: str, job: str) -> dict[str, int]:
    """Committed records and key + value bytes of ``count[0]``'s changelog partitions below
    their end offsets now (``end_offsets``: their sum, transaction markers included)."""
    from confluent_kafka import Consumer, TopicPartition

    from spillway.channels.ids import JobId, OperatorName
    from spillway.channels.naming import changelog_topic
    from spillway.channels.routing.keygroups import key_group_range

    topic = changelog_topic(JobId(job), OperatorName(OP))
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-statesweep-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        n = len(c.list_topics(topic, timeout=10).topics[topic].partitions)
        parts = list(key_group_range(TARGET, PARALLELISM, n))
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in parts}
        todo = {p for p, (lo, hi) in ends.items() if hi > lo}
        c.assign([TopicPartition(topic, p, ends[p][0]) for p in todo])
        records = size = 0
        deadline = time.monotonic() + 300
        while todo and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                p = m.partition()
                if p not in todo:
                    continue
                if m.error():
                    todo.discard(p)  # end of partition (read_committed: the LSO)
                    continue
                off = m.offset()
                if off is None or off >= ends[p][1]:
                    todo.discard(p)  # written after the ends were read: not counted
                    continue
                records += 1
                size += len(m.key() or b"") + len(m.value() or b"")
                if off >= ends[p][1] - 1:
                    todo.discard(p)
        return {
            "partitions": len(parts),
            "records": records,
            "bytes": size,
            "end_offsets": sum(hi for _, hi in ends.values()),
        }
    finally:
        c.close()


def _kill_once(
    bootstrap: str, job: str, keys: int, attempt: int, log: Path
) -> tuple[dict[str, Any], int]:
    """Kill ``count[0]``'s ``attempt`` once it is ready; its restart record and new attempt."""
    from bench import restartstats
    from bench import statesweepstats as st
    from bench.restart import _caught_up, _of, _wait_for

    _wait_ready(bootstrap, job, keys, attempt, 900)
    changelog = changelog_of_target(bootstrap, job)
    events = _wait_for(bootstrap, job, lambda ev: bool(_of(ev, "started", OP, TARGET)), 60)
    last = [e for e in _of(events, "started", OP, TARGET) if int(e["attempt"]) == attempt][-1]
    load = os.getloadavg()[0]
    killed = time.time()  # before the call: the death comes after, never before
    os.kill(int(last["pid"]), signal.SIGKILL)
    events = _wait_for(
        bootstrap, job, lambda ev: _caught_up(ev, OP, TARGET, attempt), 600, poll_s=0.5
    )
    new = max(int(e["attempt"]) for e in _of(events, "started", OP, TARGET))
    r = restartstats.restart_of(events, OP, TARGET, new, killed)
    started = [e for e in _of(events, "started", OP, TARGET) if int(e["attempt"]) == new][-1]
    logged = st.restored_records(
        log.read_text(errors="replace").splitlines(), f"{job}/{OP}[{TARGET}]"
    )
    r.update(
        keys=keys,
        load_at_kill=load,
        restore_s=started.get("restore_s"),
        state_step_s=(started.get("steps") or {}).get("state"),
        # The newest restore line is this attempt's (the first attempt restores nothing).
        restored_keys=logged[-1][0] if logged else None,
        restored_records=logged[-1][1] if logged else None,
        changelog=changelog,
        changelog_records=changelog["records"],
        changelog_bytes=changelog["bytes"],
    )
    return r, new


def run_size(bootstrap: str, keys: int, kills: int, work: Path) -> dict[str, Any]:
    """One job holding ``keys`` keys: its fill time and ``kills`` restarts of ``count[0]``."""
    from bench import restartstats
    from bench import statesweepstats as st
    from bench.restart import _Job, _wait_for

    job = f"bench-statesweep-{keys}-{uuid.uuid4().hex[:6]}"
    out = work / f"out-{keys}"
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, ENV_OUT: str(out), ENV_KEYS: str(keys)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    spillway = str(Path(sys.executable).parent / "spillway")
    args = [spillway, "run", "bench.statesweep:pipeline", "--job-id", job]
    args += ["--bootstrap", bootstrap, "--task-attempts", str(kills + 4)]
    args += ["--checkpoint-interval", "1"]
    log = work / f"job-{keys}.log"
    restarts: list[dict[str, Any]] = []
    with log.open("w") as logf:
        t0 = time.time()
        driver = _Job(args, env, logf)
        try:
            events = _wait_for(
                bootstrap,
                job,
                lambda ev: (
                    len(
                        {
                            (e["operator"], e["index"])
                            for e in ev
                            if e.get("event") in ("started", "finished")
                        }
                    )
                    >= SUBTASKS
                ),
                300,
            )
            started_s = max(float(e["time"]) for e in events if e.get("event") == "started") - t0
            attempt = 0
            full_at = _wait_ready(bootstrap, job, keys, attempt, 900)
            held = st.state_keys(_beats(bootstrap, job), OP, PARALLELISM)
            fill = st.fill_times(_wait_for(bootstrap, job, st.fill_finished, 60), full_at)
            print(
                f"{keys:,} keys: job processing {started_s:.1f} s after launch; fill sources "
                f"done in {fill['sources_s']:.1f} s, count held every key "
                f"{fill['fill_s']:.1f} s after the fill began (seen by heartbeats, ±1 s)",
                flush=True,
            )
            for k in range(kills):
                r, attempt = _kill_once(bootstrap, job, keys, attempt, log)
                restarts.append(r)
                print(
                    f"  kill {k + 1}/{kills}: processing {_fmt(r['kill_to_processing_s'])}, "
                    f"caught up {_fmt(r['kill_to_caught_up_s'])}, restore "
                    f"{_fmt(r['restore_s'])}, {r['restored_records']} changelog records read "
                    f"(load {r['load_at_kill']:.2f})",
                    flush=True,
                )
            # Re-join: the driver's task-retried event may have come after a wait ended.
            events = _wait_for(bootstrap, job, lambda ev: True, 60)
            for r in restarts:
                r.update(restartstats.restart_of(events, OP, TARGET, r["attempt"], r["killed"]))
        finally:
            exit_code = driver.stop()
    return {
        "keys": keys,
        "job": job,
        "startup_s": started_s,
        **fill,
        "fill_rate": keys / fill["fill_s"] if fill["fill_s"] > 0 else None,
        "state_keys": held,  # per count subtask, when first ready to kill
        "exit_code": exit_code,
        "restarts": restarts,
    }


def run(bootstrap: str, sizes: Sequence[int], kills: int, work: Path) -> dict[str, Any]:
    """The sweep on the broker at ``bootstrap``: a job per size in ``sizes`` (keys),
    ``kills`` SIGKILLs of ``count[0]`` each; per size its runs and :func:`summarise`."""
    from bench import restartstats

    runs = [run_size(bootstrap, k, kills, work) for k in sizes]
    for r in runs:  # every phase and attempt step, per size (bench.restartstats)
        r["restart_summary"] = restartstats.summarise(r["restarts"])
    return {"sizes": runs, "summary": summarise({"sizes": runs})}


def summarise(result: dict[str, Any]) -> dict[str, Any]:
    """The summary of a :func:`run` result (per size: medians with min–max)."""
    from bench import statesweepstats as st

    return st.summarise({r["keys"]: r["restarts"] for r in result["sizes"]})


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f} s"


def main(argv: list[str] | None = None) -> int:
    """Start a broker (unless ``--bootstrap``), run the sweep, print and store the figures."""
    import argparse
    import logging
    import shutil

    from bench import procstat
    from bench import statesweepstats as st
    from bench.channels import machine
    from spillway.devtools.localbroker import BrokerConfig, LocalBroker

    ap = argparse.ArgumentParser(prog="python -m bench.statesweep", description=__doc__)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="keys, comma-separated")
    ap.add_argument("--kills", type=int, default=3, help="kills per size (default %(default)s)")
    ap.add_argument("--bootstrap", default=None, help="use this broker instead of starting one")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR)
    a = ap.parse_args(argv)
    # Until the driver has created a job's topics, every poll of its events and heartbeats
    # retries "unknown partition" with a warning: expected here, so not shown.
    logging.getLogger("spillway.kafka").setLevel(logging.ERROR)
    sizes = [int(s) for s in a.sizes.split(",") if s.strip()]
    if not sizes or min(sizes) < 1 or a.kills < 1:
        ap.error("--sizes needs positive key counts and --kills at least 1")
    work = Path(tempfile.mkdtemp(prefix="spillway-bench-statesweep-"))
    broker = None
    load_before = procstat.load_average()
    try:
        bootstrap = a.bootstrap
        if bootstrap is None:
            broker = LocalBroker(BrokerConfig.with_free_ports(work / "broker"))
            broker.start()
            bootstrap = broker.bootstrap
        result = run(bootstrap, sizes, a.kills, work)
    except BaseException:
        print(f"failed; the job logs are kept in {work}", file=sys.stderr)
        raise
    else:
        shutil.rmtree(work, ignore_errors=True)
    finally:
        if broker is not None:
            broker.stop()
    result.update(
        load_before=load_before,
        load_after=procstat.load_average(),
        machine=machine(),
        settings={
            "sizes": sizes,
            "kills": a.kills,
            "tick_rate": TICK_RATE,
            "subtasks": SUBTASKS,
            "checkpoint_interval_s": 1,
        },
    )
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / f"statesweep-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print()
    print(f"State-size sweep: SIGKILL of {OP}[{TARGET}] ({PARALLELISM} subtasks), Spark local mode")
    print(st.load_line(result))
    for s in result["sizes"]:
        print(
            f"  {s['keys']:,} keys: fill sources {s['sources_s']:.1f} s, count full "
            f"{s['fill_s']:.1f} s after the fill began"
        )
    for line in st.render(result["summary"]):
        print(line)
    print(f"stored in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
