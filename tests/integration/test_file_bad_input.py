"""Bad lines in JSONL and CSV sources, on Spark: stop naming file and line, or dead-letter each.

Every input file mixes good lines with four classes of bad ones (>= 100 of each):
invalid UTF-8, malformed lines (not JSON / wrong CSV column count), NaN, and numbers too
big for the schema (a long over 2**63, a double over 1.8e308). With a dead-letter channel
the source subtasks are also SIGKILLed in the middle of their first file (one after a
commit, one before it): the dead-letter channel must still hold every bad line exactly
once, and the output must equal the sums of the good lines exactly.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from pathlib import Path

import pytest

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, OperatorName
from spillway.offsets.store import CheckpointStore
from spillway.recovery.observe.events import read_events
from spillway.spark_jobs.spark.driver import run_on_spark
from spillway.spark_jobs.spark.jobconfig import JobConfig
from tests.integration.deadletters import read_dlq

pytestmark = [pytest.mark.broker, pytest.mark.spark]

REF = "tests.integration.pipelines:file_sums"
FILES = 4
GOOD_PER_FILE = 5000
BAD_EVERY = 40  # one bad line after every 40th good one: 125 per file, >= 100 per class
CLASSES = ("utf8", "malformed", "nan", "huge")


def good_row(i: int) -> dict[str, object]:
    return {"key": f"k{i % 11}", "n": i, "x": i / 8}


def bad_line(kind: str, i: int, fmt: str) -> bytes:
    if fmt == "jsonl":
        return {
            "utf8": b'{"key": "k\xff\xfe", "n": 1, "x": 1.0}',
            "malformed": b'{"key": "k1", "n": 1, "x":',
            "nan": b'{"key": "k1", "n": 1, "x": NaN}',
            "huge": b'{"key": "k1", "n": 9223372036854775808, "x": 1.0}'
            if i % 2
            else b'{"key": "k1", "n": 1, "x": 1e400}',
        }[kind]
    return {
        "utf8": b"k\xc3\x28,1,1.0",
        "malformed": b"k1,1",
        "nan": b"k1,1,NaN",
        "huge": b"k1,99999999999999999999,1.0" if i % 2 else b"k1,1,1e400",
    }[kind]


BadLines = dict[tuple[str, int], str]  # (file, 1-based line) -> class


def write_inputs(directory: Path, fmt: str) -> tuple[dict[str, list[int]], BadLines]:
    """The input files; returns the reference (key -> [count, total]) and the bad lines."""
    directory.mkdir()
    reference: dict[str, list[int]] = {}
    bad: BadLines = {}
    i = 0
    for f in range(FILES):
        path = directory / f"part-{f}.{fmt}"
        lines = [b"key,n,x"] if fmt == "csv" else []
        for j in range(GOOD_PER_FILE):
            row = good_row(i)
            if fmt == "jsonl":
                lines.append(json.dumps(row).encode())
            else:
                lines.append(f"{row['key']},{row['n']},{row['x']}".encode())
            acc = reference.setdefault(str(row["key"]), [0, 0])
            acc[0], acc[1] = acc[0] + 1, acc[1] + i  # n == i
            i += 1
            if j % BAD_EVERY == BAD_EVERY // 2:
                kind = CLASSES[(j // BAD_EVERY) % len(CLASSES)]
                lines.append(bad_line(kind, j // BAD_EVERY // len(CLASSES), fmt))
                bad[(str(path), len(lines))] = kind  # 1-based line number
        path.write_bytes(b"\n".join(lines) + b"\n")
    return reference, bad


def read_sums(out: Path) -> dict[str, list[int]]:
    rows: dict[str, list[int]] = {}
    for f in sorted(out.glob("out/*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            assert r["key"] not in rows, f"duplicate output for {r['key']}"
            rows[r["key"]] = [r["count"], r["total"]]
    return rows


# "csv+batches": the same CSV files read as Arrow batches (read_files(batches=True)).
@pytest.mark.parametrize("fmt", ["jsonl", "csv", "csv+batches"])
def test_dead_letter_channel_takes_every_bad_line_once_across_crashes(
    kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    fmt, batches = fmt.removesuffix("+batches"), fmt.endswith("+batches")
    monkeypatch.setenv("SPILLWAY_TEST_BATCHES", "1" if batches else "0")
    reference, bad = write_inputs(tmp_path / "in", fmt)
    assert min(Counter(bad.values()).values()) >= 100  # >= 100 per class
    monkeypatch.setenv("SPILLWAY_TEST_IN", str(tmp_path / "in" / f"*.{fmt}"))
    monkeypatch.setenv("SPILLWAY_TEST_FORMAT", fmt)
    monkeypatch.setenv("SPILLWAY_TEST_OUT", str(tmp_path))
    # A checkpoint after every source step (2000 lines): the 2nd commit is mid-file.
    # rows[0] dies right after it, rows[1] right before it (its dead letters aborted).
    monkeypatch.setenv("SPILLWAY_CRASH_AT", "rows:0:after-commit:0:2,rows:1:before-commit:0:2")
    config = JobConfig(
        REF, unique, kafka_bootstrap, master="local[6,3]", dead_letter=True,
        checkpoint_interval_s=0.001,
    )  # fmt: skip
    results = {r.subtask.split("/")[1]: r for r in run_on_spark(config)}
    assert {r.status for r in results.values()} == {"finished"}
    assert (results["rows[0]"].attempt, results["rows[1]"].attempt) == (1, 1)
    # No crash loop: only the two planned deaths, nothing else restarted.
    assert {k: r.attempt for k, r in results.items() if not k.startswith("rows")} == {
        f"{op}[{i}]": 0 for op in ("sum", "out") for i in range(2)
    }

    assert read_sums(tmp_path) == reference  # no good line lost, repeated or diverted

    dlq = read_dlq(kafka_bootstrap, unique)
    got = Counter((str(d["file"]), int(str(d["line"]))) for d in dlq)
    assert got == Counter(bad.keys())  # each bad line exactly once, nothing else
    assert Counter(bad[k] for k in got.elements()) == Counter(bad.values())
    lines = {f: Path(f).read_bytes().split(b"\n") for f, _ in bad}
    for d in dlq:
        assert (d["stage"], d["operator"]) == ("source", "rows")
        assert base64.b64decode(str(d["raw"])) == lines[str(d["file"])][int(str(d["line"])) - 1]
        assert d["error"]
    # The restarts really resumed in the middle of a file with bad lines.
    settings = KafkaSettings(kafka_bootstrap)
    store = CheckpointStore(settings, JobId(unique), OperatorName("rows"), 2)
    restarts = [
        e
        for e in read_events(settings, JobId(unique))
        if e.get("event") == "started" and e["operator"] == "rows" and e["attempt"] == 1
    ]
    assert len(restarts) == 2
    for e in restarts:
        ckpt = store.get(int(e["index"]), int(e["restored_from"]))
        assert ckpt is not None
        assert ckpt.source["file"] == 0
        assert 0 < ckpt.source["row"] < GOOD_PER_FILE
    store.close()


def test_by_default_a_bad_line_stops_the_job_naming_file_and_line(
    kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, bad = write_inputs(tmp_path / "in", "jsonl")
    monkeypatch.setenv("SPILLWAY_TEST_IN", str(tmp_path / "in" / "*.jsonl"))
    monkeypatch.setenv("SPILLWAY_TEST_FORMAT", "jsonl")
    monkeypatch.setenv("SPILLWAY_TEST_OUT", str(tmp_path))
    monkeypatch.delenv("SPILLWAY_CRASH_AT", raising=False)
    pattern = r"rows\[\d\]: source 'rows' cannot read \S+part-\d\.jsonl:\d+: "
    with pytest.raises(Exception, match=pattern):
        run_on_spark(JobConfig(REF, unique, kafka_bootstrap, master="local[6,2]", task_attempts=2))
    settings = KafkaSettings(kafka_bootstrap)
    failures = [e for e in read_events(settings, JobId(unique)) if e.get("event") == "failed"]
    assert failures
    assert all(e["operator"] == "rows" for e in failures)
    store = CheckpointStore(settings, JobId(unique), OperatorName("rows"), 2)
    for e in failures:
        msg = str(e["error"])
        assert msg.startswith("RecordError: ")
        assert "--dead-letter" in msg
        file, line = msg.split(" cannot read ")[1].split(": ")[0].rsplit(":", 1)
        assert bad[(file, int(line))]  # it names a line that really is bad...
        first_bad = min(n for (f, n) in bad if f == file)
        assert int(line) == first_bad  # ...the first one of its file
        # Nothing past the bad line is committed.
        ckpt = store.latest(int(e["index"]))
        assert ckpt is None or ckpt.source.get("row", 0) < int(line)
    store.close()
    assert not list(tmp_path.glob("out/*.jsonl"))
