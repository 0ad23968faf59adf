"""Fixtures shared by the Spark job tests."""

from __future__ import annotations

from pathlib import Path

import pytest

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
