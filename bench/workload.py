"""The B1/B2 workload: page-view events in, a running view count per page out.

Every engine runs the same three operators on the same input topic:

1. **source**: JSON events of exactly :data:`RECORD_BYTES` bytes from a pre-loaded topic;
2. **map/parse**: decode, take page and section out of the URL (:func:`parse`);
3. **keyed count**: views per page (a running count kept as state);
4. **sink**: ``{"page", "section", "views"}`` as JSON to the output topic, keyed by page,
   exactly-once (Kafka transactions committed about every second).

Events are a pure function of their index (:func:`make_event`), so :func:`reference`
knows the exact final count of every page and :func:`check_output` can tell a complete,
duplicate-free output from anything else.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import xxhash
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

RECORD_BYTES = 200
SECTIONS = ("news", "sport", "shop", "help", "blog")
PAGES_PER_SECTION = 400
_BASE_TS = 1_700_000_000_000


def make_event(i: int) -> dict[str, Any]:
    """Event ``i`` (a fixed function of ``i``) padded so its JSON is :data:`RECORD_BYTES`."""
    h = xxhash.xxh64_intdigest(i.to_bytes(8, "little"))
    section = SECTIONS[h % len(SECTIONS)]
    event: dict[str, Any] = {
        "seq": i,
        "user": (h >> 8) % 20_000,
        "url": f"https://example.com/{section}/{(h >> 24) % PAGES_PER_SECTION}?ref={(h >> 40) % 7}",
        "ts": _BASE_TS + i,
        "agent": "",
    }
    room = RECORD_BYTES - len(encode(event))
    if room < 0:
        raise ValueError(f"event {i} is {RECORD_BYTES - room} bytes, over {RECORD_BYTES}")
    event["agent"] = "a" * room
    return event


def encode(record: dict[str, Any]) -> bytes:
    """Compact JSON, the wire format of input and output."""
    return json.dumps(record, separators=(",", ":")).encode()


def parse(event: dict[str, Any]) -> dict[str, Any]:
    """The map step: page (path without query) and section of an event's URL."""
    path = event["url"].split("://", 1)[1].split("?", 1)[0]
    _, section, page = path.split("/", 2)
    return {"page": f"/{section}/{page}", "section": section}


def reference(records: int) -> Counter[str]:
    """Final views per page after events ``0 .. records-1``."""
    return Counter(parse(make_event(i))["page"] for i in range(records))


def preload(bootstrap: str, topic: str, records: int, partitions: int) -> None:
    """Write events ``0 .. records-1`` round-robin over ``partitions`` (plain producer)."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000, "acks": "all"}
    )
    for i in range(records):
        while True:
            try:
                producer.produce(topic, encode(make_event(i)), partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.1)  # local queue full: let librdkafka send some
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(60) != 0:
        raise RuntimeError(f"could not write all {records} input records to {topic}")


@dataclass(frozen=True)
class OutputCheck:
    """What an engine wrote: messages, and whether the final counts are right."""

    messages: int
    final_counts_ok: bool
    every_update_once: bool  # each page's counts are exactly 1..final, once each
    problem: str = ""
    fields_ok: bool = True  # every message: exactly page, section, views; keyed by page


def judge(updates: Iterable[tuple[str, int]], expected: Counter[str]) -> OutputCheck:
    """Compare ``(page, views)`` updates in output order with the reference. Pure."""
    seen: dict[str, list[int]] = {}
    n = 0
    for page, views in updates:
        seen.setdefault(page, []).append(views)
        n += 1
    final = {page: max(v) for page, v in seen.items()}
    problem = ""
    counts_ok = final == dict(expected)
    if not counts_ok:
        wrong = sorted(set(final.items()) ^ set(expected.items()))[:3]
        problem = f"final counts differ from the reference, e.g. {wrong}"
    once = all(sorted(v) == list(range(1, expected.get(p, 0) + 1)) for p, v in seen.items())
    return OutputCheck(n, counts_ok, once and counts_ok, problem)


def read_rows(
    bootstrap: str, topic: str, group: str, idle_s: float = 5.0
) -> list[tuple[bytes | None, bytes | None]]:
    """``(key, value)`` of every committed message of ``topic``, in partition order."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        parts = sorted(meta.partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        done: set[int] = set()
        out: list[tuple[bytes | None, bytes | None]] = []
        while len(done) < len(parts):
            msgs = consumer.consume(5000, idle_s)
            if not msgs:
                break
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        done.add(m.partition() or 0)
                        continue
                    raise RuntimeError(f"reading {topic}: {err}")
                out.append((m.key(), m.value()))
        return out
    finally:
        consumer.close()


def read_output(
    bootstrap: str, topic: str, group: str, idle_s: float = 5.0
) -> list[tuple[str, int]]:
    """``(page, views)`` of every committed output message, in partition order."""
    out = []
    for _, value in read_rows(bootstrap, topic, group, idle_s):
        row = json.loads(value or b"{}")
        out.append((str(row["page"]), int(row["views"])))
    return out


OUTPUT_FIELDS = ("page", "section", "views")


def row_problem(key: bytes | None, value: bytes | None) -> str:
    """What is wrong with one output message ('' if nothing). Pure.

    Right is: a JSON object with exactly :data:`OUTPUT_FIELDS`, page and section strings,
    the section the one in the page's path, views an integer >= 1, keyed by the page.
    """
    try:
        row = json.loads(value or b"")
    except ValueError:
        return f"value is not JSON: {value[:80] if value else value!r}"
    if not isinstance(row, dict) or sorted(row) != sorted(OUTPUT_FIELDS):
        fields = sorted(row) if isinstance(row, dict) else type(row).__name__
        return f"fields {fields}, expected {sorted(OUTPUT_FIELDS)}"
    page, section, views = row["page"], row["section"], row["views"]
    if not (isinstance(page, str) and isinstance(section, str)):
        return f"page and section must be strings: {row}"
    if type(views) is not int or views < 1:
        return f"views must be an integer >= 1: {row}"
    if page.split("/")[1:2] != [section]:
        return f"section {section!r} is not the one of page {page!r}"
    if key != page.encode():
        return f"key {key!r} is not the page {page!r}"
    return ""


def check_rows(
    rows: Iterable[tuple[bytes | None, bytes | None]], expected: Counter[str]
) -> OutputCheck:
    """:func:`judge` of the well-formed rows, failed by any malformed one. Pure."""
    good: list[tuple[str, int]] = []
    bad: list[str] = []
    for i, (key, value) in enumerate(rows):
        if problem := row_problem(key, value):
            bad.append(f"message {i}: {problem}")
            continue
        row = json.loads(value or b"")
        good.append((row["page"], row["views"]))
    check = judge(good, expected)
    if not bad:
        return check
    problem = f"{len(bad)} malformed message(s), e.g. {bad[0]}"
    return replace(
        check,
        messages=check.messages + len(bad),
        final_counts_ok=False,
        every_update_once=False,
        fields_ok=False,
        problem=problem + ("; " + check.problem if check.problem else ""),
    )
