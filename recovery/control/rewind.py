"""Whole-job rewind to a completed global checkpoint (``spillway run --from-checkpoint N``).

The channels hold everything the previous run wrote after checkpoint N too. Exactly-once
after a rewind needs those records ignored, and only those: the in-flight records of N
(written before an upstream's checkpoint N, not yet read by its downstream at N) must be
read again. Each checkpoint records its subtask's output high-water mark per channel
partition (``output_marks``), so for writer w and partition tp of global checkpoint N:

* offsets below ``mark[w][tp]`` hold w's records up to its checkpoint N — kept;
* offsets from that mark to the log end found at the rewind (all earlier incarnations are
  fenced first, so nothing old can be appended later) hold w's records after N — the
  *discard span* ``(mark, end)`` of w in tp, which the downstream reader drops.

Records the new run writes land at or past the log end, outside every span. Spans of
earlier rewinds stay in force until a reader's position passes them.

The rewind writes, in one transaction, a new latest checkpoint for every subtask: a copy
of its part of N with the discard spans of its inputs and a fresh id. Restarting the job
then restores every subtask from there as after any failure. Keyed state is rebuilt from
the changelog records below N's changelog offset and rewritten whole at the next
checkpoint (``rewrite_state``), which buries the abandoned run's changelog records.
File sinks delete the files they published after N. A Kafka sink topic cannot take back
what its consumers have read: they see the records after N a second time.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import CheckpointFormatError, ConfigError, RetentionGapError
from spillway.channels.ids import CheckpointId, JobId, OperatorName, SubtaskId, TopicPartition
from spillway.channels.kafka.admin import Admin
from spillway.channels.kafka.clients import idempotent_producer
from spillway.channels.kafka.producer import TransactionalProducer
from spillway.channels.naming import changelog_topic
from spillway.channels.progress import Spans
from spillway.offsets.checkpoint import Checkpoint
from spillway.offsets.store import CheckpointStore
from spillway.recovery.control.globalckpt import read_completed
from spillway.recovery.job.plan import JobPlan
from spillway.recovery.observe.events import record_job_event
from spillway.recovery.restore.ownership import owned_partitions

log = logging.getLogger("spillway.rewind")
# Subtasks fenced at once (fence_subtasks): each is a client waiting on the broker.
FENCE_THREADS = 8


def plan_rewind(
    plan: JobPlan,
    n: int,
    taken: Mapping[SubtaskId, Checkpoint],
    latest_ids: Mapping[SubtaskId, int],
    log_ends: Mapping[TopicPartition, int],
    log_starts: Mapping[TopicPartition, int],
    now: float,
) -> dict[SubtaskId, Checkpoint]:
    """The checkpoint each subtask restarts from after rewinding the job to global ``n``.

    ``taken``: every subtask's checkpoint belonging to ``n``; ``latest_ids``: each
    subtask's newest checkpoint id; ``log_ends`` / ``log_starts``: offsets of every input
    channel partition once older incarnations are fenced. Pure; raises
    :class:`ConfigError` / :class:`RetentionGapError` with the numbers when ``n`` cannot
    be restored.
    """
    missing = [str(s) for s in plan.subtasks() if s not in taken]
    if missing:
        raise ConfigError(f"global checkpoint {n} has no checkpoint of {', '.join(missing)}")
    out: dict[SubtaskId, Checkpoint] = {}
    for s in plan.subtasks():
        ckpt = taken[s]
        ckpt.check_topology(plan.fingerprint)
        discard: dict[TopicPartition, dict[int, Spans]] = {
            tp: dict(m) for tp, m in ckpt.reader.discard.items()
        }
        owned = owned_partitions(plan, s)
        edges = plan.inputs_of(s.operator)
        for edge, tp in ((e, tp) for e in edges for tp in owned.topic_partitions(plan.topic_of(e))):
            needed = ckpt.reader.inputs.get(tp, 0)
            if log_starts[tp] > needed:
                raise RetentionGapError(
                    f"cannot rewind to global checkpoint {n}: {s} must re-read {tp} from "
                    f"offset {needed}, but retention deleted the log below "
                    f"{log_starts[tp]} ({log_starts[tp] - needed} records lost). Pick a "
                    "newer checkpoint (spillway checkpoints --job ...)",
                    subtasks=[s],
                )
            upstream = plan.operator(edge.upstream)
            for w in range(upstream.parallelism):
                writer = taken[SubtaskId(plan.job, upstream.name, w)]
                marks = writer.writers.output_marks.get(tp.topic)
                if marks is None:
                    raise CheckpointFormatError(
                        f"cannot rewind to global checkpoint {n}: {writer.subtask}'s checkpoint "
                        f"{writer.checkpoint_id} has no output high-water marks (written by an "
                        "older Spillway). Rewind to a checkpoint taken by this version"
                    )
                start, end = marks[tp.partition], log_ends[tp]
                if start < end:
                    spans = discard.setdefault(tp, {}).get(w, ())
                    discard[tp][w] = _add_span(spans, (start, end))
        out[s] = dataclasses.replace(
            ckpt,
            checkpoint_id=CheckpointId(latest_ids.get(s, int(ckpt.checkpoint_id)) + 1),
            meta=dataclasses.replace(
                ckpt.meta, global_id=None, rewound_from=n, wall_time=now, attempt=0
            ),
            reader=dataclasses.replace(ckpt.reader, discard=discard),
            state=dataclasses.replace(
                ckpt.state,
                rewrite_state=plan.operator(s.operator).stateful and not ckpt.meta.finished,
            ),
        )
    return out


def _add_span(spans: Spans, new: tuple[int, int]) -> Spans:
    """``spans`` plus ``new``, merged where they overlap or touch, ascending."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted((*spans, new)):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return tuple(merged)


def check_compaction_window(
    n: int, stateful: Mapping[SubtaskId, Checkpoint], lag_ms: Mapping[str, int], now: float
) -> None:
    """Refuse to rebuild state older than its changelog's ``min.compaction.lag.ms``.

    Compaction may already have removed values that were current at checkpoint ``n`` but
    overwritten since; state rebuilt from what is left would be wrong without any error.
    """
    for s, ckpt in stateful.items():
        topic = changelog_topic(s.job, s.operator)
        age_ms = (now - ckpt.meta.wall_time) * 1000
        if age_ms > lag_ms[topic]:
            raise ConfigError(
                f"cannot rewind to global checkpoint {n}: {s}'s state at that checkpoint is "
                f"{age_ms / 1000:.0f}s old, but its changelog {topic} may compact records "
                f"older than {lag_ms[topic] / 1000:.0f}s (min.compaction.lag.ms). Rewind "
                "to a newer checkpoint, or raise min.compaction.lag.ms for future rewinds",
                subtasks=[s],
            )


def rewind_job(
    settings: KafkaSettings, plan: JobPlan, n: int, clock: Any = time.time
) -> dict[SubtaskId, Checkpoint]:
    """Make global checkpoint ``n`` the latest checkpoint of every subtask of ``plan``.

    Fences every subtask's earlier incarnations first. Run it while the job is stopped,
    then start the job; returns the checkpoints written.
    """
    job = plan.job
    completed = {int(c["id"]): c for c in read_completed(settings, job)}
    if n not in completed:
        raise ConfigError(
            f"job {job} has no completed global checkpoint {n}; retained: "
            f"{sorted(completed) or 'none'} (see spillway checkpoints --job {job})"
        )
    per_subtask: Mapping[str, int] = completed[n]["subtasks"]
    stores = {
        op.name: CheckpointStore(settings, job, op.name, op.parallelism) for op in plan.operators
    }
    try:
        taken, latest_ids = _parts_of(plan, n, per_subtask, stores)
        now = clock()
        admin = Admin(settings)
        stateful = {s: c for s, c in taken.items() if plan.operator(s.operator).stateful}
        lags = {
            t: int(admin.topic_config(t).get("min.compaction.lag.ms", "0"))
            for t in {changelog_topic(job, s.operator) for s in stateful}
        }
        check_compaction_window(n, stateful, lags, now)
        _fence(settings, plan)
        inputs = [
            tp
            for s in plan.subtasks()
            for e in plan.inputs_of(s.operator)
            for tp in owned_partitions(plan, s).topic_partitions(plan.topic_of(e))
        ]
        marks = admin.watermarks(inputs)  # no open transactions left: stable = log end
        rewound = plan_rewind(
            plan,
            n,
            taken,
            latest_ids,
            {tp: high for tp, (_, high) in marks.items()},
            {tp: low for tp, (low, _) in marks.items()},
            now,
        )
        producer = TransactionalProducer(settings, f"spillway.{job}.rewind")
        try:
            producer.start()
            producer.begin()
            for s, ckpt in rewound.items():
                stores[s.operator].write(producer, ckpt)
            producer.commit()
        finally:
            producer.close()
    finally:
        for store in stores.values():
            store.close()
    record_job_event(
        settings,
        job,
        "rewound",
        to=n,
        checkpoints={str(s): int(c.checkpoint_id) for s, c in rewound.items()},
        discard={
            str(tp): {str(w): [list(sp) for sp in spans] for w, spans in m.items()}
            for c in rewound.values()
            for tp, m in c.reader.discard.items()
        },
    )
    log.info("job %s rewound to global checkpoint %d", job, n)
    return rewound


def _parts_of(
    plan: JobPlan,
    n: int,
    per_subtask: Mapping[str, int],
    stores: Mapping[OperatorName, CheckpointStore],
) -> tuple[dict[SubtaskId, Checkpoint], dict[SubtaskId, int]]:
    """Each subtask's part of global checkpoint ``n``, and its latest checkpoint id."""
    taken: dict[SubtaskId, Checkpoint] = {}
    latest_ids: dict[SubtaskId, int] = {}
    for s in plan.subtasks():
        key = f"{s.operator}[{s.index}]"
        if key not in per_subtask:
            raise ConfigError(f"global checkpoint {n} does not list {key}")
        # One read of the retained checkpoints serves both lookups.
        retained = stores[s.operator].history(s.index, 100)
        found = next((c for c in retained if c.checkpoint_id == per_subtask[key]), None)
        if found is None:
            raise ConfigError(
                f"cannot rewind to global checkpoint {n}: {s}'s checkpoint "
                f"{per_subtask[key]} is no longer retained (older checkpoints are pruned)"
            )
        taken[s] = found
        latest_ids[s] = int(retained[-1].checkpoint_id)
    return taken, latest_ids


def _fence(settings: KafkaSettings, plan: JobPlan) -> None:
    """Fence every subtask's producer (:func:`fence_subtasks`)."""
    fence_subtasks(settings, plan.job, plan.subtasks(), "rewind")


def fence_subtasks(
    settings: KafkaSettings, job: JobId, subtasks: Iterable[SubtaskId], by: str
) -> None:
    """Fence the producers of ``subtasks``: open transactions abort, zombies cannot commit.

    Each fencing is announced as a newer incarnation would announce itself, so a copy
    still running (the job should be stopped, but may not be) ends instead of having
    Spark retry it from the rewound checkpoint. The subtasks are fenced concurrently (each
    fencing waits on its transaction coordinator; one after another they added up to most
    of a live rescale's handover); the first failure is raised once all have ended.
    """
    announcer = idempotent_producer(settings)

    def fence(s: SubtaskId) -> None:
        p = TransactionalProducer(settings, s.transactional_id)
        try:
            p.start()
        finally:
            p.close()
        record_job_event(
            settings,
            job,
            "fencing",
            producer=announcer,
            operator=s.operator,
            index=s.index,
            by=by,
        )

    todo = list(subtasks)
    if not todo:
        return
    with ThreadPoolExecutor(min(FENCE_THREADS, len(todo)), "fence") as pool:
        for f in [pool.submit(fence, s) for s in todo]:
            f.result()
