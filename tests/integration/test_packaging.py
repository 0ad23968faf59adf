"""The built wheel, installed into a fresh virtualenv, gives ``spillway`` and ``import spillway``.

The wheel is built from a clean copy of the sources (a stale ``build/`` directory in the
tree cannot leak into it) and installed with ``--no-index --no-deps`` into a new venv
(not editable). Its dependencies — pyspark alone is ~300 MB — are not downloaded again:
the new venv sees the test venv's installed third-party packages through a ``.pth`` file
pointing at a directory of links to them, which leaves out every Spillway package and the
editable install, so only the wheel's copy of Spillway can be imported.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# devtools ships too: the `spillway broker`, `spillway cluster` and `spillway demo` commands
# are its local broker, local Spark cluster and demo.
SHIPPED = {"spillway", "channels", "offsets", "recovery", "spark_jobs", "devtools"}
OURS = (*SHIPPED, "chaos", "bench", "tests", "spillway_channels", "__editable__")


def run(*argv: str | Path, cwd: Path) -> str:
    proc = subprocess.run(
        [str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, f"{argv}: {proc.stdout[-2000:]}{proc.stderr[-3000:]}"
    return proc.stdout


def build_wheel(tmp: Path) -> Path:
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for pkg in (*SHIPPED, "chaos", "bench", "tests"):  # all present, as in a checkout
        shutil.copytree(ROOT / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp / "wheels"
    run(sys.executable, "-m", "pip", "wheel", src, "--no-deps", "-q", "-w", out, cwd=tmp)
    (wheel,) = out.glob("spillway_channels-*.whl")
    return wheel


def third_party_only(tmp: Path) -> Path:
    """A directory of links to this venv's installed packages, none of Spillway's."""
    site = Path(sysconfig.get_paths()["purelib"])
    deps = tmp / "deps"
    deps.mkdir()
    for entry in site.iterdir():
        if not entry.name.startswith(OURS) and not entry.name.endswith(".pth"):
            (deps / entry.name).symlink_to(entry)
    return deps


def test_wheel_installs_a_working_cli_and_import_spillway(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    top = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert top == SHIPPED  # no tests, bench or chaos
    assert "devtools/localbroker/pom.xml" in names  # package data: the broker's jars list
    assert "spark_jobs/ui/page.html" in names  # package data: spillway ui's page

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    py = venv / "bin" / "python"
    purelib = run(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=venv)
    (Path(purelib.strip()) / "_deps.pth").write_text(f"{third_party_only(tmp_path)}\n")
    run(
        sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-index", "--no-deps",
        wheel, cwd=tmp_path,
    )  # fmt: skip

    # Outside the source tree: only the installed wheel can answer.
    help_text = run(venv / "bin" / "spillway", "--help", cwd=tmp_path)
    for command in ("run", "status", "demo", "broker"):
        assert command in help_text
    assert "--metrics-port" in run(venv / "bin" / "spillway", "run", "--help", cwd=tmp_path)
    page = "from spark_jobs.ui.server import page; assert b'/api/snapshot' in page()"
    run(py, "-c", page, cwd=tmp_path)
    check = (
        "import spillway, spark_jobs, sys\n"
        "assert spillway.__file__.startswith(sys.prefix), spillway.__file__\n"
        "assert spark_jobs.__file__.startswith(sys.prefix), spark_jobs.__file__\n"
        "p = spillway.Pipeline('pkg')\n"
        "schema = {'type': 'record', 'name': 'R', 'fields': [{'name': 'i', 'type': 'long'}]}\n"
        "src = p.generate('src', count=10, make=lambda i: {'i': i}, schema=schema, parallelism=2)\n"
        "src.write_jsonl('out', '/nonexistent')\n"
        "plan = p.plan('job')\n"
        "print(spillway.__version__, [str(s) for s in plan.subtasks()])\n"
        "assert issubclass(spillway.ConfigError, spillway.SpillwayError)\n"
        "for name in ('chaos', 'bench', 'tests'):\n"
        "    try:\n"
        "        __import__(name)\n"
        "    except ImportError:\n"
        "        continue\n"
        "    raise AssertionError(name + ' is importable from the wheel')\n"
    )
    out = run(py, "-c", check, cwd=tmp_path)
    assert out.strip() == "0.1.0 ['job/src[0]', 'job/src[1]', 'job/out[0]', 'job/out[1]']"
