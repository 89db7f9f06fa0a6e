"""A family added by a third party, without touching the core: tests/plugins/zoo-persimmon,
a package whose one hook registers one family record (Adept's Persimmon, which the
zoo does not ship), installed by pip and found through the `zoo` entry-point group.

A tiny random Persimmon built by transformers from a config (two layers, odd
widths, RoPE on 8 of each head's 20 features, every parameter random, biases and
LayerNorms included, so a misplaced tensor shows) is saved with save_pretrained.
With the plugin installed, `zoo import hf` takes it and the card records the
family; its logits equal transformers' within 1e-5, greedy sampling through the
KV cache and the continuous-batching server (`zoo serve`, in a process of its
own that finds the plugin as an installed one) give transformers' greedy tokens,
and `zoo export --format hf` writes a folder transformers loads with the same
logits. Without the plugin the folder is refused naming the model types that
import. docs/plugins.md's "Adding a family" shows the plugin's files, held here
to be the files themselves.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="the interop extra is not installed: pip install -e '.[interop]'"
)

import zoo_core  # noqa: E402
from zoo_core.plugin_api import families  # noqa: E402
from zoo_core.plugin_api.manager import get_plugins  # noqa: E402

from .conftest import ROOT  # noqa: E402
from .test_third_party_plugins import pip_install, run_zoo  # noqa: E402
from .tiny_hf import byte_level_tokenizer, largest_difference, left_padded  # noqa: E402

PLUGIN = ROOT / "tests" / "plugins" / "zoo-persimmon"
PROMPTS = ["ROMEO: What light", "First Citizen:\nBefore we proceed any further, hear me", "KING"]
TOLERANCE = 1e-5
NEW_TOKENS = 6
CONFIG = dict(
    vocab_size=320,  # padded past the tokenizer's 300, as real models pad
    hidden_size=60,
    intermediate_size=84,
    num_hidden_layers=2,
    num_attention_heads=3,
    qk_layernorm=False,
    max_position_embeddings=64,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.4},
    bos_token_id=None,
    eos_token_id=None,
    pad_token_id=None,
)


def _persimmon_folder(folder: Path, **changes) -> transformers.PreTrainedModel:
    """A tiny random Persimmon saved in ``folder`` beside a byte-level tokenizer.json. Every
    parameter is drawn at random (transformers starts biases at 0 and LayerNorms at 1,
    which would hide a bias or norm read into the wrong place)."""
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(transformers.PersimmonConfig(**{**CONFIG, **changes})).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            base = 1.0 if "layernorm" in name and name.endswith(".weight") else 0.0
            parameter.copy_(base + 0.2 * torch.randn_like(parameter))
    model.save_pretrained(folder)
    byte_level_tokenizer("<|endoftext|>").save(str(folder / "tokenizer.json"))
    return model


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """tests/plugins/zoo-persimmon, pip-installed into a folder of its own."""
    root = tmp_path_factory.mktemp("persimmon")
    source = root / "zoo-persimmon"
    # pip builds in the source folder; a copy keeps build/ and *.egg-info out of the repository.
    shutil.copytree(PLUGIN, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    pip_install(root / "site", source)
    return root / "site"


@pytest.fixture(scope="module")
def persimmon(tmp_path_factory):
    transformers.utils.logging.set_verbosity_error()
    folder = tmp_path_factory.mktemp("tiny-persimmon")
    return folder, _persimmon_folder(folder)


@contextlib.contextmanager
def installed(site: Path):
    """This process sees the plugin installed in ``site`` as an installed one: the
    folder on sys.path, the plugins loaded again from the entry points found there;
    afterwards, as if uninstalled."""
    sys.path.insert(0, str(site))
    try:
        get_plugins(reload=True)
        assert "persimmon" in get_plugins().plugins, get_plugins().problems()
        yield site
    finally:
        sys.path.remove(str(site))
        for module in [name for name in sys.modules if name == "zoo_persimmon" or name.startswith("zoo_persimmon.")]:
            del sys.modules[module]
        get_plugins(reload=True)


@pytest.fixture
def with_plugin(site):
    with installed(site):
        yield site


def _greedy(reference, rows: list[list[int]]) -> list[list[int]]:
    ids, mask, _ = left_padded(rows)
    with torch.no_grad():
        generated = reference.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0
        )
    return generated[:, ids.shape[1] :].tolist()


def test_without_the_plugin_persimmon_is_refused_naming_the_model_types_that_import(persimmon, zoo):
    get_plugins(reload=True)
    assert "persimmon" not in get_plugins().plugins
    done = zoo("import", "hf", str(persimmon[0]), "--name", "tiny-persimmon")
    assert done.code != 0
    types = ", ".join(t for record in families.records() for t in record.hf_model_types)
    assert f"model_type 'persimmon'; the layouts that import are {types}" in done.err
    assert len(done.err.strip().splitlines()) == 1, done.err


def test_zoo_plugins_lists_the_family_the_installed_package_registers(site):
    report = run_zoo("plugins", "--json", path=(site,))
    assert report.code == 0, report.err
    plugins = {p["name"]: p for p in report.json()["plugins"]}
    assert plugins["persimmon"]["registered"] == {"families": ["persimmon"]}
    assert not plugins["persimmon"]["errors"]
    assert "persimmon" not in plugins["models"]["registered"]["families"]
    assert "phi" in plugins["models"]["registered"]["families"]  # Phi-2 is built in: the test plugin is not Phi
    listed = run_zoo("plugins", path=(site,))
    shown = "persimmon 0.1.0 (zoo-persimmon)\n  families: persimmon\n"
    assert shown in listed.out
    assert f"```text\n{shown}```\n" in _guide_section()  # what the guide says `zoo plugins` prints


def test_persimmon_imports_samples_and_exports_with_transformers_logits(with_plugin, persimmon, zoo, tmp_path):
    folder, reference = persimmon
    done = zoo("import", "hf", str(folder), "--name", "tiny-persimmon")
    assert done.code == 0, done.err
    model = zoo_core.load("tiny-persimmon")
    assert model.card.family == "persimmon"
    config = model.card.config
    assert {key: config[key] for key in ("norm", "residual", "mlp", "attention_bias", "layer_bias", "bias")} == {
        "norm": "layernorm",
        "residual": "sequential",
        "mlp": "relu2",
        "attention_bias": "all",
        "layer_bias": True,
        "bias": False,
    }
    assert config["rotary_fraction"] == 0.4
    assert model.card.parameters == sum(p.numel() for p in reference.parameters())
    assert model.card.tokenizer.vocab_size == 320

    rows = [model.tokenizer.encode(p) for p in PROMPTS]
    assert largest_difference(reference, model.network, rows) <= TOLERANCE
    assert model.network.supports_kv_cache
    drawn = model.sample(PROMPTS, max_new_tokens=NEW_TOKENS, temperature=0)
    assert [s.tokens for s in drawn] == _greedy(reference, rows)

    out = tmp_path / "export"
    done = zoo("export", "tiny-persimmon", "--format", "hf", "--out", str(out))
    assert done.code == 0, done.err
    written = json.loads((out / "config.json").read_text())
    assert (written["model_type"], written["architectures"]) == ("persimmon", ["PersimmonForCausalLM"])
    exported = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert type(exported).__name__ == "PersimmonForCausalLM"
    assert largest_difference(exported, model.network, rows) <= TOLERANCE
    assert set(exported.state_dict()) == set(reference.state_dict())

    # TransformerLens names the parts of every family alike (its act_fn relu2 is Persimmon's).
    # The export checks its own logits.
    lens = zoo("export", "tiny-persimmon", "--format", "transformer-lens", "--out", str(tmp_path / "lens"))
    assert lens.code == 0 and "checked: logits" in lens.out, lens.err


def test_the_continuous_batching_server_answers_with_transformers_greedy_tokens(with_plugin, persimmon, zoo):
    """`zoo serve` in a process of its own, which finds the plugin on its PYTHONPATH as an
    installed one; every prompt asked at once, greedy."""
    pytest.importorskip("starlette", reason="the web tests need the web extra: pip install 'zoo-lm[web]'")
    from tests.web_support import Server

    folder, reference = persimmon
    assert zoo("import", "hf", str(folder), "--name", "tiny-persimmon").code == 0
    model = zoo_core.load("tiny-persimmon")
    expected = _greedy(reference, [model.tokenizer.encode(p) for p in PROMPTS])
    texts = [model.tokenizer.decode(tokens) for tokens in expected]

    server = Server("--max-concurrent", "8", environment={"PYTHONPATH": str(with_plugin)})

    def ask(prompt: str) -> dict:
        body = {"model": "tiny-persimmon", "prompt": prompt, "max_tokens": NEW_TOKENS, "temperature": 0}
        request = urllib.request.Request(
            server.url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=300) as response:
            return json.loads(response.read())

    try:
        with ThreadPoolExecutor(len(PROMPTS)) as pool:
            answers = list(pool.map(ask, PROMPTS))
    finally:
        server.stop()
    assert [a["choices"][0]["text"] for a in answers] == texts
    assert all(a["usage"]["completion_tokens"] == NEW_TOKENS for a in answers)


def test_a_persimmon_card_exported_with_the_plugin_gone_is_refused_naming_the_family(site, persimmon, zoo, tmp_path):
    folder, _ = persimmon
    with installed(site):
        assert zoo("import", "hf", str(folder), "--name", "tiny-persimmon").code == 0
    done = zoo("export", "tiny-persimmon", "--format", "hf", "--out", str(tmp_path / "export"))
    assert done.code != 0
    assert "'tiny-persimmon' is of family 'persimmon', which no installed plugin registers" in done.err
    assert len(done.err.strip().splitlines()) == 1, done.err
    assert not (tmp_path / "export").exists()


def test_what_persimmon_has_and_the_zoo_cannot_compute_is_refused_in_one_line(with_plugin, zoo, tmp_path):
    _persimmon_folder(tmp_path, qk_layernorm=True)
    done = zoo("import", "hf", str(tmp_path), "--name", "tiny-persimmon-qk")
    assert done.code != 0
    assert "qk_layernorm: Persimmon's LayerNorm on queries and keys has no zoo counterpart" in done.err
    assert len(done.err.strip().splitlines()) == 1, done.err


def test_a_variant_recording_no_family_is_written_as_persimmon_when_laid_out_as_persimmon(
    with_plugin, persimmon, zoo, tmp_path
):
    """The record's `chooses`: the imported card with its ``family`` line taken out
    exports as Persimmon all the same, found by its layout after the built-in families refuse it."""
    folder, reference = persimmon
    assert zoo("import", "hf", str(folder), "--name", "tiny-persimmon").code == 0
    registry = Path(os.environ["ZOO_HOME"]) / "registry.toml"
    text = registry.read_text(encoding="utf-8")
    assert text.count('family = "persimmon"\n') == 1
    registry.write_text(text.replace('family = "persimmon"\n', ""), encoding="utf-8")
    model = zoo_core.load("tiny-persimmon")
    assert model.card.family is None
    out = tmp_path / "export"
    done = zoo("export", "tiny-persimmon", "--format", "hf", "--out", str(out))
    assert done.code == 0, done.err
    assert json.loads((out / "config.json").read_text())["architectures"] == ["PersimmonForCausalLM"]


def _guide_section() -> str:
    text = (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")
    return text.split("\n## Adding a family\n", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize("path", ["pyproject.toml", "zoo_persimmon/__init__.py", "zoo_persimmon/family.py"])
def test_the_guide_shows_the_plugins_files_as_they_are(path):
    """docs/plugins.md's worked example is the tested plugin, file for file."""
    section = _guide_section()
    shown = re.search(rf"`{re.escape(path)}`:\n\n```\w+\n(.*?)```\n", section, re.S)
    assert shown, f"docs/plugins.md's 'Adding a family' shows no `{path}`"
    assert shown.group(1) == (PLUGIN / path).read_text(encoding="utf-8")
