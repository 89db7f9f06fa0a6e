"""TransformerLens: `hooked_transformer(NAME)` and `zoo export --format transformer-lens`.

Importing transformer_lens is slow, so everything that needs it is in this one
module. Needs the `lens` extra; without it the module is skipped with that
reason, and CI installs it.
"""

from __future__ import annotations

import re
import shlex

import pytest
import torch

transformer_lens = pytest.importorskip("transformer_lens", reason="the lens extra is not installed: pip install -e '.[lens]'")

import zoo_core  # noqa: E402
from zoo_core.errors import ZooError  # noqa: E402
from zoo_core.interop.hf import LOGIT_TOLERANCE, verification_ids  # noqa: E402
from zoo_core.interop.transformer_lens import hooked_transformer  # noqa: E402

from .conftest import ROOT  # noqa: E402


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """Nothing may be fetched: the Hub's client is told it is offline, so a download attempt fails the test."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def _largest_difference(lens, model) -> float:
    ids, _ = verification_ids(model)
    with torch.no_grad():
        theirs = lens(torch.tensor([ids]))
        ours, _ = model.network(torch.tensor([ids]))
    assert theirs.shape == ours.shape
    return float((theirs - ours).abs().max())


# One variant per mapping: learned positions and GELU with tied embeddings
# (gpt-char-mini), sinusoids as a table with ReLU (transformer-6b-sin), RoPE and
# RMSNorm, ReLU² and QK-norm.
@pytest.mark.parametrize("name", ["gpt-char-mini", "transformer-6b-sin", "gpt-char-mini-rope", "gpt-char-speedrun"])
def test_a_hooked_transformer_gives_the_zoos_logits(name):
    model = zoo_core.load(name)
    lens = hooked_transformer(model)
    assert type(lens).__name__ == "HookedTransformer"
    assert _largest_difference(lens, model) <= LOGIT_TOLERANCE
    # Its own tokenizer gives the zoo's ids, with no beginning-of-text token added.
    assert lens.to_tokens("ROMEO: To be")[0].tolist() == model.tokenizer.encode("ROMEO: To be")


def test_its_hooks_see_what_the_zoo_computes():
    """The cache is TransformerLens' own: the first block's attention pattern equals the zoo's map."""
    model = zoo_core.load("transformer-6b-sin")
    lens = hooked_transformer("transformer-6b-sin")
    ids = model.tokenizer.encode("ROMEO: To be, or not")
    _, cache = lens.run_with_cache(torch.tensor([ids]))
    ours = model.network.attention_maps(torch.tensor([ids]))[0]
    assert torch.allclose(cache["blocks.0.attn.hook_pattern"], ours, atol=1e-5)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("transformer-1b-learned-post-ctx8", "post-norm blocks"),
        ("bigram", "is a bigram model"),
        ("puzzle-disobeys", "is a puzzle model"),
    ],
)
def test_what_it_cannot_represent_is_refused_by_name_in_one_line(zoo, tmp_path, name, reason):
    with pytest.raises(ZooError, match=reason) as refused:
        hooked_transformer(name)
    assert "\n" not in str(refused.value) and name in str(refused.value)
    done = zoo("export", name, "--format", "transformer-lens", "--out", str(tmp_path / "out"))
    assert done.code != 0 and reason in done.err and len(done.err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def _section() -> str:
    text = (ROOT / "docs" / "interop.md").read_text(encoding="utf-8")
    return text.split("\n## TransformerLens\n", 1)[1].split("\n## ", 1)[0]


def test_the_commands_and_snippets_of_the_docs_section_run(zoo, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    section = _section()
    commands = [shlex.split(line) for block in re.findall(r"```bash\n(.*?)```", section, re.S) for line in block.splitlines() if line.strip()]
    snippets = re.findall(r"```python\n(.*?)```", section, re.S)
    assert [c[:3] for c in commands] == [["zoo", "export", "transformer-6b-sin"]] and len(snippets) == 2
    done = zoo(*commands[0][1:])
    assert done.code == 0, done.err
    assert "checked: logits" in done.out

    in_memory: dict = {}
    exec(snippets[0], in_memory)
    assert "torch.Size([1, 2, " in capsys.readouterr().out
    from_folder: dict = {}
    exec(snippets[1], from_folder)
    assert len(snippets[1].strip().splitlines()) == 4  # the "few lines" the section promises

    model = zoo_core.load("transformer-6b-sin")
    for lens in (in_memory["lens"], from_folder["lens"]):
        assert _largest_difference(lens, model) <= LOGIT_TOLERANCE
    ids = model.tokenizer.encode("ROMEO: To be")
    assert from_folder["lens"].to_tokens("ROMEO: To be")[0].tolist() == ids
