"""Shared fixtures: run the CLI in-process, and work on a private copy of the catalogue."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from xdist.scheduler import LoadFileScheduling

from zoo_core import cli
from zoo_core.plugin_api.manager import get_plugins

ROOT = Path(__file__).resolve().parent.parent


# Modules whose tests are independent of each other and long enough to be worth
# spreading over pytest-xdist's workers one by one (see FileScheduling).
SPREAD = {"test_card_metrics", "test_crash_safety", "test_mutations"}


def pytest_configure(config):
    """ZOO_MUTATION=NAME: run the tests against a deliberately broken zoo (tests/mutations.py)."""
    import os

    if os.environ.get("ZOO_MUTATION"):
        from .mutations import apply

        apply(os.environ["ZOO_MUTATION"])
    if hasattr(config, "workerinput"):
        # A pytest-xdist worker (make test runs one per core): torch's own threads
        # would only contend with the other workers' for the same cores.
        torch.set_num_threads(1)


class FileScheduling(LoadFileScheduling):
    """make test's --dist loadfile: each module's tests go to one worker together, in
    their order, so its module-scoped fixtures (an installed wheel, a trained model) are
    built once and its last test sees what the others did; only the modules in SPREAD
    go out test by test. Work is handed out in collection order (see below)."""

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.split("::", 1)[0]
        return nodeid if Path(module).stem in SPREAD else module


@pytest.hookimpl(tryfirst=True)  # before xdist's own choice of scheduler
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    config.option.loadscopereorder = False  # keep the order below, not largest module first
    return FileScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """Modules holding slow tests first: under pytest-xdist their long work starts while
    the other workers are busy too, not last while they idle. The sort is stable, so each
    module keeps its own order; tests never depend on the order of modules."""
    slow_modules = {item.module.__name__ for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.module.__name__ not in slow_modules)
    # A test marked last_in_module checks what the rest of its module did, so it goes after
    # them in whatever order they run (make flake-hunt shuffles them; docs/determinism.md).
    first = {}
    for index, item in enumerate(items):
        first.setdefault(item.module.__name__, index)
    items.sort(key=lambda item: (first[item.module.__name__], item.get_closest_marker("last_in_module") is not None))


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


@pytest.fixture(autouse=True)
def private_home(tmp_path_factory, monkeypatch):
    """Every test gets its own user catalogue and cache folder: nothing a test
    publishes or locks ever reaches the real ~/.local/share/zoo or ~/.cache/zoo,
    and the developer's own catalogue never changes what a test sees."""
    base = tmp_path_factory.mktemp("zoo-user")
    monkeypatch.setenv("ZOO_HOME", str(base / "home"))
    monkeypatch.setenv("ZOO_CACHE", str(base / "cache"))
    monkeypatch.delenv("ZOO_REGISTRY", raising=False)
    return base / "home"


@pytest.fixture
def private_catalogue(tmp_path, monkeypatch):
    """A copy of registry.toml and checkpoints/ in tmp_path, made the built-in catalogue
    (through ZOO_BUILTIN_REGISTRY, which replaces the built-in layer; ZOO_REGISTRY adds).

    Tests may corrupt or edit the copy freely; the real files are never touched.
    """
    shutil.copytree(ROOT / "checkpoints", tmp_path / "checkpoints")
    shutil.copytree(ROOT / "data", tmp_path / "data")
    registry = tmp_path / "registry.toml"
    shutil.copyfile(ROOT / "registry.toml", registry)
    monkeypatch.setenv("ZOO_BUILTIN_REGISTRY", str(registry))
    get_plugins(reload=True)
    yield registry
    monkeypatch.delenv("ZOO_BUILTIN_REGISTRY")
    get_plugins(reload=True)


@pytest.fixture
def use_registry(monkeypatch):
    """``use_registry(path)`` makes that registry file the built-in catalogue for
    the rest of the test (hostile cards are written there)."""

    def switch(registry):
        monkeypatch.setenv("ZOO_BUILTIN_REGISTRY", str(registry))
        get_plugins(reload=True)

    yield switch
    monkeypatch.delenv("ZOO_BUILTIN_REGISTRY", raising=False)
    get_plugins(reload=True)
