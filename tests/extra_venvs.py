"""A venv holding the zoo with one extra alone, offline and in seconds: its
site-packages links exactly the distributions that `zoo-lm[EXTRA]` requires
(the core's dependencies and the extra's, and theirs, read from the running
environment's metadata), plus the zoo's own install. Nothing is downloaded or
copied; a package the extra does not bring in is not importable there."""

from __future__ import annotations

import importlib.metadata as metadata
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

DISTRIBUTION = "zoo-lm"


def required(extras: tuple[str, ...]) -> set[str]:
    """The canonical names of every distribution `zoo-lm[extras]` needs, the zoo's own included."""
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(DISTRIBUTION, set(extras))]
    while todo:
        name, active = todo.pop()
        key = (canonicalize_name(name), frozenset(active))
        if key in seen:
            continue
        seen.add(key)
        for text in metadata.distribution(name).requires or []:
            requirement = Requirement(text)
            marker = requirement.marker
            if marker is None or any(marker.evaluate({"extra": extra}) for extra in [*active, ""]):
                if requirement.name == DISTRIBUTION:  # zoo-lm[hf,onnx] naming its own extras
                    todo.append((DISTRIBUTION, set(active) | set(requirement.extras)))
                else:
                    todo.append((requirement.name, set(requirement.extras)))
    return {name for name, _ in seen}


def _top_level_entries(distribution: metadata.Distribution) -> set[Path]:
    """The entries of its site-packages folder that the distribution owns."""
    base = Path(distribution.locate_file("")).resolve()
    entries = set()
    for file in distribution.files or []:
        parts = Path(file).parts
        if parts and parts[0] != "..":  # scripts live outside site-packages
            entries.add(base / parts[0])
    return entries


def make_venv(folder: Path, extras: tuple[str, ...]) -> Path:
    """A venv in ``folder`` with the zoo and ``extras`` alone; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    python = folder / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True, timeout=60,
        ).stdout.strip()
    )
    wanted = required(extras)
    for distribution in metadata.distributions():
        name = canonicalize_name(distribution.metadata["Name"])
        if name not in wanted:
            continue
        if name == DISTRIBUTION:  # an editable install: its dist-info, finder and .pth, by name
            base = Path(distribution.locate_file("")).resolve()
            entries = {e for e in base.iterdir() if e.name.startswith(("zoo_lm-", "__editable__.zoo_lm", "__editable___zoo_lm"))}
        else:
            entries = _top_level_entries(distribution)
        for entry in entries:
            target = site / entry.name
            if entry.exists() and not target.exists():
                target.symlink_to(entry)
    return python
