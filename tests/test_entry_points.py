"""Entry points remembered between runs (zoo_core.plugin_api.entry_points): the second run
answers without importlib.metadata, and installing or removing a distribution
(a metadata folder appearing in or leaving a folder on sys.path) is noticed at
the next run. The distributions here are real metadata folders on a real
sys.path entry, found by importlib.metadata as an installer's would be."""

from __future__ import annotations

import json
import os
import py_compile
import subprocess
import sys
import time
from pathlib import Path

from zoo_core.plugin_api import entry_points
from zoo_core.plugin_api.entry_points import ZooEntryPoint
from zoo_core.storage.files import write_cache_entry

_REPORT = (
    "import json, sys\n"
    "from zoo_core.plugin_api.manager import get_plugins\n"
    "plugins = get_plugins()\n"
    "print(json.dumps({'plugins': {n: [i.distribution, i.version, i.errors] for n, i in plugins.plugins.items()},\n"
    "                  'asked_importlib_metadata': 'importlib.metadata' in sys.modules}))\n"
)


def _install(site: Path, name: str, version: str = "1.0") -> None:
    """A distribution as pip leaves it: the module, compiled (otherwise its first
    import adds __pycache__ to the folder, which moves its time once more), and
    its metadata folder with a zoo entry point."""
    module = site / f"{name}_module.py"
    module.write_text("from zoo_core import hookimpl\n\n@hookimpl\ndef register_blocks(register):\n    pass\n")
    py_compile.compile(str(module), doraise=True)
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[zoo]\n{name} = {name}_module\n")


def _settle(folder: Path) -> None:
    # As if installed a minute ago: answers are only kept for folders that have stopped changing.
    past = time.time() - 60
    os.utime(folder, (past, past))


def _report(site: Path, cache: Path) -> dict:
    environment = {**os.environ, "PYTHONPATH": str(site), "ZOO_CACHE": str(cache)}
    environment.pop("ZOO_PLUGINS", None)
    environment.pop("ZOO_DISABLE_PLUGIN_AUTOLOAD", None)
    # `python -c` puts the working folder on sys.path: one that does not change
    working = site.parent / "working"
    if not working.exists():
        working.mkdir()
        _settle(working)
    done = subprocess.run([sys.executable, "-c", _REPORT], cwd=working, env=environment, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_installs_and_removals_are_seen_and_the_rest_comes_from_the_cache(tmp_path):
    site, cache = tmp_path / "site", tmp_path / "cache"
    site.mkdir()
    _install(site, "alpha")
    _settle(site)
    first = _report(site, cache)
    assert first["asked_importlib_metadata"] and first["plugins"]["alpha"] == ["alpha", "1.0", []]
    assert "blocks" in first["plugins"] and first["plugins"]["blocks"][0] == "zoo-lm"

    again = _report(site, cache)
    assert not again["asked_importlib_metadata"] and again["plugins"] == first["plugins"]

    _install(site, "beta", "2.0")  # a new metadata folder: the folder's modification time moves
    installed = _report(site, cache)
    assert installed["asked_importlib_metadata"] and installed["plugins"]["beta"] == ["beta", "2.0", []]

    for path in sorted((site / "alpha-1.0.dist-info").iterdir()):
        path.unlink()
    (site / "alpha-1.0.dist-info").rmdir()
    _settle(site)
    removed = _report(site, cache)
    assert "alpha" not in removed["plugins"] and "beta" in removed["plugins"]
    assert not _report(site, cache)["asked_importlib_metadata"]


def test_a_folder_still_changing_is_not_remembered(tmp_path):
    # Two installs within one tick of the file-system clock would leave the same time.
    site, cache = tmp_path / "site", tmp_path / "cache"
    site.mkdir()
    _install(site, "alpha")
    assert _report(site, cache)["asked_importlib_metadata"]
    assert _report(site, cache)["asked_importlib_metadata"]


def test_a_damaged_entry_is_asked_again(tmp_path):
    site, cache = tmp_path / "site", tmp_path / "cache"
    site.mkdir()
    _install(site, "alpha")
    _settle(site)
    expected = _report(site, cache)["plugins"]
    (entry,) = (cache / "entry-points").iterdir()
    written = entry.read_bytes()
    key = json.loads(written.partition(b"\n")[0])["key"]
    stored = json.loads(written.partition(b"\n")[2])
    misshapen = []  # under the right key and checksum, but not entry points as this module writes them
    for payload in ([{**stored[0], "module": 7}], {"entry_points": stored}, [{**stored[0], "extra": "x"}]):
        write_cache_entry(tmp_path / "misshapen", key, payload)
        misshapen.append((tmp_path / "misshapen").read_bytes())
    for damage in (b"", b"{not json", b"[" * 100_000, json.dumps({"key": {}, "entry_points": []}).encode(),
                   written.replace(b'"alpha_module"', b'7'), *misshapen):
        entry.write_bytes(damage)
        report = _report(site, cache)
        assert report["asked_importlib_metadata"] and report["plugins"] == expected


def test_an_entry_point_loads_a_module_or_an_attribute_inside_it():
    assert ZooEntryPoint("x", "zoo_core.plugin_api.entry_points", "", "zoo", "0").load() is entry_points
    assert ZooEntryPoint("x", "zoo_core.plugin_api.entry_points", "ZooEntryPoint.load", "zoo", "0").load() is ZooEntryPoint.load
    assert ZooEntryPoint("x", "zoo_core", "entry_points", "zoo", "0").value == "zoo_core:entry_points"
