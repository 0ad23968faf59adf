"""The five-minute soak: the code of ``make soak-long`` (chaos.soak), run for five minutes.

The keyed chaos job on a broker of its own at 1000 records/s, a subtask's Python worker
SIGKILLed every minute, processes and topics sampled every 5 s.

Not named test_*.py, so neither `make test` nor `make soak` collects it: it joins
`make soak` (as test_soak.py) once it has passed twice in a row; until then run it by
path, `pytest tests/integration/soak_five.py`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.soak import CHECKPOINT_BOUND, SoakConfig, SoakRun, write_result

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.soak]


FIVE_MINUTES = SoakConfig(minutes=5, rate=1000, kill_every_s=60)


def test_five_minute_soak_is_exact_under_kills_with_checkpoints_pruned(tmp_path: Path) -> None:
    result = SoakRun(FIVE_MINUTES, tmp_path / "run").soak()
    path = write_result(result, tmp_path)
    for line in result.lines():
        print("soak:", line)
    print("soak: results in", path)
    report = result.report
    # Every planned kill happened, the job recovered from each, and nothing else restarted.
    assert [k.subtask for k in result.kills] == ["gen[0]", "weigh[0]", "fold[0]", "sink[0]"]
    assert [k.recovered_s is not None for k in result.kills] == [True] * 4
    assert report["kill_mismatches"] == []
    assert report["restarts"] == 4
    assert report["problems"] == []
    # The output equals the batch reference exactly: 0 lost, 0 duplicated, keys in order.
    out = report["output"]
    assert out["committed"] == out["expected"] == FIVE_MINUTES.records
    assert (out["lost"], out["missing_seqs"], out["duplicated"], out["unexpected"]) == (0, 0, 0, 0)
    assert (out["seq_gaps"], out["seq_repeats"]) == (0, 0), out["examples"]
    assert report["open_transactions"] == []
    assert report["exact"]
    # Checkpoint topics were pruned, and no partition retained more than the prune keeps.
    assert result.checkpoint_problems == []
    assert result.summary is not None
    assert result.summary.topics_end["checkpoint"].max_partition_retained <= CHECKPOINT_BOUND
    # Every process kind was sampled after warm-up (RSS is reported, not judged: five
    # minutes are too short to tell growth from warm-up); a short-lived helper process of
    # the driver's session may show up too, as "other".
    kinds = {"driver-python", "driver-jvm", "python-daemon", "python-worker", "broker-jvm"}
    assert set(result.summary.rss) - {"other"} == kinds
    assert result.problems(growth_limit=None) == []
