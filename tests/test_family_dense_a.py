"""Phi-3, Phi-2, StableLM, StarCoder2, Cohere and Falcon through `zoo import hf` and
`zoo export --format hf`, proved as tests/test_interop_hf_families.py proves the
first families: a tiny random model built by transformers from a config (two
layers, odd widths, each family's distinctive options on: windows shorter than
the prompts, partial rotary turning an odd and an even number of pairs, the
three Falcon attention layouts), saved beside a small tokenizer.json, imports
with transformers' logits within 1e-5 over a left-padded batch and its greedy
tokens, and the export loads back in transformers with the same logits again.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil

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
    max_position_embeddings=64,
    initializer_range=0.1,
    bos_token_id=None,
    eos_token_id=None,
    pad_token_id=None,
)
FALCON = {key: value for key, value in SMALL.items() if key != "intermediate_size"} | {"ffn_hidden_size": 80}


def _rope(fraction: float) -> dict:
    return {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": fraction}


# name: (config class, fields, the card settings the import must write)
FAMILIES = {
    # fused qkv_proj and gate_up_proj; a window of 5 under 13-token prompts; 6 of 8 channels rotate (3 pairs)
    "phi3-window-partial-rotary": (
        "Phi3Config",
        dict(SMALL, num_key_value_heads=2, sliding_window=5, rope_parameters=_rope(0.75)),
        {"sliding_window": 5, "rotary_fraction": 0.75, "n_kv_head": 2, "mlp": "swiglu"},
    ),
    # 4 of 8 channels rotate (2 pairs); biases everywhere, the head's too
    "phi-parallel-partial-rotary": (
        "PhiConfig",
        dict(SMALL, num_key_value_heads=3, rope_parameters=_rope(0.5)),
        {"residual": "parallel-shared-norm", "bias": True, "rotary_fraction": 0.5, "mlp": "gelu-tanh"},
    ),
    "stablelm-qkv-bias": (
        "StableLmConfig",
        dict(SMALL, num_key_value_heads=2, use_qkv_bias=True, rope_parameters=_rope(0.25)),
        {"layernorm_bias": True, "layer_bias": False, "attention_bias": "qkv", "rotary_fraction": 0.25},
    ),
    # heads of 10, 6 channels rotating (3 pairs); a LayerNorm of each head's own on its queries and keys
    "stablelm-parallel-qk-norm": (
        "StableLmConfig",
        dict(
            SMALL,
            hidden_size=60,
            num_key_value_heads=3,
            use_parallel_residual=True,
            qk_layernorm=True,
            rope_parameters=_rope(0.6),
        ),
        {
            "residual": "parallel-shared-norm",
            "attention_bias": "none",
            "rotary_fraction": 0.6,
            "qk_norm": "layernorm-per-head",
        },
    ),
    "starcoder2-window": (
        "Starcoder2Config",
        dict(SMALL, num_key_value_heads=2, sliding_window=5),
        {"sliding_window": 5, "mlp": "gelu-tanh", "layer_bias": True, "tie_embeddings": True},
    ),
    # no window (llama.cpp's starcoder2 has no key for one), no linear biases, an untied head
    "starcoder2-unbiased": (
        "Starcoder2Config",
        dict(SMALL, num_key_value_heads=3, use_bias=False, tie_word_embeddings=False),
        {"layer_bias": False, "layernorm_bias": True, "attention_bias": "none", "tie_embeddings": False},
    ),
    "cohere-logit-scale": (
        "CohereConfig",
        dict(SMALL, num_key_value_heads=3, logit_scale=0.5),
        {"logit_scale": 0.5, "layernorm_bias": False, "residual": "parallel-shared-norm", "tie_embeddings": True},
    ),
    # Command R+'s query/key norms: a weight per head, in the pairs Cohere rotates
    "cohere-qk-norm": (
        "CohereConfig",
        dict(SMALL, num_key_value_heads=2, use_qk_norm=True),
        {"qk_norm": "layernorm-per-head", "n_kv_head": 2},
    ),
    # Phi's qk_layernorm: one LayerNorm (weight and bias) all heads share
    "phi-qk-layernorm": (
        "PhiConfig",
        dict(SMALL, qk_layernorm=True, rope_parameters=_rope(0.75)),
        {"qk_norm": "layernorm", "rotary_fraction": 0.75},
    ),
    # falcon-7b's layout, the one transformers' GGUF loader reads (its feed-forward 4 d_model wide)
    "falcon-multi-query": (
        "FalconConfig",
        dict(FALCON, multi_query=True, parallel_attn=True, ffn_hidden_size=None),
        {"n_kv_head": 1, "residual": "parallel-shared-norm", "layer_bias": False, "layernorm_bias": True},
    ),
    "falcon-new-architecture": (
        "FalconConfig",
        dict(FALCON, new_decoder_architecture=True, num_kv_heads=2, bias=True),
        {"n_kv_head": 2, "residual": "parallel", "layer_bias": True},
    ),
    "falcon-sequential": (
        "FalconConfig",
        dict(FALCON, multi_query=False, parallel_attn=False, tie_word_embeddings=False),
        {"residual": "sequential", "mlp": "gelu", "tie_embeddings": False},
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
        with torch.no_grad():  # transformers starts biases at 0 and norms at 1, which would hide a misplaced one
            for name, parameter in model.named_parameters():
                base = 1.0 if "norm" in name and name.endswith(".weight") else 0.0
                parameter.copy_(base + 0.2 * torch.randn_like(parameter))
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
def test_a_family_imports_generates_and_exports_with_transformers_logits(folders, zoo, tmp_path, case):
    folder, reference = folders[case]
    done = zoo("import", "hf", str(folder), "--name", "imported")
    assert done.code == 0, done.err
    model = zoo_core.load("imported")
    assert model.card.family == reference.config.model_type
    for key, value in FAMILIES[case][2].items():
        assert model.card.config[key] == value, key
    assert model.card.parameters == sum(p.numel() for p in reference.parameters())
    rows = [model.tokenizer.encode(p) for p in PROMPTS]
    assert max(map(len, rows)) > 5  # longer than the windows
    assert largest_difference(reference, model.network, rows) <= TOLERANCE
    drawn = model.sample(PROMPTS, max_new_tokens=NEW_TOKENS, temperature=0)
    assert [s.tokens for s in drawn] == _greedy(reference, rows)

    out = tmp_path / "export"
    done = zoo("export", "imported", "--format", "hf", "--out", str(out))
    assert done.code == 0, done.err
    assert json.loads((out / "config.json").read_text())["architectures"] == [type(reference).__name__]
    exported = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert largest_difference(exported, model.network, rows) <= TOLERANCE
    for name, tensor in reference.state_dict().items():  # the same tensors under the same names
        assert torch.equal(exported.state_dict()[name], tensor), name


SERVED = [
    "phi3-window-partial-rotary",
    "cohere-logit-scale",
    "falcon-new-architecture",
    "stablelm-parallel-qk-norm",
    "phi-parallel-partial-rotary",
    "starcoder2-window",
]


def test_the_continuous_batching_server_answers_with_transformers_greedy_tokens(folders, zoo):
    """Families served together, every prompt of every family asked at once, greedy:
    each answer is transformers' own greedy continuation."""
    pytest.importorskip("starlette", reason="the web tests need the web extra: pip install 'zoo-lm[web]'")
    openai = pytest.importorskip("openai", reason="these tests need the web-test extra: pip install 'zoo-lm[web-test]'")
    from tests.web_support import Server

    expected = {}
    for case in SERVED:
        folder, reference = folders[case]
        assert zoo("import", "hf", str(folder), "--name", case).code == 0
        tokenizer = zoo_core.load(case).tokenizer
        greedy = _greedy(reference, [tokenizer.encode(p) for p in PROMPTS])
        expected.update({(case, prompt): tokenizer.decode(tokens) for prompt, tokens in zip(PROMPTS, greedy)})

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


@pytest.mark.parametrize(
    "case", ["phi3-window-partial-rotary", "phi-parallel-partial-rotary", "stablelm-qkv-bias", "starcoder2-window"]
)
def test_transformer_lens_reads_the_families_transformer_lens_has(folders, zoo, tmp_path, case):
    pytest.importorskip("transformer_lens", reason="the lens extra is not installed: pip install -e '.[lens]'")
    from zoo_core.interop.transformer_lens import hooked_transformer

    folder, reference = folders[case]
    assert zoo("import", "hf", str(folder), "--name", "imported").code == 0
    model = zoo_core.load("imported")
    lens = hooked_transformer(model)
    ids = torch.tensor([model.tokenizer.encode(PROMPTS[1])])
    with torch.no_grad():
        logits = lens(ids)
        theirs = reference(ids).logits
    assert float((logits - theirs).abs().max()) <= 1e-4
    done = zoo("export", "imported", "--format", "transformer-lens", "--out", str(tmp_path / "lens"))
    assert done.code == 0 and "checked: logits" in done.out, done.err
    for view in (["--logit-lens"], ["--ablate", "0.1,1.2"]):
        shown = zoo("inspect", "imported", "--prompt", PROMPTS[0], *view)
        assert shown.code == 0, (view, shown.err)


@pytest.mark.parametrize(
    "case, refusal",
    [("cohere-logit-scale", "logit_scale"), ("phi-qk-layernorm", "HookedTransformer's QK-norm is an RMSNorm")],
)
def test_what_transformer_lens_cannot_compute_is_refused_in_one_line(folders, zoo, tmp_path, case, refusal):
    folder, _ = folders[case]
    assert zoo("import", "hf", str(folder), "--name", "imported").code == 0
    done = zoo("export", "imported", "--format", "transformer-lens", "--out", str(tmp_path / "lens"))
    assert done.code == 1 and len(done.err.strip().splitlines()) == 1 and refusal in done.err, done.err


@pytest.mark.parametrize(
    "case, change, refusal",
    [
        ("falcon-multi-query", {"alibi": True}, "alibi: Falcon's ALiBi attention has no zoo counterpart"),
        ("falcon-new-architecture", {"parallel_attn": False}, "new_decoder_architecture without parallel_attn"),
        # 0.375 of 8 channels is 3, which do not pair; 0.35 of 10 is int(3.5) = 3 in transformers, round(3.5) = 4 here
        (
            "phi-parallel-partial-rotary",
            {"rope_parameters": _rope(0.375)},
            "rotates 3 channels, which do not pair",
        ),
        (
            "stablelm-parallel-qk-norm",
            {"rope_parameters": _rope(0.35)},
            "rotates 3 channels in transformers and 4 in the zoo",
        ),
        ("starcoder2-window", {"rope_parameters": _rope(0.5)}, "StarCoder2's attention rotates every channel"),
    ],
)
def test_what_a_family_cannot_be_is_refused_in_one_line(folders, zoo, tmp_path, case, change, refusal):
    folder, _ = folders[case]
    copy = tmp_path / "changed"
    shutil.copytree(folder, copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, **change}))
    done = zoo("import", "hf", str(copy), "--name", "refused")
    assert done.code == 1 and refusal in done.err and len(done.err.strip().splitlines()) == 1, done.err
    assert zoo("list").out.count("refused") == 0  # nothing half-written in the catalogue


# --- GGUF files in llama.cpp's layout -------------------------------------------------

# case: llama.cpp's architecture. Each family's distinctive files; falcon-7b's layout, StableLM's
# query/key/value biases and an unbiased StarCoder2 are read back from the zoo's own export below.
GGUF_CASES = {
    "phi3-window-partial-rotary": "phi3",
    "phi-parallel-partial-rotary": "phi2",
    "stablelm-parallel-qk-norm": "stablelm",
    "cohere-qk-norm": "command-r",
    "falcon-new-architecture": "falcon",
}


def _write_llama_cpp_gguf(path, model, architecture: str, fuse_attention: bool = False) -> None:
    """``model`` as llama.cpp's converter writes it (convert_hf_to_gguf.py): its
    metadata keys, tensor names from the `gguf` package's map, every tensor float32;
    Falcon's grouped query_key_value rows as [queries; keys; values]; with
    ``fuse_attention``, separate query, key and value projections as one attn_qkv."""
    import gguf

    config = model.config
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    if architecture == "falcon":
        kv_heads = config.num_kv_heads if config.new_decoder_architecture else 1
    head_size = config.hidden_size // heads
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name(f"tiny {architecture}")
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(getattr(config, "intermediate_size", None) or config.ffn_hidden_size)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    rope = config.rope_parameters
    writer.add_rope_freq_base(rope["rope_theta"])
    if architecture == "phi3":
        writer.add_layer_norm_rms_eps(config.rms_norm_eps)
        if config.sliding_window:
            writer.add_sliding_window(config.sliding_window)
    else:
        eps = next(
            getattr(config, f) for f in ("layer_norm_eps", "norm_epsilon", "layer_norm_epsilon") if hasattr(config, f)
        )
        writer.add_layer_norm_eps(eps)
    if architecture in ("phi3", "phi2", "stablelm"):
        writer.add_rope_dimension_count(int(head_size * rope.get("partial_rotary_factor", 1.0)))
    if architecture == "command-r":
        writer.add_logit_scale(config.logit_scale)
    tokenizer = byte_level_tokenizer("<|endoftext|>")
    vocab = [token for token, _ in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])]
    vocab += [f"<|unused{i}|>" for i in range(config.vocab_size - len(vocab))]  # padded as real files pad
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(vocab)
    writer.add_token_types([gguf.TokenType.CONTROL if t.startswith("<|") else gguf.TokenType.NORMAL for t in vocab])
    merges = json.loads(tokenizer.to_str())["model"]["merges"]
    writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in merges])
    arch = next(a for a, text in gguf.MODEL_ARCH_NAMES.items() if text == architecture)
    names = gguf.get_tensor_name_map(arch, config.num_hidden_layers)
    state = dict(model.state_dict())
    if fuse_attention:
        for name in [n for n in state if ".q_proj." in n]:
            parts = [state.pop(name.replace("q_proj", part)) for part in ("q_proj", "k_proj", "v_proj")]
            state[name.replace("q_proj", "query_key_value")] = torch.cat(parts)
    for name, tensor in state.items():
        if name == "lm_head.weight" and config.tie_word_embeddings:
            continue
        if "query_key_value" in name and architecture != "falcon":
            layer, kind = re.search(r"layers\.(\d+)\..*\.(weight|bias)$", name).groups()
            writer.add_tensor(f"blk.{layer}.attn_qkv.{kind}", tensor.detach().float().numpy())
            continue
        values = tensor.detach().float()
        per_head = re.fullmatch(r"(.*\.[qk]_layernorm)\.norms\.(\d+)\.weight", name)
        if per_head:  # the converter stacks StableLM's per-head norms into one (heads, head size) tensor
            if per_head.group(2) != "0":
                continue
            stacked = [t for n, t in model.state_dict().items() if n.startswith(per_head.group(1) + ".norms.")]
            name, values = f"{per_head.group(1)}.weight", torch.stack(stacked).float()
        if architecture == "falcon" and "query_key_value" in name:
            grouped = values.reshape(kv_heads, heads // kv_heads + 2, head_size, *values.shape[1:])
            values = torch.cat(
                [grouped[:, :-2].flatten(0, 2), grouped[:, -2].flatten(0, 1), grouped[:, -1].flatten(0, 1)]
            )
        writer.add_tensor(names.get_name(name, try_suffixes=(".weight", ".bias")), values.numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize("case", list(GGUF_CASES))
def test_a_llama_cpp_file_imports_with_transformers_logits(folders, zoo, tmp_path, case):
    _, reference = folders[case]
    path = tmp_path / f"{case}.gguf"
    _write_llama_cpp_gguf(path, reference, GGUF_CASES[case])
    done = zoo("import", "gguf", str(path), "--name", "from-gguf")
    assert done.code == 0, done.err
    model = zoo_core.load("from-gguf")
    assert model.card.family == reference.config.model_type
    for key, value in FAMILIES[case][2].items():
        assert model.card.config[key] == value, key
    rows = [model.tokenizer.encode(p) for p in PROMPTS]
    assert largest_difference(reference, model.network, rows) <= TOLERANCE
    drawn = model.sample(PROMPTS, max_new_tokens=NEW_TOKENS, temperature=0)
    assert [s.tokens for s in drawn] == _greedy(reference, rows)


def test_a_phi2_file_with_fused_attention_imports_with_transformers_logits(folders, zoo, tmp_path):
    """phi-2's first GGUF files hold attn_qkv where later ones hold attn_q, attn_k and attn_v."""
    _, reference = folders["phi-parallel-partial-rotary"]
    path = tmp_path / "fused.gguf"
    _write_llama_cpp_gguf(path, reference, "phi2", fuse_attention=True)
    done = zoo("import", "gguf", str(path), "--name", "from-gguf")
    assert done.code == 0, done.err
    model = zoo_core.load("from-gguf")
    rows = [model.tokenizer.encode(p) for p in PROMPTS]
    assert largest_difference(reference, model.network, rows) <= TOLERANCE


@pytest.mark.parametrize("case", ["stablelm-qkv-bias", "starcoder2-unbiased", "falcon-multi-query"])
def test_the_gguf_export_reads_back_in_transformers_and_the_zoo(folders, zoo, tmp_path, case):
    """The export checks itself against transformers' GGUF loader; the file imports again, equal."""
    folder, reference = folders[case]
    assert zoo("import", "hf", str(folder), "--name", "imported").code == 0
    done = zoo("export", "imported", "--format", "gguf", "--gguf-type", "f32", "--out", str(tmp_path / "out"))
    assert done.code == 0, done.err
    (written,) = (tmp_path / "out").glob("*.gguf")
    done = zoo("import", "gguf", str(written), "--name", "again")
    assert done.code == 0, done.err
    again = zoo_core.load("again")
    rows = [again.tokenizer.encode(p) for p in PROMPTS]
    assert largest_difference(reference, again.network, rows) <= TOLERANCE


@pytest.mark.parametrize("case", ["phi-parallel-partial-rotary", "cohere-logit-scale"])
def test_phi2_and_command_r_exports_read_back_in_the_zoo_and_llama_cpp_with_transformers_tokens(
    folders, zoo, tmp_path, case
):
    """transformers' GGUF loader reads neither phi2 nor command-r: the export checks itself
    by reading the file back in the zoo; here the file imports again with transformers'
    logits, and llama.cpp itself continues the prompt with transformers' greedy tokens."""
    from .test_interop_gguf_export import llama_cpp_greedy

    folder, reference = folders[case]
    assert zoo("import", "hf", str(folder), "--name", "imported").code == 0
    done = zoo("export", "imported", "--format", "gguf", "--gguf-type", "f32", "--out", str(tmp_path / "out"))
    assert done.code == 0, done.err
    written = tmp_path / "out" / "imported.gguf"
    done = zoo("import", "gguf", str(written), "--name", "again")
    assert done.code == 0, done.err
    again = zoo_core.load("again")
    rows = [again.tokenizer.encode(p) for p in PROMPTS]
    assert largest_difference(reference, again.network, rows) <= TOLERANCE
    (answer,) = llama_cpp_greedy([{"model": str(written), "ids": rows[1], "count": NEW_TOKENS}])
    assert answer["greedy"] == _greedy(reference, [rows[1]])[0]


@pytest.mark.parametrize(
    "case, refusal",
    [
        ("phi3-window-partial-rotary", "does not read in a phi3 file"),
        ("phi-qk-layernorm", "llama.cpp's phi2 graph has no query/key norm"),
        ("cohere-qk-norm", "llama.cpp's command-r reads them only in models of 64 layers or more"),
        ("starcoder2-window", "llama.cpp's starcoder2 has no key for one"),
        ("falcon-new-architecture", "is not laid out as falcon-7b"),
    ],
)
def test_what_a_gguf_file_cannot_hold_is_refused_in_one_line(folders, zoo, tmp_path, case, refusal):
    folder, _ = folders[case]
    assert zoo("import", "hf", str(folder), "--name", "imported").code == 0
    done = zoo("export", "imported", "--format", "gguf", "--out", str(tmp_path / "out"))
    assert done.code == 1 and refusal in done.err and len(done.err.strip().splitlines()) == 1, done.err
    assert not list(tmp_path.glob("out/*.gguf"))


@pytest.mark.parametrize("case", ["phi-parallel-partial-rotary", "falcon-new-architecture", "cohere-logit-scale"])
def test_a_variant_recording_no_family_is_written_as_the_family_that_holds_it(folders, zoo, tmp_path, case):
    """The card's ``family`` line taken out (a variant the zoo trained has none): the
    export finds the one family whose config holds every setting, after the others refuse."""
    import os
    from pathlib import Path

    folder, reference = folders[case]
    assert zoo("import", "hf", str(folder), "--name", "imported").code == 0
    registry = Path(os.environ["ZOO_HOME"]) / "registry.toml"
    text = registry.read_text(encoding="utf-8")
    line = f'family = "{reference.config.model_type}"\n'
    assert text.count(line) == 1
    registry.write_text(text.replace(line, ""), encoding="utf-8")
    assert zoo_core.load("imported").card.family is None
    out = tmp_path / "export"
    done = zoo("export", "imported", "--format", "hf", "--out", str(out))
    assert done.code == 0, done.err
    assert json.loads((out / "config.json").read_text())["architectures"] == [type(reference).__name__]
