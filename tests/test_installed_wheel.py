"""The zoo as a user gets it: a wheel installed (non-editable) into a fresh venv,
driven through its `zoo` command from a folder that has nothing to do with the
repository, with no environment variables pointing anywhere.

Every command `zoo --help` lists runs at least once (the last test checks, by
the installed help's own list): a subpackage or data file the wheel forgot
breaks the command that needs it, and a new command without a check here fails
the suite by name.

Offline: the wheel is built without build isolation, installed with
``--no-index``, and the venv reaches the local torch (and the other
dependencies) through a ``.pth`` file naming the folder they are installed in,
so nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import numpy
import pluggy
import pydantic
import pytest
import safetensors
import tiktoken
import torch

from . import loop_plugin
from .conftest import ROOT

# Not marked slow: this is the product as people install it, and it runs in CI
# (two wheels built offline, every command of the CLI started at least once).

SHIPPED_NAMES = list(tomllib.loads((ROOT / "registry.toml").read_text()))
# What the wheel is built from: the files the repository tracks for the package.
SOURCES = ["zoo_core", "plugins", "experiments", "registry.toml", "checkpoints", "data", "results", "pyproject.toml",
           "MANIFEST.in", "README.md", "LICENSE", "CHANGELOG.md", "constraints.txt"]
DISTRIBUTION = "zoo-lm"
SMALL = "transformer-1b-learned-ctx8"  # quick to load, and GPT-2 shaped: it exports to Hugging Face
LEFTOVERS = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "*.lock", "*.state.safetensors")


# What installing the zoo puts beside its packages: zoo_lm-0.1.0.dist-info, an
# editable install's finder and .pth (and the same under the old name, zoo).
OWN_ENTRIES = ("zoo_lm-", "__editable__.zoo_lm-", "__editable___zoo_lm_", "zoo-", "__editable__.zoo-", "__editable___zoo_")


def _dependency_folders(mirrors: Path) -> list[Path]:
    """Where the running interpreter finds the zoo's dependencies (torch is reused,
    never reinstalled). A folder that also holds the zoo itself (the editable
    install CI's venv has, under its name or the one it had before zoo-lm) is
    mirrored without it: symlinks to everything else."""
    folders = {Path(module.__file__).resolve().parent.parent for module in (torch, numpy, pluggy, pydantic, safetensors, tiktoken)}
    import regex

    folders.add(Path(regex.__file__).resolve().parent.parent)
    usable = []
    for number, folder in enumerate(sorted(folders)):
        own = [entry for entry in folder.iterdir() if entry.name.startswith(OWN_ENTRIES)]
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=60) as response:
        return response.status, response.read().decode()


def _status(url: str) -> int:
    try:
        return _get(url)[0]
    except urllib.error.HTTPError as error:
        return error.code


def _serving(installed: "Installed", site: Path, log: Path) -> tuple[subprocess.Popen, str]:
    """`zoo serve --site SITE` on a free loopback port, once it answers."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = installed.start("serve", "--port", str(port), "--site", str(site), log=log)
    deadline = time.monotonic() + 120
    while True:
        assert server.poll() is None, f"zoo serve exited {server.returncode}: {log.read_text()}"
        assert time.monotonic() < deadline, f"zoo serve did not answer within 120 s: {log.read_text()}"
        try:
            _get(url + "/health")
            return server, url
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.3)


def _stop(server: subprocess.Popen) -> None:
    server.terminate()
    try:
        server.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def _requirement_names(metadata: str) -> set[str]:
    """The distributions a METADATA file's Requires-Dist lines name, outside extras."""
    lines = [line.removeprefix("Requires-Dist:").strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    return {re.match(r"[A-Za-z0-9._-]+", line)[0].lower() for line in lines if "extra ==" not in line}


class Installed:
    def __init__(self, venv: Path, workdir: Path, home: Path):
        self.venv, self.workdir, self.home = venv, workdir, home
        self.ran: set[str] = set()  # the commands run so far, for the last test
        self.unavailable: dict[str, str] = {}  # commands a test could not run here, and why
        self.site = Path(subprocess.check_output(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip())
        self.environment = {
            key: value for key, value in os.environ.items()
            if not key.startswith(("ZOO_", "PYTHON", "VIRTUAL_ENV", "XDG_"))
        } | {"HOME": str(home), "OMP_NUM_THREADS": "1", "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}

    def zoo(self, *args: str, expect: int = 0, cwd: Path | None = None, input: str | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        self.ran.add(args[0])
        done = subprocess.run([str(self.venv / "bin" / "zoo"), *args], capture_output=True, text=True, input=input,
                              cwd=cwd or self.workdir, env=self.environment | (env or {}), timeout=600)
        assert done.returncode == expect, f"zoo {' '.join(args)} -> {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done

    def start(self, *args: str, log: Path) -> subprocess.Popen:
        """`zoo ARGS` left running (a server); the caller stops it."""
        self.ran.add(args[0])
        with log.open("wb") as out:
            return subprocess.Popen([str(self.venv / "bin" / "zoo"), *args], stdout=out, stderr=subprocess.STDOUT,
                                    cwd=self.workdir, env=self.environment | {"PYTHONUNBUFFERED": "1"})

    def needs(self, module: str, commands: tuple[str, ...]) -> None:
        """Skip unless an optional extra's module is importable, noting the commands left unrun."""
        try:
            pytest.importorskip(module)
        except pytest.skip.Exception as skipped:
            self.unavailable |= dict.fromkeys(commands, str(skipped))
            raise

    def pip(self, *args: str, cwd: Path | None = None) -> None:
        # The project's pins hold here too: an install that pulled dependencies would get the CPU torch.
        pins = ["--constraint", str(ROOT / "constraints.txt")] if args[0] == "install" else []
        _pip("--python", str(self.venv / "bin" / "python"), *args, *pins, cwd=cwd)

    def python(self, code: str) -> str:
        done = subprocess.run([str(self.venv / "bin" / "python"), "-c", code], capture_output=True, text=True,
                              cwd=self.workdir, env=self.environment, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def with_home(self, workdir: Path, home: Path) -> "Installed":
        """The same installed zoo for a user of their own (HOME, so catalogue and
        caches too), whose commands still count for the last test."""
        workdir.mkdir(parents=True, exist_ok=True)
        other = Installed(self.venv, workdir, home)
        other.ran, other.unavailable = self.ran, self.unavailable
        return other

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
    (dist_info,) = installed.site.glob("zoo_lm-*.dist-info")
    metadata = (dist_info / "METADATA").read_text()
    assert f"Name: {DISTRIBUTION}\n" in metadata
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert any("numpy" in line for line in requires)
    assert all("extra ==" in line for line in requires if "pytest" in line)  # pytest only with [test]
    # torch as a range: the exact CPU build is constraints.txt's business, not every user's.
    (torch_requirement,) = [line for line in requires if line.startswith("Requires-Dist: torch")]
    assert "==" not in torch_requirement and "<3" in torch_requirement
    assert "MIT License" in (dist_info / "licenses" / "LICENSE").read_text()


def test_the_wheel_holds_every_module_and_package_file_of_the_repository(installed):
    """A subpackage (or a template) added to the repository is in the wheel, or this names it."""
    files = installed.files()
    for folder, package in (("zoo_core", "zoo_core"), ("plugins", "zoo_plugins")):
        shipped = {str(package / path.relative_to(ROOT / folder)) for path in (ROOT / folder).rglob("*")
                   if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"}
        assert shipped, folder
        assert not shipped - files, f"in {folder}/ but not in the wheel: {sorted(shipped - files)}"
    assert {"zoo_core/py.typed", "zoo_plugins/py.typed", "zoo_core/web/templates/sample.html", "zoo_core/web/static/zoo.css",
            "zoo_core/training/studies.toml"} <= files


def test_the_installed_zoo_works_from_anywhere(installed):
    assert installed.zoo("--version").stdout.strip() == "zoo 0.1.0"  # read from the zoo-lm distribution's metadata
    listed = json.loads(installed.zoo("list", "--json").stdout)
    assert [row["name"] for row in listed] == SHIPPED_NAMES
    assert {row["source"] for row in listed} == {"built-in"}
    assert "tinyshakespeare" in installed.zoo("datasets").stdout
    found = json.loads(installed.zoo("search", "rope", "--json").stdout)  # the shipped variants with rotary positions
    assert [row["name"] for row in found] == ["gpt-char-mini-rope", "llama-char-mini", "neox-char-mini", "mistral-char-mini"]
    assert "ModelCard" in json.loads(installed.zoo("card-schema").stdout)["title"]
    assert "positions 0.1.0 (built-in)" in installed.zoo("plugins").stdout
    assert "complete" in installed.zoo("completion", "bash").stdout
    assert installed.zoo("help", "train").stdout == installed.zoo("train", "--help").stdout
    assert "ROMEO" in installed.zoo("attention", SMALL, "--prompt", "ROMEO").stdout
    inspected = json.loads(installed.zoo("inspect", SMALL, "--prompt", "ROMEO: I will", "--logit-lens", "--ablate", "0.0",
                                         "--windows", "8", "--json").stdout)
    assert inspected["logit_lens"]["layers"] == ["embeddings", "block 0"]
    assert inspected["ablation"]["ablations"][0]["heads"] == ["0.0"]

    loaded = json.loads(installed.zoo("load", "transformer-6b-sin", "--json").stdout)
    assert loaded["verified"] == ["sha256", "names", "shapes", "parameters", "tokenizer sha256"]
    assert Path(loaded["checkpoint"]).is_relative_to(installed.site)
    assert installed.zoo("sample", "transformer-6b-sin", "--prompt", "ROMEO:", "--max-new-tokens", "20").stdout.startswith("ROMEO:")
    report = json.loads(installed.zoo("eval", "gpt-char-mini", "--json").stdout)
    assert round(report["validation_loss"], 4) == 1.7909 and report["dataset"] == "tinyshakespeare"


def test_the_installed_zoo_list_imports_no_torch(installed):
    # `zoo list` reads registry files and cached cards: installed, it must stay as
    # free of torch as in a checkout (run twice: the first run fills the caches).
    command = [str(installed.venv / "bin" / "python"), "-X", "importtime", "-m", "zoo_core", "list"]
    for _ in range(2):
        done = subprocess.run(command, capture_output=True, text=True, cwd=installed.workdir,
                              env=installed.environment, timeout=600)
        assert done.returncode == 0, done.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "zoo_core.catalogue.registry" in imported and "torch" not in imported


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


def _readme_commands(heading: str) -> list[list[str]]:
    """The `zoo` commands of the first bash block under ``heading`` in README.md, as argument lists."""
    import shlex

    section = (ROOT / "README.md").read_text(encoding="utf-8").split(f"\n{heading}\n", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]
    assert all(command[0] == ".venv/bin/zoo" for command in commands), commands
    return [command[1:] for command in commands]


def _own_text() -> str:
    """A text unlike Shakespeare, with two characters gpt-char-mini's vocabulary lacks."""
    import random

    words = "the cat sat on a mat and then the dog ran to the park where birds sang songs of summer".split()
    rng = random.Random(5)
    lines = [" ".join(rng.choice(words) for _ in range(12)).capitalize() + "." for _ in range(500)]
    return "\n".join(lines) + "\nA café in the park, naïve dogs.\n"


def test_the_readmes_five_commands_take_ones_own_text_to_a_fine_tuned_model(installed):
    """The README's walkthrough as written, from the installed wheel, in a folder of the user's."""
    before = installed.files()
    (installed.workdir / "notes.txt").write_text(_own_text(), encoding="utf-8")
    outputs = [installed.zoo(*command) for command in _readme_commands("## Your text, your model")]
    assert [command[0] for command in _readme_commands("## Your text, your model")] == [
        "datasets", "train", "show", "sample", "compare"]
    assert "dropped 2 occurrences of 2 character(s)" in outputs[1].stderr
    card = json.loads(installed.zoo("show", "my-gpt", "--json").stdout)
    base = json.loads(installed.zoo("show", "gpt-char-mini", "--json").stdout)
    assert card["recipe"]["base"] == "gpt-char-mini" and card["recipe"]["base_sha256"] == base["checkpoint"]["sha256"]
    assert card["recipe"]["data"] == "my-text" and len(card["recipe"]["data_sha256"]) == 64
    compared = json.loads(installed.zoo("compare", "gpt-char-mini", "my-gpt", "--data", "my-text",
                                        "--windows", "64", "--max-new-tokens", "5", "--json").stdout)
    base_loss, tuned_loss = (model["validation_loss"] for model in compared["models"])
    assert tuned_loss < base_loss - 0.5, compared
    home = installed.home / ".local" / "share" / "zoo"
    assert (home / "runs" / "my-gpt" / "my-gpt.log.jsonl").is_file()  # beside the catalogue, not among its weights

    # One byte of the text changed: training on it, and scoring the card on it, are refused in one line.
    notes = installed.workdir / "notes.txt"
    notes.write_bytes(notes.read_bytes().replace(b"cat", b"cot", 1))
    for refused in (installed.zoo("train", "my-gpt-2", "--from", "gpt-char-mini", "--data", "my-text", "--steps", "1",
                                  "--skip-unknown", "--quiet", expect=1),
                    installed.zoo("eval", "my-gpt", expect=1)):
        assert "sha256" in refused.stderr and refused.stderr.count("\n") == 1
    installed.zoo("remove", "my-gpt")
    installed.zoo("datasets", "remove", "my-text")
    assert "my-text" not in installed.zoo("datasets").stdout
    assert installed.files() == before


def test_a_lora_adapter_trains_loads_and_logs_to_tensorboard_and_mlflow(installed, tmp_path):
    installed.needs("tensorboard", ("train",))
    installed.needs("mlflow", ("train",))
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    before = installed.files()
    text = tmp_path / "own" / "text.txt"
    text.parent.mkdir()
    text.write_text(_own_text().rsplit("\n", 2)[0] + "\n", encoding="utf-8")  # without the unknown characters
    installed.zoo("datasets", "add", "own", str(text.parent))  # a folder of one file
    out = tmp_path / "run"
    installed.zoo("train", "my-lora", "--from", "gpt-char-mini", "--trainer", "lora", "--data", "own", "--steps", "6",
                  "--set", "options.rank=4", "--set", "eval_windows=16", "--set", "eval_every=3", "--grad-accum", "3",
                  "--out", str(out), "--log-to", "tensorboard", "--log-to", "mlflow", "--log-to", "csv", "--quiet")
    base_size = (ROOT / "checkpoints" / "gpt-char-mini.safetensors").stat().st_size
    assert (out / "my-lora.safetensors").stat().st_size < base_size / 10
    loaded = installed.zoo("--registry", str(out / "registry.toml"), "load", "my-lora")
    assert "my-lora" in loaded.stdout
    merged = installed.zoo("--registry", str(out / "registry.toml"), "load", "my-lora", "--merge")
    assert "my-lora" in merged.stdout
    installed.zoo("--registry", str(out / "registry.toml"), "sample", "my-lora", "--prompt", "The ",
                  "--max-new-tokens", "10", "--seed", "1")
    # zoo merge keeps the folded adapter as a standalone variant of the user's catalogue
    installed.zoo("merge", "my-lora", "--name", "my-lora-merged", "--registry", str(out / "registry.toml"))
    standalone = json.loads(installed.zoo("load", "my-lora-merged", "--json").stdout)
    assert standalone["verified"][0] == "sha256"
    installed.zoo("remove", "my-lora-merged")

    [run_folder] = (out / "tensorboard").iterdir()
    events = EventAccumulator(str(run_folder)).Reload()
    assert [event.step for event in events.Scalars("train/loss")] == [1, 2, 3, 4, 5, 6]
    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow' / 'mlflow.db'}")
    [experiment] = [e for e in client.search_experiments() if e.name == "my-lora"]
    [run] = client.search_runs([experiment.experiment_id])
    assert [metric.step for metric in client.get_metric_history(run.info.run_id, "train/loss")] == [1, 2, 3, 4, 5, 6]
    assert len((out / "my-lora.log.csv").read_text().splitlines()) > 6
    installed.zoo("datasets", "remove", "own")
    assert installed.files() == before


def test_the_tokenizer_and_study_commands_write_outside_the_package(installed, tmp_path):
    before = installed.files()
    installed.zoo("train-tokenizer", "--kind", "char", "--out", str(tmp_path / "chars.json"))
    assert (tmp_path / "chars.json").read_bytes() == (ROOT / "checkpoints" / "char-65.json").read_bytes()
    installed.zoo("experiment", "--arms", SMALL, "--steps", "2", "--seeds", "1", "--quiet", "--out", str(tmp_path / "study"))
    results = json.loads((tmp_path / "study" / "results.json").read_text())
    assert SMALL in json.dumps(results)
    assert installed.files() == before


def test_gallery_and_server_run_from_the_installed_templates(installed, tmp_path):
    installed.needs("starlette", ("gallery", "serve"))
    installed.needs("uvicorn", ("gallery", "serve"))
    installed.needs("jinja2", ("gallery", "serve"))
    installed.needs("markdown", ("gallery", "serve"))
    before = installed.files()
    site = tmp_path / "site"
    installed.zoo("gallery", "--variants", "bigram", "--out", str(site), "--quiet")
    assert "bigram" in (site / "index.html").read_text() and (site / "variants").is_dir()
    # The shipped results tables travel with the wheel: shown without --results (issue 58).
    index = (site / "index.html").read_text()
    for table in sorted((ROOT / "results").glob("*.csv")):
        assert f"results/{table.name}" in index, table.name

    server, url = _serving(installed, site, tmp_path / "serve.log")
    try:
        status, body = _get(url + "/v1/models")
        assert status == 200 and SHIPPED_NAMES[0] in {model["id"] for model in json.loads(body)["data"]}
        status, body = _get(url + "/sample")  # rendered from the installed package's templates
        assert status == 200 and SMALL in body
        status, body = _get(url + "/")  # the gallery written above
        assert status == 200 and body == (site / "index.html").read_text()
        # The same server as a remote catalogue: listed, pulled (installed under a new name), forgotten.
        home = installed.home / ".local" / "share" / "zoo"
        installed.zoo("remote", "add", "here", url)
        assert SMALL in installed.zoo("list", "--remote", "here", "--source", "remote").stdout
        installed.zoo("pull", f"here/{SMALL}", "--name", "pulled-small")
        assert (home / "checkpoints" / "pulled-small.safetensors").is_file()
        installed.zoo("remote", "remove", "here")
        installed.zoo("remove", "pulled-small")
        assert not (home / "checkpoints" / "pulled-small.safetensors").exists()
    finally:
        _stop(server)
    assert installed.files() == before


def test_an_export_imports_back_and_is_removed(installed, tmp_path):
    installed.needs("transformers", ("export", "import"))
    home = installed.home / ".local" / "share" / "zoo"
    before = installed.files()
    installed.zoo("export", SMALL, "--format", "hf", "--out", str(tmp_path / "hf"))
    assert (tmp_path / "hf" / "model.safetensors").is_file()
    installed.zoo("import", "hf", str(tmp_path / "hf"), "--name", "round-trip")
    assert (home / "checkpoints" / "round-trip.safetensors").is_file()
    user = json.loads(installed.zoo("list", "--source", "user", "--json").stdout)
    assert "round-trip" in [row["name"] for row in user]
    installed.zoo("remove", "round-trip")
    assert not (home / "checkpoints" / "round-trip.safetensors").exists()
    assert installed.files() == before


@pytest.mark.slow
@pytest.mark.smollm2
def test_gguf_out_and_back_and_smollm2_chats(installed, smollm2_home, tmp_path):
    installed.needs("gguf", ("import", "export", "chat", "quantize"))
    installed.needs("transformers", ("export", "import", "chat"))
    before = installed.files()
    # A trained zoo variant out to llama.cpp's format and back: the same greedy text.
    installed.zoo("export", "llama-char-mini", "--format", "gguf", "--gguf-type", "f32", "--out", str(tmp_path / "gguf"))
    installed.zoo("import", "gguf", str(tmp_path / "gguf" / "llama-char-mini.gguf"), "--name", "llama-char-back")
    greedy = ("--prompt", "ROMEO:", "--temperature", "0", "--max-new-tokens", "30")
    assert installed.zoo("sample", "llama-char-back", *greedy).stdout == installed.zoo("sample", "llama-char-mini", *greedy).stdout
    installed.zoo("remove", "llama-char-back")
    # Its weights as llama.cpp's Q8_0 blocks, as the help says: the same greedy text here.
    quantised = installed.zoo("quantize", "llama-char-mini", "--to", "q8_0", "--name", "llama-char-q8")
    assert "checkpoints/llama-char-q8.safetensors" in quantised.stdout, quantised.stdout
    assert installed.zoo("sample", "llama-char-q8", *greedy).stdout == installed.zoo("sample", "llama-char-mini", *greedy).stdout
    installed.zoo("remove", "llama-char-q8")
    # SmolLM2, as `zoo import gguf` made it (the shared catalogue, read only), answers in the terminal.
    shared = {"ZOO_REGISTRY": str(smollm2_home / "registry.toml")}
    chat = installed.zoo("chat", "smollm2-135m-instruct", "--temperature", "0", "--max-new-tokens", "8",
                         input="What is the capital of France?\n", env=shared)
    assert "Paris" in chat.stdout, chat.stdout
    refused = installed.zoo("chat", "llama-char-mini", expect=1)
    assert refused.stderr.count("\n") == 1 and "has no chat template" in refused.stderr
    assert installed.files() == before


def test_a_plugin_installed_non_editable_evaluates_and_uninstalls_cleanly(installed, tmp_path):
    source = tmp_path / "zoo-alibi"
    shutil.copytree(ROOT / "examples" / "zoo-alibi", source, ignore=LEFTOVERS)
    wheel = _build_wheel(source, tmp_path / "dist")
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(next(name for name in archive.namelist() if name.endswith(".dist-info/METADATA"))).decode()
    assert DISTRIBUTION in _requirement_names(metadata)  # the plugin depends on the distribution installed here
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
    checked = installed.zoo("check-plugin", "alibi", "--quick")
    assert "plugin 'alibi':" in checked.stdout and "passed" in checked.stdout

    installed.pip("uninstall", "--yes", "zoo-alibi")
    assert installed.files() == before
    assert not (installed.site / "zoo_alibi").exists()


def test_a_packed_variant_installs_under_a_new_name_samples_and_is_removed(installed, tmp_path):
    home = installed.home / ".local" / "share" / "zoo"
    before = installed.files()
    installed.zoo("pack", SMALL, "--out", str(tmp_path / "small.zoo"))
    installed.zoo("pack", SMALL, "--out", str(tmp_path / "again.zoo"))
    assert (tmp_path / "small.zoo").read_bytes() == (tmp_path / "again.zoo").read_bytes()
    installed.zoo("install", str(tmp_path / "small.zoo"), expect=1)  # the shipped name is taken
    installed.zoo("install", str(tmp_path / "small.zoo"), "--name", "travelled")
    assert (home / "checkpoints" / "travelled.safetensors").is_file()
    prompt = ("--prompt", "ROMEO:", "--max-new-tokens", "12", "--seed", "5")
    assert installed.zoo("sample", "travelled", *prompt).stdout == installed.zoo("sample", SMALL, *prompt).stdout
    assert "archive sha256" in installed.zoo("show", "travelled").stdout
    installed.zoo("remove", "travelled")
    assert not (home / "checkpoints" / "travelled.safetensors").exists()
    assert installed.files() == before


def test_a_new_plugin_skeleton_depends_on_this_distribution(installed):
    installed.zoo("new-plugin", "cope")
    written = installed.workdir / "zoo-cope"
    project = tomllib.loads((written / "pyproject.toml").read_text())["project"]
    assert [re.match(r"[A-Za-z0-9._-]+", requirement)[0] for requirement in project["dependencies"]] == [DISTRIBUTION]
    shutil.rmtree(written)


# Counts the positions the network is run on while sampling far past its window:
# a model that carries its state forward must be fed each token once.
_LINEAR_SAMPLING = """
import json, zoo_core
model = zoo_core.load(NAME)
network, fed = model.network, []
step = network.step
def counting_step(idx, state=None):
    fed.append(idx.shape[1])
    return step(idx, state)
network.step = counting_step
network.register_forward_pre_hook(lambda module, args: fed.append(args[0].shape[1]))
prompt = "The master said"
text = model.generate(prompt, max_new_tokens=NEW, seed=1)
print(json.dumps({"fed": sum(fed), "prompt": len(model.tokenizer.encode(prompt)), "new": len(model.tokenizer.encode(text)) - len(model.tokenizer.encode(prompt))}))
"""


def test_a_plugin_authors_path_from_the_docs_alone(installed, tmp_path):
    """Issue 32's check: a plugin written outside the project (a GRU, its own
    byte tokenizer and dataset, two variants), installed non-editable, checked,
    trained and shipped with the commands the zoo itself suggests, sampled far
    past its window in linear time, compared, served over HTTP, uninstalled;
    nothing is left behind, and a variant trained from it names what to reinstall."""
    for module in ("starlette", "uvicorn", "jinja2", "markdown"):
        installed.needs(module, ("gallery", "serve"))
    author = installed.with_home(tmp_path / "somewhere", tmp_path / "home")
    data, cache = author.home / ".local" / "share" / "zoo", author.home / ".cache" / "zoo"
    source = loop_plugin.write_loop_plugin(tmp_path / "zoo-loop")  # the author's source checkout
    before = installed.files()
    author.pip("install", "--no-deps", "--no-index", str(_build_wheel(source, tmp_path / "dist")))
    with_plugin = installed.files()
    assert "loop 0.1.0 (zoo-loop)" in author.zoo("plugins").stdout

    # check-plugin: a line for everything registered, and skips that say how to go on.
    lines = author.zoo("check-plugin", "loop").stdout.splitlines()
    for subject in ("model 'loop-gru'", "tokenizer 'loop-bytes'", "dataset 'loop-koans'",
                    *(f"variant '{name}'" for name in loop_plugin.VARIANTS)):
        assert any(subject in line and line.startswith("ok") for line in lines), (subject, lines)
    skips = [line for line in lines if line.startswith("skip") and "no weights yet" in line]
    assert len(skips) == 2, lines
    suggested = {name: re.findall(r"`((?:zoo|pip) [^`]+)`", next(line for line in skips if f"'{name}'" in line))
                 for name in loop_plugin.VARIANTS}
    registry = f"{loop_plugin.PACKAGE}/variants/registry.toml"
    assert suggested["loop-zen"] == [f"zoo train loop-zen --publish --registry {registry}", "pip install .",
                                     "zoo train loop-zen --publish --name my-loop-zen"]
    # Plain --publish is refused, naming the same path.
    refused = author.zoo("train", "loop-zen", "--publish", expect=1).stderr
    assert suggested["loop-zen"][0] in refused and refused.count("\n") == 1

    # Train into the package from its checkout, then ship: reinstall it (offline here).
    for name in loop_plugin.VARIANTS:
        author.zoo(*shlex.split(suggested[name][0])[1:], cwd=source)
    card = tomllib.loads((source / registry).read_text())["loop-zen"]
    assert card["recipe"]["data"] == "loop-koans" and card["checkpoint"]["sha256"]
    assert card["components"]["model"]["distribution"] == loop_plugin.DISTRIBUTION
    assert shlex.split(suggested["loop-zen"][1]) == ["pip", "install", "."]
    author.pip("install", "--no-deps", "--no-build-isolation", "--no-index", ".", cwd=source)
    shipped = {f"{loop_plugin.PACKAGE}/variants/{n}.safetensors" for n in loop_plugin.VARIANTS}
    assert shipped <= installed.files() - with_plugin
    checked = author.zoo("check-plugin", "loop").stdout
    assert "skip variant" not in checked and "verified weights" in checked
    assert "sha256" in author.zoo("load", "loop-zen").stdout

    # Sampled far past its window, each token fed once; compared; trained into one's own catalogue.
    new = 40 * loop_plugin.WINDOW
    counted = json.loads(author.python(_LINEAR_SAMPLING.replace("NAME", '"loop-zen"').replace("NEW", str(new))))
    assert counted["new"] >= new - 4 and counted["fed"] <= 2 * counted["prompt"] + new + 2, counted
    sample = author.zoo("sample", "loop-zen", "--prompt", "The master", "--max-new-tokens", str(new), "--seed", "1")
    assert len(sample.stdout.encode()) > new // 2
    compared = author.zoo("compare", "loop-zen", "loop-wide").stdout
    assert "loop-zen" in compared and "loop-wide" in compared
    author.zoo(*shlex.split(suggested["loop-zen"][2])[1:])
    assert (data / "checkpoints" / "my-loop-zen.safetensors").is_file()

    # Served over HTTP, from a gallery of its variants.
    site = tmp_path / "site"
    author.zoo("gallery", "--variants", "*loop*", "--out", str(site), "--quiet")
    server, url = _serving(author, site, tmp_path / "serve.log")
    try:
        assert _status(url + "/variants/loop-zen.html") == 200
        assert "loop-zen" in {model["id"] for model in json.loads(_get(url + "/v1/models")[1])["data"]}
    finally:
        _stop(server)

    # Uninstalled: the package's files go; the variant trained from it says what to reinstall.
    author.pip("uninstall", "--yes", loop_plugin.DISTRIBUTION)
    assert installed.files() == before
    orphan = author.zoo("load", "my-loop-zen", expect=1).stderr
    assert f"pip install {loop_plugin.DISTRIBUTION}" in orphan and "plugin 'loop'" in orphan, orphan
    author.zoo("gallery", "--variants", "*loop*", "--out", str(site), "--quiet")  # its next build
    server, url = _serving(author, site, tmp_path / "serve-again.log")
    try:
        assert _status(url + "/variants/loop-zen.html") == 404
        assert _status(url + "/variants/my-loop-zen.html") == 200  # still yours, listed as it is
    finally:
        _stop(server)
    author.zoo("remove", "my-loop-zen")
    # No empty registry file, no empty folder: only the run's log stays, the record of what was done.
    left = sorted(data.rglob("*"))
    assert [path.name for path in left if path.is_file()] == ["my-loop-zen.log.jsonl"], left
    assert all(any(path.iterdir()) for path in left if path.is_dir()), left
    assert (cache / "cards").is_dir() and (cache / "locks").is_dir()
    cleared = author.zoo("cache", "clear").stdout
    assert "cards/" in cleared and not (cache / "cards").exists() and not (cache / "site").exists()
    assert (cache / "locks").is_dir()  # kept without --all
    cleared = author.zoo("cache", "clear", "--all").stdout
    assert "cards/" in cleared and "gallery/" in cleared and "site/" in cleared
    assert not cache.exists(), sorted(cache.rglob("*"))
    assert not {path.name for path in (site / "variants").iterdir()} & {f"{n}.html" for n in loop_plugin.VARIANTS}


def test_the_puzzles_roles_verify_from_the_installed_wheel(installed):
    """zoo_plugins.puzzle.roles with zoo_core.inspection.roles, as installed."""
    roles = installed.zoo("inspect", "puzzle-disobeys", "--verify-roles").stdout
    assert "every role holds" in roles and "layer1.previous_word_head.result" in roles


@pytest.mark.last_in_module  # it checks what the tests above ran
def test_every_command_zoo_help_lists_was_run(installed, request):
    selected = {item.name for item in request.session.items if item.module is request.module}
    everything = {name for name in globals() if name.startswith("test_")}
    if selected != everything:
        pytest.skip(f"only part of this module ran ({len(selected)} of {len(everything)} tests)")
    help_text = installed.zoo("--help").stdout
    listing = help_text.split("positional arguments:")[1].split("options:")[0]
    commands = re.findall(r"^ {4}([a-z][a-z-]*)", listing, flags=re.MULTILINE)
    assert "list" in commands and "serve" in commands, help_text
    unavailable = {command: why for command, why in installed.unavailable.items() if command not in installed.ran}
    if unavailable:
        pytest.skip(f"optional extras missing: {unavailable}")
    never = [command for command in commands if command not in installed.ran]
    assert not never, (f"`zoo --help` lists {', '.join(never)}, which no test in {Path(__file__).name} runs: "
                       "add a check that runs each from the installed wheel")
