"""Plugins found through importlib.metadata's entry points (zoo_core.plugin_api.manager):
installing or removing a distribution (a metadata folder appearing in or leaving
a folder on sys.path) is noticed at the next run. The distributions here are real
metadata folders on a real sys.path entry, found by importlib.metadata as an
installer's would be."""

from __future__ import annotations

import json
import os
import py_compile
import subprocess
import sys
from pathlib import Path

_REPORT = (
    "import json, sys\n"
    "from zoo_core.plugin_api.manager import get_plugins\n"
    "plugins = get_plugins()\n"
    "print(json.dumps({'plugins': {n: [i.distribution, i.version, i.errors] for n, i in plugins.plugins.items()}}))\n"
)


def _install(site: Path, name: str, version: str = "1.0") -> None:
    """A distribution as pip leaves it: the module, compiled, and its metadata
    folder with a zoo entry point."""
    module = site / f"{name}_module.py"
    module.write_text("from zoo_core import hookimpl\n\n@hookimpl\ndef register_blocks(register):\n    pass\n")
    py_compile.compile(str(module), doraise=True)
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[zoo]\n{name} = {name}_module\n")


def _report(site: Path, cache: Path) -> dict:
    environment = {**os.environ, "PYTHONPATH": str(site), "ZOO_CACHE": str(cache)}
    environment.pop("ZOO_PLUGINS", None)
    environment.pop("ZOO_DISABLE_PLUGIN_AUTOLOAD", None)
    working = site.parent / "working"
    working.mkdir(exist_ok=True)
    done = subprocess.run([sys.executable, "-c", _REPORT], cwd=working, env=environment, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_installs_and_removals_are_seen(tmp_path):
    site, cache = tmp_path / "site", tmp_path / "cache"
    site.mkdir()
    _install(site, "alpha")
    first = _report(site, cache)
    assert first["plugins"]["alpha"] == ["alpha", "1.0", []]
    assert "blocks" in first["plugins"] and first["plugins"]["blocks"][0] == "zoo-lm"
    assert _report(site, cache)["plugins"] == first["plugins"]

    _install(site, "beta", "2.0")
    installed = _report(site, cache)
    assert installed["plugins"]["beta"] == ["beta", "2.0", []]

    for path in sorted((site / "alpha-1.0.dist-info").iterdir()):
        path.unlink()
    (site / "alpha-1.0.dist-info").rmdir()
    removed = _report(site, cache)
    assert "alpha" not in removed["plugins"] and "beta" in removed["plugins"]
