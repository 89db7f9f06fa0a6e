"""Each extra covers the commands it names: in a venv holding the zoo with that
extra alone (tests/extra_venvs.py: links to this environment's packages, offline),
`[gguf]` exports and imports GGUF files and `[hf]` Hugging Face folders; the
other format is refused in one line naming its extra. One venv per extra."""

from __future__ import annotations

import os
import subprocess

import pytest

from .extra_venvs import make_venv

pytest.importorskip("gguf", reason="the gguf extra is not installed")
pytest.importorskip("transformers", reason="the hf extra is not installed")

pytestmark = pytest.mark.slow  # two venvs, and a torch import per command (about a minute)

VARIANT = "llama-char-mini"  # shipped, tiny, and laid out as both formats take it


def _zoo(python, home, *args) -> subprocess.CompletedProcess:
    environment = {**os.environ, "ZOO_HOME": str(home / "zoo"), "ZOO_CACHE": str(home / "cache"), "OMP_NUM_THREADS": "1"}
    environment.pop("ZOO_REGISTRY", None)
    return subprocess.run(
        [str(python), "-m", "zoo_core", *args], capture_output=True, text=True, env=environment, cwd=home, timeout=600
    )


def _refused_naming(done: subprocess.CompletedProcess, extra: str) -> None:
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert f"pip install 'zoo-lm[{extra}]'" in line, line


@pytest.fixture(scope="module")
def venvs(tmp_path_factory):
    return {extra: make_venv(tmp_path_factory.mktemp(f"venv-{extra}"), (extra,)) for extra in ("gguf", "hf")}


def test_the_gguf_extra_alone_exports_and_imports_gguf(venvs, tmp_path):
    python = venvs["gguf"]
    probe = subprocess.run([str(python), "-c", "import importlib.util as u; print([u.find_spec(m) is None for m in "
                            "('gguf', 'tokenizers', 'transformers', 'accelerate')])"],
                           capture_output=True, text=True, timeout=120)
    assert probe.stdout.strip() == "[False, False, True, True]", probe.stderr  # the extra and nothing else
    exported = _zoo(python, tmp_path, "export", VARIANT, "--format", "gguf", "--out", "out")
    assert exported.returncode == 0, exported.stderr
    assert "checked: logits" in exported.stdout
    imported = _zoo(python, tmp_path, "import", "gguf", f"out/{VARIANT}.gguf", "--name", "back")
    assert imported.returncode == 0, imported.stderr
    sampled = _zoo(python, tmp_path, "sample", "back", "--prompt", "ROMEO:", "--max-new-tokens", "3", "--seed", "1")
    assert sampled.returncode == 0 and sampled.stdout.startswith("ROMEO:"), sampled.stderr
    _refused_naming(_zoo(python, tmp_path, "export", VARIANT, "--format", "hf", "--out", "hf"), "hf")


def test_the_hf_extra_alone_exports_and_imports_hf_folders(venvs, tmp_path):
    python = venvs["hf"]
    exported = _zoo(python, tmp_path, "export", VARIANT, "--format", "hf", "--out", "folder")
    assert exported.returncode == 0, exported.stderr
    imported = _zoo(python, tmp_path, "import", "hf", "folder", "--name", "back")
    assert imported.returncode == 0, imported.stderr
    _refused_naming(_zoo(python, tmp_path, "export", VARIANT, "--format", "gguf", "--out", "gguf"), "gguf")
