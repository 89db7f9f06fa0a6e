"""The zoo as a user gets it: a wheel installed (non-editable) into a fresh venv,
driven through its `zoo` command from a folder that has nothing to do with the
repository, with no environment variables pointing anywhere.

Offline: the wheel is built without build isolation, installed with
``--no-index``, and the venv reaches the local torch (and the other
dependencies) through a ``.pth`` file naming the folder they are installed in,
so nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy
import pluggy
import pydantic
import pytest
import safetensors
import tiktoken
import torch

from .conftest import ROOT

# Not marked slow: this is the product as people install it, and it runs in CI
# (two wheels built offline, the CLI started ~20 times: about 70 s on a quiet machine).

SHIPPED_NAMES = list(tomllib.loads((ROOT / "registry.toml").read_text()))
# What the wheel is built from: the files the repository tracks for the package.
SOURCES = ["zoo_core", "plugins", "experiments", "registry.toml", "checkpoints", "data", "pyproject.toml", "setup.py", "MANIFEST.in", "README.md"]
LEFTOVERS = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "*.lock", "*.state.safetensors")


def _dependency_folders(mirrors: Path) -> list[Path]:
    """Where the running interpreter finds the zoo's dependencies (torch is reused,
    never reinstalled). A folder that also holds the zoo itself (the editable
    install CI's venv has) is mirrored without it: symlinks to everything else."""
    folders = {Path(module.__file__).resolve().parent.parent for module in (torch, numpy, pluggy, pydantic, safetensors, tiktoken)}
    import regex

    folders.add(Path(regex.__file__).resolve().parent.parent)
    usable = []
    for number, folder in enumerate(sorted(folders)):
        own = [entry for entry in folder.iterdir() if entry.name.startswith(("zoo-", "__editable__.zoo-", "__editable___zoo_"))]
        if not own:
            usable.append(folder)
            continue
        mirror = mirrors / f"dependencies-{number}"
        mirror.mkdir(parents=True)
        for entry in folder.iterdir():
            if entry not in own and entry.suffix != ".pth":
                (mirror / entry.name).symlink_to(entry)
        usable.append(mirror)
    return usable


def _pip(*args: str, cwd: Path | None = None) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr


def _build_wheel(source: Path, out: Path) -> Path:
    _pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(out), str(source))
    (wheel,) = out.glob("*.whl")
    return wheel


class Installed:
    def __init__(self, venv: Path, workdir: Path, home: Path):
        self.venv, self.workdir, self.home = venv, workdir, home
        self.site = Path(subprocess.check_output(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip())
        self.environment = {
            key: value for key, value in os.environ.items()
            if not key.startswith(("ZOO_", "PYTHON", "VIRTUAL_ENV", "XDG_"))
        } | {"HOME": str(home), "OMP_NUM_THREADS": "1", "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}

    def zoo(self, *args: str, expect: int = 0) -> subprocess.CompletedProcess:
        done = subprocess.run([str(self.venv / "bin" / "zoo"), *args], capture_output=True, text=True,
                              cwd=self.workdir, env=self.environment, timeout=600)
        assert done.returncode == expect, f"zoo {' '.join(args)} -> {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done

    def pip(self, *args: str) -> None:
        _pip("--python", str(self.venv / "bin" / "python"), *args)

    def files(self) -> set[str]:
        return {str(p.relative_to(self.site)) for p in self.site.rglob("*") if "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    base = tmp_path_factory.mktemp("wheel")
    source = base / "source"
    source.mkdir()
    for name in SOURCES:
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy2)(ROOT / name, source / name, **({"ignore": LEFTOVERS} if (ROOT / name).is_dir() else {}))
    wheel = _build_wheel(source, base / "dist")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(base / "venv")], check=True)
    venv = base / "venv"
    site = Path(subprocess.check_output(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip())
    (site / "_local_dependencies.pth").write_text("".join(f"{folder}\n" for folder in _dependency_folders(base / "mirrors")))
    workdir = base / "somewhere-else"
    workdir.mkdir()
    result = Installed(venv, workdir, base / "home")
    result.pip("install", "--no-deps", "--no-index", str(wheel))
    return result


def test_the_wheel_installs_its_own_packages_and_the_catalogue(installed):
    files = installed.files()
    assert "zoo_plugins/shipped/registry.toml" in files
    assert "zoo_plugins/shipped/data/tinyshakespeare.txt" in files
    assert "zoo_plugins/shipped/checkpoints/transformer-6b-sin.safetensors" in files
    assert not (installed.site / "plugins").exists()  # no bare top-level 'plugins' package
    top = {name.split("/")[0] for name in files}
    assert {"zoo_core", "zoo_plugins"} <= top and not any(name.startswith("pytest") for name in top if "dist-info" in name)
    metadata = next(installed.site.glob("zoo-*.dist-info")) / "METADATA"
    requires = [line for line in metadata.read_text().splitlines() if line.startswith("Requires-Dist:")]
    assert any("numpy" in line for line in requires)
    assert all("extra ==" in line for line in requires if "pytest" in line)  # pytest only with [test]


def test_the_installed_zoo_works_from_anywhere(installed):
    listed = json.loads(installed.zoo("list", "--json").stdout)
    assert [row["name"] for row in listed] == SHIPPED_NAMES
    assert {row["source"] for row in listed} == {"built-in"}
    assert "tinyshakespeare" in installed.zoo("datasets").stdout

    loaded = json.loads(installed.zoo("load", "transformer-6b-sin", "--json").stdout)
    assert loaded["verified"] == ["sha256", "names", "shapes", "parameters", "tokenizer sha256"]
    assert Path(loaded["checkpoint"]).is_relative_to(installed.site)
    assert installed.zoo("sample", "transformer-6b-sin", "--prompt", "ROMEO:", "--max-new-tokens", "20").stdout.startswith("ROMEO:")
    report = json.loads(installed.zoo("eval", "gpt-char-mini", "--json").stdout)
    assert round(report["validation_loss"], 4) == 1.7909 and report["dataset"] == "tinyshakespeare"


def test_a_published_run_joins_the_zoo_and_leaves(installed):
    before = installed.files()
    installed.zoo("train", "transformer-1b-learned-ctx8", "--steps", "30", "--publish", "--name", "my-1b", "--quiet")
    home = installed.home / ".local" / "share" / "zoo"  # XDG default: no ZOO_HOME set
    assert (home / "registry.toml").is_file() and (home / "checkpoints" / "my-1b.safetensors").is_file()
    assert installed.files() == before  # nothing written into the installed package
    user = json.loads(installed.zoo("list", "--source", "user", "--json").stdout)
    assert [row["name"] for row in user] == ["my-1b"]
    card = json.loads(installed.zoo("show", "my-1b", "--json").stdout)
    assert card["recipe"]["data"] == "tinyshakespeare" and len(card["recipe"]["data_sha256"]) == 64
    assert len(card["tokenizer"]["sha256"]) == 64

    compared = json.loads(installed.zoo("compare", "transformer-1b-learned-ctx8", "my-1b", "--windows", "20",
                                        "--max-new-tokens", "5", "--json").stdout)
    assert [m["name"] for m in compared["models"]] == ["transformer-1b-learned-ctx8", "my-1b"]
    assert json.loads(installed.zoo("eval", "my-1b", "--json").stdout)["validation_loss"] > 0
    refused = installed.zoo("train", "transformer-1b-learned-ctx8", "--steps", "1", "--publish", "--quiet", expect=1)
    assert "already exists in the built-in catalogue" in refused.stderr and "--name" in refused.stderr
    refused = installed.zoo("remove", "transformer-6b-sin", expect=1)
    assert "zoo remove deletes only your own variants" in refused.stderr and refused.stderr.count("\n") == 1

    installed.zoo("remove", "my-1b")
    assert not (home / "checkpoints" / "my-1b.safetensors").exists()
    assert "my-1b" not in installed.zoo("list").stdout
    assert installed.files() == before


def test_a_plugin_installed_non_editable_evaluates_and_uninstalls_cleanly(installed, tmp_path):
    source = tmp_path / "zoo-alibi"
    shutil.copytree(ROOT / "examples" / "zoo-alibi", source, ignore=LEFTOVERS)
    wheel = _build_wheel(source, tmp_path / "dist")
    before = installed.files()
    installed.pip("install", "--no-deps", "--no-index", str(wheel))
    with_plugin = installed.files()

    report = json.loads(installed.zoo("eval", "alibi-swiglu-4b", "--json").stdout)  # no --data: the dataset by name
    assert report["dataset"] == "tinyshakespeare"
    card = tomllib.loads((source / "zoo_alibi" / "variants" / "registry.toml").read_text())["alibi-swiglu-4b"]
    assert report["validation_loss"] == pytest.approx(card["metrics"]["validation_loss"], abs=1e-3)
    verified = json.loads(installed.zoo("verify", "--json").stdout)
    assert {row["name"] for row in verified} == {*SHIPPED_NAMES, "alibi-swiglu-4b"}
    assert installed.files() == with_plugin  # no lock or other litter inside the packages

    installed.pip("uninstall", "--yes", "zoo-alibi")
    assert installed.files() == before
    assert not (installed.site / "zoo_alibi").exists()
