"""Named hook points (zoo_core/plugin_api/hook_points.py): cached activations replay
the logits, hooks that keep or copy an activation change no bit, hooks are always
removed, names are module paths (a third party's too), every built-in transformer
variant has the full list, and cached decoding and row batches pass every point."""

from __future__ import annotations

import pytest
import torch

from zoo_core.errors import ZooError
from zoo_core.loading.api import build_network, get_variant, list_variants
from zoo_core.plugin_api import HookPoint, hook_point_names, hooks, run_with_cache
from zoo_core.plugin_api.manager import get_plugins
from zoo_plugins.blocks.blocks import PreNormBlock
from zoo_plugins.models.transformer import TransformerLanguageModel

from .test_decoding import LAYOUTS, VOCAB, WINDOW

BLOCK_POINTS = [
    "resid_pre",
    "attention.input",
    "attention.pattern",
    "attention.heads",
    "attention.output",
    "resid_mid",
    "feed_forward.hidden",
    "feed_forward.output",
    "resid_post",
]


def expected_names(n_layer: int, positions: str) -> list[str]:
    names = ["embed"] + (["positions.added"] if positions in ("learned", "sinusoidal") else [])
    names += [f"blocks.{i}.{point}" for i in range(n_layer) for point in BLOCK_POINTS]
    return names + ["final_norm.output", "logits"]


def _model(**layout) -> TransformerLanguageModel:
    torch.manual_seed(0)
    return TransformerLanguageModel(VOCAB, WINDOW, 16, 2, 2, components=get_plugins().components, **layout).eval()


def _ids(length: int = WINDOW, seed: int = 3) -> torch.Tensor:
    return torch.randint(VOCAB, (2, length), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(autouse=True)
def no_hook_left_behind():
    yield
    assert HookPoint.active == 0


LAYOUT_IDS = ["-".join(str(v) for v in layout.values()) for layout in LAYOUTS]


@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
@torch.no_grad()
def test_the_cache_replays_the_logits_and_reading_changes_no_bit(layout):
    model = _model(**layout)
    ids = _ids()
    plain = model(ids)[0]
    logits, cache = run_with_cache(model, ids)
    assert torch.equal(logits, plain)  # reading every point, the pattern included, changes nothing
    assert list(cache) == expected_names(2, layout["positions"])
    assert cache["blocks.0.attention.pattern"].shape == (2, 2, WINDOW, WINDOW)
    assert cache["blocks.0.attention.heads"].shape == (2, WINDOW, 2, layout.get("head_size", 8))
    assert cache["blocks.1.feed_forward.hidden"].shape == (2, WINDOW, 64)
    # the last residual stream through the final norm and the head is the model's output
    replayed = model.cap_logits(model.lm_head(model.final_norm(cache["blocks.1.resid_post"])))
    assert torch.equal(replayed, plain)
    assert torch.equal(model.cap_logits(model.lm_head(cache["final_norm.output"])), plain)
    assert torch.equal(cache["logits"], plain)
    # each block's input is the previous block's output
    assert torch.equal(cache["blocks.1.resid_pre"], cache["blocks.0.resid_post"])


@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
@torch.no_grad()
def test_a_hook_that_replaces_an_activation_by_itself_leaves_the_logits_bitwise_equal(layout):
    model = _model(**layout)
    ids = _ids()
    plain = model(ids)[0]
    with hooks(model, {"*": lambda activation, name: activation}):
        assert torch.equal(model(ids)[0], plain)
    # a copy is a new tensor with the same values: equal bits everywhere but the
    # pattern, whose replacement is attended through explicitly (not by SDPA)
    copies = {name: (lambda a, n: a.clone()) for name in hook_point_names(model) if not name.endswith("pattern")}
    with hooks(model, copies):
        assert torch.equal(model(ids)[0], plain)
    with hooks(model, {"blocks.*.attention.pattern": lambda a, n: a.clone()}):
        torch.testing.assert_close(model(ids)[0], plain, rtol=1e-5, atol=1e-5)
        assert torch.equal(model(ids)[0], model._run(ids, need_weights=True)[0])  # as attention_maps computes it


@torch.no_grad()
def test_replacing_activations_intervenes():
    model = _model(positions="learned", block="pre-norm")
    ids = _ids()
    plain = model(ids)[0]
    _, cache = run_with_cache(model, ids, "blocks.1.attention.heads")

    def zero_head(activation, name):
        activation = activation.clone()
        activation[:, :, 1] = 0  # head 1 of (B, T, H, D)
        return activation

    with hooks(model, {"blocks.1.attention.heads": zero_head}):
        ablated, after = run_with_cache(model, ids, ["blocks.1.attention.heads", "blocks.1.attention.output"])
    assert not torch.equal(ablated, plain)
    assert torch.equal(after["blocks.1.attention.heads"][:, :, 0], cache["blocks.1.attention.heads"][:, :, 0])
    assert after["blocks.1.attention.heads"][:, :, 1].abs().max() == 0
    # zeroing head 1 is projecting head 0 alone
    proj = model.blocks[1].attention.proj
    alone = torch.cat([cache["blocks.1.attention.heads"][:, :, 0], torch.zeros(2, WINDOW, 8)], dim=-1)
    torch.testing.assert_close(after["blocks.1.attention.output"], proj(alone))
    # a pattern that attends to the first token only is attended through
    with hooks(model, {"blocks.0.attention.pattern": lambda a, n: torch.zeros_like(a).index_fill_(-1, torch.tensor([0]), 1.0)}):
        _, first = run_with_cache(model, ids, "blocks.0.attention.heads")
    _, values = run_with_cache(model, ids, "blocks.0.attention.input")
    v = model.blocks[0].attention.qkv(values["blocks.0.attention.input"]).split(16, dim=2)[2].view(2, WINDOW, 2, 8)
    torch.testing.assert_close(first["blocks.0.attention.heads"], v[:, :1].expand(2, WINDOW, 2, 8))


def test_hooks_are_removed_after_an_exception():
    model = _model(positions="learned", block="pre-norm")

    def failing(activation, name):
        raise RuntimeError("the hook failed")

    with pytest.raises(RuntimeError, match="the hook failed"):
        with hooks(model, {"blocks.*.resid_post": failing, "embed": lambda a, n: None}):
            assert HookPoint.active == 3
            model(_ids())
    assert HookPoint.active == 0
    assert all(not point.functions for point in model.modules() if isinstance(point, HookPoint))


def test_an_unknown_name_is_one_line_naming_close_ones_and_nothing_is_set():
    model = _model(positions="learned", block="pre-norm")
    with pytest.raises(ZooError, match=r"no hook point 'blocks\.0\.resid_psot' .*did you mean 'blocks\.0\.resid_post'"):
        with hooks(model, {"embed": lambda a, n: None, "blocks.0.resid_psot": lambda a, n: None}):
            pass
    with pytest.raises(ZooError, match="no hook point 'blocks.7.\\*'"):
        run_with_cache(model, _ids(), "blocks.7.*")
    with pytest.raises(ZooError, match="returned int; return a tensor or None"):
        with hooks(model, {"embed": lambda a, n: 0}):
            model(_ids())


class _BlockWithItsOwnPoint(PreNormBlock):
    """A third party's block: its own hook point beside the ones it inherits."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.gate = HookPoint()

    def forward(self, x, positions, encoding, need_weights=False, cache=None):
        x, weights = super().forward(x, positions, encoding, need_weights, cache)
        return self.gate(x), weights


class _BlockOfItsOwn(torch.nn.Module):
    def __init__(self, d_model: int, **_):
        super().__init__()
        self.mix = torch.nn.Linear(d_model, d_model)
        self.mixed = HookPoint()

    def forward(self, x, positions, encoding, need_weights=False, cache=None):
        return x + self.mixed(self.mix(x)), None


@torch.no_grad()
def test_a_third_party_blocks_hook_points_appear_by_name():
    from zoo_core import hookimpl
    from zoo_core.plugin_api.manager import PluginInfo, PluginSet

    class ThirdParty:
        @hookimpl
        def register_blocks(register):
            register("gated", _BlockWithItsOwnPoint)
            register("own", _BlockOfItsOwn)

    plugins = PluginSet()
    plugins.components = {**get_plugins().components, "blocks": plugins.components["blocks"]}
    plugins.add_plugin(ThirdParty, PluginInfo("third", "third", "1", False))
    config = {"vocab_size": VOCAB, "context_length": WINDOW, "d_model": 16, "n_layer": 2, "n_head": 2}
    gated = plugins.components["models"].create("transformer", {**config, "block": "gated"}, plugins.components)
    names = hook_point_names(gated)
    assert "blocks.1.gate" in names and "blocks.1.resid_post" in names
    logits, cache = run_with_cache(gated.eval(), _ids(), "blocks.*.gate")
    assert list(cache) == ["blocks.0.gate", "blocks.1.gate"]
    own = plugins.components["models"].create("transformer", {**config, "block": "own"}, plugins.components)
    assert hook_point_names(own) == ["embed", "positions.added", "blocks.0.mixed", "blocks.1.mixed", "final_norm.output", "logits"]


def test_every_built_in_transformer_variant_has_the_full_list():
    checked = 0
    for card in list_variants():
        variant = get_variant(card.name)
        if card.architecture not in ("transformer", "gpt"):
            continue
        config = card.architecture_config()
        positions = config.get("positions", "learned")
        assert hook_point_names(build_network(variant)) == expected_names(config["n_layer"], positions), variant.name
        checked += 1
    assert checked >= 15
    bigram = build_network(get_variant("bigram"))
    assert hook_point_names(bigram) == ["embed", "logits"]


@torch.no_grad()
def test_hooks_see_every_decoded_token():
    model = _model(positions="rope", block="pre-norm")
    ids = _ids(8)

    def cached_run():
        cache = model.make_cache()
        out = [model(ids[:, :3], cache=cache)[0]]
        out += [model(ids[:, t : t + 1], cache=cache)[0] for t in range(3, 8)]
        return torch.cat(out, dim=1)

    plain = cached_run()
    seen = []
    with hooks(model, {"blocks.1.resid_post": lambda a, n: seen.append(a.shape[1])}):
        hooked = cached_run()
    assert seen == [3, 1, 1, 1, 1, 1]  # every token through the blocks' forward
    assert torch.equal(hooked, plain)  # a reading hook changes nothing


@torch.inference_mode()
def test_hooks_see_every_row_of_a_row_batch_step():
    model = _model(positions="learned", block="post-norm")
    prompts = [_ids(2, seed=1)[:1], _ids(5, seed=2)[:1]]
    batches = [model.make_row_batch(2), model.make_row_batch(2)]
    for batch in batches:
        for row, prompt in enumerate(prompts):
            cache = model.make_cache()
            model(prompt, cache=cache)
            batch.add(row, cache)
    hooked, plain = batches
    seen = []
    with hooks(model, {"embed": lambda a, n: seen.append(tuple(a.shape))}):
        first = hooked.step([4, 7])
    assert seen == [(2, 1, 16)]  # one forward for both rows
    assert torch.equal(first, plain.step([4, 7]))
    # the rows' keys and values went into their slots: the steps after agree
    assert torch.equal(hooked.step([1, 2]), plain.step([1, 2]))
