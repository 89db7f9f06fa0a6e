"""The beginning-of-sequence token a tokenizer says to put first (zoo_core/inference/bos.py):
recorded at import from a tiny GGUF file written by the `gguf` package's writer with
``tokenizer.ggml.add_bos_token`` true or false, and from a tokenizer.json's post-processor;
put before prompts and texts read from their start, never twice, never into a chat
template's text; SmolLM2's file does not ask for it, and the zoo's own variants have none."""

from __future__ import annotations

import gguf
import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the interop extra is not installed")

from tokenizers import processors  # noqa: E402

from zoo_core.evaluation.bits import bits_per_byte  # noqa: E402
from zoo_core.inference.chat import chat_prompt_ids  # noqa: E402
from zoo_core.loading.api import load  # noqa: E402

from .conftest import SMOLLM2_NAME  # noqa: E402
from .gguf_support import Q, tiny_tokenizer, write_gguf  # noqa: E402

VOCAB = 299
BOS = 1  # the tiny files' tokenizer.ggml.bos_token_id: <|im_start|>
TEXT = "the quick brown fox jumps over"


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer(VOCAB)


def tiny_model():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=32,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def imported(zoo, tmp_path, tokenizer, name, add_bos: bool | None):
    path = tmp_path / f"{name}.gguf"
    flag = {} if add_bos is None else {"tokenizer.ggml.add_bos_token": (add_bos, gguf.GGUFValueType.BOOL)}
    write_gguf(path, tiny_model(), [Q.F32], tokenizer, metadata=flag)
    done = zoo("import", "gguf", str(path), "--name", name)
    assert done.code == 0, done.err
    return load(name)


def test_a_file_that_asks_for_bos_gets_it_first_once(zoo, tmp_path, tokenizer):
    model = imported(zoo, tmp_path, tokenizer, "with-bos", add_bos=True)
    plain = tokenizer.encode(TEXT).ids
    assert model.card.tokenizer.bos_id == BOS
    assert model.encode_prompt(TEXT) == [BOS, *plain]
    assert model.encode_prompt("<|im_start|>" + TEXT) == [BOS, *plain]  # typed by hand: still one
    (drawn,) = model.sample([TEXT], max_new_tokens=3, temperature=0)
    assert drawn.prompt == TEXT and drawn.prompt_tokens == [BOS, *plain]
    with torch.no_grad():
        greedy = model.network(torch.tensor([[BOS, *plain]]))[0][0, -1].argmax().item()
    assert drawn.tokens[0] == greedy
    # `zoo sample` shows the text as typed, and draws what the API draws
    shown = zoo("sample", "with-bos", "--prompt", TEXT, "--temperature", "0", "--max-new-tokens", "3")
    assert shown.code == 0 and shown.out.startswith(TEXT + drawn.text), shown.out
    # The chat template writes its own first tokens: nothing is put before them.
    chat = chat_prompt_ids(model, [{"role": "user", "content": "hi"}])
    assert chat == tokenizer.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n").ids
    # A text scored from its start: every token of it predicted, the first from BOS.
    assert bits_per_byte(model, TEXT, "")["tokens"] == len(plain)
    # The logit lens reads the prompt as sampling does.
    assert model.prompt_ids(TEXT).tolist() == [[BOS, *plain]]


@pytest.mark.parametrize("add_bos", [False, None], ids=["false", "unsaid"])
def test_a_file_that_does_not_ask_reads_the_text_as_given(zoo, tmp_path, tokenizer, add_bos):
    model = imported(zoo, tmp_path, tokenizer, "without-bos", add_bos=add_bos)
    plain = tokenizer.encode(TEXT).ids
    assert model.card.tokenizer.bos_id is None
    assert model.encode_prompt(TEXT) == plain
    assert bits_per_byte(model, TEXT, "")["tokens"] == len(plain) - 1  # the first token is only history


def test_a_tokenizer_json_post_processor_is_recorded_by_import_hf(zoo, tmp_path, tokenizer):
    import json

    folder = tmp_path / "hf"
    tiny_model().save_pretrained(folder)
    framing = tokenizer.from_str(tokenizer.to_str())
    framing.post_processor = processors.TemplateProcessing(
        single="<|endoftext|> $A", pair="<|endoftext|> $A $B:1", special_tokens=[("<|endoftext|>", 0)]
    )
    framing.save(str(folder / "tokenizer.json"))
    # A chat template that writes the BOS itself, as Gemma's and Llama's do.
    template = "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}"
    config = {"chat_template": template, "bos_token": "<|endoftext|>"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    assert zoo("import", "hf", str(folder), "--name", "hf-bos").code == 0
    model = load("hf-bos")
    assert model.card.tokenizer.bos_id == 0
    assert model.encode_prompt(TEXT) == framing.encode(TEXT).ids  # transformers' add_special_tokens=True
    chat = chat_prompt_ids(model, [{"role": "user", "content": TEXT}])
    assert chat == [0, BOS, *tokenizer.encode(TEXT).ids, 2]  # the template's one BOS, not two


def test_smollm2_and_the_zoos_own_variants_have_none(smollm2_home, monkeypatch):
    monkeypatch.setenv("ZOO_REGISTRY", str(smollm2_home / "registry.toml"))
    smollm2 = load(SMOLLM2_NAME)
    assert smollm2.card.tokenizer.bos_id is None  # its file: tokenizer.ggml.add_bos_token = false
    assert smollm2.encode_prompt("Hello") == smollm2.tokenizer.encode("Hello")
    for name in ("gpt-char-mini", "bigram"):
        model = load(name)
        assert model.card.tokenizer.bos_id is None and model.encode_prompt("ROMEO:") == model.tokenizer.encode("ROMEO:")


@pytest.mark.parametrize("says, post_processor, expected", [(True, False, BOS), (False, True, None)])
def test_tokenizer_config_add_bos_token_wins(zoo, tmp_path, tokenizer, says, post_processor, expected):
    """As transformers' Llama and Gemma tokenizers rebuild their post-processor from it."""
    import json

    folder = tmp_path / "hf"
    tiny_model().save_pretrained(folder)
    framing = tokenizer.from_str(tokenizer.to_str())
    if post_processor:
        framing.post_processor = processors.TemplateProcessing(
            single="<|im_start|> $A", special_tokens=[("<|im_start|>", BOS)]
        )
    framing.save(str(folder / "tokenizer.json"))
    config = {"add_bos_token": says, "bos_token": "<|im_start|>"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    assert zoo("import", "hf", str(folder), "--name", "configured").code == 0
    assert load("configured").card.tokenizer.bos_id == expected
