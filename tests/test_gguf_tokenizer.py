"""The tokenizer of a GGUF file (zoo_core/interop/gguf_tokenizer.py) against llama.cpp's
own vocabulary tests and against transformers' tokenizer for SmolLM2's file.

llama.cpp's tests (its tests/test-tokenizer-0): ``ggml-vocab-NAME.gguf`` holds only a
vocabulary; ``.inp`` holds the inputs, each followed by a line ``__ggml_vocab_test__``;
``.out`` holds, one line per input, the ids llama.cpp gives it (without BOS/EOS).
"""

from __future__ import annotations

import json
import mmap
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import gguf
import pytest
from tokenizers import Tokenizer

from zoo_core.errors import ZooError
from zoo_core.interop.gguf_tokenizer import tokenizer_from_gguf
from zoo_plugins.hf_tokenizer.tokenizer import HFTokenizer, read_tokenizer_json

from .references import reference

VOCABS = ("gpt-2", "llama-bpe", "qwen2", "phi-3")
SEPARATOR = "\n__ggml_vocab_test__\n"

# GGUF value types: the fixed-size ones by struct format (8 is a string, 9 an array).
_FORMATS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def gguf_metadata(path: Path) -> dict[str, Any]:
    """The file's metadata as ``{field.name: field.contents()}`` of `gguf.GGUFReader` gives
    it (less its ``GGUF.*`` header fields), read directly: the reader builds a numpy view
    per string, half a minute for llama-bpe's 408,000 on this machine, this a second.
    test_metadata_reads_as_gguf_reader_does holds the two equal."""
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        at = 0

        def take(fmt: str, count: int = 1) -> tuple:
            nonlocal at
            values = struct.unpack_from(f"<{count}{fmt}", data, at)
            at += struct.calcsize(f"<{count}{fmt}")
            return values

        def string() -> str:
            nonlocal at
            (length,) = take("Q")
            at += length
            return bytes(data[at - length : at]).decode("utf-8")

        def value(kind: int) -> Any:
            if kind == 8:
                return string()
            if kind == 9:
                item, count = take("I") + take("Q")
                return [string() for _ in range(count)] if item == 8 else list(take(_FORMATS[item], count))
            return take(_FORMATS[kind])[0]

        assert data[:4] == b"GGUF"
        at = 4
        _version, _tensors, count = take("I") + take("Q") + take("Q")
        return {string(): value(take("I")[0]) for _ in range(count)}


@pytest.fixture(scope="module")
def metadata():
    """Each vocabulary's metadata, read once for the module."""
    cache: dict[str, dict[str, Any]] = {}

    def read(name: str) -> dict[str, Any]:
        if name not in cache:
            cache[name] = gguf_metadata(reference(f"llama.cpp-vocab/ggml-vocab-{name}.gguf"))
        return cache[name]

    return read


@pytest.fixture(scope="module")
def built(metadata):
    """Each vocabulary's tokenizer, built once for the module."""
    cache: dict[str, Tokenizer] = {}

    def build(name: str) -> Tokenizer:
        if name not in cache:
            cache[name] = tokenizer_from_gguf(metadata(name))
        return cache[name]

    return build


def llama_cpp_cases(name: str) -> list[tuple[str, list[int]]]:
    inputs = reference(f"llama.cpp-vocab/ggml-vocab-{name}.gguf.inp").read_text(encoding="utf-8")
    outputs = reference(f"llama.cpp-vocab/ggml-vocab-{name}.gguf.out").read_text(encoding="utf-8")
    texts = inputs.split(SEPARATOR)
    if texts[-1] == "":  # the file ends with a separator, which ends the last input
        texts.pop()
    ids = [[int(i) for i in line.split()] for line in outputs.splitlines()]
    assert len(texts) == len(ids), "llama.cpp's own rule: one output line per input"
    return list(zip(texts, ids))


def test_metadata_reads_as_gguf_reader_does():
    path = reference("llama.cpp-vocab/ggml-vocab-phi-3.gguf")
    fields = gguf.GGUFReader(path).fields.values()
    expected = {field.name: field.contents() for field in fields if not field.name.startswith("GGUF.")}
    assert gguf_metadata(path) == expected


@pytest.mark.parametrize("name", VOCABS)
def test_llama_cpp_vocabulary_cases(name, metadata, built, tmp_path):
    """Every case of llama.cpp's test, through the tokenizer.json the import saves, read
    back by the zoo's 'hf' tokenizer kind; decoding gives the text back."""
    saved = tmp_path / "tokenizer.json"
    saved.write_text(built(name).to_str(), encoding="utf-8")
    tokenizer = HFTokenizer(read_tokenizer_json(saved), len(metadata(name)["tokenizer.ggml.tokens"]))
    cases = llama_cpp_cases(name)
    assert len(cases) == 46
    wrong = [(text, tokenizer.encode(text), ids) for text, ids in cases if tokenizer.encode(text) != ids]
    assert wrong == []
    assert [text for text, ids in cases if tokenizer.decode(ids) != text] == []


def encode(tokenizer: Tokenizer, text: str, special: bool = False) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=special).ids


def test_special_tokens_are_whole_in_chat_text(built):
    """Control tokens match whole (chat templates write them as text) and decode back;
    llama.cpp's SentencePiece space goes before the text after each of them."""
    qwen2 = built("qwen2")
    chat = "<|im_start|>user\nHello<|im_end|>\n"
    ids = encode(qwen2, chat)
    assert ids == [151644, *encode(qwen2, "user\nHello"), 151645, *encode(qwen2, "\n")]
    assert qwen2.decode(ids, skip_special_tokens=False) == chat
    phi3 = built("phi-3")
    assert encode(phi3, "<|user|>Hi<|end|>") == [32010, *encode(phi3, "Hi"), 32007]
    assert encode(phi3, "Hi") == [6324]  # "▁Hi"
    # Unknown-typed tokens are special too in llama.cpp, user-defined ones are text matched whole.
    assert encode(phi3, "[PAD32011]") == [32011]
    assert encode(qwen2, "a[PAD151646]") == [64, 151646]


@pytest.mark.parametrize(
    ("name", "changes", "first"),
    [
        ("gpt-2", {}, None),  # byte-level BPE adds nothing by default
        ("llama-bpe", {}, 128000),  # but llama3's pre-tokenizer adds BOS
        ("llama-bpe", {"tokenizer.ggml.add_bos_token": False}, None),
        ("phi-3", {}, 1),  # SentencePiece adds BOS by default
        ("phi-3", {"tokenizer.ggml.add_bos_token": False}, None),
        ("gpt-2", {"tokenizer.ggml.add_bos_token": True}, 50256),
    ],
)
def test_bos_as_llama_cpp_adds_it(metadata, built, name, changes, first):
    tokenizer = tokenizer_from_gguf({**metadata(name), **changes}) if changes else built(name)
    plain = encode(tokenizer, "Hello world")
    assert encode(tokenizer, "Hello world", special=True) == ([first] if first is not None else []) + plain


def test_special_ids_from_the_file(metadata, built):
    qwen2 = built("qwen2")
    assert qwen2.padding["pad_id"] == 151643 and qwen2.padding["pad_token"] == "<|endoftext|>"
    phi3 = tokenizer_from_gguf({**metadata("phi-3"), "tokenizer.ggml.add_eos_token": True})
    assert encode(phi3, "Hi", special=True) == [1, 6324, 32000]
    assert phi3.get_vocab_size(with_added_tokens=True) == len(metadata("phi-3")["tokenizer.ggml.tokens"])


def test_add_space_prefix_off(metadata):
    """tokenizer.ggml.add_space_prefix = false: no ▁ before the text, and none taken off when decoding."""
    phi3 = tokenizer_from_gguf({**metadata("phi-3"), "tokenizer.ggml.add_space_prefix": False})
    assert encode(phi3, "Hi") == [18567]  # "Hi", no "▁Hi"
    assert phi3.decode(encode(phi3, " Hi")) == " Hi"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"tokenizer.ggml.model": "bert"}, "GGUF tokenizer model 'bert' is not supported; the zoo reads 'gpt2' (pre"),
        (
            {"tokenizer.ggml.pre": "falcon"},
            "GGUF pre-tokenizer 'falcon' is not supported; the zoo reads tokenizers 'gpt2'",
        ),
        ({"tokenizer.ggml.pre": None}, "GGUF pre-tokenizer None is not supported"),  # None: no such key
        ({"tokenizer.ggml.tokens": []}, "GGUF file has no tokenizer.ggml.tokens"),
        ({"tokenizer.ggml.tokens": ["a", 3]}, "GGUF tokenizer.ggml.tokens is not a list of strings"),
        ({"tokenizer.ggml.token_type": [1, 1]}, "GGUF tokenizer.ggml.token_type has 2 entries for 50,257 tokens"),
        ({"tokenizer.ggml.merges": ["Ġ t", "Ġa"]}, "GGUF merge 1 ('Ġa') is not two tokens"),
        ({"tokenizer.ggml.merges": ["Ġ \x1b[2J"]}, "GGUF tokenizer cannot be built: "),
        ({"tokenizer.ggml.add_bos_token": "no"}, "GGUF tokenizer.ggml.add_bos_token = 'no' is not true or false"),
        ({"tokenizer.ggml.bos_token_id": True}, "GGUF tokenizer.ggml.bos_token_id = True is not a token id"),
        (
            {"tokenizer.ggml.bos_token_id": 50257},
            "GGUF tokenizer.ggml.bos_token_id = 50257 is not a token id (0..50256)",
        ),
        (
            {"tokenizer.ggml.add_eos_token": True, "tokenizer.ggml.eos_token_id": None},
            "GGUF tokenizer.ggml.add_eos_token is true, but",
        ),
    ],
)
def test_refusals_are_one_line(metadata, changes, message):
    changed = {**metadata("gpt-2"), **changes}
    with pytest.raises(ZooError) as raised:
        tokenizer_from_gguf({key: value for key, value in changed.items() if value is not None})
    assert str(raised.value).startswith(message)
    assert "\n" not in str(raised.value) and "\x1b" not in str(raised.value)


def test_a_token_twice_is_refused(metadata):
    tokens = list(metadata("gpt-2")["tokenizer.ggml.tokens"])
    tokens[7] = tokens[3]
    with pytest.raises(ZooError, match=r"^GGUF vocabulary has '\$' twice \(ids 3 and 7\)$"):
        tokenizer_from_gguf({**metadata("gpt-2"), "tokenizer.ggml.tokens": tokens})


# Chat-like text with the special tokens of each vocabulary (and of none).
CHAT_TEXTS = [
    "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWie viel ist 12 × 34?<|im_end|>\n<|im_start|>assistant\n",
    "<|user|>\nHi there<|end|>\n<|assistant|>\n ok  <|end|>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "<|endoftext|>Hello<|endoftext|> world",
    "<s>[INST] x [/INST]</s>",
    "a[PAD32011]b[PAD151646]c",
    "<reponame>zoo<file_sep>a.py\n",
]

# llama.cpp also makes control tokens of those whose text names an end of generation,
# whatever their type; qwen2's vocabulary has "</s>" as an ordinary token, which the
# zoo, as transformers, cuts up.
LLAMA_CPP_ONLY = {("qwen2", "<s>[INST] x [/INST]</s>")}

NODE_TOKENIZE = """
import {getLlama} from "%s";
const [texts, ...models] = process.argv.slice(2);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const result = [];
for (const path of models) {
  const model = await llama.loadModel({modelPath: path, vocabOnly: true});
  result.push(JSON.parse(texts).map((text) => Array.from(model.tokenize(text, true))));
}
console.log(JSON.stringify(result));
process.exit(0);
"""


@pytest.mark.slow
def test_chat_text_as_llama_cpp_reads_it(tmp_path):
    """llama.cpp itself (node-llama-cpp's build), parsing special tokens as chat needs: the
    same ids for each vocabulary, Phi-3's whitespace after its special tokens dropped,
    SentencePiece's space after each special token."""
    package = reference("node-llama-cpp/node_modules/node-llama-cpp/dist/index.js")
    paths = [reference(f"llama.cpp-vocab/ggml-vocab-{name}.gguf") for name in VOCABS]
    paths.append(reference("SmolLM2-135M-Instruct.Q4_1.gguf"))
    script = tmp_path / "tokenize.mjs"
    script.write_text(NODE_TOKENIZE % package.as_uri(), encoding="utf-8")
    node = shutil.which("node")
    assert node, "node-llama-cpp's references need node"
    run = subprocess.run(
        [node, str(script), json.dumps(CHAT_TEXTS), *map(str, paths)], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-2000:]
    llama_cpp = json.loads(run.stdout.splitlines()[-1])
    differing = set()
    for path, expected in zip(paths, llama_cpp):
        tokenizer = tokenizer_from_gguf(gguf_metadata(path))
        for text, ids in zip(CHAT_TEXTS, expected):
            if encode(tokenizer, text) != ids:
                differing.add((path.stem.removeprefix("ggml-vocab-"), text))
    assert differing == LLAMA_CPP_ONLY


@pytest.mark.slow
@pytest.mark.smollm2
def test_smollm2_tokens_equal_transformers():
    """SmolLM2's file (pre-tokenizer 'smollm'): the ids transformers' tokenizer for the same
    file gives, on text in many scripts and on a chat rendered by the file's own template."""
    transformers = pytest.importorskip("transformers", reason="the interop extra is not installed")
    path = reference("SmolLM2-135M-Instruct.Q4_1.gguf")
    ours = tokenizer_from_gguf(gguf_metadata(path))
    theirs = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    text = (
        "The quick brown fox jumps over the lazy dog. It's 2024; we'll pay 1,234.56 € or $78.\n"
        "Ça coûte très cher, n'est-ce pas ? Grüße aus Köln: Äpfel, Öl und Übermaß, süß.\n"
        "我想在北京工作，天气很好。 Привет, как дела? Всё хорошо. 🦙🚀 😶‍🌫️ ✅\n"
        "def square(x):\n\treturn x ** 2  # 3.14159\n\n\n    indented    runs   of  spaces \r\n\t\t end  "
    )
    conversation = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Wie heißt die Hauptstadt von Frankreich?"},
        {"role": "assistant", "content": "Paris. 巴黎。"},
        {"role": "user", "content": "And 12 × 34?"},
    ]
    chat = theirs.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
    assert chat.count("<|im_start|>") == 5
    for sample in (text, chat):
        ids = encode(ours, sample)
        assert ids == theirs.encode(sample, add_special_tokens=False)
        assert encode(ours, sample, special=True) == theirs.encode(sample)
        assert ours.decode(ids, skip_special_tokens=False) == sample == theirs.decode(ids)
    assert encode(ours, chat)[:2] == [1, 9690]  # <|im_start|> whole, then "system"
