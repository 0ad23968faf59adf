"""Fixtures shared by the Spark job tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from spillway.spark_jobs.spark.sharedctx import shared_spark

RECORDS = 40_000  # clicks per test job: small enough for 2 cores, big enough for checkpoints


@pytest.fixture
def clicks_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    out = tmp_path / "out"
    monkeypatch.setenv("CLICKS_RECORDS", str(RECORDS))
    monkeypatch.setenv("CLICKS_OUT", str(out))
    monkeypatch.setenv("CLICKS_PARALLELISM", "2")
    monkeypatch.delenv("CLICKS_RATE", raising=False)
    monkeypatch.delenv("SPILLWAY_CRASH_AT", raising=False)
    monkeypatch.delenv("CLICKS_CHAINING", raising=False)
    return out


@pytest.fixture(scope="module", autouse=True)
def _shared_spark_context(request: pytest.FixtureRequest) -> Iterator[None]:
    """One Spark context per test module where its runs can share it
    (:func:`spillway.spark_jobs.spark.sharedctx.shared_spark`): ``run_on_spark`` in this
    process keeps its context for the module's next run that wants the same configuration,
    and the context is stopped when the module ends, so the next module (or a process
    check) finds none. A module where sharing is wrong sets ``SHARE_SPARK = False`` with
    its reason; its runs each create and stop their own context, as ``spillway run`` does.
    Runs in subprocesses (``spillway run``, spark-submit) are not affected.
    """
    if not getattr(request.module, "SHARE_SPARK", True):
        yield
        return
    with shared_spark():
        yield
