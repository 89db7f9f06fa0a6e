"""OLMo 2, Granite and SmolLM3 through `zoo import hf` / `zoo export --format hf`, and
GPT-NeoX with an odd rotary part of a head, proved as the other families are
(tests/test_interop_hf_families.py): a tiny random model built by transformers from a
config, with the family's own options on (OLMo 2's output norms and whole-width
query/key norm under grouped heads; Granite's four multipliers, none of them 1;
SmolLM3's layers without RoPE and sliding-window layers shorter than the prompts;
NeoX rotating 3 or int(4.8) = 4 channels of a 12-channel head), imports with logits
equal to transformers' within 1e-5 over a left-padded batch, greedy tokens equal,
and its export loads back in transformers with the same logits. GGUF: a file written
in llama.cpp's layout by `gguf`'s own writer (olmo2, granite, smollm3) imports with
transformers' logits and greedy tokens, the zoo's export of it is the same file, and
llama.cpp itself (slow lane) continues the exports with transformers' greedy tokens.
The continuous-batching server answers every family's prompts at once (imported from
its folder, and from a GGUF file where llama.cpp has the family) with transformers'
greedy tokens. TransformerLens, which has OLMo 2, gives its logits and inspect views.
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


def test_the_continuous_batching_server_answers_every_family_with_transformers_greedy_tokens(folders, zoo, tmp_path):
    """Every family imported from its transformers folder, and the GGUF families from files in
    llama.cpp's layout too, served together, every prompt asked at once, greedy: each answer
    is transformers' own greedy continuation."""
    pytest.importorskip("starlette", reason="the web tests need the web extra: pip install 'zoo-lm[web]'")
    openai = pytest.importorskip("openai", reason="these tests need the web-test extra: pip install 'zoo-lm[web-test]'")
    from tests.web_support import Server

    sources = [(family, "hf", folders[family][0]) for family in FAMILIES]
    for family in GGUF_FAMILIES:
        write_llama_cpp_gguf(tmp_path / f"{family}.gguf", folders[family][1])
        sources.append((family, "gguf", tmp_path / f"{family}.gguf"))
    expected = {}
    for family, kind, source in sources:
        name = f"{family}-{kind}"
        assert zoo("import", kind, str(source), "--name", name).code == 0
        tokenizer = zoo_core.load(name).tokenizer
        continuations = greedy(folders[family][1], [tokenizer.encode(p) for p in PROMPTS])
        expected.update({(name, p): tokenizer.decode(c) for p, c in zip(PROMPTS, continuations)})

    async def ask_all(url):
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=300) as client:
            return await asyncio.gather(
                *[
                    client.completions.create(model=family, prompt=prompt, max_tokens=NEW_TOKENS, temperature=0)
                    for family, prompt in expected
                ]
            )

    server = Server("--max-concurrent", "64")
    try:
        answers = asyncio.run(ask_all(server.url))
    finally:
        server.stop()
    assert [a.choices[0].text for a in answers] == list(expected.values())


# --- GGUF: llama.cpp's olmo2, granite and smollm3 -------------------------------------

GGUF_FAMILIES = ["olmo2", "granite", "smollm3"]
PAIRED = ("granite", "smollm3")  # llama.cpp's NORM RoPE: each head's rows in adjacent pairs, as for llama


def _pairs(rows: torch.Tensor, heads: int) -> torch.Tensor:
    """llama.cpp's converter order of a head's rows: its two halves interleaved."""
    half = rows.shape[0] // heads // 2
    return rows.reshape(heads, 2, half, *rows.shape[1:]).transpose(1, 2).reshape(rows.shape)


def write_llama_cpp_gguf(path, model) -> None:
    """``model`` as llama.cpp's converter lays it out, written by `gguf`'s own writer in F32: the
    tensor names from the package's name map for the architecture, the query and key rows of
    granite and smollm3 in pairs, the architecture's keys (granite's four scales among them)."""
    import gguf

    config, arch = model.config, model.config.model_type
    head_size = config.hidden_size // config.num_attention_heads
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(f"Tiny {arch}")
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_dimension_count(head_size)
    writer.add_vocab_size(config.vocab_size)
    if arch == "granite":
        writer.add_embedding_scale(config.embedding_multiplier)
        writer.add_residual_scale(config.residual_multiplier)
        writer.add_logit_scale(config.logits_scaling)
        writer.add_attention_scale(config.attention_multiplier)
    tokenizer = byte_level_tokenizer("<|endoftext|>")
    described = json.loads(tokenizer.to_str())
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    tokens = [token for token, _ in vocab] + [f"[PAD{i}]" for i in range(len(vocab), config.vocab_size)]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(
        [gguf.TokenType.CONTROL if t == "<|endoftext|>" else gguf.TokenType.NORMAL for t, _ in vocab]
        + [gguf.TokenType.UNUSED] * (config.vocab_size - len(vocab))
    )
    writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in described["model"]["merges"]])
    arch_id = next(key for key, text in gguf.MODEL_ARCH_NAMES.items() if text == arch)
    names = gguf.get_tensor_name_map(arch_id, config.num_hidden_layers)
    for name, tensor in model.state_dict().items():
        if config.tie_word_embeddings and name == "lm_head.weight":
            continue  # llama.cpp reads the embedding where output.weight is absent
        values = tensor.detach().float()
        if arch in PAIRED and ".q_proj." in name:
            values = _pairs(values, config.num_attention_heads)
        elif arch in PAIRED and ".k_proj." in name:
            values = _pairs(values, config.num_key_value_heads)
        writer.add_tensor(names.get_name(name, try_suffixes=(".weight", ".bias")), values.numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize("family", GGUF_FAMILIES)
def test_a_llama_cpp_layout_file_imports_with_transformers_logits_and_exports_the_same_file(
    folders, zoo, tmp_path, family
):
    """A file written in llama.cpp's layout imports with transformers' logits and greedy
    tokens; the zoo's export of it holds the same metadata and tensors, bit for bit."""
    import gguf

    _, reference = folders[family]
    written = tmp_path / "written.gguf"
    write_llama_cpp_gguf(written, reference)
    done = zoo("import", "gguf", str(written), "--name", "from-gguf")
    assert done.code == 0, done.err
    model = zoo_core.load("from-gguf")
    assert model.card.family == family
    rows = [model.tokenizer.encode(p) for p in PROMPTS]
    assert largest_difference(reference, model.network, rows) <= 1e-4  # the scales stored as float32
    drawn = model.sample(PROMPTS, max_new_tokens=NEW_TOKENS, temperature=0)
    assert [s.tokens for s in drawn] == greedy(reference, rows)

    done = zoo("export", "from-gguf", "--format", "gguf", "--gguf-type", "f32", "--out", str(tmp_path / "out"))
    assert done.code == 0, done.err
    theirs, ours = gguf.GGUFReader(written), gguf.GGUFReader(tmp_path / "out" / "from-gguf.gguf")
    held = {t.name: t.data for t in ours.tensors}
    assert set(held) == {t.name for t in theirs.tensors}
    for tensor in theirs.tensors:
        assert (held[tensor.name] == tensor.data).all(), tensor.name
    for key, field in theirs.fields.items():
        if key.startswith(f"{family}."):
            assert ours.fields[key].contents() == pytest.approx(field.contents()), key


def test_what_llama_cpp_and_transformer_lens_cannot_run_is_refused_in_one_line(folders, zoo, tmp_path):
    pytest.importorskip("transformer_lens", reason="the lens extra is not installed: pip install -e '.[lens]'")
    cases = [
        ("smollm3-nope-sliding", "gguf", "has sliding-window layers; llama.cpp's smollm3 has no key for a window"),
        ("granite", "transformer-lens", "which HookedTransformer's blocks have no place for"),
        ("smollm3", "transformer-lens", "sets layers, which HookedTransformer's blocks have no place for"),
    ]
    for family, kind, refusal in cases:
        folder, _ = folders[family]
        assert zoo("import", "hf", str(folder), "--name", family).code == 0
        done = zoo("export", family, "--format", kind, "--out", str(tmp_path / family))
        assert done.code == 1 and refusal in done.err and len(done.err.strip().splitlines()) == 1, done.err


@pytest.mark.slow
def test_llama_cpp_continues_the_gguf_exports_with_transformers_greedy_tokens(folders, zoo, tmp_path):
    """llama.cpp itself (node-llama-cpp's prebuilt CPU build) runs each family's F32 export:
    its greedy tokens are transformers' (and so the zoo's), from the prompt's ids."""
    from .test_interop_gguf_export import llama_cpp_greedy

    jobs, expected = [], []
    for family in GGUF_FAMILIES:
        folder, reference = folders[family]
        assert zoo("import", "hf", str(folder), "--name", family).code == 0
        out = tmp_path / family
        done = zoo("export", family, "--format", "gguf", "--gguf-type", "f32", "--out", str(out))
        assert done.code == 0, done.err
        ids = zoo_core.load(family).tokenizer.encode(PROMPTS[1])
        jobs.append({"model": str(out / f"{family}.gguf"), "ids": ids, "count": NEW_TOKENS})
        expected.append({"greedy": greedy(reference, [ids])[0]})
    assert llama_cpp_greedy(jobs) == expected


def test_transformer_lens_and_the_inspect_views_read_olmo2(folders, zoo, tmp_path):
    """TransformerLens has OLMo 2 (its own post-norm block and whole-width query/key norms):
    the converted HookedTransformer gives the zoo's logits, and every inspect view runs."""
    pytest.importorskip("transformer_lens", reason="the lens extra is not installed: pip install -e '.[lens]'")
    from zoo_core.interop.transformer_lens import hooked_transformer

    folder, reference = folders["olmo2"]
    assert zoo("import", "hf", str(folder), "--name", "imported").code == 0
    model = zoo_core.load("imported")
    lens = hooked_transformer(model)
    assert lens.cfg.original_architecture == "Olmo2ForCausalLM" and lens.cfg.n_key_value_heads == 2
    ids = torch.tensor([model.tokenizer.encode(PROMPTS[1])])
    with torch.no_grad():
        logits, cache = lens.run_with_cache(ids)
        theirs = reference(ids).logits
    assert float((logits - theirs).abs().max()) <= 1e-4
    assert cache["blocks.1.attn.hook_pattern"].shape == (1, 6, ids.shape[1], ids.shape[1])
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


@pytest.mark.parametrize(
    "family, change, refusal",
    [
        (
            "neox-even-rotary",
            {
                "num_attention_heads": 4,
                "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0},
            },
            "rotates all 9 channels of a head, an odd number",
        ),
        (
            "neox-even-rotary",
            {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.05}},
            "rotates none of a head's 12 channels",
        ),
        ("smollm3", {"no_rope_layers": [1, 0]}, "no_rope_layers and layer_types need one entry per layer (4)"),
    ],
)
def test_what_transformers_cannot_run_either_is_refused_in_one_line(folders, zoo, tmp_path, family, change, refusal):
    import shutil

    folder, _ = folders[family]
    copy = tmp_path / "changed"
    shutil.copytree(folder, copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, **change}))
    done = zoo("import", "hf", str(copy), "--name", "refused")
    assert done.code == 1 and refusal in done.err and len(done.err.strip().splitlines()) == 1, done.err


def test_a_layer_without_rope_needs_rope_positions():
    from zoo_core.errors import ZooError
    from zoo_plugins.models.settings import TransformerConfig

    sizes = dict(d_model=8, n_layer=2, n_head=2)
    specs = TransformerConfig.read({**sizes, "positions": "rope", "layers": [{}, {"rope": False}]}, "x").layer_specs()
    assert [spec.rotary is None or spec.rotary.rotates for spec in specs] == [True, False]
    with pytest.raises(ZooError, match="config.rope: rope switches RoPE on or off in a layer; positions is 'learned'"):
        TransformerConfig.read({**sizes, "layers": [{"rope": False}]}, "x")


def test_transformer_lens_rotates_an_odd_neox_rotary_part_as_transformers_does(folders, zoo):
    pytest.importorskip("transformer_lens", reason="the lens extra is not installed: pip install -e '.[lens]'")
    from zoo_core.interop.transformer_lens import hooked_transformer

    folder, reference = folders["neox-odd-rotary"]
    assert zoo("import", "hf", str(folder), "--name", "imported").code == 0
    model = zoo_core.load("imported")
    lens = hooked_transformer(model)
    assert lens.cfg.rotary_dim == 4
    ids = torch.tensor([model.tokenizer.encode(PROMPTS[1])])
    with torch.no_grad():
        assert float((lens(ids) - reference(ids).logits).abs().max()) <= 1e-4
