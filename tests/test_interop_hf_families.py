"""The transformer families through `zoo import hf` and `zoo export --format hf`,
proved as conversions are proved: a tiny random model built by transformers
from a config (two layers, odd widths that catch a transpose, a vocabulary
padded past its tokenizer's as the real models pad), saved with
save_pretrained beside a small tokenizer.json, is imported; its logits equal
transformers' within 1e-5 over a left-padded batch, greedy generation gives
the same tokens, and the export loads back in transformers with the same
logits again. One case per family and per option that changes the arithmetic.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="the interop extra is not installed: pip install -e '.[interop]'"
)

import zoo_core  # noqa: E402
from zoo_core.corpus.datasets import read_text_file  # noqa: E402
from zoo_core.plugin_api.manager import get_plugins  # noqa: E402

from .conftest import ROOT  # noqa: E402
from .tiny_hf import LLAMA3_ROPE, byte_level_tokenizer, largest_difference, left_padded  # noqa: E402

TEXT = read_text_file(ROOT / "data" / "tinyshakespeare.txt").text
PROMPTS = ["ROMEO: What light", "First Citizen:\nBefore we proceed any further, hear me", "KING"]
TOLERANCE = 1e-5
NEW_TOKENS = 6
SMALL = dict(
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
# name: (config class, fields, tokenizer, the card settings the import must write)
FAMILIES = {
    "llama-gqa-untied": (
        "LlamaConfig",
        dict(SMALL, vocab_size=320, num_key_value_heads=2),
        "sentencepiece",
        {"n_kv_head": 2, "mlp": "swiglu", "tie_embeddings": False},
    ),
    "llama-llama3-rope": (
        "LlamaConfig",
        dict(SMALL, vocab_size=320, num_key_value_heads=3, rope_parameters=LLAMA3_ROPE),
        "sentencepiece",
        {
            "rope_scaling": {
                "kind": "llama3",
                "factor": 4.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_context_length": 16,
            }
        },
    ),
    "llama-biases-linear-rope": (
        "LlamaConfig",
        dict(SMALL, vocab_size=320, num_key_value_heads=2, attention_bias=True, mlp_bias=True,
             rope_parameters={"rope_type": "linear", "rope_theta": 500.0, "factor": 2.0}),
        "sentencepiece",
        {"attention_bias": "all", "layer_bias": True, "rope_base": 500.0,
         "rope_scaling": {"kind": "linear", "factor": 2.0}},
    ),
    "mistral-sliding-window": (
        "MistralConfig",
        dict(SMALL, vocab_size=320, num_key_value_heads=2, head_dim=8, sliding_window=5),
        "sentencepiece",
        {"sliding_window": 5},
    ),
    "qwen2-qkv-bias-tied": (
        "Qwen2Config",
        dict(SMALL, vocab_size=320, num_key_value_heads=2, tie_word_embeddings=True),
        "byte-level",
        {"attention_bias": "qkv", "tie_embeddings": True},
    ),
    "qwen3-qk-norm": (
        "Qwen3Config",
        dict(SMALL, vocab_size=320, num_key_value_heads=2, head_dim=16),
        "byte-level",
        {"qk_norm": "rmsnorm", "head_size": 16},
    ),
    "neox-parallel-partial-rotary": (
        "GPTNeoXConfig",
        dict(
            SMALL,
            vocab_size=384,
            num_attention_heads=3,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        ),
        "byte-level",
        {"residual": "parallel", "rotary_fraction": 0.25},
    ),
    "neox-sequential": (
        "GPTNeoXConfig",
        dict(SMALL, vocab_size=384, num_attention_heads=3, use_parallel_residual=False),
        "byte-level",
        {"residual": "sequential", "mlp": "gelu"},
    ),
    "gpt2": (
        "GPT2Config",
        dict(
            vocab_size=320,
            n_positions=64,
            n_embd=48,
            n_layer=2,
            n_head=6,
            n_inner=80,
            initializer_range=0.1,
            bos_token_id=None,
            eos_token_id=None,
        ),
        "byte-level",
        {"tie_embeddings": True},
    ),
}


def _tokenizer(kind: str):
    """A small tokenizer.json trained here: GPT-2's byte-level BPE, or Llama-2's
    SentencePiece style (metaspace, an unknown token, a template that adds <s>)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    if kind == "byte-level":
        return byte_level_tokenizer("<|endoftext|>")
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    tokenizer.train_from_iterator([TEXT[:50_000]], trainer)
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return tokenizer


class _Folders(dict):
    """Each family's transformers folder, built once for the module when first asked for."""

    def __init__(self, factory):
        super().__init__()
        self.factory = factory
        self.tokenizers: dict = {}

    def __missing__(self, family):
        config_class, fields, tokenizer_kind, _ = FAMILIES[family]
        torch.manual_seed(0)
        config = getattr(transformers, config_class)(**fields)
        model = transformers.AutoModelForCausalLM.from_config(config).eval()
        folder = self.factory.mktemp(family)
        model.save_pretrained(folder)
        if tokenizer_kind not in self.tokenizers:
            self.tokenizers[tokenizer_kind] = _tokenizer(tokenizer_kind)
        self.tokenizers[tokenizer_kind].save(str(folder / "tokenizer.json"))
        self[family] = (folder, model)
        return self[family]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    transformers.utils.logging.set_verbosity_error()
    return _Folders(tmp_path_factory)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_family_imports_generates_and_exports_with_transformers_logits(folders, zoo, tmp_path, family):
    folder, reference = folders[family]
    done = zoo("import", "hf", str(folder), "--name", "imported")
    assert done.code == 0, done.err
    model = zoo_core.load("imported")
    for key, value in FAMILIES[family][3].items():
        assert model.card.config[key] == value, key
    assert model.card.tokenizer.kind == "hf" and model.card.tokenizer.sha256
    assert model.card.tokenizer.vocab_size == reference.config.vocab_size  # the padded vocabulary
    assert model.card.parameters == sum(p.numel() for p in reference.parameters())

    from tokenizers import Tokenizer

    theirs = Tokenizer.from_file(str(folder / "tokenizer.json"))
    rows = [model.tokenizer.encode(p) for p in PROMPTS]
    assert rows == [theirs.encode(p, add_special_tokens=False).ids for p in PROMPTS]
    assert model.tokenizer.decode(rows[1]) == theirs.decode(rows[1])
    assert largest_difference(reference, model.network, rows) <= TOLERANCE

    # A prompt as transformers' tokenizer(prompt) frames it: Llama-2's <s> first, GPT-2's as it is.
    prompted = [theirs.encode(p).ids for p in PROMPTS]
    assert [model.encode_prompt(p) for p in PROMPTS] == prompted
    ids, mask, _ = left_padded(prompted)
    with torch.no_grad():
        generated = reference.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0
        )
    drawn = model.sample(PROMPTS, max_new_tokens=NEW_TOKENS, temperature=0)
    assert [s.tokens for s in drawn] == generated[:, ids.shape[1] :].tolist()

    out = tmp_path / "export"
    done = zoo("export", "imported", "--format", "hf", "--out", str(out))
    assert done.code == 0, done.err
    assert json.loads((out / "config.json").read_text())["architectures"] == [type(reference).__name__]
    exported = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert largest_difference(exported, model.network, rows) <= TOLERANCE
    again = transformers.AutoTokenizer.from_pretrained(out)
    assert again(PROMPTS[1], add_special_tokens=False)["input_ids"] == rows[1]


SERVED = [
    "llama-gqa-untied",
    "mistral-sliding-window",
    "neox-parallel-partial-rotary",
    "qwen2-qkv-bias-tied",
    "qwen3-qk-norm",
    "gpt2",
]


def test_the_continuous_batching_server_answers_with_transformers_greedy_tokens(folders, zoo):
    """Imported families served together, every prompt of every family asked at once,
    greedy: each answer is transformers' own greedy continuation."""
    pytest.importorskip("starlette", reason="the web tests need the web extra: pip install 'zoo-lm[web]'")
    openai = pytest.importorskip("openai", reason="these tests need the web-test extra: pip install 'zoo-lm[web-test]'")
    from tests.web_support import Server

    expected = {}
    for family in SERVED:
        folder, reference = folders[family]
        assert zoo("import", "hf", str(folder), "--name", family).code == 0
        model = zoo_core.load(family)
        ids, mask, _ = left_padded([model.encode_prompt(p) for p in PROMPTS])  # with the tokenizer's own BOS
        with torch.no_grad():
            generated = reference.generate(
                input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0
            )[:, ids.shape[1] :].tolist()
        drawn = model.sample(PROMPTS, max_new_tokens=NEW_TOKENS, temperature=0)
        assert [s.tokens for s in drawn] == generated
        expected.update({(family, s.prompt): s.text for s in drawn})

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
    assert all(a.usage.completion_tokens == NEW_TOKENS for a in answers)


def _docs_section() -> str:
    text = (ROOT / "docs" / "interop.md").read_text(encoding="utf-8")
    return text.split("\n## Transformer families: Llama, Mistral, Qwen, GPT-NeoX\n", 1)[1].split("\n## ", 1)[0]


def test_the_docs_commands_run_and_a_cached_repository_imports_with_the_network_off(zoo, tmp_path, monkeypatch):
    """The section's snippet and commands, in order. The one naming a repository
    id runs as its own process, so HF_HUB_CACHE and HF_HUB_OFFLINE are read as
    huggingface_hub reads them, with every proxy at a closed port: any attempt
    to reach the network would fail."""
    monkeypatch.chdir(tmp_path)
    section = _docs_section()
    (snippet,) = re.findall(r"```python\n(.*?)```", section, re.S)
    (block,) = re.findall(r"```bash\n(.*?)```", section, re.S)
    commands = [shlex.split(line) for line in block.splitlines() if line.strip()]
    made: dict = {}
    exec(snippet, made)
    reference = transformers.AutoModelForCausalLM.from_pretrained("tiny-llama").eval()
    repo = tmp_path / "hub" / "models--tiny-org--tiny-llama"
    shutil.copytree("tiny-llama", repo / "snapshots" / "0123456789abcdef")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123456789abcdef")
    closed = "http://127.0.0.1:9"
    for command in commands:
        if command[0] == "zoo":
            done = zoo(*command[1:])
            assert done.code == 0, (command, done.err)
            continue
        variables = dict(word.split("=", 1) for word in command[: command.index("zoo")])
        environment = {
            **os.environ,
            **variables,
            "HF_HUB_CACHE": str(tmp_path / "hub"),
            "HTTP_PROXY": closed,
            "HTTPS_PROXY": closed,
            "ALL_PROXY": closed,
            "OMP_NUM_THREADS": "1",
        }
        finished = subprocess.run(
            [sys.executable, "-m", "zoo_core", *command[command.index("zoo") + 1 :]],
            capture_output=True,
            text=True,
            env=environment,
            timeout=300,
        )
        assert finished.returncode == 0, finished.stderr
    assert [c[-1] for c in commands if "import" in c] == ["tiny-llama", "tiny-llama-cached"]
    get_plugins(reload=True)
    ids = [zoo_core.load("tiny-llama").tokenizer.encode(p) for p in PROMPTS]
    for name in ("tiny-llama", "tiny-llama-cached"):
        assert largest_difference(reference, zoo_core.load(name).network, ids) <= TOLERANCE
    exported = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "tiny-llama-hf").eval()
    assert largest_difference(exported, zoo_core.load("tiny-llama").network, ids) <= TOLERANCE


def test_a_repository_id_not_in_the_cache_is_one_line(zoo):
    missing = zoo("import", "hf", "tiny-org/not-cached", "--name", "other")
    assert missing.code == 1 and len(missing.err.strip().splitlines()) == 1
    assert "'tiny-org/not-cached' is not in the Hugging Face cache" in missing.err and "never downloads" in missing.err


@pytest.mark.parametrize(
    "family",
    [
        "llama-gqa-untied",
        "llama-llama3-rope",
        "mistral-sliding-window",
        "qwen3-qk-norm",
        "neox-parallel-partial-rotary",
    ],
)
def test_transformer_lens_and_the_inspect_views_read_the_families(folders, zoo, tmp_path, family):
    pytest.importorskip("transformer_lens", reason="the lens extra is not installed: pip install -e '.[lens]'")
    from zoo_core.interop.transformer_lens import hooked_transformer

    folder, reference = folders[family]
    assert zoo("import", "hf", str(folder), "--name", "imported").code == 0
    model = zoo_core.load("imported")
    lens = hooked_transformer(model)
    config = reference.config
    # Heads counted as TransformerLens counts them: query heads, and the key/value heads they share.
    assert lens.cfg.n_heads == config.num_attention_heads
    assert (lens.cfg.n_key_value_heads or lens.cfg.n_heads) == getattr(config, "num_key_value_heads", lens.cfg.n_heads)
    ids = torch.tensor([model.tokenizer.encode(PROMPTS[1])])
    with torch.no_grad():
        logits, cache = lens.run_with_cache(ids)
        ours, _ = model.network(ids)
    assert float((logits - ours).abs().max()) <= 1e-4
    assert cache["blocks.1.attn.hook_pattern"].shape == (1, config.num_attention_heads, ids.shape[1], ids.shape[1])
    clean = "ROMEO: What light"
    # Patching compares position by position: a corrupted prompt of the same length in tokens.
    corrupt = next(
        text
        for text in ("ROMEO: What night", "ROMEO: What fight", "ROMEO: That light", "JULIET: What light")
        if len(model.tokenizer.encode(text)) == len(model.tokenizer.encode(clean))
    )
    done = zoo("export", "imported", "--format", "transformer-lens", "--out", str(tmp_path / "lens"))
    assert done.code == 0 and "checked: logits" in done.out, done.err
    for view in (["--logit-lens"], ["--ablate", "0.1,1.2"], ["--patch", "--corrupt", corrupt]):
        shown = zoo("inspect", "imported", "--prompt", clean, *view)
        assert shown.code == 0, (view, shown.err)


@pytest.mark.parametrize("change, refusal", [
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0}},
     "RoPE scaling 'yarn' has no zoo counterpart"),
    ({"hidden_act": "tanh"}, "hidden_act 'tanh' has no zoo counterpart"),
    ({"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 4},
     "some layers attend within a sliding window and others fully"),
])
def test_what_the_zoo_cannot_compute_is_refused_in_one_line(folders, zoo, tmp_path, change, refusal):
    folder, _ = folders["mistral-sliding-window"]
    copy = tmp_path / "changed"
    shutil.copytree(folder, copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, **change}))
    done = zoo("import", "hf", str(copy), "--name", "refused")
    assert done.code == 1 and refusal in done.err and len(done.err.strip().splitlines()) == 1, done.err


def test_a_tensor_outside_the_layout_is_refused(folders, zoo, tmp_path):
    from safetensors.torch import load_file, save_file

    folder, _ = folders["llama-gqa-untied"]
    copy = tmp_path / "extra"
    shutil.copytree(folder, copy)
    tensors = load_file(copy / "model.safetensors")
    save_file({**tensors, "model.layers.0.self_attn.rotary_scale": torch.ones(1)}, copy / "model.safetensors")
    done = zoo("import", "hf", str(copy), "--name", "refused")
    assert done.code == 1 and "'model.layers.0.self_attn.rotary_scale' is not in LlamaForCausalLM's 2-layer layout" in done.err


def _sharded_copy(folders, tmp_path):
    """The Llama case saved as real models ship: several shards and their index."""
    original, reference = folders["llama-gqa-untied"]
    folder = tmp_path / "sharded"
    reference.save_pretrained(folder, max_shard_size="40KB")
    shutil.copyfile(original / "tokenizer.json", folder / "tokenizer.json")
    return folder, reference


def test_a_model_saved_in_shards_imports_with_transformers_logits(folders, zoo, tmp_path):
    folder, reference = _sharded_copy(folders, tmp_path)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    assert not (folder / "model.safetensors").exists() and len(set(index["weight_map"].values())) >= 3
    done = zoo("import", "hf", str(folder), "--name", "sharded")
    assert done.code == 0, done.err
    model = zoo_core.load("sharded")
    assert model.card.parameters == sum(p.numel() for p in reference.parameters())
    rows = [model.tokenizer.encode(p) for p in PROMPTS]
    assert largest_difference(reference, model.network, rows) <= TOLERANCE


@pytest.mark.parametrize("damage, refusal", [
    (lambda index: index["weight_map"].update({"lm_head.weight": "../model.safetensors"}), "is not a file beside the index"),
    (lambda index: index["weight_map"].update({"model.norm.weight": min(index["weight_map"].values())}), "does not put there"),
    (lambda index: index["weight_map"].update({"model.extra.weight": min(index["weight_map"].values())}), "which its shard does not hold"),
    (lambda index: index.pop("weight_map"), "not a shard index"),
])
def test_a_damaged_shard_index_is_refused_in_one_line(folders, zoo, tmp_path, damage, refusal):
    folder, _ = _sharded_copy(folders, tmp_path)
    path = folder / "model.safetensors.index.json"
    index = json.loads(path.read_text())
    damage(index)
    path.write_text(json.dumps(index))
    done = zoo("import", "hf", str(folder), "--name", "refused")
    assert done.code == 1 and refusal in done.err and len(done.err.strip().splitlines()) == 1, done.err
