"""CPU cost per record of a channel writer by partition count, without a broker.

``python -m bench.writercost`` writes bench.channels' 300k records of 200 B through a
:class:`~spillway.channels.writer.ChannelWriter` (keyed, default settings) whose producer only
counts messages, 256 records per call as the channel benchmark does, and prints the
best of three runs' process CPU time per record for 1, 16, 32 and 128 partitions. It
isolates what partitioning costs the writer's Python (routing, splitting, encoding)
from the broker and librdkafka, whose share ``make bench-channels`` includes.

``python -m bench.writercost --rebalance`` measures a round-robin edge instead: per
record over 2 partitions (a non-keyed edge before slots, downstream width 2), per record
over 32, and a batch at a time over 32 slots
(:class:`spillway.channels.routing.partitioners.Sticky`,
what a round-robin edge into a slotted operator does now).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, cast

from bench.channels import SCHEMA, _key_of, make_records
from spillway.channels.config import ChannelSettings
from spillway.channels.ids import TopicPartition
from spillway.channels.routing.partitioners import KeyHash, Partitioner, RoundRobin, Sticky
from spillway.channels.writer import ChannelWriter, OutputChannel


class _CountingProducer:
    def __init__(self) -> None:
        self.messages = 0

    def produce(self, *_args: Any) -> None:
        self.messages += 1

    def last_offset(self, _tp: TopicPartition) -> int | None:
        return None


def cost(
    records: list[dict[str, Any]],
    partitions: int,
    runs: int = 3,
    route: Callable[[int], Partitioner] | None = None,
) -> tuple[float, int]:
    """(best CPU seconds per record over ``runs``, messages written) for ``partitions``,
    routed by ``route(partitions)`` (default: by key)."""
    best, messages = float("inf"), 0
    for _ in range(runs):
        producer = _CountingProducer()
        part = route(partitions) if route is not None else KeyHash(_key_of, partitions)
        channel = OutputChannel("t", SCHEMA, part, partitions)
        writer = ChannelWriter(cast(Any, producer), channel, 0, ChannelSettings())
        start = time.process_time()
        for i in range(0, len(records), 256):
            writer.write_many(records[i : i + 256])
            writer.tick()
        writer.flush_batches()
        best = min(best, (time.process_time() - start) / len(records))
        messages = producer.messages
    return best, messages


def main(argv: list[str] | None = None) -> int:
    """Print the table; ``argv``: partition counts (default 1 16 32 128), or
    ``--rebalance`` for the round-robin table."""
    args = list(argv if argv is not None else sys.argv[1:])
    records, _ = make_records(300_000, 200)
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    print(f"writer CPU per record, best of 3, 300k records; load average {' '.join(load)}")
    if args == ["--rebalance"]:
        rows: list[tuple[str, int, Callable[[int], Partitioner]]] = [
            ("round-robin per record", 2, lambda n: RoundRobin(0, n)),
            ("round-robin per record", 32, lambda n: RoundRobin(0, n)),
            ("sticky slots", 32, lambda n: Sticky(0, n)),
        ]
        for name, n, route in rows:
            per, messages = cost(records, n, route=route)
            print(f"{name:>22}, {n:>3} partitions: {per * 1e6:.3f} µs/record, {messages} messages")
        return 0
    counts = [int(a) for a in args] or [1, 16, 32, 128]
    for n in counts:
        per, messages = cost(records, n)
        print(f"{n:>4} partitions: {per * 1e6:.3f} µs/record, {messages} messages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
