"""The core's layout: each module has one import path, and every command is served
by the family module the command table names."""

import importlib
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from zoo_core import cli

from .conftest import ROOT


@pytest.mark.parametrize("old", ["hookspecs", "trainrun", "plugin_api.testing"])
def test_the_paths_from_before_the_grouping_are_gone(old):
    # One path per module: old names that 0.1's plugin guide never gave are not aliases.
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"zoo_core.{old}")


# 0.1's documented paths: deprecated aliases of the modules' new homes until 0.3 (CHANGELOG).
DEPRECATED_PATHS = {
    "components": "zoo_core.plugin_api.components",
    "plugin_manager": "zoo_core.plugin_api.manager",
    "sampling": "zoo_core.inference.sampling",
    "testing": "zoo_core.kit.testing",
    "api": "zoo_core.loading.api",
}


def test_the_previous_releases_paths_warn_and_give_the_moved_module():
    # In a fresh interpreter (an import warns only the first time in a process), all five in one.
    code = (
        "import importlib, warnings\n"
        f"for old, new in {DEPRECATED_PATHS!r}.items():\n"
        "    with warnings.catch_warnings(record=True) as caught:\n"
        "        warnings.simplefilter('always')\n"
        "        module = importlib.import_module('zoo_core.' + old)\n"
        "    said = [str(w.message) for w in caught if w.category is DeprecationWarning]\n"
        "    print(old, module is importlib.import_module(new), said[0] if said else None, sep='|')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    lines = [line.split("|") for line in done.stdout.strip().splitlines()]
    assert [old for old, _, _ in lines] == list(DEPRECATED_PATHS)
    for old, same, said in lines:
        assert same == "True", old
        assert said.startswith(f"zoo_core.{old} moved to {DEPRECATED_PATHS[old]}") and "removed in 0.3" in said


def test_the_built_in_plugins_have_one_import_name():
    # The folder is plugins/, the package zoo_plugins, in a checkout as installed:
    # `plugins.x` imports only where a checkout's top happens to be on sys.path.
    names = sorted(
        path.stem
        for path in (ROOT / "plugins").iterdir()
        if not path.name.startswith(("_", ".")) and (path.is_dir() or path.suffix == ".py")
    )
    bare = re.compile(r"(?<![\w.])(from plugins[. ]|import plugins\b|plugins\.(%s)\.)" % "|".join(names))
    folders = [ROOT / name for name in ("zoo_core", "plugins", "tests", "examples", "docs", "benchmarks")]
    files = [
        ROOT / "README.md",
        *[path for folder in folders for kind in ("*.py", "*.md") for path in folder.rglob(kind)],
    ]
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files
        if path != Path(__file__).resolve()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if bare.search(line)
    ]
    assert not found, "\n".join(found)


def test_pyproject_lists_every_package_folder():
    # setuptools' finder cannot rename plugins* to zoo_plugins*, so pyproject.toml lists
    # the packages; a folder left out of the list would be left out of the wheel.
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in ("zoo_core", "plugins")
        for init in (ROOT / top).rglob("__init__.py")
    }
    packages = {
        "zoo_plugins" + name.removeprefix("plugins") if name.startswith("plugins") else name for name in folders
    }
    # Folders of package data are listed too (setuptools warns otherwise); they hold no module.
    data = {
        name for name in listed if name.startswith("zoo_plugins.shipped.") or name.endswith((".templates", ".static"))
    }
    unlisted = listed - {"zoo_plugins.shipped"} - data
    assert unlisted == packages, f"not listed: {sorted(packages - listed)}, no folder: {sorted(unlisted - packages)}"


def test_an_unknown_old_path_is_still_an_import_error():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("zoo_core.no_such_module")


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_each_command_is_defined_in_its_family_module(command):
    family = importlib.import_module(f"zoo_core.cli.parsers.{cli.COMMANDS[command]}")
    assert callable(getattr(family, command.replace("-", "_") + "_arguments"))
    parser = cli.build_parser(command)
    assert command in parser._subparsers._group_actions[0].choices


def test_python_dash_m_zoo_core_runs_the_command():
    done = subprocess.run([sys.executable, "-m", "zoo_core", "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("zoo ")


def test_the_cli_starts_where_fcntl_does_not_exist(tmp_path):
    # Platform-specific modules are imported where they are used: a platform
    # without fcntl (Windows) still imports every command family and lists.
    code = """
import importlib, sys
sys.modules["fcntl"] = None  # import fcntl now raises ImportError
from zoo_core import cli
for family in sorted(set(cli.COMMANDS.values())):
    importlib.import_module(f"zoo_core.cli.{family}")
import zoo_core.loading.api, zoo_core.storage.files, zoo_core.training.run
sys.exit(cli.main(["list"]))
"""
    environment = {"ZOO_HOME": str(tmp_path / "home"), "ZOO_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment)
    assert done.returncode == 0 and "transformer-6b-nopos" in done.stdout, done.stderr
