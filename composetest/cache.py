"""The persistent cache of ``make compose-test`` and content hashes of build inputs.

Layout of ``<cache>/compose`` (``<cache>`` is :func:`spillway.devtools.localbroker.cache_dir`)::

    lock                   one compose-test at a time on a machine
    rootfs/<key>.tar       a debootstrapped Debian, as a tar for ``docker import``
    debs/<key>/            Debian packages with their Packages index and apt source line
    wheels/<key>/          wheels for the Spark image, with requirements.txt
    go/                    Go module and build caches (Compose v2)
    bin/docker-compose-v2  Compose v2, built once
    engine/                the Docker engine's data root: images and build cache

Every directory under a ``<key>`` is complete once its ``.complete`` marker exists; a
half-made one (the run died) has none and is made again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from spillway.devtools.localbroker.jars import cache_dir

MARKER = ".complete"


def compose_cache() -> Path:
    """``<cache>/compose``, created if missing."""
    path = cache_dir() / "compose"
    path.mkdir(parents=True, exist_ok=True)
    return path


def digest(parts: Iterable[str | bytes]) -> str:
    """A short (16 hex digits) SHA-256 over ``parts``, each length-prefixed."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()[:16]


def tree_parts(root: Path, *, content: bool) -> list[str | bytes]:
    """Relative paths of every file under ``root``, with its bytes or (``content=False``) size.

    Sizes suffice where the file names carry versions (packages, wheels, jars); sources
    are hashed by content.
    """
    parts: list[str | bytes] = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        parts.append(str(path.relative_to(root)))
        parts.append(path.read_bytes() if content else str(path.stat().st_size))
    return parts


def complete(directory: Path) -> bool:
    """True if ``directory`` was finished (its marker exists)."""
    return (directory / MARKER).is_file()


def fill_once(directory: Path, fill: Callable[[Path], None]) -> Path:
    """Return ``directory``, calling ``fill(directory)`` first unless it is complete.

    A directory left half-filled by a failed run is emptied and filled again.
    """
    if complete(directory):
        return directory
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    fill(directory)
    (directory / MARKER).write_text("", encoding="ascii")
    return directory


@contextlib.contextmanager
def exclusive(lock_file: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_file`` (blocks while another run holds it)."""
    with lock_file.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
