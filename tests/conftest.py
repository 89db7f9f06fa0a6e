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


SMOLLM2_NAME = "smollm2-135m-instruct"
GEMMA3_NAME = "gemma-3-270m"


def _shared_import(tmp_path_factory, folder: str, source, name: str):
    """A ZOO_HOME folder (``folder`` in the run's folder) holding ``name``, imported by
    `zoo import gguf` from ``source`` once per test run. Under pytest-xdist every
    worker shares the one import: the first worker makes it under a file lock and
    the others wait for it. The import goes into a staging folder renamed into
    place whole, so an interrupted import is never mistaken for a finished one."""
    import os
    from unittest import mock

    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's folder, which holds every worker's own
    home = base / folder
    with FileLock(str(base / f"{folder}.lock")):
        if not home.exists():
            staging = base / f"{folder}.partial"
            shutil.rmtree(staging, ignore_errors=True)
            variables = {"ZOO_HOME": str(staging), "ZOO_CACHE": str(base / f"{folder}-cache")}
            with mock.patch.dict(os.environ, variables):  # the environment is put back whole afterwards
                os.environ.pop("ZOO_REGISTRY", None)
                # The command the docs give (tests/test_smollm2_gguf.py and test_gemma3.py hold them to it),
                # float32 (--dequantize): the tests on it train, export and compare weights;
                # tests/test_quantized.py imports the file's blocks as they are.
                assert cli.main(["import", "gguf", str(source), "--name", name, "--dequantize"]) == 0
            staging.rename(home)
    return home


@pytest.fixture(scope="session")
def smollm2_home(tmp_path_factory):
    """A ZOO_HOME folder holding SMOLLM2_NAME: SmolLM2-135M-Instruct imported by
    `zoo import gguf` from its GGUF file (tests/references.py) once per test run,
    shared by every worker (`_shared_import`).

    Read it, never write it (other tests share it): ``monkeypatch.setenv("ZOO_HOME",
    str(smollm2_home))``, or keep your own home and add its catalogue with
    ``monkeypatch.setenv("ZOO_REGISTRY", str(smollm2_home / "registry.toml"))``."""
    from .references import SMOLLM2, reference

    return _shared_import(tmp_path_factory, "smollm2-home", reference(SMOLLM2), SMOLLM2_NAME)


@pytest.fixture(scope="session")
def gemma3_home(tmp_path_factory):
    """A ZOO_HOME folder holding GEMMA3_NAME: Gemma 3 270M imported by `zoo import gguf`
    from its GGUF file (tests/references.py) once per test run; read it as `smollm2_home`."""
    from .references import GEMMA3, reference

    return _shared_import(tmp_path_factory, "gemma3-home", reference(GEMMA3), GEMMA3_NAME)


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
