"""Shared fixtures: run the CLI in-process, and work on a private copy of the catalogue."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from zoo_core import cli
from zoo_core.plugin_manager import get_plugins

ROOT = Path(__file__).resolve().parent.parent


class Result:
    def __init__(self, code: int, out: str, err: str):
        self.code, self.out, self.err = code, out, err


@pytest.fixture
def zoo(capsys):
    """Run `zoo ARGS...` in this process; returns exit code, stdout and stderr."""

    def run(*args: str) -> Result:
        capsys.readouterr()
        code = cli.main(list(args))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


@pytest.fixture
def private_catalogue(tmp_path, monkeypatch):
    """A copy of registry.toml and checkpoints/ in tmp_path, made the built-in catalogue.

    Tests may corrupt or edit the copy freely; the real files are never touched.
    """
    shutil.copytree(ROOT / "checkpoints", tmp_path / "checkpoints")
    shutil.copytree(ROOT / "data", tmp_path / "data")
    registry = tmp_path / "registry.toml"
    shutil.copyfile(ROOT / "registry.toml", registry)
    monkeypatch.setenv("ZOO_REGISTRY", str(registry))
    get_plugins(reload=True)
    yield registry
    monkeypatch.delenv("ZOO_REGISTRY")
    get_plugins(reload=True)


@pytest.fixture(autouse=True)
def private_zoo_home(tmp_path_factory, monkeypatch):
    """Every test sees an empty user catalogue of its own, never the real $ZOO_HOME."""
    monkeypatch.setenv("ZOO_HOME", str(tmp_path_factory.mktemp("zoo-home")))
