"""Writing files so that nothing finished is ever lost.

Every write goes to a temporary file in the same folder, is flushed to disk and
renamed over the target: a reader (or a crash) sees the old file or the new one,
never half of one. Read-modify-write of a shared file happens under a lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from .errors import ZooError


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(temporary_path)``, fsync it, then rename it over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(handle)
    try:
        write(Path(temporary))
        with open(temporary, "rb+") as written:
            os.fsync(written.fileno())
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual mode
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda temporary: temporary.write_text(text, encoding="utf-8"))


def remove_stale_temporaries(path: Path) -> None:
    """Delete what ``atomic_write(path, ...)`` left behind when its process was
    killed mid-write. Only for a caller that holds the lock on writing ``path``:
    another writer's temporary file would otherwise go from under it."""
    for temporary in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        temporary.unlink(missing_ok=True)


def atomic_copy(source: Path, target: Path) -> None:
    atomic_write(target, lambda temporary: shutil.copyfile(source, temporary))


def read_limited(path: Path, limit: int, what: str) -> bytes:
    """The bytes of ``path``; a file larger than ``limit`` is refused before any
    of it is read, so a hostile file cannot make the zoo allocate without bound."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            raise ZooError(f"{path}: {what} is {size:,} bytes, more than the {limit:,} such a file can need")
        return handle.read(size)  # exactly: read(n) sets aside n bytes before it reads any


def lock_file_for(path: Path) -> Path:
    """Where the lock guarding ``path`` lives: in the user's cache folder, never
    beside ``path``. A lock file left inside an installed package would outlive
    `pip uninstall` (the folder stays behind, and a later install of the same
    plugin then finds a stale folder); a read-only location could not hold one
    at all. The name is derived from the absolute path, so every process that
    means the same file takes the same lock."""
    import hashlib

    from .locations import cache_dir

    absolute = str(Path(path).expanduser().resolve())
    digest = hashlib.sha256(absolute.encode("utf-8", "surrogateescape")).hexdigest()[:24]
    return cache_dir() / "locks" / f"{digest}-{Path(path).name[:80]}.lock"


@contextlib.contextmanager
def exclusive_lock(path: Path, wait: bool = True) -> Iterator[None]:
    """Hold the lock of ``path`` exclusively; with ``wait=False`` a held lock is an error."""
    lock_path = lock_file_for(path)
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ZooError(f"{lock_path.parent}: cannot create the zoo's lock folder: {exc.strerror or exc} (set ZOO_CACHE)") from None
    with open(lock_path, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            raise ZooError(f"{path} is being written by another zoo process; wait for it to finish") from None
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextlib.contextmanager
def shared_lock(path: Path) -> Iterator[None]:
    """Hold the lock of ``path`` shared, so that no writer (``exclusive_lock``) is
    half way through while a reader looks at ``path`` and what it refers to. When
    the cache folder cannot be written the file is read unlocked rather than not
    at all."""
    lock_path = lock_file_for(path)
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(lock_path, "a")
    except OSError:
        lock = None
    if lock is None:
        yield
        return
    with lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
