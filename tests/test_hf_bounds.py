"""`zoo import hf` on folders whose config.json claims what the weights do not hold
(issue 55): a million layers, a width of 2**31, zero heads. Each is one line, in a
fresh process whose time and peak memory are measured (tests/peak_memory.py), before
transformers' config class or a family builds anything; nothing is published. And a
shard name holding an escape code and a line break reaches the terminal escaped."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

transformers = pytest.importorskip("transformers", reason="the interop extra is not installed")

from .tiny_hf import byte_level_tokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SECONDS, MIB = 2.0, 300  # the targets for a folder under 1 MB


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory) -> Path:
    """A two-layer Llama of width 48 as save_pretrained writes it, with a tokenizer.json."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=300,
        hidden_size=48,
        intermediate_size=80,
        num_hidden_layers=2,
        num_attention_heads=6,
        max_position_embeddings=64,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    folder = tmp_path_factory.mktemp("hf") / "llama"
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    byte_level_tokenizer().save(str(folder / "tokenizer.json"))
    return folder


def _copy_with(folder: Path, target: Path, **config) -> Path:
    shutil.copytree(folder, target)
    path = target / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
    return target


def measured_import(folder: Path, home: Path) -> dict:
    """`zoo import hf FOLDER` in a fresh process: exit code, stderr, seconds and memory
    growth from the moment `import_hf` is entered."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "ZOO_WORKDIR": str(folder.parent), "ZOO_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-m", "tests.peak_memory", "--from", "zoo_core.interop.hf:import_hf"]
        + ["import", "hf", str(folder), "--name", "bounded"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "err": done.stderr}


CLAIMS = {
    "a-million-layers": ({"num_hidden_layers": 1_000_000}, "num_hidden_layers 1000000, the file holds 2 layers"),
    "width-2-to-the-31": ({"hidden_size": 2**31}, "hidden_size 2,147,483,648, larger than every dimension"),
    "zero-heads": ({"num_attention_heads": 0}, "field 'config.num_attention_heads': must be at least 1, not 0"),
    "zero-key-value-heads": ({"num_key_value_heads": 0}, "'config.num_key_value_heads': must be at least 1"),
    "a-billion-experts-width": ({"intermediate_size": 10**9}, "intermediate_size 1,000,000,000"),
}


@pytest.mark.parametrize("case", sorted(CLAIMS))
def test_config_counts_the_weights_do_not_hold_are_one_line_at_once(case, llama_folder, tmp_path, private_home):
    change, fragment = CLAIMS[case]
    folder = _copy_with(llama_folder, tmp_path / "claims", **change)
    report = measured_import(folder, private_home)
    assert report["code"] == 1, report
    lines = report["err"].strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zoo: error: ") and fragment in lines[0], report["err"]
    assert report["seconds"] < SECONDS and report["growth_mib"] < MIB, report
    assert not private_home.exists() or not any(private_home.rglob("*.safetensors"))


def test_the_honest_folder_imports(zoo, llama_folder):
    """The control: the same folder, unchanged, imports."""
    result = zoo("import", "hf", str(llama_folder), "--name", "honest")
    assert result.code == 0, result.err


def test_a_name_of_100000_characters_is_refused_before_anything_is_written(zoo, llama_folder, private_home):
    result = zoo("import", "hf", str(llama_folder), "--name", "a" * 100_000)
    assert result.code == 1 and len(result.err.strip().splitlines()) == 1
    assert "(100,000 characters)': a variant name has at most 200 characters" in result.err and len(result.err) < 200
    assert not private_home.exists() or not any(private_home.rglob("*"))


def test_a_shard_name_with_an_escape_code_is_shown_escaped(zoo, llama_folder, tmp_path, private_home):
    folder = tmp_path / "sharded"
    shutil.copytree(llama_folder, folder)
    (folder / "model.safetensors").unlink()
    shard = "\x1b[31mred\nline.safetensors"
    with safe_open(str(llama_folder / "model.safetensors"), "pt") as weights:
        names = list(weights.keys())
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": dict.fromkeys(names, shard)}))
    result = zoo("import", "hf", str(folder), "--name", "sharded")
    assert result.code == 1
    assert len(result.err.strip().splitlines()) == 1 and "\x1b" not in result.err
    assert "\\u001b[31mred\\nline.safetensors" in result.err and "No such file" in result.err, result.err


def test_a_tokenizer_regex_that_backtracks_is_refused_at_import(llama_folder, tmp_path, private_home):
    """(a+)+b trips the regex engine's retry limit, a Rust panic at `zoo sample`, or
    freezes whoever encodes a long prompt: the import's probe refuses it in one line."""
    folder = tmp_path / "regex"
    shutil.copytree(llama_folder, folder)
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    tokenizer["pre_tokenizer"] = {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "(a+)+b"}, "behavior": "Isolated", "invert": False},
            tokenizer["pre_tokenizer"],
        ],
    }
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    report = measured_import(folder, private_home)
    assert report["code"] == 1, report
    lines = report["err"].strip().splitlines()
    assert len(lines) == 1 and "the tokenizer fails on a test text" in lines[0], report["err"]
    assert "retry-limit-in-match" in lines[0] and "it is not imported" in lines[0]
    assert not private_home.exists() or not any(private_home.rglob("*.safetensors"))


# --- exports that cannot be written ---------------------------------------------------


@pytest.fixture(scope="module")
def exported_home(llama_folder, tmp_path_factory):
    """The tiny Llama imported once, to export."""
    home = tmp_path_factory.mktemp("export-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ZOO_HOME", str(home))
        from zoo_core import cli

        assert cli.main(["import", "hf", str(llama_folder), "--name", "tiny-export"]) == 0
    return home


def _export(home: Path, out: Path, form: str, fsize: int | None = None) -> subprocess.CompletedProcess:
    def limited():  # the file-size limit, with SIGXFSZ ignored so that a write past it fails with EFBIG
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run(
        [sys.executable, "-m", "zoo_core.cli", "export", "tiny-export", "--format", form, "--out", str(out)],
        env={**os.environ, "ZOO_HOME": str(home), "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=limited if fsize else None,
    )


def _one_line(done: subprocess.CompletedProcess, *fragments: str) -> None:
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zoo: error: "), done.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.mark.parametrize("form, file", [("hf", "written before it failed: config.json"), ("gguf", ".gguf: cannot")])
def test_an_export_to_a_full_disk_names_the_file_and_says_so(exported_home, tmp_path, form, file):
    """A 64 KiB tmpfs (mounting one needs root: elsewhere the file-size limit below stands in)."""
    disk = tmp_path / "small-disk"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)]).returncode:
        pytest.skip("mounting a small tmpfs needs root; test_an_export_past_the_file_size_limit covers the path")
    try:
        done = _export(exported_home, disk / "out", form)
        _one_line(done, str(disk / "out"), file, "the disk is full", "nothing was exported")
        assert list(disk.iterdir()) == []  # no staging folder left behind
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_an_export_past_the_file_size_limit_names_the_file(exported_home, tmp_path):
    done = _export(exported_home, tmp_path / "out", "hf", fsize=32 * 1024)
    _one_line(done, str(tmp_path / "out"), "File too large", "nothing was exported")
    assert not (tmp_path / "out").exists() and [p.name for p in tmp_path.iterdir()] == []


def test_an_export_into_proc_names_the_folder_asked_for(exported_home):
    done = _export(exported_home, Path("/proc/zoo-export"), "hf")
    _one_line(done, "/proc/zoo-export: cannot write here")
    assert ".partial" not in done.stderr
