"""What the writer-schema header ``spw.s`` (spillway.channels.wire.schemaid) costs per channel
message.

``python -m bench.schemaheader`` measures, with no broker:

* **produce**: CPU time of ``Producer.produce`` of one channel message with the headers a
  data message had before (``spw.v``, ``spw.k``) and with ``spw.s`` added, alternating
  rounds of the two so that machine load hits both alike (librdkafka copies headers into
  the message; nothing is sent: the producer points at a closed port and its queue holds
  every message);
* **read**: CPU time the reader adds per data message (finding ``spw.s`` among the headers
  and checking it is the reader's own schema);
* **bytes**: what the header adds to a message in Kafka's record format.

It prints medians over the rounds, in microseconds per message.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence

from confluent_kafka import Producer

from spillway.channels.wire.envelope import Kind, headers
from spillway.channels.wire.schemaid import H_SCHEMA, WriterSchemas, schema_header, schema_id_of

SCHEMA = {
    "type": "record",
    "name": "Event",
    "fields": [{"name": "seq", "type": "long"}, {"name": "key", "type": "string"}],
}


def _produce_us(
    producer: Producer, hdrs: Sequence[tuple[str, bytes]], value: bytes, n: int
) -> float:
    start = time.process_time()
    for _ in range(n):
        producer.produce(
            "bench.schemaheader", value=value, key=b"0", partition=0, headers=list(hdrs)
        )
    producer.purge()
    producer.poll(0)  # serves the purged messages' reports, which hold their queue slots
    return (time.process_time() - start) / n * 1e6


def _read_us(hdrs: Sequence[tuple[str, bytes]], n: int) -> float:
    writers = WriterSchemas(SCHEMA)
    start = time.process_time()
    for _ in range(n):
        sid = schema_id_of(hdrs)
        writers.is_own(sid)
    return (time.process_time() - start) / n * 1e6


def header_bytes(name: str, value: bytes) -> int:
    """Bytes one header adds to a Kafka record (v2 format: varint key length, key, varint
    value length, value; the header count varint stays one byte below 64 headers)."""
    return _varint_len(len(name)) + len(name) + _varint_len(len(value)) + len(value)


def _varint_len(n: int) -> int:
    z, size = n << 1, 1  # zigzag of a non-negative length
    while z >= 0x80:
        z >>= 7
        size += 1
    return size


def main(argv: Sequence[str] | None = None) -> None:
    """Run the measurement and print it."""
    p = argparse.ArgumentParser(prog="python -m bench.schemaheader", description=__doc__)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--messages", type=int, default=20_000, help="per round and variant")
    p.add_argument("--value-bytes", type=int, default=1024, help="message value size")
    a = p.parse_args(argv)
    producer = Producer({
        "bootstrap.servers": "127.0.0.1:9", "queue.buffering.max.messages": 2 * a.messages,
        "queue.buffering.max.kbytes": 1_048_576, "log_level": 0,
    })  # fmt: skip
    before = headers(Kind.DATA)
    after = [*before, schema_header(SCHEMA)]
    value = b"x" * a.value_bytes
    runs: dict[str, list[float]] = {"without": [], "with": [], "read": []}
    for _ in range(a.rounds):
        runs["without"].append(_produce_us(producer, before, value, a.messages))
        runs["with"].append(_produce_us(producer, after, value, a.messages))
        runs["read"].append(_read_us(after, a.messages))
    med = {k: statistics.median(v) for k, v in runs.items()}
    added = header_bytes(H_SCHEMA, schema_header(SCHEMA)[1])
    print(f"produce without spw.s: {med['without']:.3f} us/message (median of {a.rounds})")
    print(
        f"produce with spw.s:    {med['with']:.3f} us/message ({med['with'] - med['without']:+.3f})"
    )
    print(f"reader, find and check spw.s: {med['read']:.3f} us/message")
    share = f"{added / a.value_bytes:.3%} of a {a.value_bytes} B value"
    print(f"bytes added per message: {added} ({share})")


if __name__ == "__main__":
    main()
