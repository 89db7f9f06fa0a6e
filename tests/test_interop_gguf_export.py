"""`zoo export --format gguf`, proved twice.

In the default suite: a tiny random LlamaForCausalLM built by transformers from a
config (odd widths that catch a transpose, grouped-query attention, a
feed-forward width that is not whole Q8_0 blocks) is imported with `zoo import
hf` and exported in F32, F16 and Q8_0; llama.cpp's own reader (`gguf.GGUFReader`)
reads back the hyper-parameters and every tensor, compared with transformers'
tensors under llama.cpp's names and in its query/key row order (the converter's
permutation, written here from the fact: each head's two halves interleaved).
F32 is equal; F16 within its rounding (2^-11 of the value); Q8_0 within half a
quantisation step plus the F16 rounding of the block scale (0.57 × the block's
largest magnitude / 127). A tiny Qwen2 (tied head, query/key/value biases, a
byte-level tokenizer.json, a chat template on its card) checks the other family
and the tokenizer metadata.

In the slow lane, llama.cpp itself (node-llama-cpp's prebuilt CPU build, through
tests/llama_cpp_greedy.mjs) loads the files and continues token ids greedily:
its tokens equal the zoo's, for the tiny models, the shipped llama-char-mini
(trained here), and (the smollm2 lane) SmolLM2-135M-Instruct.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf", reason="the gguf extra is not installed: pip install -e '.[gguf]'")
transformers = pytest.importorskip(
    "transformers", reason="the interop extra is not installed: pip install -e '.[interop]'"
)

import zoo_core  # noqa: E402
from zoo_core.errors import ZooError  # noqa: E402
from zoo_core.interop import gguf_export  # noqa: E402
from zoo_core.storage.locations import user_registry_path  # noqa: E402

from .conftest import ROOT  # noqa: E402
from .references import reference  # noqa: E402
from .tiny_hf import CHATML_SPECIALS, LLAMA3_ROPE, byte_level_tokenizer  # noqa: E402

TYPES = ("f32", "f16", "q8_0")
SMALL = dict(
    hidden_size=96,
    intermediate_size=80,  # not whole 32-value blocks: Q8_0 keeps ffn_down in F16
    num_hidden_layers=2,
    num_attention_heads=6,
    num_key_value_heads=2,
    max_position_embeddings=64,
    rope_parameters={"rope_type": "default", "rope_theta": 5000.0},
    rms_norm_eps=1e-5,
    initializer_range=0.1,
    bos_token_id=None,
    eos_token_id=None,
    pad_token_id=None,
)
CHAT = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
PROMPT = "ROMEO: What light"
NEW_TOKENS = 8


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """transformers folders: a Llama (65 tokens: the zoo's characters) and a Qwen2."""
    transformers.utils.logging.set_verbosity_error()
    made = {}
    for family, config in [
        ("llama", transformers.LlamaConfig(vocab_size=65, **SMALL)),
        ("qwen2", transformers.Qwen2Config(vocab_size=320, tie_word_embeddings=True, **SMALL)),
    ]:
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config).eval()
        folder = tmp_path_factory.mktemp(family)
        model.save_pretrained(folder)
        if family == "qwen2":
            byte_level_tokenizer(*CHATML_SPECIALS).save(str(folder / "tokenizer.json"))
        made[family] = (folder, model)
    return made


BOS = "<|begin_of_text|>"


@pytest.fixture(scope="module")
def bos_folder(tmp_path_factory):
    """A Llama whose tokenizer.json puts BOS first, as Llama 3's does (its post-processor)."""
    from tokenizers import Tokenizer, processors

    transformers.utils.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(transformers.LlamaConfig(vocab_size=320, **SMALL)).eval()
    folder = tmp_path_factory.mktemp("llama3-bos")
    model.save_pretrained(folder)
    tokenizer = Tokenizer.from_str(byte_level_tokenizer(BOS, "<|endoftext|>").to_str())  # a copy: never the shared one
    bos_id = tokenizer.token_to_id(BOS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B:1", special_tokens=[(BOS, bos_id)]
    )
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder, bos_id


def _imported(zoo, folders, family: str) -> str:
    folder, _ = folders[family]
    done = zoo("import", "hf", str(folder), "--name", f"tiny-{family}")
    assert done.code == 0, done.err
    return f"tiny-{family}"


def _exported(zoo, name: str, tensor_type: str, out):
    done = zoo("export", name, "--format", "gguf", "--gguf-type", tensor_type, "--out", str(out))
    assert done.code == 0, done.err
    assert "checked: logits on the first" in done.out  # transformers' GGUF loader read it back
    assert "Converting" not in done.err  # nor its progress bar
    return out / f"{name}.gguf"


def _permuted(rows: torch.Tensor, heads: int) -> torch.Tensor:
    """llama.cpp's query/key row order for Llama: in each head, the first half's
    row i goes to 2i and the second half's to 2i + 1 (convert_hf_to_gguf's permute)."""
    return rows.reshape(heads, 2, rows.shape[0] // heads // 2, *rows.shape[1:]).transpose(1, 2).reshape(rows.shape)


def _llama_cpp_tensors(model, permute: bool) -> dict[str, torch.Tensor]:
    """transformers' tensors under llama.cpp's names (the table of its llama and qwen2 architectures)."""
    state = model.state_dict()
    config = model.config
    names = {"model.embed_tokens": "token_embd", "model.norm": "output_norm"}
    if not config.tie_word_embeddings:
        names["lm_head"] = "output"
    for i in range(config.num_hidden_layers):
        names.update(
            {
                f"model.layers.{i}.input_layernorm": f"blk.{i}.attn_norm",
                f"model.layers.{i}.self_attn.q_proj": f"blk.{i}.attn_q",
                f"model.layers.{i}.self_attn.k_proj": f"blk.{i}.attn_k",
                f"model.layers.{i}.self_attn.v_proj": f"blk.{i}.attn_v",
                f"model.layers.{i}.self_attn.o_proj": f"blk.{i}.attn_output",
                f"model.layers.{i}.post_attention_layernorm": f"blk.{i}.ffn_norm",
                f"model.layers.{i}.mlp.gate_proj": f"blk.{i}.ffn_gate",
                f"model.layers.{i}.mlp.up_proj": f"blk.{i}.ffn_up",
                f"model.layers.{i}.mlp.down_proj": f"blk.{i}.ffn_down",
            }
        )
    expected = {}
    for theirs, ours in names.items():
        for kind in ("weight", "bias"):
            tensor = state.get(f"{theirs}.{kind}")
            if tensor is None:
                continue
            if permute and ours.endswith(("attn_q", "attn_k")):
                heads = config.num_attention_heads if ours.endswith("attn_q") else config.num_key_value_heads
                tensor = _permuted(tensor, heads)
            expected[f"{ours}.{kind}"] = tensor.detach().float()
    return expected


def _read(path):
    reader = gguf.GGUFReader(path)
    fields = {name: field.contents() for name, field in reader.fields.items()}
    tensors = {}
    for tensor in reader.tensors:
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        tensors[tensor.name] = (tensor.tensor_type.name, torch.from_numpy(np.array(values, dtype=np.float32)))
    return fields, tensors


def _within_rounding(kind: str, got: torch.Tensor, want: torch.Tensor) -> bool:
    if kind == "F32":
        return torch.equal(got, want)
    if kind == "F16":
        return bool(((got - want).abs() <= want.abs() * 2**-11 + 2**-24).all())
    assert kind == "Q8_0"
    blocks = want.reshape(-1, 32)
    step = blocks.abs().amax(dim=1, keepdim=True) / 127
    return bool(((got.reshape(-1, 32) - blocks).abs() <= 0.57 * step).all())


@pytest.mark.parametrize("tensor_type", TYPES)
def test_a_llama_exports_its_tensors_and_keys_as_llama_cpp_names_them(zoo, folders, tmp_path, tensor_type):
    name = _imported(zoo, folders, "llama")
    fields, tensors = _read(_exported(zoo, name, tensor_type, tmp_path / "out"))
    _, reference_model = folders["llama"]
    assert fields["general.architecture"] == "llama"
    assert {key: fields[f"llama.{key}"] for key in ("context_length", "embedding_length", "block_count")} == {
        "context_length": 64,
        "embedding_length": 96,
        "block_count": 2,
    }
    assert fields["llama.feed_forward_length"] == 80
    assert (fields["llama.attention.head_count"], fields["llama.attention.head_count_kv"]) == (6, 2)
    assert fields["llama.rope.freq_base"] == 5000.0
    assert fields["llama.rope.dimension_count"] == 16
    assert fields["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-5)
    # The zoo's characters, each in GPT-2's byte alphabet ("\n" is "Ċ", " " is "Ġ"), no merges.
    characters = zoo_core.load(name).tokenizer.characters
    assert fields["tokenizer.ggml.model"] == "gpt2" and fields["tokenizer.ggml.merges"] == []
    assert fields["tokenizer.ggml.tokens"][:2] == ["Ċ", "Ġ"] and fields["tokenizer.ggml.tokens"][2:] == characters[2:]

    expected = _llama_cpp_tensors(reference_model, permute=True)
    assert set(tensors) == set(expected)
    for tensor_name, want in expected.items():
        kind, got = tensors[tensor_name]
        wanted_kind = "F32" if want.ndim == 1 or tensor_type == "f32" else "F16"
        if tensor_type == "q8_0" and want.ndim == 2 and want.shape[1] % 32 == 0:
            wanted_kind = "Q8_0"
        assert kind == wanted_kind, tensor_name
        assert _within_rounding(kind, got.reshape(want.shape), want), tensor_name


def test_a_qwen2_keeps_its_row_order_biases_tied_head_tokenizer_and_chat_template(zoo, folders, tmp_path):
    name = _imported(zoo, folders, "qwen2")
    # The card's chat field, as the GGUF import writes it.
    with user_registry_path().open("a", encoding="utf-8") as registry:
        registry.write(f'\n[{name}.chat]\ntemplate = {json.dumps(CHAT)}\neos_token = "<|im_end|>"\n')
    fields, tensors = _read(_exported(zoo, name, "f32", tmp_path / "out"))
    folder, reference_model = folders["qwen2"]
    assert fields["general.architecture"] == "qwen2"
    expected = _llama_cpp_tensors(reference_model, permute=False)  # llama.cpp rotates Qwen2 as transformers does
    assert "output.weight" not in tensors and "blk.0.attn_q.bias" in expected
    assert set(tensors) == set(expected)
    assert all(torch.equal(tensors[key][1].reshape(want.shape), want) for key, want in expected.items())

    described = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    by_id = sorted(described["model"]["vocab"].items(), key=lambda item: item[1])
    tokens = fields["tokenizer.ggml.tokens"]
    assert tokens[:300] == [token for token, _ in by_id]
    assert tokens[300:] == [f"[PAD{i}]" for i in range(300, 320)]  # the vocabulary padded to the model's 320
    assert fields["tokenizer.ggml.merges"] == [" ".join(pair) for pair in described["model"]["merges"]]
    types = fields["tokenizer.ggml.token_type"]
    assert types[:3] == [gguf.TokenType.CONTROL] * 3 and set(types[3:300]) == {gguf.TokenType.NORMAL}
    assert fields["tokenizer.ggml.pre"] == "gpt-2"  # llama.cpp's name for GPT-2's split
    assert fields["tokenizer.chat_template"] == CHAT
    assert fields["tokenizer.ggml.eos_token_id"] == tokens.index("<|im_end|>")


def test_pre_tokenizers_get_llama_cpps_names_and_others_are_refused():
    """GPT-2's byte-level split, alone or after single digits (SmolLM's, as
    tokenizers' Digits or as the GGUF import's isolated \\p{N} split)."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    cases = [
        (byte_level, "gpt-2"),
        (pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level]), "smollm"),
        (pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"), byte_level]), "smollm"),
        (pre_tokenizers.Metaspace(), None),
        (pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=False), byte_level]), None),
    ]
    for pre, expected in cases:
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre
        described = json.loads(tokenizer.to_str())["pre_tokenizer"]
        if expected is not None:
            assert gguf_export._pre_tokenizer(described, "x") == expected
        else:
            with pytest.raises(ZooError, match="has no llama.cpp name here"):
                gguf_export._pre_tokenizer(described, "x")


@pytest.mark.parametrize(
    "args, message",
    [
        (("gpt-char-mini",), "'gpt-char-mini' has positions 'learned'; the GGUF export writes RoPE families"),
        (("gpt-char-mini-rope",), "no bias on its vocabulary head, which this variant has"),
        (("gpt-char-mini-rope", "--gguf-type", "f32", "--format", "hf"), "--gguf-type is for --format gguf, not hf"),
    ],
)
def test_what_gguf_cannot_describe_is_refused_in_one_line(zoo, tmp_path, args, message):
    format_given = "--format" in args
    done = zoo("export", *args, *([] if format_given else ["--format", "gguf"]), "--out", str(tmp_path / "out"))
    assert done.code != 0 and message in done.err
    assert len(done.err.strip().splitlines()) == 1 and "Traceback" not in done.err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "config_class, fields, message",
    [
        ("MistralConfig", dict(sliding_window=5), "sets sliding_window; llama.cpp's llama architecture has no key"),
        ("LlamaConfig", dict(rope_parameters=LLAMA3_ROPE), "sets rope_scaling; the GGUF export writes plain RoPE only"),
        (
            "LlamaConfig",
            dict(attention_bias=True),
            "sets attention_bias or layer_bias; GGUF export writes llama without biases",
        ),
        ("LlamaConfig", dict(hidden_act="gelu"), "has mlp 'geglu'; llama.cpp's llama and qwen2 gate with SiLU"),
        ("Qwen3Config", dict(head_dim=16), "is in Qwen3ForCausalLM's layout; the GGUF export writes llama, qwen2"),
    ],
)
def test_an_imported_layout_gguf_is_not_written_for_is_refused_naming_it(zoo, tmp_path, config_class, fields, message):
    config = getattr(transformers, config_class)(vocab_size=65, **{**SMALL, **fields})
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "folder")
    done = zoo("import", "hf", str(tmp_path / "folder"), "--name", "imported")
    assert done.code == 0, done.err
    done = zoo("export", "imported", "--format", "gguf", "--out", str(tmp_path / "out"))
    assert done.code != 0 and message in done.err and len(done.err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_the_docs_commands_run(zoo, tmp_path, monkeypatch):
    """docs/interop.md's GGUF section: its snippet, then its commands, in order."""
    monkeypatch.chdir(tmp_path)
    text = (ROOT / "docs" / "interop.md").read_text(encoding="utf-8")
    section = text.split("\n## GGUF export: llama.cpp\n", 1)[1].split("\n## ", 1)[0]
    (snippet,) = re.findall(r"```python\n(.*?)```", section, re.S)
    (block,) = re.findall(r"```bash\n(.*?)```", section, re.S)
    exec(snippet, {})
    for line in block.splitlines():
        command = shlex.split(line)
        assert command[0] == "zoo"
        done = zoo(*command[1:])
        assert done.code == 0, (command, done.err)
    fields, _ = _read(tmp_path / "tiny-llama-gguf" / "tiny-llama.gguf")
    assert fields["general.architecture"] == "llama" and fields["general.file_type"] == gguf.LlamaFileType.MOSTLY_Q8_0


# --- llama.cpp itself ----------------------------------------------------------------


def llama_cpp_greedy(jobs: list[dict]) -> list[dict]:
    """Each job's greedy continuation (and tokens of its text) from llama.cpp, one process for all."""
    node = shutil.which("node")
    if node is None:
        if os.environ.get("CI"):
            pytest.fail("node is not installed")
        pytest.skip("node is not installed")
    modules = reference("node-llama-cpp") / "node_modules"
    done = subprocess.run(
        [node, str(ROOT / "tests" / "llama_cpp_greedy.mjs"), str(modules)],
        input=json.dumps(jobs),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _job(name: str, path, prompt: str = PROMPT) -> tuple[dict, list[int], list[int]]:
    """The llama.cpp job for the file, with the zoo's prompt ids and greedy tokens."""
    model = zoo_core.load(name)
    ids = model.tokenizer.encode(prompt)
    (drawn,) = model.sample([prompt], max_new_tokens=NEW_TOKENS, temperature=0)
    return {"model": str(path), "ids": ids, "count": NEW_TOKENS, "text": prompt}, ids, drawn.tokens


@pytest.mark.slow
def test_llama_cpp_continues_the_exports_with_the_zoos_greedy_tokens(zoo, folders, tmp_path):
    """The tiny Llama in every type, the tiny Qwen2, and the shipped, trained
    llama-char-mini (gpt-char-mini's Llama-layout sibling; the GPT-layout
    character models have ReLU feed-forwards and a head bias, which no GGUF
    architecture describes): llama.cpp's greedy tokens are the zoo's, and it
    reads the prompt's text as the same ids."""
    llama = _imported(zoo, folders, "llama")
    jobs = [_job(llama, _exported(zoo, llama, tensor_type, tmp_path / tensor_type)) for tensor_type in TYPES]
    qwen2 = _imported(zoo, folders, "qwen2")
    jobs.append(_job(qwen2, _exported(zoo, qwen2, "f16", tmp_path / "qwen2")))
    jobs.append(_job("llama-char-mini", _exported(zoo, "llama-char-mini", "f32", tmp_path / "trained"), "ROMEO:"))
    answers = llama_cpp_greedy([job for job, _, _ in jobs])
    for (job, ids, tokens), answer in zip(jobs, answers):
        assert answer == {"greedy": tokens, "tokens": ids}, job["model"]


@pytest.mark.slow
@pytest.mark.smollm2
def test_smollm2_exported_from_the_zoo_runs_in_llama_cpp_with_the_zoos_greedy_tokens(
    zoo, smollm2_home, monkeypatch, tmp_path
):
    # `zoo import gguf`'s SmolLM2 (the shared, read-only home), exported back to GGUF
    monkeypatch.setenv("ZOO_REGISTRY", str(smollm2_home / "registry.toml"))
    path = _exported(zoo, "smollm2-135m-instruct", "q8_0", tmp_path / "out")
    job, ids, tokens = _job("smollm2-135m-instruct", path, "The capital of France is")
    (answer,) = llama_cpp_greedy([job])
    assert answer == {"greedy": tokens, "tokens": ids}
    assert zoo_core.load("smollm2-135m-instruct").tokenizer.decode(tokens).startswith(" Paris")


# --- the beginning-of-sequence token -------------------------------------------------


def _add_bos(path) -> tuple[bool, int | None]:
    fields = gguf.GGUFReader(path).fields
    bos = fields.get("tokenizer.ggml.bos_token_id")
    return fields["tokenizer.ggml.add_bos_token"].contents(), bos.contents() if bos is not None else None


def test_a_tokenizer_that_adds_bos_exports_it_and_imports_back_with_it(zoo, folders, bos_folder, tmp_path):
    """An HF import whose tokenizer puts BOS first writes add_bos_token true and its id, so a
    re-import (and llama.cpp) adds it again; a tokenizer without one writes false, as before."""
    folder, bos_id = bos_folder
    assert zoo("import", "hf", str(folder), "--name", "tiny-bos").code == 0
    assert zoo_core.load("tiny-bos").card.tokenizer.bos_id == bos_id
    path = _exported(zoo, "tiny-bos", "f32", tmp_path / "bos")
    assert _add_bos(path) == (True, bos_id)
    done = zoo("import", "gguf", str(path), "--name", "bos-again")
    assert done.code == 0, done.err
    assert zoo_core.load("bos-again").card.tokenizer.bos_id == bos_id

    qwen2 = _imported(zoo, folders, "qwen2")  # byte-level BPE with no BOS: SmolLM2's case
    assert zoo_core.load(qwen2).card.tokenizer.bos_id is None
    path = _exported(zoo, qwen2, "f32", tmp_path / "plain")
    assert _add_bos(path)[0] is False
    assert zoo("import", "gguf", str(path), "--name", "plain-again").code == 0
    assert zoo_core.load("plain-again").card.tokenizer.bos_id is None


@pytest.mark.slow
def test_llama_cpp_puts_the_exported_bos_first_where_the_zoo_does(zoo, folders, bos_folder, tmp_path):
    """llama.cpp reads the export's add_bos_token: it puts BOS before a text for the
    tokenizer that asks for it (and continues the zoo's prompt, BOS first, as the zoo
    does), and nothing before one that does not."""
    folder, bos_id = bos_folder
    assert zoo("import", "hf", str(folder), "--name", "tiny-bos").code == 0
    model = zoo_core.load("tiny-bos")
    (drawn,) = model.sample([PROMPT], max_new_tokens=NEW_TOKENS, temperature=0)
    ids = [bos_id, *model.tokenizer.encode(PROMPT)]  # what sample() reads (zoo_core.inference.bos)
    qwen2 = _imported(zoo, folders, "qwen2")
    jobs = [
        {"model": str(_exported(zoo, "tiny-bos", "f32", tmp_path / "bos")), "ids": ids, "count": NEW_TOKENS,
         "text": PROMPT, "bos": True},
        {"model": str(_exported(zoo, qwen2, "f32", tmp_path / "plain")), "ids": [1], "count": 1, "bos": True},
    ]  # fmt: skip
    with_bos, without = llama_cpp_greedy(jobs)
    assert with_bos == {"greedy": drawn.tokens, "tokens": ids[1:], "bos": bos_id}
    assert without["bos"] is None
