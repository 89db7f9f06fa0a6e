"""`zoo inspect` and zoo_core.inspection: the logit lens's last row is the model's
own prediction, patching recovers all at the last layer and nothing where the
prompts agree, zero-ablating a head is cutting it out of the output projection,
every user error is one line, and every command of docs/inspect.md runs as shown."""

from __future__ import annotations

import copy
import json
import re
import shlex
import sys

import pytest
import torch

from zoo_core import load
from zoo_core.corpus.batches import mean_loss
from zoo_core.errors import ZooError
from zoo_core.inspection.ablation import ablate_heads, every_head, parse_heads, validation_windows
from zoo_core.inspection.logit_lens import logit_lens
from zoo_core.inspection.patching import patch_residual
from zoo_core.plugin_api import HookPoint

from .conftest import ROOT

VARIANT = "transformer-2b-learned-ctx8"


@pytest.fixture(scope="module")
def model():
    return load(VARIANT)


@pytest.fixture(autouse=True)
def no_hook_left_behind():
    yield
    assert HookPoint.active == 0


def test_the_logit_lens_ends_in_the_models_own_prediction(model):
    lens = logit_lens(model, "ROMEO: What is")
    ids = model.prompt_ids("ROMEO: What is")
    assert lens.layers == ["embeddings", "block 0", "block 1"]
    assert len(lens.tokens) == ids.shape[1] and all(len(row) == ids.shape[1] for row in lens.predictions)
    with torch.no_grad():
        logits = model.network(ids)[0][0]
    own = [model.tokenizer.decode([i]).replace(" ", "␣").replace("\n", "\\n") for i in logits.argmax(-1).tolist()]
    assert lens.predictions[-1] == own
    torch.testing.assert_close(torch.tensor(lens.probabilities[-1]), torch.softmax(logits, -1).max(-1).values)
    assert lens.final_token_probabilities[-1] == lens.probabilities[-1]
    loss = torch.nn.functional.cross_entropy(logits[:-1], ids[0, 1:])
    assert lens.prompt_loss[-1] == pytest.approx(float(loss), rel=1e-5)


def test_patching_recovers_all_at_the_last_layer_and_nothing_where_the_prompts_agree(model):
    patching = patch_residual(model, "ROMEO: What is", "JULIET: What is")
    assert patching.clean_tokens[1:] == patching.corrupted_tokens[1:]
    assert patching.answer != patching.wrong
    last = patching.recovered[-1]
    assert last[-1] == pytest.approx(1.0)  # the whole last residual stream decides the logits
    assert all(value == 0.0 for value in last[:-1])  # earlier positions cannot reach the last after the last block
    embeddings = patching.recovered[0]
    assert all(value == 0.0 for value in embeddings[1:])  # the same token there: patching changes nothing


def test_zero_ablating_a_head_is_cutting_it_out_of_the_output_projection(model):
    report = ablate_heads(model, [[(1, 0)], [(0, 1), (1, 0)]], "zero", windows=32)
    inputs, targets, _ = validation_windows(model, 32)
    cut = copy.deepcopy(model.network)
    D = cut.blocks[1].attention.head_size
    with torch.no_grad():
        cut.blocks[1].attention.proj.weight[:, 0:D] = 0
    assert report.ablations[0].loss == pytest.approx(mean_loss(cut, inputs, targets), rel=1e-5)
    with torch.no_grad():
        cut.blocks[0].attention.proj.weight[:, D : 2 * D] = 0
    assert report.ablations[1].loss == pytest.approx(mean_loss(cut, inputs, targets), rel=1e-5)
    assert report.loss == pytest.approx(mean_loss(model.network, inputs, targets))
    assert report.ablations[0].delta == pytest.approx(report.ablations[0].loss - report.loss)


def test_mean_ablation_puts_in_the_heads_mean_output(model):
    zero = ablate_heads(model, [[(0, 0)]], "zero", windows=32)
    mean = ablate_heads(model, [[(0, 0)]], "mean", windows=32)
    assert mean.loss == zero.loss and mean.ablations[0].loss != zero.ablations[0].loss
    assert every_head(model) == [[(0, 0)], [(0, 1)], [(1, 0)], [(1, 1)]]


def test_inspect_json_carries_every_view(zoo):
    result = zoo("inspect", VARIANT, "--prompt", "ROMEO: What is", "--logit-lens", "--patch", "--corrupt",
                 "JULIET: What is", "--ablate", "1.1", "--windows", "16", "--json")
    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert set(report) == {"name", "logit_lens", "patching", "ablation"}
    assert report["ablation"]["windows"] == 16 and report["ablation"]["ablations"][0]["heads"] == ["1.1"]


def test_inspect_draws_svg_and_png(zoo, tmp_path):
    svg = tmp_path / "lens.svg"
    result = zoo("inspect", VARIANT, "--prompt", "ROMEO: What is", "--logit-lens", "--out", str(svg))
    assert result.code == 0, result.err
    text = svg.read_text()
    assert text.startswith("<svg") and "logit lens" in text and "block 1" in text and "ROMEO" in text
    pytest.importorskip("matplotlib")
    png = tmp_path / "patch.png"
    result = zoo("inspect", VARIANT, "--prompt", "ROMEO: What is", "--patch", "--corrupt", "JULIET: What is",
                 "--out", str(png))
    assert result.code == 0, result.err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "arguments, message",
    [
        ([VARIANT, "--ablate", "0.5"], "head 0.5: layer 0 of 'transformer-2b-learned-ctx8' has 2 heads, 0 to 1"),
        ([VARIANT, "--ablate", "2.0"], "layer 2: 'transformer-2b-learned-ctx8' has 2 layers, 0 to 1"),
        ([VARIANT, "--ablate", "first"], "--ablate takes LAYER.HEAD[,LAYER.HEAD...] counted from 0, e.g. 0.1,1.0; not 'first'"),
        ([VARIANT, "--prompt", "ROMEO: What is the matter with you, my lord?", "--logit-lens"],
         "the prompt is 14 tokens; 'transformer-2b-learned-ctx8' reads at most 8"),
        ([VARIANT, "--prompt", "ROMEO:"], "choose a view: --logit-lens, --ablate LAYER.HEAD[,...] or --patch --corrupt TEXT"),
        ([VARIANT, "--logit-lens"], "--logit-lens and --patch need --prompt TEXT"),
        ([VARIANT, "--prompt", "ROMEO:", "--patch"], "--patch needs --corrupt TEXT"),
        ([VARIANT, "--prompt", "ROMEO: What", "--patch", "--corrupt", "ROMEO"],
         "the clean prompt is 4 tokens and the corrupted one 1: patching compares them position by position"),
        (["bigram", "--prompt", "ROMEO:", "--logit-lens"], "'bigram' (bigram) has no residual stream of blocks to read"),
        (["bigram", "--ablate", "0.0"], "'bigram' (bigram) has no attention heads to ablate"),
        ([VARIANT, "--prompt", "ROMEO:", "--logit-lens", "--out", "lens.txt"], "--out lens.txt: write a .svg or a .png"),
    ],
)
def test_user_errors_are_one_line(zoo, arguments, message):
    result = zoo("inspect", *arguments)
    assert result.code == 1
    assert message in result.err and result.err.count("\n") == 1, result.err


def test_parse_heads():
    assert parse_heads("0.1, 2.0") == [(0, 1), (2, 0)]
    with pytest.raises(ZooError):
        parse_heads("1")


def _documented_commands() -> list[tuple[list[str], str | None]]:
    """Each `zoo` command of docs/inspect.md's bash blocks, with the text block shown after it, if any."""
    text = (ROOT / "docs" / "inspect.md").read_text(encoding="utf-8")
    found = []
    for match in re.finditer(r"```bash\n(.*?)```(?:\n\n```text\n(.*?)```)?", text, re.S):
        lines = [line for line in match.group(1).splitlines() if line.strip()]
        for i, line in enumerate(lines):
            found.append((shlex.split(line), match.group(2) if i == len(lines) - 1 else None))
    return found


def test_every_command_of_docs_inspect_md_runs_and_prints_what_it_shows(zoo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    commands = _documented_commands()
    assert len(commands) >= 4
    for command, shown in commands:
        assert command[0] == "zoo", command
        if "--out" in command and command[command.index("--out") + 1].endswith(".png") and "matplotlib" not in sys.modules:
            pytest.importorskip("matplotlib")
        result = zoo(*command[1:])
        assert result.code == 0, (command, result.err)
        if shown is not None:
            assert result.out.rstrip() == shown.rstrip(), command


def test_the_python_of_docs_inspect_md_runs():
    text = (ROOT / "docs" / "inspect.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks
    for block in blocks:
        exec(compile(block, "docs/inspect.md", "exec"), {})
