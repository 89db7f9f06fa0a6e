"""Staging folders that name their owner, and the leftovers of owners that died.

`zoo install` and `zoo pull` extract an archive into ``$ZOO_HOME/.installing-…``
before anything enters the catalogue, and remove the folder when they finish.
A process killed meanwhile (kill -9, a power cut) cannot remove it, so the name
records the owner: ``.installing-PID-START-RANDOM``, START being the process's
start time (in clock ticks since boot, from ``/proc/PID/stat``). A later
install, pull or `zoo cache clear` removes every such folder whose owner is gone:
no process has that pid, or the process that has it started at another time
(the pid was reused). `zoo verify` lists them meanwhile.

Where there is no ``/proc`` the start time is recorded as 0 and only the pid is
checked. A folder named in the older way (no owner) is a leftover of an older
zoo's install, which no running command can still own.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from ..errors import ZooError
from .files import describe_os_error

PREFIX = ".installing-"
_OWNED = re.compile(rf"{re.escape(PREFIX)}(\d+)-(\d+)-.+")


def start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot); None when there is
    no such process, 0 when this system cannot say (no /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return None
        return 0 if _pid_exists(pid) else None
    except OSError:
        return None
    # The name in parentheses may hold spaces or ')': the fields after the last ')' are fixed.
    return int(stat.rpartition(")")[2].split()[19])


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True


def make_staging_folder(home: Path) -> Path:
    """A new, empty staging folder in ``home`` named after this process."""
    pid = os.getpid()
    try:
        return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{pid}-{start_time(pid) or 0}-", dir=home))
    except OSError as exc:
        raise ZooError(f"{home}: cannot write the user catalogue ($ZOO_HOME): {describe_os_error(exc)}") from None


def owner_gone(folder: Path) -> bool:
    """Whether the process that made staging folder ``folder`` is no longer running."""
    owned = _OWNED.fullmatch(folder.name)
    if owned is None:
        return True  # an older zoo's: no running command owns it
    pid, started = int(owned.group(1)), int(owned.group(2))
    now = start_time(pid)
    return now is None or (started != 0 and now != 0 and now != started)


def leftover_staging(home: Path) -> list[Path]:
    """The staging folders in ``home`` whose owner is gone."""
    try:
        found = [path for path in home.iterdir() if path.name.startswith(PREFIX) and path.is_dir()]
    except OSError:  # no home yet, or one that cannot be listed: nothing of ours there
        return []
    return sorted(path for path in found if not path.is_symlink() and owner_gone(path))


def remove_leftover_staging(home: Path) -> list[Path]:
    """Delete the staging folders in ``home`` whose owner is gone; returns them.
    One that cannot be deleted stays (and `zoo verify` keeps listing it)."""
    removed = []
    for folder in leftover_staging(home):
        shutil.rmtree(folder, ignore_errors=True)
        if not folder.exists():
            removed.append(folder)
    return removed


def folder_size(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file() and not path.is_symlink())
