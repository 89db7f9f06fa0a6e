"""Cold start: what a command pays before its own work. With the card cache warm
(zoo_core.catalogue.card_cache), listing imports neither pydantic nor torch (nor
rich when no table is drawn): that front reads the cached cards as plain data. Loading and
sampling, behind it, import torch and pydantic (the card); sampling sets its
thread count before loading, which is torch work too."""

from __future__ import annotations

import os
import subprocess
import sys

import torch

from zoo_core.storage import checkpoints

from .conftest import ROOT


def _fresh(code: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def _imported_after(commands: list[list[str]], modules: tuple[str, ...]) -> set[str]:
    code = ("import contextlib, io, sys\nfrom zoo_core.cli import main\n"
            f"for command in {commands!r}:\n"
            "    with contextlib.redirect_stdout(io.StringIO()):\n"
            "        assert main(command) == 0, command\n"
            f"print(','.join(m for m in {modules!r} if m in sys.modules))\n")
    done = _fresh(code)
    assert done.returncode == 0, done.stderr
    return set(filter(None, done.stdout.strip().split(",")))


def test_with_a_warm_cache_listing_imports_no_pydantic_torch_or_rich(zoo):
    assert zoo("list").code == 0  # warms this test's cache folder: cards
    unwanted = ("pydantic", "torch", "rich")
    assert _imported_after([["list", "--json"], ["search", "rope", "--json"], ["list", "--sort", "parameters", "--json"]],
                           unwanted) == set()
    assert _imported_after([["list"]], unwanted) == {"rich"}  # the table needs rich alone


def test_with_a_warm_cache_loading_and_sampling_import_torch_and_pydantic(zoo):
    assert zoo("load", "transformer-6b-sin").code == 0
    assert zoo("sample", "gpt-char-mini", "--prompt", "ROMEO:", "--max-new-tokens", "2").code == 0
    imported = _imported_after([["load", "transformer-6b-sin"],
                                ["sample", "gpt-char-mini", "--prompt", "ROMEO:", "--max-new-tokens", "2"]],
                               ("pydantic", "torch"))
    assert imported == {"torch", "pydantic"}


def test_sampling_sets_its_threads_before_loading(zoo, monkeypatch):
    # A small model samples on one thread; checking and copying its weights on
    # two, on a busy machine, took longer than the sampling.
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    seen = []
    real = checkpoints.load_verified

    def recording(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(checkpoints, "load_verified", recording)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        result = zoo("sample", "gpt-char-mini", "--prompt", "ROMEO:", "--max-new-tokens", "2")
        assert result.code == 0 and seen == [1]
        torch.set_num_threads(2)
        assert zoo("eval", "puzzle-disobeys").code == 0 and seen == [1, 1]
    finally:
        torch.set_num_threads(before)


def test_help_imports_no_pydantic_or_torch():
    # `zoo help COMMAND` is the front, as `zoo COMMAND --help` is: it builds that command's parser alone
    assert _imported_after([["help", "train"], ["help", "datasets", "add"]], ("pydantic", "torch")) == set()


def test_the_python_apis_listing_imports_no_torch(zoo):
    # The package's docstring: torch is imported only when a model is built.
    assert zoo("list").code == 0  # warms this test's cache folder
    done = _fresh("import sys, zoo_core\n"
                  "names = [card.name for card in zoo_core.list_variants('gpt-*')]\n"
                  "assert names and zoo_core.get_variant(names[0]).name == names[0], names\n"
                  "print('torch' in sys.modules)\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
