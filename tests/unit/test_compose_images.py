"""composetest.images: dropping outdated stand-in tags, with a fake docker client."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from composetest import images
from composetest.engine import Engine


def test_leftover_containers_of_an_outdated_tag_are_removed_before_the_tag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[list[str]] = []
    answers = {
        "images": "spillway-standin/spark:new\nspillway-standin/spark:old\n",
        "ps": "c1\nc2\n",
    }

    def fake_run(command: Sequence[str | Path], **_: object) -> str:
        argv = [str(c) for c in command]
        verb = argv[argv.index("unix:///fake.sock") + 1]
        calls.append(argv[argv.index(verb) :])
        return answers.get(verb, "")

    monkeypatch.setattr(images, "run", fake_run)
    engine = Engine("unix:///fake.sock", None, None)
    images._drop_older_tags(engine, "spillway-standin/spark:new")

    assert calls[1] == ["ps", "-aq", "--filter", "ancestor=spillway-standin/spark:old"]
    assert calls[2] == ["rm", "-f", "c1", "c2"]
    assert calls[3] == ["rmi", "spillway-standin/spark:old"]  # the current tag is kept
    assert calls[4][:2] == ["builder", "prune"]


def test_no_outdated_tag_removes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def fake_run(command: Sequence[str | Path], **_: object) -> str:
        argv = [str(c) for c in command]
        calls.append(argv)
        return "spillway-standin/spark:new\n" if "images" in argv else ""

    monkeypatch.setattr(images, "run", fake_run)
    images._drop_older_tags(Engine("unix:///fake.sock", None, None), "spillway-standin/spark:new")
    assert not [c for c in calls if "rm" in c or "rmi" in c or "ps" in c]
