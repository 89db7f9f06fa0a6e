"""SamplingSettings: validated once, frozen, importable without torch, and the only
place the sampling options are listed (the layers pass it whole)."""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

import zoo_core
from zoo_core.cli.parsers import sampling as sample_command
from zoo_core.errors import ZooError
from zoo_core.inference.settings import OPTION_NAMES, SamplingSettings, resolve_settings

ROOT = Path(__file__).resolve().parent.parent


def test_settings_are_frozen_and_every_change_is_checked_again():
    settings = SamplingSettings(top_p=0.9, stop="\n\n")
    assert settings.stop == ("\n\n",)  # one string or several, always a tuple
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.top_p = 2.0
    with pytest.raises(ZooError, match=r"^min_p must be from 0 to 1, not 2"):
        settings.replace(min_p=2)
    assert settings.replace(seed=5) == SamplingSettings(top_p=0.9, stop=("\n\n",), seed=5)


def test_errors_name_options_as_the_caller_spells_them():
    with pytest.raises(ZooError, match=r"^--min-p must be from 0 to 1"):
        SamplingSettings(min_p=-0.1, flags=True)
    with pytest.raises(ZooError, match=r"^--seed must be from -2\*\*63"):
        SamplingSettings(seed=2**64, flags=True)
    with pytest.raises(ZooError, match=r"^top_k must be a whole number"):
        SamplingSettings(top_k=2.5)


def test_resolve_settings_takes_settings_options_or_a_token_count():
    base = SamplingSettings(max_new_tokens=7, min_p=0.1)
    assert resolve_settings(base) is base
    assert resolve_settings(base, seed=3) == base.replace(seed=3)
    assert resolve_settings(40, top_k=2) == SamplingSettings(max_new_tokens=40, top_k=2)
    assert resolve_settings(top_p=0.5) == SamplingSettings(top_p=0.5)
    assert zoo_core.SamplingSettings is SamplingSettings


def test_the_settings_module_imports_no_torch():
    # The command line checks what the user typed before it pays for torch.
    code = "import sys, zoo_core.inference.settings; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    arguments = function.args
    return {a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)}


def test_no_function_lists_the_sampling_options_again():
    # seed and max_new_tokens also mean other things (windows, training), so
    # only the options that exist for sampling alone are looked for.
    sampling_only = set(OPTION_NAMES) - {"seed", "max_new_tokens"}
    settings_module = ROOT / "zoo_core" / "inference" / "settings.py"
    offenders = []
    for path in sorted([*(ROOT / "zoo_core").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")]):
        if path == settings_module:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _parameters(node) & sampling_only:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not offenders, f"take a SamplingSettings instead: {offenders}"


def test_zoo_sample_has_a_flag_for_every_setting_a_user_chooses():
    import argparse

    commands = argparse.ArgumentParser().add_subparsers()
    sample_command.sample_arguments(commands)
    flags = {action.dest for action in commands.choices["sample"]._actions}
    assert set(OPTION_NAMES) - {"use_cache"} <= flags  # the KV cache changes speed, never the text


def test_cli_min_p_draws_what_the_api_draws(zoo):
    result = zoo("sample", "gpt-char-mini", "--prompt", "ROMEO:", "--min-p", "0.2", "--max-new-tokens", "30",
                 "--seed", "5", "--json")
    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert report["settings"]["min_p"] == 0.2
    model = zoo_core.load("gpt-char-mini")
    sample = report["samples"][0]
    assert sample["prompt"] + sample["text"] == model.generate("ROMEO:", 30, seed=5, min_p=0.2)
    assert model.generate("ROMEO:", 30, seed=5, min_p=0.2) == model.generate(
        "ROMEO:", SamplingSettings(**report["settings"])
    )
