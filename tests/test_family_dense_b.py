"""OLMo 2, Granite and SmolLM3 through `zoo import hf` / `zoo export --format hf`, and
GPT-NeoX with an odd rotary part of a head, proved as the other families are
(tests/test_interop_hf_families.py): a tiny random model built by transformers from a
config, with the family's own options on (OLMo 2's output norms and whole-width
query/key norm under grouped heads; Granite's four multipliers, none of them 1;
SmolLM3's layers without RoPE and sliding-window layers shorter than the prompts;
NeoX rotating 3 or int(4.8) = 4 channels of a 12-channel head), imports with logits
equal to transformers' within 1e-5 over a left-padded batch, greedy tokens equal,
and its export loads back in transformers with the same logits. The continuous-
batching server answers every family's prompts at once with transformers' greedy
tokens. GGUF: files the export writes in llama.cpp's layout (olmo2, granite,
smollm3) are read back by `zoo import gguf` with transformers' logits, and by
llama.cpp itself (slow lane) with the same greedy tokens.
"""

from __future__ import annotations

import asyncio
import json

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="the interop extra is not installed: pip install -e '.[interop]'"
)

import zoo_core  # noqa: E402

from .tiny_hf import byte_level_tokenizer, largest_difference, left_padded  # noqa: E402

PROMPTS = ["ROMEO: What light", "First Citizen:\nBefore we proceed any further, hear me", "KING"]
TOLERANCE = 1e-5
NEW_TOKENS = 6
SMALL = dict(
    vocab_size=320,
    hidden_size=48,
    intermediate_size=80,
    num_hidden_layers=2,
    num_attention_heads=6,
    num_key_value_heads=2,
    max_position_embeddings=64,
    initializer_range=0.1,
    bos_token_id=None,
    eos_token_id=None,
    pad_token_id=None,
)
NEOX = dict(SMALL, vocab_size=384, hidden_size=36, num_attention_heads=3)  # heads of 12
del NEOX["num_key_value_heads"]
# name: (config class, fields, the card settings the import must write)
FAMILIES = {
    "olmo2": (
        "Olmo2Config",
        dict(SMALL, rms_norm_eps=1e-6),
        {"norm_placement": "after", "qk_norm": "rmsnorm-whole", "n_kv_head": 2, "tie_embeddings": False},
    ),
    "granite": (
        "GraniteConfig",
        dict(
            SMALL,
            embedding_multiplier=3.0,
            attention_multiplier=0.2,
            residual_multiplier=0.35,
            logits_scaling=4.0,
            tie_word_embeddings=True,
        ),
        {"embedding_scale": 3.0, "query_scale": 0.2, "residual_scale": 0.35, "logit_scale": 0.25},
    ),
    "smollm3": (  # transformers' default pattern: the fourth layer does not rotate
        "SmolLM3Config",
        dict(SMALL, num_hidden_layers=4),
        {"layers": [{"repeat": 3}, {"rope": False}]},
    ),
    "smollm3-nope-sliding": (
        "SmolLM3Config",
        dict(
            SMALL,
            num_hidden_layers=3,
            no_rope_layers=[0, 1, 1],
            use_sliding_window=True,
            sliding_window=4,
            layer_types=["full_attention", "sliding_attention", "full_attention"],
        ),
        {"layers": [{"rope": False}, {"sliding_window": 4}, {}]},
    ),
    "neox-odd-rotary": (  # int(12 x 0.25) = 3 channels: transformers rotates 2 pairs at base^(-2i/3)
        "GPTNeoXConfig",
        dict(NEOX, rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}),
        {"rotary_fraction": 4 / 12, "rope_base": 10000.0 ** (4 / 3)},
    ),
    "neox-even-rotary": (  # int(12 x 0.4) = 4, where rounding would give 5
        "GPTNeoXConfig",
        dict(NEOX, rope_parameters={"rope_type": "default", "rope_theta": 500.0, "partial_rotary_factor": 0.4}),
        {"rotary_fraction": 4 / 12, "rope_base": 500.0},
    ),
}


class _Folders(dict):
    """Each family's transformers folder, built once for the module when first asked for."""

    def __init__(self, factory):
        super().__init__()
        self.factory = factory

    def __missing__(self, family):
        config_class, fields, _ = FAMILIES[family]
        torch.manual_seed(0)
        config = getattr(transformers, config_class)(**fields)
        model = transformers.AutoModelForCausalLM.from_config(config).eval()
        folder = self.factory.mktemp(family)
        model.save_pretrained(folder)
        byte_level_tokenizer("<|endoftext|>").save(str(folder / "tokenizer.json"))
        self[family] = (folder, model)
        return self[family]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    transformers.utils.logging.set_verbosity_error()
    return _Folders(tmp_path_factory)


def greedy(reference, rows: list[list[int]]) -> list[list[int]]:
    """transformers' greedy continuation of each row, the batch left-padded."""
    ids, mask, _ = left_padded(rows)
    with torch.no_grad():
        generated = reference.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0
        )
    return generated[:, ids.shape[1] :].tolist()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_family_imports_generates_and_exports_with_transformers_logits(folders, zoo, tmp_path, family):
    folder, reference = folders[family]
    done = zoo("import", "hf", str(folder), "--name", "imported")
    assert done.code == 0, done.err
    model = zoo_core.load("imported")
    for key, value in FAMILIES[family][2].items():
        assert model.card.config[key] == (pytest.approx(value) if isinstance(value, float) else value), key
    assert model.card.parameters == sum(p.numel() for p in reference.parameters())
    rows = [model.tokenizer.encode(p) for p in PROMPTS]
    assert largest_difference(reference, model.network, rows) <= TOLERANCE
    drawn = model.sample(PROMPTS, max_new_tokens=NEW_TOKENS, temperature=0)
    assert [s.tokens for s in drawn] == greedy(reference, rows)

    out = tmp_path / "export"
    done = zoo("export", "imported", "--format", "hf", "--out", str(out))
    assert done.code == 0, done.err
    assert json.loads((out / "config.json").read_text())["architectures"] == [type(reference).__name__]
    exported = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert largest_difference(exported, model.network, rows) <= TOLERANCE


def test_the_continuous_batching_server_answers_every_family_with_transformers_greedy_tokens(folders, zoo):
    pytest.importorskip("starlette", reason="the web tests need the web extra: pip install 'zoo-lm[web]'")
    openai = pytest.importorskip("openai", reason="these tests need the web-test extra: pip install 'zoo-lm[web-test]'")
    from tests.web_support import Server

    expected = {}
    for family in FAMILIES:
        folder, reference = folders[family]
        assert zoo("import", "hf", str(folder), "--name", family).code == 0
        tokenizer = zoo_core.load(family).tokenizer
        continuations = greedy(reference, [tokenizer.encode(p) for p in PROMPTS])
        expected.update({(family, p): tokenizer.decode(c) for p, c in zip(PROMPTS, continuations)})

    async def ask_all(url):
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=300) as client:
            return await asyncio.gather(
                *[
                    client.completions.create(model=family, prompt=prompt, max_tokens=NEW_TOKENS, temperature=0)
                    for family, prompt in expected
                ]
            )

    server = Server("--max-concurrent", "32")
    try:
        answers = asyncio.run(ask_all(server.url))
    finally:
        server.stop()
    assert [a.choices[0].text for a in answers] == list(expected.values())
