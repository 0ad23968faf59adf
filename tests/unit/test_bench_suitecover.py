"""bench.suitecover on a tiny checkout of its own: which files count as product code, what
each tier's run is given, and how covered statements are counted per tier and together.
The data files are written with coverage.py's own API, as measured processes write them;
no make, no broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import coverage

from bench import suitecover

MODULE_A = "def f(x):\n    if x:\n        return 1\n    return 2\n"  # statements 1, 2, 3, 4
MODULE_B = "X = 1\nY = 2\n"  # statements 1, 2


def checkout(tmp_path: Path) -> Path:
    """``root/spillway`` with a symlinked layer folder, as the real tree is laid out."""
    root = tmp_path / "repo"
    (root / "spillway").mkdir(parents=True)
    (root / "spillway" / "__init__.py").write_text("")
    (root / "channels").mkdir()
    (root / "channels" / "__init__.py").write_text("")
    (root / "channels" / "a.py").write_text(MODULE_A)
    (root / "channels" / "b.py").write_text(MODULE_B)
    (root / "spillway" / "channels").symlink_to("../channels")
    return root


def write_data(data_dir: Path, name: str, lines: Mapping[Path, Sequence[int]]) -> None:
    """One process's data file, as coverage.py writes it with ``parallel = true``."""
    data_dir.mkdir(parents=True, exist_ok=True)
    data = coverage.CoverageData(basename=str(data_dir / f"cov.{name}"))
    data.add_lines({str(p): list(ls) for p, ls in lines.items()})
    data.write()


def test_product_files_follow_the_symlinked_layers_and_map_to_real_paths(
    tmp_path: Path,
) -> None:
    root = checkout(tmp_path)
    files = suitecover.product_files(root)
    assert files == {
        "spillway/__init__.py": (root / "spillway" / "__init__.py").resolve(),
        "spillway/channels/__init__.py": (root / "channels" / "__init__.py").resolve(),
        "spillway/channels/a.py": (root / "channels" / "a.py").resolve(),
        "spillway/channels/b.py": (root / "channels" / "b.py").resolve(),
    }
    config = suitecover.config_text(root)
    assert f'"{root / "spillway"}", "{(root / "channels").resolve()}"' in config
    assert 'patch = ["fork", "_exit"]' in config


def test_a_tier_runs_make_with_the_coverage_variables_and_its_own_data_folder(
    tmp_path: Path,
) -> None:
    root = checkout(tmp_path)
    stale = root / ".coverage-data" / "soak" / "cov.old"
    stale.parent.mkdir(parents=True)
    stale.write_text("from an earlier run")
    seen: list[tuple[list[str], Path, dict[str, str]]] = []

    def run(command: Sequence[str], cwd: Path, env: Mapping[str, str]) -> int:
        seen.append((list(command), cwd, dict(env)))
        return 3

    code, _seconds = suitecover.run_tier("soak", root, run)
    assert code == 3
    [(command, cwd, env)] = seen
    data_dir = root / ".coverage-data" / "soak"
    assert (command, cwd) == (["make", "soak"], root)
    assert env["COVERAGE_FILE"] == str(data_dir / "cov")
    assert env["COVERAGE_PROCESS_START"] == str(data_dir / "coverage.toml")
    assert (data_dir / "coverage.toml").read_text() == suitecover.config_text(root)
    assert not stale.exists()


def test_statements_are_counted_per_tier_and_together_across_processes(
    tmp_path: Path,
) -> None:
    root = checkout(tmp_path)
    a = (root / "channels" / "a.py").resolve()
    data = root / ".coverage-data"
    write_data(data / "test", "p1", {a: [1, 2, 3]})
    write_data(data / "test", "p2", {a: [1]})  # a second process of the same tier
    write_data(data / "soak", "p3", {a: [1, 4]})
    (data / "soak" / "cov.p4").write_bytes(b"SQLite format 3\x00 cut short")  # killed saving
    modules = {m.path: m for m in suitecover.measure(root, ["test", "soak"])}
    assert modules["spillway/channels/a.py"] == suitecover.ModuleCoverage(
        "spillway/channels/a.py", 4, {"test": 3, "soak": 2, "all": 4}
    )
    # Never imported: all its statements missed.
    assert modules["spillway/channels/b.py"] == suitecover.ModuleCoverage(
        "spillway/channels/b.py", 2, {"test": 0, "soak": 0, "all": 0}
    )
    total = suitecover.totals(list(modules.values()), ["test", "soak"])
    assert (total.statements, total.covered) == (6, {"test": 3, "soak": 2, "all": 4})


def test_a_result_is_written_and_a_fall_against_an_earlier_one_is_named(
    tmp_path: Path,
) -> None:
    root = checkout(tmp_path)
    a = (root / "channels" / "a.py").resolve()
    b = (root / "channels" / "b.py").resolve()
    write_data(root / ".coverage-data" / "test", "p1", {a: [1, 2, 3, 4], b: [1]})
    before = tmp_path / "before.json"
    assert suitecover.main(["test", "--no-run", "--root", str(root), "--out", str(before)]) == 0
    assert json.loads(before.read_text())["total"]["covered"] == {"test": 5, "all": 5}

    (root / ".coverage-data" / "test" / "cov.p1").unlink()
    write_data(root / ".coverage-data" / "test", "p2", {a: [1], b: [1, 2]})
    after = suitecover.measure(root, ["test"])
    assert suitecover.fallen(suitecover.load(before), after) == [
        ("spillway/channels/a.py", 100.0, 25.0)
    ]


def test_measuring_inside_a_measured_process_keeps_that_process_s_data(tmp_path: Path) -> None:
    # Under `make coverage` these unit tests run in a measured pytest process; a Coverage
    # object made there once cost that process (every unit test's lines) its data file.
    root = checkout(tmp_path)
    write_data(root / ".coverage-data" / "test", "p1", {(root / "channels" / "a.py"): [1]})
    own = tmp_path / "own"
    own.mkdir()
    config = own / "coverage.toml"
    config.write_text(suitecover.config_text(root))
    b = root / "channels" / "b.py"
    script = (
        "import runpy; from pathlib import Path; from bench import suitecover; "
        f"suitecover.measure(Path({str(root)!r}), ['test']); runpy.run_path({str(b)!r})"
    )
    env = dict(
        os.environ,
        COVERAGE_PROCESS_START=str(config),
        COVERAGE_FILE=str(own / "cov"),
        PYTHONPATH=str(Path(suitecover.__file__).parent.parent),
    )
    subprocess.run([sys.executable, "-c", script], env=env, cwd=own, check=True)
    [data_file] = own.glob("cov.*")
    data = coverage.CoverageData(basename=str(data_file))
    data.read()
    assert data.lines(str((root / "channels" / "b.py").resolve())) == [1, 2]
