"""What one ``make bench`` run is asked to do: its :class:`Settings` (sizes, repetitions,
engines, parts) and :data:`PARTITIONS`, the partition count of every input topic it
creates.

Read by :mod:`bench.suite` (which parses them from its command line) and by the parts
wired in :mod:`bench.steadyparts`.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench import columnarrun, localized, peers, rescale, steadyrun

PARTITIONS = 2  # every input topic of the suite


@dataclass(frozen=True)
class Settings:
    """Sizes and repetitions of one ``make bench`` run."""

    runs: int = 5  # at least 5 rounds, for a median with a spread
    b0_records: int = 1_000_000
    # 400k: the fastest engines need ~4 s, i.e. several 1-s commits per run (at 200k a
    # run had become about one commit interval long).
    b1_records: int = 400_000
    engines: tuple[str, ...] = peers.ENGINES
    commit_interval_s: float = 1.0
    b4_records: int = 1_500_000
    # sss-python needed ~80 s for 50k records at load ~25 in a trial run: room for 400k.
    engine_timeout_s: float = 900.0
    parts: tuple[str, ...] = ("b0", "b0s", "b1", "b1s", "b1c", "b4", "b2", "b3", "b3k", "b3s")
    b2_intervals: tuple[float, ...] = (0.1, 1.0, 5.0)
    b2_rate: float = 2000.0
    b2_seconds: float = 10.0
    b2_records: int = 400_000  # per throughput run (EOS overhead): several commits at 1 s
    b3_rate: float = localized.Settings.rate
    b3_kills: int = localized.Settings.kills
    # B1s (bench.steadyrun): whole runs at two sizes; the larger one >= 5M records, so
    # every engine runs for minutes in steady state.
    b1s_sizes: tuple[int, ...] = (1_000_000, 5_000_000)
    b1s_engines: tuple[str, ...] = steadyrun.ENGINES
    b1s_timeout_s: float = 3600.0  # one whole run of 5M records (sss-python is slowest)
    # The engines 4-10x slower per record run at these sizes in B1s and B1c: the run of record asks
    # for "60 s or 5M records" per run; Quix Streams and the Python Structured Streaming
    # variant take about 60 s (start-up included) for 1.5M, where 5M would take them 3-4
    # minutes a run and a full `make bench` more than a session.
    slow_engines: tuple[str, ...] = ("quix", "sss-python")
    slow_sizes: tuple[int, ...] = (300_000, 1_500_000)
    # B0s (bench.ceiling): tuned perf tools and raw confluent-kafka loops at two sizes.
    b0s_sizes: tuple[int, ...] = (1_000_000, 5_000_000)
    # B1c (bench.columnarrun): the columnar path on Spark, whole runs at two sizes.
    b1c_sizes: tuple[int, ...] = (1_000_000, 5_000_000)
    b1c_engines: tuple[str, ...] = columnarrun.ENGINES
    # B6 (bench.rescale): keys of the rescaled count's state, records/s per source subtask.
    b6_keys: int = rescale.KEYS
    b6_rate: float = rescale.RATE
