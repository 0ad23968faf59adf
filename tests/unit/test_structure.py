"""The package's shape, where import-linter cannot see it: Kafka clients are made in one
room, and no layer imports the front door (``from spillway import ...``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "spillway"
KAFKA_ROOM = PACKAGE / "channels" / "kafka"
LAYERS = ("channels", "offsets", "recovery", "spark_jobs")
CLIENTS = {"Producer", "Consumer", "AdminClient"}


def modules(under: Path) -> list[Path]:
    # rglob does not follow the layers' symbolic links in spillway/, so walk each layer.
    return sorted(p for p in under.resolve().rglob("*.py") if "__pycache__" not in p.parts)


def all_modules() -> list[Path]:
    found = {p for layer in LAYERS for p in modules(PACKAGE / layer)}
    found |= {p.resolve() for p in PACKAGE.glob("*.py")}
    found |= {p for d in ("devtools", "examples") for p in modules(PACKAGE / d)}
    return sorted(found)


def client_calls(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    return [
        f"{path}:{node.lineno}: {node.func.id}(...)"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in CLIENTS
    ]


def test_the_walk_sees_every_layer() -> None:
    names = {p.parent.name for p in all_modules()}
    assert {"kafka", "wire", "routing", "runtime", "restore", "api", "spark", "devtools"} <= names


def test_kafka_clients_are_created_only_in_channels_kafka() -> None:
    room = KAFKA_ROOM.resolve()
    outside = [c for p in all_modules() if room not in p.parents for c in client_calls(p)]
    assert outside == []
    assert client_calls(room / "clients.py")  # the check can see a creation


@pytest.mark.parametrize("layer", LAYERS)
def test_no_layer_imports_the_front_door(layer: str) -> None:
    bare = []
    for path in modules(PACKAGE / layer):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module == "spillway" and node.level == 0:
                bare.append(f"{path}:{node.lineno}")
            if isinstance(node, ast.Import) and any(a.name == "spillway" for a in node.names):
                bare.append(f"{path}:{node.lineno}")
    assert bare == []
