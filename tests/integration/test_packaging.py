"""The built wheel, installed into a fresh virtualenv, gives ``spillway`` and ``import spillway``,
and nothing else at top level, so it installs beside Django Channels (``import channels``).

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

import pytest

pytestmark = pytest.mark.soak

ROOT = Path(__file__).resolve().parents[2]
# One import package ships: the layers (channels/, offsets/, recovery/, spark_jobs/ in the
# tree) are linked under spillway/, and devtools (`spillway broker|cluster|demo`) lives there.
SHIPPED = {"spillway"}
LAYERS = ("channels", "offsets", "recovery", "spark_jobs")
OURS = (*SHIPPED, *LAYERS, "chaos", "bench", "tests", "spillway_channels", "__editable__")


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
    for pkg in (*SHIPPED, *LAYERS, "chaos", "bench", "tests"):  # all present, as in a checkout
        shutil.copytree(
            ROOT / pkg, src / pkg, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
        )
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
    assert "spillway/devtools/localbroker/pom.xml" in names  # package data: the broker's jars
    assert "spillway/spark_jobs/ui/page.html" in names  # package data: spillway ui's page
    assert "spillway/channels/kafka/producer.py" in names  # the layers, under spillway

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
    page = "from spillway.spark_jobs.ui.server import page; assert b'/api/snapshot' in page()"
    run(py, "-c", page, cwd=tmp_path)
    check = (
        "import spillway, spillway.spark_jobs, sys\n"
        "assert spillway.__file__.startswith(sys.prefix), spillway.__file__\n"
        "assert spillway.spark_jobs.__file__.startswith(sys.prefix), spillway.spark_jobs.__file__\n"
        "p = spillway.Pipeline('pkg')\n"
        "schema = {'type': 'record', 'name': 'R', 'fields': [{'name': 'i', 'type': 'long'}]}\n"
        "src = p.generate('src', count=10, make=lambda i: {'i': i}, schema=schema, parallelism=2)\n"
        "src.write_jsonl('out', '/nonexistent')\n"
        "plan = p.plan('job')\n"
        "print(spillway.__version__, [str(s) for s in plan.subtasks()])\n"
        "assert issubclass(spillway.ConfigError, spillway.SpillwayError)\n"
        "for name in ('chaos', 'bench', 'tests', 'channels', 'offsets', 'recovery', 'devtools'):\n"
        "    try:\n"
        "        __import__(name)\n"
        "    except ImportError:\n"
        "        continue\n"
        "    raise AssertionError(name + ' is importable from the wheel')\n"
    )
    out = run(py, "-c", check, cwd=tmp_path)
    assert out.strip() == "0.1.0 ['job/src[0]', 'job/src[1]', 'job/out[0]', 'job/out[1]']"


def test_wheel_installs_beside_django_channels(tmp_path: Path) -> None:
    """Django Channels' import name is ``channels``: both wheels install into one venv, each
    keeps its own files, and uninstalling Django Channels leaves Spillway whole."""
    wheel = build_wheel(tmp_path)
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    py = venv / "bin" / "python"
    purelib = Path(
        run(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=venv).strip()
    )
    (purelib / "_deps.pth").write_text(f"{third_party_only(tmp_path)}\n")
    pip = (sys.executable, "-m", "pip", "--python", py)
    run(*pip, "install", "-q", "--no-deps", "channels==4.3.2", cwd=tmp_path)  # from PyPI
    run(*pip, "install", "-q", "--no-index", "--no-deps", wheel, cwd=tmp_path)

    both = (
        "import channels, spillway.channels.reader, spillway.spark_jobs.api.pipeline\n"
        "print(channels.__version__, channels.__file__, spillway.channels.__file__)\n"
    )
    version, django_file, ours = run(py, "-c", both, cwd=tmp_path).split()
    assert version == "4.3.2"
    assert Path(django_file) == purelib / "channels" / "__init__.py"
    assert Path(ours) == purelib / "spillway" / "channels" / "__init__.py"

    run(*pip, "uninstall", "-q", "-y", "channels", cwd=tmp_path)
    assert not (purelib / "channels").exists()
    after = "import spillway.channels.reader, spillway; print(spillway.Pipeline)"
    out = run(py, "-c", after, cwd=tmp_path)
    assert "spillway.spark_jobs.api.pipeline.Pipeline" in out
