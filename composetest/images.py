"""The images of the deployment: official ones if they can be pulled, else local stand-ins.

A stand-in is tagged ``spillway-standin/<name>:<hash>``, the hash taken over its
Dockerfile, its base image and every input of its build context. An image whose tag the
engine already has is not built again; the engine's data root is kept between runs.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from composetest import fetch
from composetest.cache import digest, tree_parts
from composetest.engine import Engine
from composetest.host import run

log = logging.getLogger(__name__)

STANDIN_DIR = fetch.repository_root() / "docker" / "standin"
OFFICIAL_KAFKA = "apache/kafka:4.4.0"
_PULL_TIMEOUT_S = 120.0
_BUILD_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class Built:
    """An image ready in the engine: its reference, size, and whether this run built it."""

    ref: str
    size_bytes: int
    built: bool
    seconds: float


@dataclass(frozen=True)
class ContextPart:
    """One entry of a build context: ``name`` in the context, filled from ``source``.

    ``content`` says whether the hash reads the files' bytes (sources) or only their
    names and sizes (packages, wheels and jars, whose names carry their versions).
    """

    name: str
    source: Path
    content: bool


def can_pull(engine: Engine, image: str) -> bool:
    """True if ``image`` is in the engine or a pull of it succeeds (bounded in time)."""
    if _exists(engine, image):
        return True
    try:
        probe = subprocess.run(
            engine.docker("pull", "-q", image),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_PULL_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        log.info("docker pull %s: no answer within %.0f s", image, _PULL_TIMEOUT_S)
        return False
    if probe.returncode != 0:
        reason = (probe.stderr.strip().splitlines() or ["?"])[-1]
        log.info("docker pull %s failed: %s", image, reason)
    return probe.returncode == 0


def base_image(engine: Engine, rootfs: Path) -> str:
    """The Debian base imported from ``rootfs`` (a tar), once per tar."""
    ref = f"spillway-standin/debian:{rootfs.stem}"
    if not _exists(engine, ref):
        run(engine.docker("import", str(rootfs), ref), timeout=600)
    return ref


def standin(
    engine: Engine,
    name: str,
    base: str,
    parts: list[ContextPart],
    *,
    context: Path,
    prepare: Callable[[Path], None] | None = None,
) -> Built:
    """Build ``docker/standin/<name>.Dockerfile`` on ``base`` unless its tag exists.

    The build context is assembled in ``context`` from ``parts`` and the stand-in
    directory's files named ``<name>-*``; ``prepare(context)`` then adds what is derived
    from them (it is only called when the image is built, so it is not hashed).
    """
    dockerfile = STANDIN_DIR / f"{name}.Dockerfile"
    extra = sorted(STANDIN_DIR.glob(f"{name}-*"))
    hash_parts: list[str | bytes] = [dockerfile.read_bytes(), _image_id(engine, base)]
    for part in parts:
        hash_parts += [part.name, *tree_parts(part.source, content=part.content)]
    for path in extra:
        hash_parts += [path.name, path.read_bytes()]
    ref = f"spillway-standin/{name}:{digest(hash_parts)}"
    if _exists(engine, ref):
        return Built(ref, _size(engine, ref), built=False, seconds=0.0)
    started = time.monotonic()
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    for part in parts:
        _link_tree(part.source, context / part.name)
    for path in [dockerfile, *extra]:
        shutil.copy2(path, context / path.name)
    if prepare is not None:
        prepare(context)
    run(
        [
            *engine.docker("build", "-q", "-f", str(context / dockerfile.name)),
            "--build-arg",
            f"BASE={base}",
            "-t",
            ref,
            str(context),
        ],
        timeout=_BUILD_TIMEOUT_S,
        env=engine.env(),
    )
    shutil.rmtree(context)
    _drop_older_tags(engine, ref)
    seconds = time.monotonic() - started
    log.info("Built %s in %.0f s", ref, seconds)
    return Built(ref, _size(engine, ref), built=True, seconds=seconds)


def kafka(engine: Engine, base: str, debs: Path, cache: Path) -> Built:
    """The Kafka stand-in: Java from ``debs`` and the broker jars of the packaged pom."""
    parts = [
        ContextPart("debs", debs, content=False),
        ContextPart("jars", fetch.kafka_jars(), content=False),
    ]
    return standin(engine, "kafka", base, parts, context=cache / "context" / "kafka")


def spark(engine: Engine, base: str, debs: Path, wheels: Path, cache: Path) -> Built:
    """The Spark stand-in: Java and Python, pyspark and the wheels, this package."""
    src = cache / "context" / "spark-src"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    fetch.copy_sources(fetch.repository_root(), src)
    parts = [
        ContextPart("debs", debs, content=False),
        ContextPart("wheels", wheels, content=False),
        ContextPart("src", src, content=True),
    ]

    def package(context: Path) -> None:
        # The wheel's bytes change with every build (timestamps): the hash covers the
        # sources it is made from instead.
        fetch.package_wheel(context / "src", context / "package")

    try:
        return standin(
            engine, "spark", base, parts, context=cache / "context" / "spark", prepare=package
        )
    finally:
        shutil.rmtree(src, ignore_errors=True)


def _link_tree(source: Path, target: Path) -> None:
    # Hard links where the cache and the context share a file system: no copy of 500 MB.
    def link(src: str, dst: str) -> object:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)
        return dst

    shutil.copytree(source, target, copy_function=link)


def _exists(engine: Engine, ref: str) -> bool:
    probe = subprocess.run(
        engine.docker("image", "inspect", "--format", "{{.Id}}", ref),
        capture_output=True,
        timeout=60,
        check=False,
    )
    return probe.returncode == 0


def _image_id(engine: Engine, ref: str) -> str:
    return run(engine.docker("image", "inspect", "--format", "{{.Id}}", ref), timeout=60).strip()


def _size(engine: Engine, ref: str) -> int:
    out = run(
        engine.docker("image", "inspect", "--format", "{{.Size}}", ref), timeout=60, quiet=True
    )
    return int(out.strip())


def _drop_older_tags(engine: Engine, ref: str) -> None:
    """Remove the other tags of ``ref``'s repository: the data root must not grow forever."""
    repository = ref.rpartition(":")[0]
    listed = run(
        engine.docker("images", "--format", "{{.Repository}}:{{.Tag}}", repository), timeout=60
    )
    old = [r for r in listed.split() if r != ref and r.startswith(repository + ":")]
    for tag in old:
        # A run that died (a CI job cut off mid-deployment) leaves its stopped containers,
        # and an image a container uses cannot be removed. The engine and its data root
        # are this project's own, so its containers of an outdated image are leftovers.
        users = run(engine.docker("ps", "-aq", "--filter", f"ancestor={tag}"), timeout=60).split()
        if users:
            log.info("removing %d leftover container(s) of %s", len(users), tag)
            run(engine.docker("rm", "-f", *users), timeout=300)
    if old:
        run(engine.docker("rmi", *old), timeout=300)
    # Keep the build cache bounded too (layers of images no longer tagged).
    run(engine.docker("builder", "prune", "-f", "--keep-storage", "4gb"), timeout=300)


def describe_size(size_bytes: int) -> str:
    """``1.12 GB`` (decimal units, as ``docker images`` prints)."""
    if size_bytes >= 1e9:
        return f"{size_bytes / 1e9:.2f} GB"
    return f"{size_bytes / 1e6:.0f} MB"
