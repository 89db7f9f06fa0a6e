"""Gemma, Gemma 2 and Gemma 3 through `zoo import hf`, `zoo export --format hf`,
the continuous-batching server and GGUF files in llama.cpp's layout, proved as
the other families are (tests/test_interop_hf_families.py): a tiny random model
built by transformers from a config, with what sets each Gemma apart switched on
and made to bite: norm weights drawn away from zero (the unit offset counts),
sliding windows shorter than the longest prompt, soft-caps at the scores' and
logits' own size, a query_pre_attn_scalar other than the head size, RoPE bases
(and a linear scaling) of their own on Gemma 3's local and global layers, and
head sizes that are not a slice of the width.
"""

from __future__ import annotations

import asyncio
import json

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="the interop extra is not installed: pip install -e '.[interop]'"
)
gguf = pytest.importorskip("gguf", reason="the gguf extra is not installed: pip install -e '.[gguf]'")

import zoo_core  # noqa: E402

from .gguf_support import tiny_tokenizer  # noqa: E402
from .test_interop_gguf_export import llama_cpp_greedy  # noqa: E402
from .tiny_hf import byte_level_tokenizer, largest_difference, left_padded  # noqa: E402

PROMPTS = ["ROMEO: What light", "First Citizen:\nBefore we proceed any further, hear me", "KING"]
TOLERANCE = 1e-5
NEW_TOKENS = 6
SMALL = dict(
    vocab_size=320,
    hidden_size=48,
    intermediate_size=80,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=10,
    max_position_embeddings=64,
    initializer_range=0.1,
    rms_norm_eps=1e-6,
    bos_token_id=None,
    eos_token_id=None,
    pad_token_id=None,
)
GEMMA3_ROPE = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
    "full_attention": {"rope_type": "linear", "rope_theta": 5000.0, "factor": 2.0},
}
# name: (config class, fields, the card settings the import must write)
FAMILIES = {
    "gemma": ("GemmaConfig", dict(SMALL, num_hidden_layers=2), {"mlp": "geglu-tanh", "norm": "rmsnorm-unit-offset"}),
    "gemma2": (
        "Gemma2Config",
        dict(
            SMALL,
            num_hidden_layers=4,
            sliding_window=4,
            query_pre_attn_scalar=7,
            attn_logit_softcapping=1.0,
            final_logit_softcapping=1.5,
        ),
        {
            "norm_placement": "both",
            "attention_softcap": 1.0,
            "logit_softcap": 1.5,
            "query_scale": 7**-0.5,
            "layers": [{"sliding_window": 4}, {}],
        },
    ),
    "gemma3": (
        "Gemma3TextConfig",
        dict(SMALL, num_hidden_layers=7, sliding_window=4, query_pre_attn_scalar=7, rope_parameters=GEMMA3_ROPE),
        {
            "qk_norm": "rmsnorm-unit-offset",
            "layers": [
                {"repeat": 5, "sliding_window": 4, "rope_base": 100.0},
                {"rope_base": 5000.0, "rope_scaling": {"kind": "linear", "factor": 2.0}},
            ],
        },
    ),
}


def _build(config_class: str, fields: dict):
    """transformers' model of the config, every norm weight drawn away from zero."""
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(getattr(transformers, config_class)(**fields)).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.normal_(0.0, 0.3)
    return model


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Each family's transformers folder (model and tokenizer.json), built once."""
    transformers.utils.logging.set_verbosity_error()
    made = {}
    for family, (config_class, fields, _) in FAMILIES.items():
        model = _build(config_class, fields)
        folder = tmp_path_factory.mktemp(family)
        model.save_pretrained(folder)
        byte_level_tokenizer("<|endoftext|>").save(str(folder / "tokenizer.json"))
        made[family] = (folder, model)
    return made


def _greedy(reference, rows):
    ids, mask, _ = left_padded(rows)
    with torch.no_grad():
        generated = reference.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0
        )
    return generated[:, ids.shape[1] :].tolist()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_gemma_imports_generates_and_exports_with_transformers_logits(folders, zoo, tmp_path, family):
    folder, reference = folders[family]
    done = zoo("import", "hf", str(folder), "--name", "imported")
    assert done.code == 0, done.err
    model = zoo_core.load("imported")
    assert model.card.family == family
    for key, value in FAMILIES[family][2].items():
        assert model.card.config[key] == value, key
    assert model.card.config["embedding_scale"] == float(torch.tensor(48**0.5, dtype=torch.float32))
    assert model.card.parameters == sum(p.numel() for p in reference.parameters())
    rows = [model.tokenizer.encode(p) for p in PROMPTS]
    assert max(map(len, rows)) > 4  # past the sliding window
    assert largest_difference(reference, model.network, rows) <= TOLERANCE
    drawn = model.sample(PROMPTS, max_new_tokens=NEW_TOKENS, temperature=0)
    assert [s.tokens for s in drawn] == _greedy(reference, rows)

    out = tmp_path / "export"
    done = zoo("export", "imported", "--format", "hf", "--out", str(out))
    assert done.code == 0, done.err
    assert json.loads((out / "config.json").read_text())["architectures"] == [type(reference).__name__]
    exported = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    if family != "gemma":  # Gemma 2's and 3's layer kinds go back as they came
        assert exported.config.layer_types == reference.config.layer_types
    assert largest_difference(exported, model.network, rows) <= TOLERANCE


def test_the_continuous_batching_server_answers_with_transformers_greedy_tokens(folders, zoo):
    """The three Gemmas served together, every prompt asked at once, greedy."""
    pytest.importorskip("starlette", reason="the web tests need the web extra: pip install 'zoo-lm[web]'")
    openai = pytest.importorskip("openai", reason="these tests need the web-test extra: pip install 'zoo-lm[web-test]'")
    from tests.web_support import Server

    expected = {}
    for family in FAMILIES:
        folder, reference = folders[family]
        assert zoo("import", "hf", str(folder), "--name", family).code == 0
        model = zoo_core.load(family)
        rows = [model.tokenizer.encode(p) for p in PROMPTS]
        greedy = _greedy(reference, rows)
        expected.update({(family, p): (model.tokenizer.decode(tokens)) for p, tokens in zip(PROMPTS, greedy)})

    async def ask_all(url):
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=300) as client:
            return await asyncio.gather(
                *[
                    client.completions.create(model=family, prompt=prompt, max_tokens=NEW_TOKENS, temperature=0)
                    for family, prompt in expected
                ]
            )

    server = Server("--max-concurrent", "16")
    try:
        answers = asyncio.run(ask_all(server.url))
    finally:
        server.stop()
    assert [a.choices[0].text for a in answers] == list(expected.values())


# -- GGUF in llama.cpp's layout -------------------------------------------------------

GGUF_VOCAB = 280
# transformers' tensor names (after "model.layers.{i}.") -> llama.cpp's, as its converter writes them.
LLAMA_CPP_NAMES = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "pre_feedforward_layernorm": "ffn_norm",
    "post_feedforward_layernorm": "post_ffw_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
# llama.cpp's graphs fix what a file does not say: the score scale (head_dim^-0.5), the layer
# pattern, Gemma 3's local RoPE base (10000); and the export is checked by transformers' GGUF
# loader, which reads no soft-caps (it takes Gemma 2's defaults, 50 and 30) and defaults
# query_pre_attn_scalar to 256: so the head size is 256 here, and the soft-caps Gemma 2's own,
# made to bite by louder weights (`LOUD`).
GGUF_SMALL = dict(SMALL, vocab_size=GGUF_VOCAB, head_dim=256)
GGUF_FAMILIES = {
    "gemma": ("gemma", "GemmaConfig", dict(GGUF_SMALL, num_hidden_layers=2)),
    "gemma2": (
        "gemma2",
        "Gemma2Config",
        dict(GGUF_SMALL, num_hidden_layers=4, sliding_window=4, attn_logit_softcapping=50.0,
             final_logit_softcapping=30.0),
    ),
    "gemma3": (
        "gemma3",
        "Gemma3TextConfig",
        dict(GGUF_SMALL, num_hidden_layers=7, sliding_window=4,
             rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                              "full_attention": {"rope_type": "default", "rope_theta": 5000.0}}),
    ),
}  # fmt: skip
# multiplied: logits of ~13 and scores past 50, where each cap moves the logits by more than 0.5
LOUD = {"model.embed_tokens.weight": 3.0, "q_proj.weight": 6.0, "k_proj.weight": 6.0}


def _gguf_name(architecture: str, hf_name: str) -> str:
    name, kind = hf_name.rsplit(".", 1)
    if name == "model.embed_tokens":
        return f"token_embd.{kind}"
    if name == "model.norm":
        return f"output_norm.{kind}"
    layer, part = name.removeprefix("model.layers.").split(".", 1)
    if part == "post_attention_layernorm":  # Gemma's feed-forward input norm; Gemma 2's and 3's attention output norm
        part = "ffn_norm" if architecture == "gemma" else "post_attention_norm"
    else:
        part = LLAMA_CPP_NAMES[part]
    return f"blk.{layer}.{part}.{kind}"


def write_gemma_gguf(path, model, architecture: str, tokenizer) -> None:
    """``model`` as llama.cpp's converter writes it: float32, the head left out (tied),
    every norm weight stored as 1 + w, the rows in transformers' order (NeoX RoPE)."""
    config = model.config
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name(f"Tiny {architecture}")
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_key_length(config.head_dim)
    writer.add_value_length(config.head_dim)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    if architecture == "gemma2":
        writer.add_sliding_window(config.sliding_window)
        writer.add_attn_logit_softcapping(config.attn_logit_softcapping)
        writer.add_final_logit_softcapping(config.final_logit_softcapping)
    if architecture == "gemma3":
        writer.add_sliding_window(config.sliding_window)
        writer.add_rope_freq_base(config.rope_parameters["full_attention"]["rope_theta"])
    vocab = [token for token, _ in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(vocab)
    writer.add_token_types([gguf.TokenType.NORMAL] * len(vocab))
    merges = json.loads(tokenizer.to_str())["model"]["merges"]
    writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in merges])
    for hf_name, tensor in model.state_dict().items():
        if hf_name == "lm_head.weight":
            continue
        values = tensor.detach().float()
        if hf_name.endswith("norm.weight"):
            values = values + 1
        writer.add_tensor(_gguf_name(architecture, hf_name), values.numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize("family", list(GGUF_FAMILIES))
def test_a_gemma_gguf_file_imports_with_transformers_logits_and_exports_again(zoo, tmp_path, family):
    architecture, config_class, fields = GGUF_FAMILIES[family]
    reference = _build(config_class, fields)
    if family == "gemma2":
        with torch.no_grad():
            for name, parameter in reference.named_parameters():
                parameter.mul_(next((v for k, v in LOUD.items() if name.endswith(k)), 1.0))
    path = tmp_path / f"{family}.gguf"
    write_gemma_gguf(path, reference, architecture, tiny_tokenizer(GGUF_VOCAB))
    done = zoo("import", "gguf", str(path), "--name", "from-gguf")
    assert done.code == 0, done.err
    model = zoo_core.load("from-gguf")
    assert model.card.family == family
    rows = [model.tokenizer.encode(p) for p in ("the quick brown fox jumps over the lazy dog", "a library", "dog")]
    # Float32's own rounding grows with the logits (and scores past 50): 1e-5 of the largest logit, at least 1e-5.
    with torch.no_grad():
        tolerance = TOLERANCE * max(1.0, float(reference(torch.tensor([rows[0]])).logits.abs().max()))
    assert largest_difference(reference, model.network, rows) <= tolerance
    (drawn,) = model.sample(["a library on the corner"], max_new_tokens=NEW_TOKENS, temperature=0)
    assert [drawn.tokens] == _greedy(reference, [model.tokenizer.encode("a library on the corner")])

    out = tmp_path / "exported"
    done = zoo("export", "from-gguf", "--format", "gguf", "--gguf-type", "f32", "--out", str(out))
    assert done.code == 0, done.err
    exported = out / "from-gguf.gguf"
    assert gguf.GGUFReader(exported).fields["general.architecture"].contents() == architecture
    done = zoo("import", "gguf", str(exported), "--name", "again")
    assert done.code == 0, done.err
    assert largest_difference(reference, zoo_core.load("again").network, rows) <= tolerance
    # llama.cpp itself (node-llama-cpp's prebuilt build) reads the export and continues as the zoo does:
    # for Gemma (1), which transformers' GGUF loader does not read, the check the export lacks.
    ids = model.tokenizer.encode("a library on the corner")
    (answer,) = llama_cpp_greedy([{"model": str(exported), "ids": ids, "count": NEW_TOKENS}])
    assert answer["greedy"] == drawn.tokens


def test_what_llama_cpp_cannot_run_is_refused_in_one_line(folders, zoo, tmp_path):
    """The tiny Gemma 2 scales its scores by query_pre_attn_scalar 7, which llama.cpp's graph cannot."""
    folder, _ = folders["gemma2"]
    assert zoo("import", "hf", str(folder), "--name", "imported").code == 0
    done = zoo("export", "imported", "--format", "gguf", "--out", str(tmp_path / "out.gguf"))
    assert done.code == 1 and len(done.err.strip().splitlines()) == 1, done.err
    assert "llama.cpp's graph scales them by 10^-0.5" in done.err
    assert not (tmp_path / "out.gguf").exists()


def test_a_gemma_with_bidirectional_attention_is_refused_in_one_line(folders, zoo, tmp_path):
    import shutil

    folder, _ = folders["gemma3"]
    copy = tmp_path / "changed"
    shutil.copytree(folder, copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "use_bidirectional_attention": True}))
    done = zoo("import", "hf", str(copy), "--name", "refused")
    assert done.code == 1 and "use_bidirectional_attention" in done.err, done.err
    assert len(done.err.strip().splitlines()) == 1


@pytest.mark.parametrize("family", ["gemma", "gemma2"])
def test_transformer_lens_and_the_inspect_views_read_gemma_and_gemma2(folders, zoo, tmp_path, family):
    pytest.importorskip("transformer_lens", reason="the lens extra is not installed: pip install -e '.[lens]'")
    from zoo_core.interop.transformer_lens import hooked_transformer

    folder, _ = folders[family]
    assert zoo("import", "hf", str(folder), "--name", "imported").code == 0
    model = zoo_core.load("imported")
    lens = hooked_transformer(model)
    ids = torch.tensor([model.tokenizer.encode(PROMPTS[1])])  # longer than the window
    with torch.no_grad():
        logits, cache = lens.run_with_cache(ids)
        ours, _ = model.network(ids)
    assert float((logits - ours).abs().max()) <= 1e-4
    assert cache["blocks.1.attn.hook_pattern"].shape == (1, 4, ids.shape[1], ids.shape[1])
    done = zoo("export", "imported", "--format", "transformer-lens", "--out", str(tmp_path / "lens"))
    assert done.code == 0 and "checked: logits" in done.out, done.err
    clean = "ROMEO: What light"
    corrupt = next(  # patching compares position by position: as many tokens as the clean prompt
        text
        for text in ("ROMEO: What night", "ROMEO: What fight", "ROMEO: That light", "JULIET: What light")
        if len(model.tokenizer.encode(text)) == len(model.tokenizer.encode(clean))
    )
    for view in (["--logit-lens"], ["--ablate", "0.1,1.2"], ["--patch", "--corrupt", corrupt]):
        shown = zoo("inspect", "imported", "--prompt", clean, *view)
        assert shown.code == 0, (view, shown.err)


def test_a_gemma_3_with_rope_scaling_has_no_transformer_lens_form(folders, zoo, tmp_path):
    folder, _ = folders["gemma3"]
    assert zoo("import", "hf", str(folder), "--name", "imported").code == 0
    done = zoo("export", "imported", "--format", "transformer-lens", "--out", str(tmp_path / "lens"))
    assert done.code == 1 and len(done.err.strip().splitlines()) == 1, done.err
    assert "sets rope_scaling; HookedTransformer's Gemma has plain RoPE" in done.err
