"""B3 figures for Structured Streaming losing one executor, from what the observer saw. Pure.

The observer notes ``(arrival, seq, ts_ms, page, views)`` per output row (arrival and ts
are wall-clock: ``time.time()`` seconds and the pacer's send time in ms). A row of the
traced query (:mod:`bench.sssb3job`) stands for every record of its page counted in one
micro-batch, and carries ``seq`` and ``ts`` of the *last* of them (the highest seq), so
its latency (arrival − ts) is that of the youngest record it covers.

The output check (:func:`output_check`) knows which page each input ``seq`` belongs to
(``page_of``), so each row can be checked exactly: a row ``(page, views=v, seq=s)`` is
right iff ``s`` is the seq of the v-th input record of that page.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench.checkpoints import percentile
from bench.recoverystats import back_within, window_quantiles

Seen = tuple[float, int, int, str, int]  # (arrival s, seq, ts ms, page, views)

QUANTILE = 0.9  # the recovery baseline: this quantile of the latency before the kill
TOLERANCE = 0.1  # back within 10 % of it
RECOVERY_WINDOW_S = 1.0  # back_within's windows (as bench.kstreamsb3)
P99_WINDOW_S = 0.1  # the p99 windows


@dataclass(frozen=True)
class Timeline:
    """When the executor was killed and how long before / after it is measured (s)."""

    kill: float
    base_s: float
    after_s: float


def latencies(seen: Sequence[Seen]) -> list[tuple[float, float]]:
    """``(arrival, arrival − ts)`` per output row, in seconds."""
    return [(arrival, arrival - ts / 1000) for arrival, _, ts, _, _ in seen]


def _between(points: Sequence[tuple[float, float]], start: float, end: float) -> list[float]:
    return [v for t, v in points if start <= t < end]


def latency_figures(seen: Sequence[Seen], tl: Timeline) -> dict[str, float | None]:
    """Recovery time and latencies around the kill; ``None`` where nothing was seen.

    * ``back_within_10pct_s``: kill → the 1-s windows' 0.9-quantile is back within 10 % of
      the 0.9-quantile of ``[kill − base_s, kill)``, for good (``None``: not back by
      ``kill + after_s``);
    * ``first_output_after_kill_s``: kill → the first row arriving after it;
    * ``max_latency_after_kill_s``: over ``[kill, kill + after_s)``;
    * ``p99_before_s`` / ``p99_after_s``: p99 of the rows arriving in ``[kill − base_s,
      kill)`` / ``[kill, kill + base_s)``;
    * ``window_p99_before_max_s`` / ``window_p99_after_max_s``: the highest p99 of a
      100 ms window in those two spans.
    """
    points = latencies(seen)
    kill, end = tl.kill, tl.kill + tl.after_s
    before = _between(points, kill - tl.base_s, kill)
    after_base = _between(points, kill, kill + tl.base_s)
    after = _between(points, kill, end)
    baseline = percentile(before, QUANTILE) if before else None
    back = (
        back_within(points, kill, end, baseline, TOLERANCE, RECOVERY_WINDOW_S, QUANTILE)
        if baseline is not None
        else None
    )
    arrivals = [t for t, _ in points if kill <= t < end]

    def window_max(start: float, stop: float) -> float | None:
        ws = window_quantiles(points, start, stop, P99_WINDOW_S, 0.99)
        return max(v for _, v in ws) if ws else None

    return {
        "baseline_latency_q90_s": baseline,
        "back_within_10pct_s": back,
        "first_output_after_kill_s": min(arrivals) - kill if arrivals else None,
        "max_latency_after_kill_s": max(after) if after else None,
        "p99_before_s": percentile(before, 0.99) if before else None,
        "p99_after_s": percentile(after_base, 0.99) if after_base else None,
        "window_p99_before_max_s": window_max(kill - tl.base_s, kill),
        "window_p99_after_max_s": window_max(kill, kill + tl.base_s),
    }


def output_check(seen: Sequence[Seen], sent: int, page_of: Callable[[int], str]) -> dict[str, Any]:
    """The output against inputs ``0 .. sent-1`` (``page_of(seq)``: the page of record seq).

    * ``rows``: rows seen; ``duplicate_rows``: rows beyond the first of each (page, views);
    * ``duplicate_records``: input records whose update was output more than once: a row
      (page, v) covers the records of its page after the page's previous distinct count
      v' (v − v' of them), and each repeat of it outputs them again;
    * ``wrong_rows``: rows whose ``seq`` is not that of the views-th record of its page
      (or whose views exceed the page's records);
    * ``missing``: input records whose update no row covers (the page's highest views
      seen is below the record's rank in its page);
    * ``exact_but_duplicates``: no wrong row and nothing missing (duplicates allowed:
      Spark's Kafka sink is at-least-once).
    """
    order: dict[str, list[int]] = {}
    for seq in range(sent):
        order.setdefault(page_of(seq), []).append(seq)
    repeats = Counter((page, views) for _, _, _, page, views in seen)
    wrong = 0
    for _, seq, _, page, views in seen:
        seqs = order.get(page, [])
        if not 1 <= views <= len(seqs) or seqs[views - 1] != seq:
            wrong += 1
    counts: dict[str, list[int]] = {}
    for page, views in repeats:
        counts.setdefault(page, []).append(views)
    duplicate_records = 0
    for page, vs in counts.items():
        previous = 0
        for v in sorted(vs):
            duplicate_records += (repeats[(page, v)] - 1) * (v - previous)
            previous = v
    missing = sum(max(0, len(seqs) - max(counts.get(page, [0]))) for page, seqs in order.items())
    return {
        "sent": sent,
        "rows": len(seen),
        "duplicate_rows": sum(n - 1 for n in repeats.values()),
        "duplicate_records": duplicate_records,
        "wrong_rows": wrong,
        "missing": missing,
        "exact_but_duplicates": wrong == 0 and missing == 0,
    }
