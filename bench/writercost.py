"""CPU cost per record of a channel writer by partition count, without a broker.

``python -m bench.writercost`` writes bench.channels' 300k records of 200 B through a
:class:`~channels.writer.ChannelWriter` (keyed, default settings) whose producer only
counts messages, 256 records per call as the channel benchmark does, and prints the
best of three runs' process CPU time per record for 1, 16, 32 and 128 partitions. It
isolates what partitioning costs the writer's Python (routing, splitting, encoding)
from the broker and librdkafka, whose share ``make bench-channels`` includes.
"""

from __future__ import annotations

import sys
import time
from typing import Any, cast

from bench.channels import SCHEMA, _key_of, make_records
from channels.config import ChannelSettings
from channels.ids import TopicPartition
from channels.partitioners import KeyHash
from channels.writer import ChannelWriter, OutputChannel


class _CountingProducer:
    def __init__(self) -> None:
        self.messages = 0

    def produce(self, *_args: Any) -> None:
        self.messages += 1

    def last_offset(self, _tp: TopicPartition) -> int | None:
        return None


def cost(records: list[dict[str, Any]], partitions: int, runs: int = 3) -> tuple[float, int]:
    """(best CPU seconds per record over ``runs``, messages written) for ``partitions``."""
    best, messages = float("inf"), 0
    for _ in range(runs):
        producer = _CountingProducer()
        channel = OutputChannel("t", SCHEMA, KeyHash(_key_of, partitions), partitions)
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
    """Print the table; ``argv``: partition counts (default 1 16 32 128)."""
    counts = [int(a) for a in (argv if argv is not None else sys.argv[1:])] or [1, 16, 32, 128]
    records, _ = make_records(300_000, 200)
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    print(f"writer CPU per record, best of 3, 300k records; load average {' '.join(load)}")
    for n in counts:
        per, messages = cost(records, n)
        print(f"{n:>4} partitions: {per * 1e6:.3f} µs/record, {messages} messages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
