"""Everything the stand-in images need, fetched on the host (builds cannot reach out).

Only Debian's packages, PyPI and Maven Central, through their own clients: debootstrap
and apt-get, pip, Maven. Each result is cached under a key of what was asked for
(:mod:`composetest.cache`), so a second run fetches nothing.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import time
from importlib.metadata import requires, version
from pathlib import Path

from composetest.cache import digest, fill_once
from composetest.host import ComposeTestError, run
from spillway.devtools.localbroker.jars import resolve_jars

log = logging.getLogger(__name__)

SUITE = "bookworm"
# Both images install from one local package repository: the Kafka image takes Java only.
PACKAGES = ("openjdk-17-jre-headless", "python3", "python3-venv", "curl")
DIST = "spillway-channels"
# What goes into the Spark image's /opt/spillway and the package wheel (not tests, docs).
SOURCES = (
    "spillway",  # the front door: the wheel's `spillway` command, and what the example imports
    "channels",
    "offsets",
    "recovery",
    "spark_jobs",
    "chaos",
    "pyproject.toml",
    "README.md",
)
_DEFAULT_MIRROR = "http://deb.debian.org/debian"
# The mount point of the package directory in the Dockerfiles' RUN --mount.
_MOUNTED_AT = "/mnt/debs"


def debian_mirror(apt_dir: Path = Path("/etc/apt")) -> str:
    """The Debian archive apt uses here (not the security one); deb.debian.org if none."""
    files = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*"))]
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            continue
        for uri in re.findall(r"(?:URIs:|^deb(?:\s+\[[^]]*\])?)\s+(\S+)", text, re.MULTILINE):
            if uri.rstrip("/").endswith("/debian"):
                return str(uri).rstrip("/")
    return _DEFAULT_MIRROR


def rootfs_tar(cache: Path) -> Path:
    """A minimal Debian (debootstrap minbase) as a tar for ``docker import``, made once."""
    mirror = debian_mirror()
    key = digest([SUITE, "minbase", mirror])
    target = cache / "rootfs" / f"{SUITE}-{key}.tar"
    if target.is_file():
        return target
    work = cache / "rootfs" / f"tmp-{key}"
    shutil.rmtree(work, ignore_errors=True)
    work.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    run(["debootstrap", "--variant=minbase", SUITE, work, mirror], timeout=1200)
    # No package lists or archives in the image: builds install from their own source.
    for junk in ("var/lib/apt/lists", "var/cache/apt/archives"):
        for path in (work / junk).glob("*"):
            if path.is_file():
                path.unlink()
    partial = target.with_suffix(".tmp")
    run(["tar", "-C", work, "-cf", partial, "."], timeout=600)
    partial.replace(target)
    shutil.rmtree(work)
    log.info("Debian %s rootfs made in %.0f s", SUITE, time.monotonic() - started)
    return target


def debs(cache: Path) -> Path:
    """A local apt repository with :data:`PACKAGES` and their whole dependency closure."""
    key = digest([SUITE, *PACKAGES])
    return fill_once(cache / "debs" / key, _download_debs)


def _download_debs(target: Path) -> None:
    started = time.monotonic()
    status = target / "empty-status"
    status.write_text("", encoding="ascii")
    run(["apt-get", "update", "-q"], timeout=600, env={"DEBIAN_FRONTEND": "noninteractive"})
    # Against an empty dpkg status apt downloads the whole closure, not only what this
    # host lacks; no package caches are written, so the host's apt state is untouched.
    run(
        [
            "apt-get",
            "-q",
            "-y",
            "--download-only",
            "-o",
            f"Dir::State::status={status}",
            "-o",
            f"Dir::Cache::archives={target}",
            "-o",
            "Dir::Cache::pkgcache=",
            "-o",
            "Dir::Cache::srcpkgcache=",
            "-o",
            "APT::Install-Recommends=false",
            "install",
            *PACKAGES,
        ],
        timeout=1200,
        env={"DEBIAN_FRONTEND": "noninteractive"},
    )
    status.unlink()
    shutil.rmtree(target / "partial", ignore_errors=True)
    (target / "lock").unlink(missing_ok=True)
    index = run(["dpkg-scanpackages", "--multiversion", ".", "/dev/null"], timeout=300, cwd=target)
    (target / "Packages").write_text(index, encoding="utf-8")
    (target / "local.list").write_text(f"deb [trusted=yes] file:{_MOUNTED_AT} ./\n", "ascii")
    count = len(list(target.glob("*.deb")))
    log.info("Downloaded %d Debian packages in %.0f s", count, time.monotonic() - started)


def runtime_requirements() -> list[str]:
    """The package's runtime dependencies pinned to the versions installed here."""
    names = []
    for spec in requires(DIST) or []:
        if "extra ==" in spec:
            continue
        match = re.match(r"[A-Za-z0-9._-]+", spec)
        if match is not None:
            names.append(match.group(0))
    return sorted(f"{name}=={version(name)}" for name in names)


def wheels(cache: Path) -> Path:
    """Wheels of the runtime dependencies (pyspark included), as installed in this venv."""
    pins = runtime_requirements()
    freeze = _freeze()
    key = digest([sys.version.split()[0], *pins, freeze])

    def fill(target: Path) -> None:
        started = time.monotonic()
        (target / "requirements.txt").write_text("\n".join(pins) + "\n", encoding="utf-8")
        (target.parent / f"{key}.constraints").write_text(freeze, encoding="utf-8")
        # pip builds pyspark's wheel from its sdist unless its wheel cache has it already
        # (installing the venv put it there).
        run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "-q",
                "--wheel-dir",
                target,
                "-r",
                target / "requirements.txt",
                "-c",
                target.parent / f"{key}.constraints",
            ],
            timeout=1800,
        )
        count = len(list(target.glob("*.whl")))
        log.info("Collected %d wheels in %.0f s", count, time.monotonic() - started)

    return fill_once(cache / "wheels" / key, fill)


def _freeze() -> str:
    out = run([sys.executable, "-m", "pip", "freeze", "--exclude-editable"], timeout=120)
    return "".join(line + "\n" for line in sorted(out.splitlines()) if "==" in line)


def kafka_jars() -> Path:
    """The broker jars of the packaged pom's Kafka release (the local broker's cache)."""
    return resolve_jars()


def repository_root() -> Path:
    """The checkout this package was installed from (editable install)."""
    return Path(__file__).resolve().parents[1]


def copy_sources(root: Path, target: Path) -> None:
    """Copy :data:`SOURCES` of ``root`` (tracked files only, when it is a git checkout)."""
    tracked = _git_files(root)
    for name in SOURCES:
        source = root / name
        files = [source] if source.is_file() else sorted(source.rglob("*"))
        for path in files:
            relative = path.relative_to(root)
            if path.is_symlink():  # spillway/channels -> ../channels: kept a link, as in git
                link = target / relative
                if not link.is_symlink() and (tracked is None or str(relative) in tracked):
                    link.parent.mkdir(parents=True, exist_ok=True)
                    link.symlink_to(os.readlink(path))
                continue
            if not path.is_file() or "__pycache__" in relative.parts:
                continue
            if tracked is not None and str(relative) not in tracked:
                continue
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target / relative)


def _git_files(root: Path) -> set[str] | None:
    try:
        out = subprocess.run(
            [
                "git",
                "-C",
                str(root),
                "ls-files",
                "-z",
                "--cached",
                "--others",
                "--exclude-standard",
            ],
            capture_output=True,
            timeout=60,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {p.decode() for p in out.split(b"\0") if p}


def package_wheel(sources: Path, target: Path) -> Path:
    """Build this package's wheel from the copied ``sources`` (not in the checkout)."""
    run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--wheel-dir", target, sources],
        timeout=600,
    )
    found = sorted(target.glob("*.whl"))
    if len(found) != 1:
        raise ComposeTestError(f"expected one wheel of {DIST} in {target}, found {found}")
    return found[0]
