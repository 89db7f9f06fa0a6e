"""Writing files so that nothing finished is ever lost.

Every write goes to a temporary file in the same folder, is flushed to disk and
renamed over the target: a reader (or a crash) sees the old file or the new one,
never half of one. Read-modify-write of a shared file happens under a lock.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import json
import os
import shutil
import signal
import stat
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ..errors import ZooError
from .locations import cache_dir


def atomic_write(
    path: Path,
    write: Callable[[Path], None],
    *,
    named: Callable[[], Path] | None = None,
    fault_points: bool = True,
) -> Path:
    """Call ``write(temporary_path)``, fsync it, then rename it over ``path``
    (or over ``named()``, asked once the content is written: a file named after
    its own sha256). Returns the path written.

    Any OS failure (a read-only or full disk, a folder that is a file, no
    permission) becomes one ZooError line naming ``path``; the temporary file is
    removed and whatever ``path`` held before is untouched. ``fault_points``
    False keeps a cache write out of the fault-injection count (see fault_point).
    """
    make_folder(path.parent, shown=path)
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise ZooError(f"{path}: cannot write here: {describe_os_error(exc)}") from None
    os.close(handle)
    try:
        write(Path(temporary))
        with open(temporary, "rb+") as written:
            os.fsync(written.fileno())
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual mode
        target = named() if named is not None else path
        if fault_points:
            fault_point()  # written in full, not yet in place
        os.replace(temporary, target)
    except BaseException as exc:
        Path(temporary).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise ZooError(f"{path}: cannot write: {describe_os_error(exc)} (nothing was changed)") from None
        raise
    if fault_points:
        fault_point()
    return target


# --- fault injection ----------------------------------------------------------
# A crash can only hurt between two file operations, so the crash-safety tests
# (tests/test_crash_safety.py) kill the process exactly there, at every such
# point in turn, instead of at random delays that rarely hit the narrow windows.
# ZOO_FAULT_AT=N makes the N-th point reached by this process a SIGKILL (exit
# status 137): no cleanup, no finally, as with kill -9 or a power cut. There is
# one point after each operation (a temporary file written, renamed, a file
# deleted), which is also the point before the next one.
_fault_points_reached = 0


def fault_point() -> None:
    """Called after every file operation of an atomic write, a rename or a
    deletion; a no-op unless ZOO_FAULT_AT is set."""
    wanted = os.environ.get("ZOO_FAULT_AT")
    if not wanted:
        return
    global _fault_points_reached
    _fault_points_reached += 1
    if _fault_points_reached == int(wanted):
        os.kill(os.getpid(), signal.SIGKILL)


def replace_file(source: Path, target: Path) -> None:
    """``os.replace`` (atomic: ``target`` is the old file or the new one), as a fault point."""
    try:
        os.replace(source, target)
    except OSError as exc:
        raise ZooError(f"{target}: cannot move {source.name} into place: {describe_os_error(exc)}") from None
    fault_point()


def remove_file(path: Path) -> bool:
    """Delete ``path`` (a file or a symlink, never what a symlink points at), as a
    fault point; False when it was already gone."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise ZooError(f"{path}: cannot delete: {describe_os_error(exc)}") from None
    fault_point()
    return True


def place_copy(source: Path, target: Path) -> None:
    """Give the file ``source`` a second name, ``target``, atomically: a hard link
    (no bytes copied, no space needed) where the file system allows one, else a
    flushed copy; either is renamed over ``target``, so a reader (or a crash)
    sees the old ``target`` or the new one."""

    def link_or_copy(temporary: Path) -> None:
        temporary.unlink()
        try:
            os.link(source, temporary)
        except OSError:
            shutil.copyfile(source, temporary)

    atomic_write(target, link_or_copy)


def content_named(path: Path, sha256: str) -> Path:
    """``NAME.safetensors`` -> ``NAME.<first 12 hex of sha256>.safetensors``: a name
    that only these bytes can have, so writing it never changes a file a card names."""
    return path.with_name(f"{path.stem}.{sha256[:12]}{path.suffix}")


def make_folder(folder: Path, shown: Path | None = None) -> None:
    """``mkdir -p``, its failures one ZooError line naming ``shown`` (default the folder)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ZooError(
            f"{shown or folder}: cannot write here: part of the folder path is a file, not a folder"
        ) from None
    except OSError as exc:
        raise ZooError(f"{shown or folder}: cannot write here: {describe_os_error(exc)}") from None


def describe_os_error(exc: OSError) -> str:
    """The OS's reason in a few words, without the file name (messages name it first)."""
    return exc.strerror or " ".join(str(exc).split()) or type(exc).__name__


# Every byte the zoo writes goes through this one call: a test can make the disk
# "fill up" at any byte by replacing it (see tests/test_os_failures.py).
_write = os.write


def write_all(temporary: Path, data: bytes) -> None:
    """Write ``data`` to ``temporary`` in full, or raise the OS error that stopped it."""
    write_chunks(temporary, [data])


def write_chunks(temporary: Path, pieces: Iterable[bytes | memoryview]) -> None:
    """Write each buffer of ``pieces`` in turn to ``temporary``, in full, or raise
    the OS error that stopped it (a file written from parts never held whole)."""
    fd = os.open(temporary, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
    try:
        for piece in pieces:
            view = memoryview(piece).cast("B")
            while view:
                written = _write(fd, view[: 1 << 20])
                if written <= 0:
                    raise OSError(errno.EIO, "the write made no progress")
                view = view[written:]
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    atomic_write(path, lambda temporary: write_all(temporary, data))


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def give_usual_modes(folder: Path) -> None:
    """``folder`` and everything in it readable as open() and mkdir() would have
    made them (0666 and 0777 less the umask): a folder from mkdtemp is 0700 and
    safetensors writes its files 0600, which a folder for other people to read
    (an export to upload) should not keep."""
    mask = _umask()
    for path in [folder, *folder.rglob("*")]:
        if not path.is_symlink():
            os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~mask)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def remove_stale_temporaries(path: Path) -> None:
    """Delete what ``atomic_write(path, ...)`` left behind when its process was
    killed mid-write. Only for a caller that holds the lock on writing ``path``:
    another writer's temporary file would otherwise go from under it."""
    for temporary in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        temporary.unlink(missing_ok=True)


def atomic_copy(source: Path, target: Path, limit: int = 1 << 30) -> None:
    atomic_write_bytes(target, read_limited(source, limit, "file"))


def open_regular(path: Path, what: str = "file"):
    """Open ``path`` for reading only if it is a regular file, without ever blocking.

    O_NONBLOCK makes opening a FIFO (or a device) return at once instead of
    waiting for a writer; fstat on the open descriptor then refuses anything that
    is not a regular file, with no window for a swap between check and use.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = (
                "a folder"
                if stat.S_ISDIR(mode)
                else "a FIFO"
                if stat.S_ISFIFO(mode)
                else "a device"
                if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a socket"
                if stat.S_ISSOCK(mode)
                else "not a regular file"
            )
            raise ZooError(f"{path}: {what} is {kind}, not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_limited(path: Path, limit: int, what: str) -> bytes:
    """The bytes of ``path``, a regular file; a file larger than ``limit`` is
    refused before any of it is read, so a hostile file cannot make the zoo
    allocate without bound, and a file that shrinks while it is read (replaced,
    truncated) is an error rather than half a file."""
    with open_regular(path, what) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            raise ZooError(f"{path}: {what} is {size:,} bytes, more than the {limit:,} such a file can need")
        data = handle.read(size)  # exactly: read(n) sets aside n bytes before it reads any
        if len(data) != size:
            raise ZooError(f"{path}: {what} changed while it was read ({len(data):,} of {size:,} bytes); try again")
        return data


def lock_file_for(path: Path) -> Path:
    """Where the lock guarding ``path`` lives: in the user's cache folder, never
    beside ``path``. A lock file left inside an installed package would outlive
    `pip uninstall` (the folder stays behind, and a later install of the same
    plugin then finds a stale folder); a read-only location could not hold one
    at all. The name is derived from the absolute path, so every process that
    means the same file takes the same lock."""
    return cache_file_for(path, "locks", ".lock")


def cache_file_for(path: Path, folder: str, suffix: str) -> Path:
    """The file standing for ``path`` in the cache folder's ``folder``: named after
    the absolute path (a digest, then the file's own name to stay readable), so
    every process that means the same file finds the same one."""
    absolute = str(Path(path).expanduser().resolve())
    digest = hashlib.sha256(absolute.encode("utf-8", "surrogateescape")).hexdigest()[:24]
    return cache_dir() / folder / f"{digest}-{Path(path).name[:80]}{suffix}"


CACHE_ENTRY_FORMAT = 1


def read_cache_entry(entry: Path, key: str) -> Any | None:
    """The JSON payload the cache file ``entry`` holds under ``key``; None on any
    kind of miss: missing, unreadable, stored under another key, or damaged (the
    header line carries the key and the sha256 of the JSON body below it)."""
    try:
        head, _, body = entry.read_bytes().partition(b"\n")
        header = json.loads(head)
        if header != {"format": CACHE_ENTRY_FORMAT, "key": key, "sha256": hashlib.sha256(body).hexdigest()}:
            return None
        return json.loads(body)
    except (OSError, ValueError, RecursionError):  # missing, unreadable, not JSON
        return None


def write_cache_entry(entry: Path, key: str, payload: Any) -> None:
    """Store ``payload`` (plain JSON) in ``entry`` under ``key``, atomically: a
    reader sees the old entry or the new one. Best effort: a cache that cannot be
    written means doing the work again next time, never an error."""
    try:
        body = json.dumps(payload, separators=(",", ":")).encode()
        header = json.dumps({"format": CACHE_ENTRY_FORMAT, "key": key, "sha256": hashlib.sha256(body).hexdigest()})
        data = header.encode() + b"\n" + body
        atomic_write(entry, lambda temporary: write_all(temporary, data), fault_points=False)
    except (ZooError, OSError, ValueError, TypeError):
        pass


def lock_at(lock_path: Path):
    """The lock whose file is ``lock_path`` (a ``filelock.ReadWriteLock``: shared
    for readers, exclusive for a writer), not yet held. Each call opens its own,
    so that two holders in one process exclude each other as two processes do.
    filelock is imported here, not at the top: `zoo list` imports this module and
    never locks."""
    from filelock import ReadWriteLock

    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with _not_a_lock_is_an_os_error(lock_path):
        return ReadWriteLock(lock_path, is_singleton=False)


@contextlib.contextmanager
def _not_a_lock_is_an_os_error(lock_path: Path) -> Iterator[None]:
    """A file in the lock folder that is not a lock (SQLite's "not a database")
    is an OSError, like any other file that cannot be used."""
    import sqlite3

    try:
        yield
    except sqlite3.DatabaseError as exc:
        raise OSError(errno.EINVAL, f"not a lock file ({exc})", str(lock_path)) from None


def try_write_lock(lock, wait: bool) -> bool:
    """Take ``lock`` (from ``lock_at``) exclusively; False when another holds it and ``wait`` is False."""
    from filelock import Timeout

    try:
        with _not_a_lock_is_an_os_error(Path(lock.lock_file)):
            lock.acquire_write(blocking=wait)
    except Timeout:
        return False
    return True


@contextlib.contextmanager
def exclusive_lock(path: Path, wait: bool = True) -> Iterator[None]:
    """Hold the lock of ``path`` exclusively; with ``wait=False`` a held lock is an error."""
    lock_path = lock_file_for(path)
    try:
        lock = lock_at(lock_path)
    except (FileExistsError, NotADirectoryError):
        raise ZooError(
            f"{lock_path.parent}: cannot create the zoo's lock folder: part of its path is a file (set ZOO_CACHE)"
        ) from None
    except OSError as exc:
        raise ZooError(
            f"{lock_path.parent}: cannot create the zoo's lock folder: {describe_os_error(exc)} (set ZOO_CACHE)"
        ) from None
    try:
        try:
            held = try_write_lock(lock, wait)
        except OSError as exc:
            raise ZooError(f"{lock_path}: cannot lock: {describe_os_error(exc)} (`zoo cache clear --all`)") from None
        if not held:
            raise ZooError(f"{path} is being written by another zoo process; wait for it to finish")
        try:
            yield
        finally:
            lock.release()
    finally:
        lock.close()


@contextlib.contextmanager
def shared_lock(path: Path) -> Iterator[None]:
    """Hold the lock of ``path`` shared, so that no writer (``exclusive_lock``) is
    half way through while a reader looks at ``path`` and what it refers to. When
    the cache folder cannot be written, or its lock file used, the file is read
    unlocked rather than not at all."""
    lock_path = lock_file_for(path)
    try:
        lock = lock_at(lock_path)
    except OSError:
        yield
        return
    try:
        try:
            with _not_a_lock_is_an_os_error(lock_path):
                lock.acquire_read()
            held = True
        except OSError:
            held = False
        try:
            yield
        finally:
            if held:
                lock.release()
    finally:
        lock.close()
