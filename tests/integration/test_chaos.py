"""The chaos suite's short profile (``make chaos`` runs the same) and its negative control.

Each run starts a broker of its own (the broker faults need one the test owns), runs the
keyed chaos job on Spark in a driver subprocess, injects the seeded crash schedule and the
other faults, and checks the committed output against the batch reference exactly.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import pytest

from chaos.run import FAULTS, SHORT, ChaosRun
from chaos.schedule import CHAOS_POINTS

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.soak]

log = logging.getLogger(__name__)

SEED = 1


def test_short_chaos_profile_loses_nothing_and_duplicates_nothing(tmp_path: Path) -> None:
    report = ChaosRun(SHORT, SEED, tmp_path).run()
    log.info("chaos report: %s", json.dumps(report.to_json()))
    # Every planned subtask kill happened, and no other during the schedule.
    assert report.kill_mismatches == [], report.fault_notes
    assert report.kills_planned == SHORT.kills >= 15
    assert set(report.kills_by_point) == set(CHAOS_POINTS)
    assert min(report.kills_by_point.values()) >= 1
    assert report.faults == dict.fromkeys(FAULTS, 1)
    # A live rescale and a live upgrade, each with a kill of a subtask it started:
    # nothing restarted but what each asked for.
    assert [c.split()[0] for c in report.changes] == ["rescale", "upgrade"]
    assert report.change_mismatches == []
    # The output equals the batch reference exactly, every key's seq dense and in order.
    out = report.output
    assert out.committed == out.expected == SHORT.records
    assert (out.lost, out.missing_seqs, out.duplicated, out.unexpected) == (0, 0, 0, 0)
    assert (out.seq_gaps, out.seq_repeats) == (0, 0), out.examples
    # Aborted transactions did leave data in the log, and none of it was read.
    assert report.aborted_messages > 0
    assert report.open_transactions == []
    assert report.replay_outside == []
    assert report.problems == []  # the stopped subtask was retried, the zombie fenced ...
    assert report.exact


def test_the_checker_catches_at_least_once(tmp_path: Path) -> None:
    # A seeded crash schedule without transactions: restarted subtasks re-send what
    # followed their last checkpoint. One kill per crash point is enough for repeats to
    # show, and a smaller job paced over 12 s still outlasts every kill, so the control
    # costs about half of what the full schedule (16 kills over 40 s) did.
    profile = replace(SHORT, records=20_000, emit_s=12.0, faults=(), kills=len(CHAOS_POINTS))
    report = ChaosRun(profile, SEED, tmp_path, guarantee="at-least-once").run()
    log.info("chaos report: %s", json.dumps(report.to_json()))
    assert report.kill_mismatches == []
    out = report.output
    assert out.committed > out.expected
    assert out.missing_seqs == 0  # nothing lost ...
    assert out.seq_repeats > 0  # ... but repeats, which the checker reports
    assert out.duplicated + out.unexpected > 0
    assert not report.exact
