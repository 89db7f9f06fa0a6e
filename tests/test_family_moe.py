"""Mixtral and Qwen2-MoE, the zoo's mixtures of experts, proved as the other families
are: tiny random models built by transformers from configs (few layers, odd widths,
uneven routing: 4 experts top-2, 3 experts top-1, 5 experts top-3, Qwen2-MoE's
dense layers and shared expert) import with transformers' logits within 1e-5 over a
left-padded batch and its greedy tokens, export and load back in transformers with
the same logits, answer through the continuous-batching server with transformers'
greedy tokens, and import from GGUF files written by `gguf`'s writer in llama.cpp's
layout (stacked experts in F32 and Q8_0), exporting them back value for value, which
llama.cpp itself runs with the zoo's greedy tokens (slow lane); `zoo inspect --routing`
counts the tokens each expert took as transformers' router chooses them."""

from __future__ import annotations

import asyncio
import json

import gguf
import numpy as np
import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="the interop extra is not installed: pip install -e '.[interop]'"
)

import zoo_core  # noqa: E402
from zoo_core.errors import ZooError  # noqa: E402
from zoo_plugins.models.settings import TransformerConfig  # noqa: E402

from .gguf_support import CHAT_TEMPLATE, SPECIALS  # noqa: E402
from .tiny_hf import byte_level_tokenizer, largest_difference, left_padded  # noqa: E402

PROMPTS = ["ROMEO: What light", "First Citizen:\nBefore we proceed any further, hear me", "KING"]
TOLERANCE = 1e-5
NEW_TOKENS = 6
SMALL = dict(
    vocab_size=320,
    hidden_size=48,
    num_attention_heads=6,
    num_key_value_heads=2,
    max_position_embeddings=64,
    initializer_range=0.1,
    bos_token_id=None,
    eos_token_id=None,
    pad_token_id=None,
)
# name: (config class, fields, the card settings the import must write)
FAMILIES = {
    "mixtral-4-experts-top-2": (
        "MixtralConfig",
        dict(SMALL, num_hidden_layers=2, intermediate_size=40, num_local_experts=4, num_experts_per_tok=2),
        {"experts": 4, "experts_per_token": 2, "d_ff": 40},
    ),
    "mixtral-3-experts-top-1-window": (
        "MixtralConfig",
        dict(SMALL, num_hidden_layers=2, intermediate_size=28, num_local_experts=3, num_experts_per_tok=1,
             sliding_window=5, tie_word_embeddings=True),
        {"experts": 3, "experts_per_token": 1, "sliding_window": 5, "tie_embeddings": True},
    ),
    "qwen2moe-shared-dense-layer": (
        "Qwen2MoeConfig",
        dict(SMALL, num_hidden_layers=3, intermediate_size=72, moe_intermediate_size=24,
             shared_expert_intermediate_size=40, num_experts=4, num_experts_per_tok=2, mlp_only_layers=[1]),
        {"experts": 4, "expert_d_ff": 24, "shared_expert_d_ff": 40, "norm_topk_prob": False,
         "d_ff": 72, "attention_bias": "qkv", "layers": [{}, {"experts": False}, {}]},
    ),
    "qwen2moe-sparse-step-rescaled": (
        "Qwen2MoeConfig",
        dict(SMALL, num_hidden_layers=4, intermediate_size=56, moe_intermediate_size=20,
             shared_expert_intermediate_size=36, num_experts=5, num_experts_per_tok=3, decoder_sparse_step=2,
             norm_topk_prob=True, qkv_bias=False),
        {"experts": 5, "experts_per_token": 3, "norm_topk_prob": True, "attention_bias": "none",
         "layers": [{"experts": False}, {}, {"experts": False}, {}]},
    ),
}


class _Folders(dict):
    """Each case's transformers folder, built once for the module when first asked for."""

    def __init__(self, factory):
        super().__init__()
        self.factory = factory

    def __missing__(self, case):
        config_class, fields, _ = FAMILIES[case]
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(getattr(transformers, config_class)(**fields)).eval()
        folder = self.factory.mktemp(case)
        model.save_pretrained(folder)
        byte_level_tokenizer("<|endoftext|>").save(str(folder / "tokenizer.json"))
        self[case] = (folder, model)
        return self[case]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    transformers.utils.logging.set_verbosity_error()
    return _Folders(tmp_path_factory)


def _greedy(reference, rows):
    ids, mask, _ = left_padded(rows)
    with torch.no_grad():
        generated = reference.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0
        )
    return generated[:, ids.shape[1] :].tolist()


@pytest.mark.parametrize("case", list(FAMILIES))
def test_a_mixture_of_experts_imports_generates_and_exports_with_transformers_logits(folders, zoo, tmp_path, case):
    folder, reference = folders[case]
    done = zoo("import", "hf", str(folder), "--name", "imported")
    assert done.code == 0, done.err
    model = zoo_core.load("imported")
    assert model.card.family == reference.config.model_type
    for key, value in FAMILIES[case][2].items():
        assert model.card.config[key] == value, key
    assert model.card.parameters == sum(p.numel() for p in reference.parameters())
    # The size budget's estimate counts the experts: an upper bound, and not a loose one.
    sized = {**model.card.config, "vocab_size": reference.config.vocab_size, "context_length": 64}
    estimate, _ = TransformerConfig.estimate_sizes(sized)
    assert model.card.parameters <= estimate <= 1.5 * model.card.parameters
    rows = [model.tokenizer.encode(p) for p in PROMPTS]
    assert largest_difference(reference, model.network, rows) <= TOLERANCE
    drawn = model.sample(PROMPTS, max_new_tokens=NEW_TOKENS, temperature=0)
    assert [s.tokens for s in drawn] == _greedy(reference, rows)

    out = tmp_path / "export"
    done = zoo("export", "imported", "--format", "hf", "--out", str(out))
    assert done.code == 0, done.err
    assert json.loads((out / "config.json").read_text())["architectures"] == [type(reference).__name__]
    exported = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert largest_difference(exported, model.network, rows) <= TOLERANCE


def test_the_continuous_batching_server_answers_with_transformers_greedy_tokens(folders, zoo):
    pytest.importorskip("starlette", reason="the web tests need the web extra: pip install 'zoo-lm[web]'")
    openai = pytest.importorskip("openai", reason="these tests need the web-test extra: pip install 'zoo-lm[web-test]'")
    from tests.web_support import Server

    expected = {}
    for case in ("mixtral-4-experts-top-2", "qwen2moe-shared-dense-layer"):
        folder, reference = folders[case]
        assert zoo("import", "hf", str(folder), "--name", case).code == 0
        model = zoo_core.load(case)
        greedy = _greedy(reference, [model.tokenizer.encode(p) for p in PROMPTS])
        expected.update({(case, prompt): model.tokenizer.decode(tokens) for prompt, tokens in zip(PROMPTS, greedy)})

    async def ask_all(url):
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=300) as client:
            return await asyncio.gather(
                *[
                    client.completions.create(model=case, prompt=prompt, max_tokens=NEW_TOKENS, temperature=0)
                    for case, prompt in expected
                ]
            )

    server = Server("--max-concurrent", "16")
    try:
        answers = asyncio.run(ask_all(server.url))
    finally:
        server.stop()
    assert [a.choices[0].text for a in answers] == list(expected.values())
    assert all(a.usage.completion_tokens == NEW_TOKENS for a in answers)


def _router_counts(reference, ids):
    """Per layer with experts, the tokens transformers' router sends to each expert."""
    config = reference.config
    k = config.num_experts_per_tok
    experts = getattr(config, "num_local_experts", None) or config.num_experts
    with torch.no_grad():
        router_logits = reference(input_ids=ids, output_router_logits=True).router_logits
    counts = []
    for logits in router_logits:
        chosen = torch.softmax(logits.float(), dim=-1).topk(k, dim=-1).indices
        counts.append(torch.bincount(chosen.flatten(), minlength=experts).tolist())
    return counts


@pytest.mark.parametrize("case", ["mixtral-4-experts-top-2", "qwen2moe-shared-dense-layer"])
def test_zoo_inspect_counts_the_tokens_each_expert_took(folders, zoo, case):
    folder, reference = folders[case]
    assert zoo("import", "hf", str(folder), "--name", "imported").code == 0
    model = zoo_core.load("imported")
    prompt = PROMPTS[1]
    ids = torch.tensor([model.tokenizer.encode(prompt)])
    shown = zoo("inspect", "imported", "--prompt", prompt, "--routing", "--json")
    assert shown.code == 0, shown.err
    report = json.loads(shown.out)["routing"]
    expected_layers = [i for i, block in enumerate(model.network.blocks) if hasattr(block.feed_forward, "router")]
    assert report["layers"] == expected_layers
    assert report["counts"] == _router_counts(reference, ids)
    k = reference.config.num_experts_per_tok
    assert all(sum(counts) == k * ids.shape[1] for counts in report["counts"])
    assert any(len(set(counts)) > 1 for counts in report["counts"])  # the routing is uneven
    table = zoo("inspect", "imported", "--prompt", prompt, "--routing")
    assert table.code == 0 and "expert 0" in table.out
    first = next(line for line in table.out.splitlines() if line.strip().startswith(f"layer {expected_layers[0]}"))
    assert first.split()[2:] == [str(c) for c in report["counts"][0]]


def test_a_dense_model_has_no_experts_to_count(folders, zoo):
    from .tiny_hf import byte_level_tokenizer as tokenizer

    torch.manual_seed(0)
    config = transformers.Qwen2Config(**dict(SMALL, num_hidden_layers=1, intermediate_size=40))
    dense = transformers.AutoModelForCausalLM.from_config(config)
    folder = folders.factory.mktemp("dense")
    dense.save_pretrained(folder)
    tokenizer("<|endoftext|>").save(str(folder / "tokenizer.json"))
    assert zoo("import", "hf", str(folder), "--name", "dense").code == 0
    shown = zoo("inspect", "dense", "--prompt", "KING", "--routing")
    assert shown.code == 1 and "'dense' has no experts to count" in shown.err
    assert len(shown.err.strip().splitlines()) == 1


@pytest.mark.parametrize("case", ["mixtral-4-experts-top-2", "mixtral-3-experts-top-1-window"])
def test_transformer_lens_reads_mixtral_and_the_inspect_views_run(folders, zoo, tmp_path, case):
    pytest.importorskip("transformer_lens", reason="the lens extra is not installed: pip install -e '.[lens]'")
    from zoo_core.interop.transformer_lens import hooked_transformer

    folder, reference = folders[case]
    assert zoo("import", "hf", str(folder), "--name", "imported").code == 0
    model = zoo_core.load("imported")
    lens = hooked_transformer(model)
    assert lens.cfg.num_experts == reference.config.num_local_experts
    ids = torch.tensor([model.tokenizer.encode(PROMPTS[1])])
    with torch.no_grad():
        logits, cache = lens.run_with_cache(ids)
        ours, _ = model.network(ids)
    assert float((logits - ours).abs().max()) <= 1e-4
    k = reference.config.num_experts_per_tok
    assert cache["blocks.1.mlp.hook_expert_indices"].shape == (ids.shape[1], k)
    done = zoo("export", "imported", "--format", "transformer-lens", "--out", str(tmp_path / "lens"))
    assert done.code == 0 and "checked: logits" in done.out, done.err
    if case != "mixtral-4-experts-top-2":
        return  # the views read the zoo's own hook points: one Mixtral shows they run
    ablate = ["--ablate", "0.1,1.2", "--windows", "4", "--context", "16"]
    for view in (["--logit-lens"], ablate, ["--patch", "--corrupt", "ROMEO: That light"]):
        shown = zoo("inspect", "imported", "--prompt", "ROMEO: What light", *view)
        assert shown.code == 0, (view, shown.err)


# --- GGUF ----------------------------------------------------------------------------


def _pairs(rows: torch.Tensor, heads: int) -> torch.Tensor:
    """llama.cpp's llama order of a query or key projection's rows (its converter's permute)."""
    half = rows.shape[0] // heads // 2
    return rows.reshape(heads, 2, half, *rows.shape[1:]).transpose(1, 2).reshape(rows.shape)


def _gguf_tensors(reference) -> dict[str, np.ndarray]:
    """The transformers model's tensors under llama.cpp's names, as its converter writes
    them: experts stacked (E, F, C), a llama file's query/key rows in pairs order, the
    shared expert's gate a vector."""
    config = reference.config
    llama = config.model_type == "mixtral"
    names = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    per_layer = {
        "input_layernorm.weight": "attn_norm.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "mlp.gate.weight": "ffn_gate_inp.weight",
        "mlp.experts.down_proj": "ffn_down_exps.weight",
        "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
        "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
        "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
        "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
        **{f"self_attn.{p}_proj.{kind}": f"attn_{p}.{kind}" for p in "qkv" for kind in ("weight", "bias")},
    }
    out = {}
    for name, tensor in reference.state_dict().items():
        if name == "lm_head.weight" and config.tie_word_embeddings:
            continue
        values = tensor.detach().float()
        if name.startswith("model.layers."):
            layer, rest = name[len("model.layers.") :].split(".", 1)
            if rest == "mlp.experts.gate_up_proj":
                gate, up = values.chunk(2, dim=1)
                out[f"blk.{layer}.ffn_gate_exps.weight"] = gate.numpy()
                out[f"blk.{layer}.ffn_up_exps.weight"] = up.numpy()
                continue
            if llama and rest == "self_attn.q_proj.weight":
                values = _pairs(values, config.num_attention_heads)
            if llama and rest == "self_attn.k_proj.weight":
                values = _pairs(values, config.num_key_value_heads)
            if rest == "mlp.shared_expert_gate.weight":
                values = values.reshape(-1)
            out[f"blk.{layer}.{per_layer[rest]}"] = values.numpy()
        else:
            out[names[name]] = values.numpy()
    return out


def _write_gguf(path, reference, tokenizer) -> None:
    config = reference.config
    mixtral = config.model_type == "mixtral"
    arch = "llama" if mixtral else "qwen2moe"
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name("Tiny MoE")
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    writer.add_expert_count(config.num_local_experts if mixtral else config.num_experts)
    writer.add_expert_used_count(config.num_experts_per_tok)
    if not mixtral:
        writer.add_expert_feed_forward_length(config.moe_intermediate_size)
        writer.add_expert_shared_feed_forward_length(config.shared_expert_intermediate_size)
    vocab = [token for token, _ in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])]
    vocab += [f"[PAD{i}]" for i in range(config.vocab_size - len(vocab))]  # the padded vocabulary
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(vocab)
    writer.add_token_types([gguf.TokenType.CONTROL if t in SPECIALS else gguf.TokenType.NORMAL for t in vocab])
    merges = json.loads(tokenizer.to_str())["model"]["merges"]
    writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in merges])
    writer.add_chat_template(CHAT_TEMPLATE)
    for name, values in _gguf_tensors(reference).items():
        if name.endswith("ffn_down_exps.weight") and values.shape[-1] % 32 == 0:  # stacked experts in Q8_0
            writer.add_tensor(name, gguf.quants.quantize(values, Q8_0), raw_dtype=Q8_0)
        else:
            writer.add_tensor(name, values.astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


GGUF_CASES = {
    "mixtral-4-experts-top-2": dict(
        FAMILIES["mixtral-4-experts-top-2"][1], vocab_size=320, num_local_experts=4, num_experts_per_tok=2
    ),
    # its experts' down projections have rows of 32, and are written in Q8_0
    "qwen2moe-every-layer-q8-experts": dict(
        FAMILIES["qwen2moe-shared-dense-layer"][1],
        mlp_only_layers=[],
        num_experts=3,
        num_experts_per_tok=1,
        moe_intermediate_size=32,
    ),
}
Q8_0 = gguf.GGMLQuantizationType.Q8_0


def _gguf_reference(case: str):
    """The case's transformers model, its Q8_0 tensors holding the values the file will
    (Q8_0 of values already on its grid gives them back exactly)."""
    config_class = "MixtralConfig" if case.startswith("mixtral") else "Qwen2MoeConfig"
    torch.manual_seed(1)
    config = getattr(transformers, config_class)(**GGUF_CASES[case])
    reference = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for layer in reference.model.layers:
            down = layer.mlp.experts.down_proj
            if down.shape[-1] % 32 == 0:
                rounded = gguf.quants.dequantize(gguf.quants.quantize(down.numpy(), Q8_0), Q8_0)
                down.copy_(torch.from_numpy(np.array(rounded, dtype=np.float32).reshape(down.shape)))
    return reference


def _read_gguf(path) -> dict[str, np.ndarray]:
    reader = gguf.GGUFReader(path)
    return {t.name: np.array(gguf.quants.dequantize(t.data, t.tensor_type)) for t in reader.tensors}


@pytest.mark.parametrize("case", list(GGUF_CASES))
def test_a_gguf_file_in_llama_cpp_layout_imports_with_transformers_logits_and_exports_the_same(zoo, tmp_path, case):
    reference = _gguf_reference(case)
    tokenizer = byte_level_tokenizer(*SPECIALS)
    path = tmp_path / "tiny-moe.gguf"
    _write_gguf(path, reference, tokenizer)
    done = zoo("import", "gguf", str(path), "--name", "from-gguf")
    assert done.code == 0, done.err
    model = zoo_core.load("from-gguf")
    assert model.card.family == ("mixtral" if case.startswith("mixtral") else "qwen2_moe")
    assert model.card.parameters == sum(p.numel() for p in reference.parameters())
    rows = [tokenizer.encode(p).ids for p in PROMPTS]
    assert largest_difference(reference, model.network, rows) <= TOLERANCE
    drawn = model.sample(PROMPTS, max_new_tokens=NEW_TOKENS, temperature=0)
    assert [s.tokens for s in drawn] == _greedy(reference, rows)

    # Exported again in F32: llama.cpp's names, shapes and row orders, every value as the file had it.
    done = zoo("export", "from-gguf", "--format", "gguf", "--gguf-type", "f32", "--out", str(tmp_path / "out"))
    assert done.code == 0, done.err
    written, original = _read_gguf(tmp_path / "out" / "from-gguf.gguf"), _read_gguf(path)
    assert sorted(written) == sorted(original)
    assert all(np.array_equal(written[name], original[name]) for name in original)
    fields = gguf.GGUFReader(tmp_path / "out" / "from-gguf.gguf").fields
    arch = "llama" if case.startswith("mixtral") else "qwen2moe"
    assert fields["general.architecture"].contents() == arch
    assert fields[f"{arch}.expert_count"].contents() == model.card.config["experts"]
    assert fields[f"{arch}.expert_used_count"].contents() == model.card.config["experts_per_token"]


@pytest.mark.slow
def test_llama_cpp_continues_the_gguf_exports_with_the_zoos_greedy_tokens(zoo, tmp_path):
    """llama.cpp itself (node-llama-cpp's CPU build) runs the exported Mixtral (llama with
    experts) and Qwen2-MoE files: its greedy tokens are the zoo's."""
    from .test_interop_gguf_export import llama_cpp_greedy

    tokenizer = byte_level_tokenizer(*SPECIALS)
    jobs, expected = [], []
    for case in GGUF_CASES:
        _write_gguf(tmp_path / f"{case}.gguf", _gguf_reference(case), tokenizer)
        done = zoo("import", "gguf", str(tmp_path / f"{case}.gguf"), "--name", case)
        assert done.code == 0, done.err
        done = zoo("export", case, "--format", "gguf", "--gguf-type", "f16", "--out", str(tmp_path / "out"))
        assert done.code == 0, done.err
        model = zoo_core.load(case)
        ids = model.tokenizer.encode(PROMPTS[1])
        (drawn,) = model.sample([PROMPTS[1]], max_new_tokens=NEW_TOKENS, temperature=0)
        jobs.append({"model": str(tmp_path / "out" / f"{case}.gguf"), "ids": ids, "count": NEW_TOKENS})
        expected.append(drawn.tokens)
    assert [answer["greedy"] for answer in llama_cpp_greedy(jobs)] == expected


# --- refusals ------------------------------------------------------------------------


def test_what_a_mixture_of_experts_cannot_do_is_refused_in_one_line(folders, zoo, tmp_path):
    folder, _ = folders["qwen2moe-shared-dense-layer"]
    assert zoo("import", "hf", str(folder), "--name", "imported").code == 0
    for command, refusal in (
        (("export", "imported", "--format", "gguf", "--out", str(tmp_path / "gguf")),
         "llama.cpp's qwen2moe has experts in every layer"),
        (("export", "imported", "--format", "transformer-lens", "--out", str(tmp_path / "lens")),
         "has layers with experts and layers without"),
    ):
        done = zoo(*command)
        assert done.code == 1 and refusal in done.err and len(done.err.strip().splitlines()) == 1, done.err


@pytest.mark.parametrize("change, refusal", [
    ({"experts": 4}, "experts need experts_per_token"),
    ({"experts": 3, "experts_per_token": 4}, "4 experts per token, but a layer has 3"),
    ({"experts_per_token": 2}, "experts_per_token is a setting of experts, and no layer sets experts"),
    ({"experts": 4, "experts_per_token": 2, "layer_bias": True}, "experts have no biases"),
    ({"experts": 0, "experts_per_token": 1}, "config.experts: must be at least 1, not 0"),
])
def test_an_impossible_mixture_of_experts_is_one_line_naming_the_setting(change, refusal):
    base = {"d_model": 16, "n_layer": 2, "n_head": 2, "vocab_size": 10, "context_length": 8, "mlp": "swiglu"}
    with pytest.raises(ZooError) as raised:
        TransformerConfig.read({**base, **change}, "transformer")
    assert refusal in str(raised.value) and "\n" not in str(raised.value)


LLAMA_LIKE = {
    "block": "pre-norm", "norm": "rmsnorm", "mlp": "swiglu", "residual": "sequential", "positions": "rope",
    "attention_bias": "none", "layer_bias": False, "bias": False, "d_model": 16, "n_layer": 2, "n_head": 2,
    "n_kv_head": 2, "head_size": 8, "experts": 4, "experts_per_token": 2,
}


@pytest.mark.parametrize("change, family, reason", [
    ({}, "mixtral", ""),
    ({"sliding_window": 4}, "mixtral", ""),
    ({"shared_expert_d_ff": 8, "attention_bias": "qkv", "norm_topk_prob": False}, "qwen2_moe", ""),
    ({"shared_expert_d_ff": 8, "layers": [{}, {"experts": False}]}, "qwen2_moe", ""),
    ({"layers": [{}, {"experts": False}]}, None, "dense layers; Mixtral has none"),
    ({"norm_topk_prob": False}, None, "Mixtral rescales them"),
    ({"attention_bias": "all"}, None, "Mixtral and Qwen2-MoE have none"),
    ({"qk_norm": "rmsnorm"}, None, "experts in a qwen3 layout"),
    ({"layers": [{}, {"experts": False, "sliding_window": 2}]}, None, "sets layers"),
])
def test_a_variant_with_experts_and_no_recorded_family_is_written_as_the_family_that_has_them(change, family, reason):
    """What an export of the zoo's own variant (no family on its card) is written as."""
    from zoo_plugins.models.families.llama import choose

    chosen, why = choose({**LLAMA_LIKE, **change})
    assert chosen == family and reason in why, why


def test_hooks_on_the_router_re_route_tokens_and_a_bad_id_is_one_line(folders, zoo):
    from zoo_core.plugin_api.hook_points import hooks, run_with_cache

    folder, _ = folders["mixtral-4-experts-top-2"]
    assert zoo("import", "hf", str(folder), "--name", "imported").code == 0
    network = zoo_core.load("imported").network
    ids = torch.tensor([[5, 17, 42, 99, 3, 250, 7]])

    def without_expert_0(probabilities, name):
        return probabilities.index_fill(-1, torch.tensor([0]), 0.0)

    with torch.no_grad():
        plain, cache = run_with_cache(network, ids, "blocks.*.feed_forward.chosen")
        assert any((chosen == 0).any() for chosen in cache.values())  # expert 0 takes tokens unhooked
        with hooks(network, {"blocks.*.feed_forward.probabilities": without_expert_0}):
            rerouted, cache = run_with_cache(network, ids, "blocks.*.feed_forward.chosen")
        assert not any((chosen == 0).any() for chosen in cache.values())
        assert not torch.equal(plain, rerouted)
        with hooks(network, {"blocks.0.feed_forward.chosen": lambda chosen, name: chosen + 4}):
            with pytest.raises(ZooError, match="expert ids 0 to 3"):
                network(ids)


@pytest.mark.parametrize("dropped, refusal", [
    ("model.layers.0.block_sparse_moe.experts.1.w1.weight", "the experts are not numbered 0 to 2"),
    ("model.layers.1.block_sparse_moe.experts.3.w2.weight", "(the configuration does not describe this checkpoint)"),
])
def test_a_checkpoint_missing_an_expert_is_refused_in_one_line(folders, zoo, tmp_path, dropped, refusal):
    import shutil

    from safetensors.torch import load_file, save_file

    folder, _ = folders["mixtral-4-experts-top-2"]
    copy = tmp_path / "missing"
    shutil.copytree(folder, copy)
    tensors = load_file(copy / "model.safetensors")
    del tensors[dropped]
    save_file(tensors, copy / "model.safetensors")
    done = zoo("import", "hf", str(copy), "--name", "refused")
    assert done.code == 1 and refusal in done.err and len(done.err.strip().splitlines()) == 1, done.err
    assert zoo("show", "refused").code == 1  # nothing half-written in the catalogue
