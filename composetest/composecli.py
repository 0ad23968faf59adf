"""Which compose runs the deployment: Compose v2 when present or buildable, else 1.29.

Debian bookworm packages docker-compose 1.29 only. Compose v2 is built once from the Go
module proxy into the cache (``<cache>/compose/bin/docker-compose-v2``): ``go install``
refuses the module because its go.mod has an ``exclude`` block, so a small wrapper module
requires ``github.com/docker/compose/v2`` and carries a copy of that block. The build
takes about 5 minutes on 2 cores; when it fails, or there is no Go, 1.29 runs and the
run says so.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from composetest.host import DOCKER_CLIENT, ComposeTestError, run, which

log = logging.getLogger(__name__)

V2_MODULE = "github.com/docker/compose/v2"
V2_VERSION = "v2.40.3"
PROJECT = "spillway"
_BUILD_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class ComposeCli:
    """A compose command line (``argv`` prefix) and its version."""

    argv: tuple[str, ...]
    version: str

    @property
    def major(self) -> int:
        """1 for docker-compose 1.x, 2 for Compose v2."""
        return int(self.version.lstrip("v").split(".")[0])

    def command(self, files: list[Path], *args: str) -> list[str]:
        """argv for ``compose -p spillway -f FILE ... ARGS``."""
        options = [x for f in files for x in ("-f", str(f))]
        return [*self.argv, "-p", PROJECT, *options, *args]


def v1() -> ComposeCli | None:
    """Debian's docker-compose (1.29), if installed."""
    found = which("docker-compose")
    if found is None:
        return None
    out = run([found, "version", "--short"], timeout=60, quiet=True).strip()
    return ComposeCli((found,), out)


def v2(cache: Path, *, build: bool) -> ComposeCli | None:
    """Compose v2: the engine client's plugin, the cached build, or (``build``) a new build."""
    plugin = subprocess.run(
        [str(DOCKER_CLIENT), "compose", "version", "--short"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if plugin.returncode == 0:
        return ComposeCli((str(DOCKER_CLIENT), "compose"), plugin.stdout.strip())
    binary = cache / "bin" / f"docker-compose-{V2_VERSION}"
    if not binary.is_file() and build:
        try:
            build_v2(cache, binary)
        except ComposeTestError as exc:
            log.warning("Compose v2 could not be built, docker-compose 1.29 runs: %s", exc)
            return None
    if not binary.is_file():
        return None
    out = run([binary, "version", "--short"], timeout=60, quiet=True).strip()
    return ComposeCli((str(binary),), out)


def build_v2(cache: Path, binary: Path) -> None:
    """Build Compose ``V2_VERSION`` into ``binary`` through a wrapper module (see above)."""
    go = which("go")
    if go is None:
        raise ComposeTestError("no Go toolchain (go) on PATH")
    started = time.monotonic()
    gocache = cache / "go"
    env = {
        "GOMODCACHE": str(gocache / "mod"),
        "GOCACHE": str(gocache / "build"),
        "GOFLAGS": "-mod=mod",
        "GOTOOLCHAIN": "local",
        "CGO_ENABLED": "0",
    }
    listed = run(
        [go, "mod", "download", "-json", f"{V2_MODULE}@{V2_VERSION}"], timeout=600, env=env
    )
    gomod = Path(_json_field(listed, "GoMod")).read_text(encoding="utf-8")
    wrapper = gocache / "wrapper"
    wrapper.mkdir(parents=True, exist_ok=True)
    (wrapper / "go.mod").write_text(wrapper_go_mod(gomod), encoding="utf-8")
    (wrapper / "tools.go").write_text(
        f'//go:build tools\n\npackage tools\n\nimport _ "{V2_MODULE}/cmd"\n', encoding="utf-8"
    )
    run([go, "mod", "tidy", "-e"], timeout=_BUILD_TIMEOUT_S, env=env, cwd=wrapper)
    partial = binary.with_suffix(".tmp")
    binary.parent.mkdir(parents=True, exist_ok=True)
    ldflags = f"-s -w -X {V2_MODULE}/internal.Version={V2_VERSION}"
    run(
        [go, "build", "-trimpath", "-ldflags", ldflags, "-o", partial, f"{V2_MODULE}/cmd"],
        timeout=_BUILD_TIMEOUT_S,
        env=env,
        cwd=wrapper,
    )
    os.replace(partial, binary)
    log.info("Built Compose %s in %.0f s", V2_VERSION, time.monotonic() - started)


def wrapper_go_mod(upstream: str) -> str:
    """go.mod of the wrapper: ``go`` line, the requirement, and upstream's exclude blocks.

    ``go build`` of a dependency ignores that dependency's ``exclude`` directives; copying
    them into the main module makes them apply, as in upstream's own build.
    """
    go_line = re.search(r"^go \S+$", upstream, re.MULTILINE)
    excludes = re.findall(r"^exclude (?:\(.*?^\)|\S+ \S+)$", upstream, re.MULTILINE | re.DOTALL)
    lines = [
        "module spillway.invalid/composev2",
        "",
        go_line.group(0) if go_line else "go 1.24",
        "",
        f"require {V2_MODULE} {V2_VERSION}",
        "",
        *excludes,
    ]
    return "\n".join(lines) + "\n"


def _json_field(text: str, field: str) -> str:
    match = re.search(rf'"{field}":\s*"([^"]+)"', text)
    if match is None:
        raise ComposeTestError(f"`go mod download -json` printed no {field}: {text[:300]}")
    return match.group(1)
