"""The session-lateness rule as the pipeline API page states it, with its own example:
lateness is judged on the session a record would end up in after merging."""

from __future__ import annotations

from spillway import Pipeline, Session, Watermarks, count
from spillway.testing import TestDriver

VISIT = {
    "type": "record",
    "name": "Visit",
    "fields": [{"name": "user", "type": "string"}, {"name": "ts", "type": "long"}],
}
MIN = 60_000


def at(h: int, m: int) -> int:
    """Event time of ``h:m`` on the day the test's clock starts (ms)."""
    return (h * 60 + m) * MIN


def build(out: str) -> Pipeline:
    p = Pipeline("sessions")
    visits = p.read_kafka(
        "visits", "visits-topic", schema=VISIT, timestamp_column="ts",
        watermarks=Watermarks.bounded(0),
    )
    sessions = visits.key_by("user").window("per-visit", Session(10 * MIN))
    sessions.agg(n=count()).write_jsonl("sessions", out)
    return p


def test_a_record_far_behind_the_watermark_merges_into_an_open_session(tmp_path: object) -> None:
    with TestDriver(build(str(tmp_path))) as t:
        t.send("visits", [{"user": "b", "ts": at(11, 40)}, {"user": "b", "ts": at(11, 42)}])
        t.send("visits", [{"user": "a", "ts": at(12, 12)}, {"user": "a", "ts": at(12, 21)}])
        t.advance_event_time(at(12, 30))
        # b's [11:40, 11:52) fired; a's [12:12, 12:31) is still open at 12:30.
        assert t.output("sessions") == [
            {"user": "b", "start": at(11, 40), "end": at(11, 52), "n": 2}
        ]
        t.send("visits", [{"user": "a", "ts": at(12, 5)}, {"user": "b", "ts": at(12, 5)}])
        (late,) = t.dead_letters()
        assert (late.stage, late.record) == ("late", {"user": "b", "ts": at(12, 5)})
        t.advance_event_time(at(12, 31))
        assert t.output("sessions")[1:] == [
            {"user": "a", "start": at(12, 5), "end": at(12, 31), "n": 3}
        ]
