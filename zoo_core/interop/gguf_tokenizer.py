"""The tokenizer a GGUF file describes, rebuilt as a Hugging Face `tokenizers` tokenizer.

A GGUF file carries its tokenizer as metadata (``tokenizer.ggml.*``): the token
strings, each token's type, BPE merges or SentencePiece scores, the name of the
pre-tokenizer, and the special ids. llama.cpp (``src/llama-vocab.cpp``) is the
reference for what they mean; the facts this module relies on:

- ``tokenizer.ggml.model = "gpt2"`` is byte-level BPE: tokens are spelled in
  GPT-2's byte alphabet, merges are ranked by their position, and the text is
  first cut by the split patterns ``tokenizer.ggml.pre`` names (below). The
  llama3 pre-tokenizer also looks a whole piece up in the vocabulary before
  merging (its ``ignore_merges``) and adds BOS by default.
- ``tokenizer.ggml.model = "llama"`` is SentencePiece-style BPE: spaces become
  ``▁``, a space is put before the text and after every special token
  (``add_space_prefix``, on unless the file says otherwise), the adjacent pair
  whose concatenation is the best-scored token merges first, and a character no
  token covers falls back to its UTF-8 bytes, the tokens ``<0xNN>``. BOS is added
  by default. A `tokenizers` BPE merges the pair listed first, so every split of
  every token is listed, best-scored token first: the same choice at each step.
- Token types 3 (control) and 2 (unknown) are special: matched whole in the text
  before anything else (as llama.cpp does when it parses special tokens, which
  chat needs); type 4 (user-defined) are matched whole too, but are text. For
  Phi-3 (known by ``general.name``) the whitespace after them is dropped. llama.cpp
  also makes a control token of any whose text names an end of generation
  (``</s>``, ``<|im_end|>``, ...) whatever its type; the zoo, as transformers,
  goes by the type alone.
- ``add_bos_token`` / ``add_eos_token`` override the defaults above; they go into
  the post-processor, which runs only when special tokens are asked for.

The result's ``to_str()`` is a tokenizer.json for the zoo's ``hf`` tokenizer kind
(plugins/hf_tokenizer), which encodes without special tokens, as the chat
template writes its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from ..errors import ZooError, printable

# llama.cpp's token types (llama_token_type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED = 1, 2, 3, 4

SPACE = "\u2581"  # SentencePiece's visible space, ▁


@dataclass(frozen=True)
class PreTokenizer:
    """How llama.cpp cuts text before byte-level BPE, for one ``tokenizer.ggml.pre``."""

    splits: tuple[str, ...]  # patterns applied in turn, each match isolated
    gpt2_pattern: bool  # then GPT-2's own pattern (the ByteLevel pre-tokenizer's)
    ignore_merges: bool = False  # a piece that is a token stays whole
    add_bos: bool = False


# Llama 3's and Qwen2's split patterns (their tokenizer.json's; llama.cpp's
# adaptation spells the case-insensitive contractions out and is otherwise the same).
LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# The names llama.cpp gives each of these pre-tokenizers.
PRE_TOKENIZERS = {
    "gpt-2": PreTokenizer(splits=(), gpt2_pattern=True),
    "llama-bpe": PreTokenizer(splits=(LLAMA3,), gpt2_pattern=False, ignore_merges=True, add_bos=True),
    "llama3": PreTokenizer(splits=(LLAMA3,), gpt2_pattern=False, ignore_merges=True, add_bos=True),
    "llama-v3": PreTokenizer(splits=(LLAMA3,), gpt2_pattern=False, ignore_merges=True, add_bos=True),
    "qwen2": PreTokenizer(splits=(QWEN2,), gpt2_pattern=False),
    "deepseek-r1-qwen": PreTokenizer(splits=(QWEN2,), gpt2_pattern=False),
    # SmolLM's: every digit on its own, then GPT-2's pattern.
    "smollm": PreTokenizer(splits=(r"\p{N}",), gpt2_pattern=True),
}

SUPPORTED = f"'gpt2' (pre-tokenizer {', '.join(repr(name) for name in PRE_TOKENIZERS)}) and 'llama' (SentencePiece)"


def tokenizer_from_gguf(metadata: Mapping[str, Any]) -> Tokenizer:
    """The tokenizer of a GGUF file from its metadata (key -> plain value, as
    ``gguf.GGUFReader``'s ``field.contents()`` gives them), or one line saying why not."""
    kind = metadata.get("tokenizer.ggml.model")
    tokens = _tokens(metadata)
    types = _numbers(metadata, "tokenizer.ggml.token_type", len(tokens), int) or [NORMAL] * len(tokens)
    if kind == "gpt2":
        pre_name = metadata.get("tokenizer.ggml.pre")
        pre = PRE_TOKENIZERS.get(pre_name) if isinstance(pre_name, str) else None
        if pre is None:
            raise ZooError(
                f"GGUF pre-tokenizer {printable(repr(pre_name))} is not supported; the zoo reads tokenizers {SUPPORTED}"
            )
        tokenizer = _byte_level(metadata, tokens, pre)
        add_bos = pre.add_bos
    elif kind == "llama":
        tokenizer = _sentencepiece(metadata, tokens)
        add_bos = True
    else:
        raise ZooError(f"GGUF tokenizer model {printable(repr(kind))} is not supported; the zoo reads {SUPPORTED}")
    # llama.cpp drops the whitespace after Phi-3's added tokens but three, knowing the model by its name.
    name = str(metadata.get("general.name", "")).lower()
    phi3 = "phi-3" in name or "phi3" in name

    def added(index: int, special: bool) -> AddedToken:
        rstrip = phi3 and tokens[index] not in ("<unk>", "<s>", "<|endoftext|>")
        return AddedToken(tokens[index], special=special, normalized=False, rstrip=rstrip)

    tokenizer.add_special_tokens([added(i, True) for i, t in enumerate(types) if t in (CONTROL, UNKNOWN)])
    tokenizer.add_tokens([added(i, False) for i, t in enumerate(types) if t == USER_DEFINED])
    _special_ids(tokenizer, metadata, tokens, add_bos)
    return tokenizer


def _byte_level(metadata: Mapping[str, Any], tokens: list[str], pre: PreTokenizer) -> Tokenizer:
    merges = []
    for index, merge in enumerate(_strings(metadata, "tokenizer.ggml.merges")):
        cut = merge.find(" ", 1)  # llama.cpp's cut: a merge's left part may itself be a space
        if cut < 0:
            raise ZooError(f"GGUF merge {index} ({printable(repr(merge))}) is not two tokens")
        merges.append((merge[:cut], merge[cut + 1 :]))
    vocabulary = _vocabulary(tokens)
    model = _built(lambda: models.BPE(vocabulary, merges, ignore_merges=pre.ignore_merges))
    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(pattern), behavior="isolated") for pattern in pre.splits]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=pre.gpt2_pattern)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _sentencepiece(metadata: Mapping[str, Any], tokens: list[str]) -> Tokenizer:
    scores = _numbers(metadata, "tokenizer.ggml.scores", len(tokens), float) or [0.0] * len(tokens)
    vocabulary = _vocabulary(tokens)
    cut_lengths = _Lengths(tokens)
    # Every way to make a token from two tokens, the best-scored token first
    # (a stable sort: equal scores keep the file's order).
    merges = [
        (token[:cut], token[cut:], index)
        for index, token in enumerate(tokens)
        for cut in _cuts(token, cut_lengths)
        if token[:cut] in vocabulary and token[cut:] in vocabulary
    ]
    merges.sort(key=lambda merge: -scores[merge[2]])
    unknown = _token_id(metadata, "tokenizer.ggml.unknown_token_id", len(tokens), default=0)
    model = _built(
        lambda: models.BPE(
            vocabulary,
            [(left, right) for left, right, _ in merges],
            unk_token=tokens[unknown] if unknown is not None else None,
            byte_fallback=True,
        )
    )
    tokenizer = Tokenizer(model)
    prefix = _flag(metadata, "tokenizer.ggml.add_space_prefix", True)
    replace = normalizers.Replace(" ", SPACE)
    # The normaliser runs on each stretch of text between special tokens: llama.cpp
    # puts its prefix space at the start and after every special token, the same places.
    tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend(SPACE), replace]) if prefix else replace
    steps = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    tokenizer.decoder = decoders.Sequence(steps + [decoders.Strip(" ", 1, 0)] if prefix else steps)
    return tokenizer


class _Lengths:
    """The distinct lengths of a vocabulary's tokens, to find where a token can be cut in two tokens."""

    def __init__(self, tokens: list[str]):
        self.sorted = sorted({len(token) for token in tokens})
        self.present = set(self.sorted)


def _cuts(token: str, lengths: _Lengths):
    """Where ``token`` might be cut into two tokens. A short token: everywhere.
    A long one: only where both parts have the length of some token, so a
    400,000-character token costs a pass over the few lengths that exist rather
    than 400,000 cuts of 400,000 characters. Either way a token's cost is at most
    the number of distinct lengths times its own: linear in the vocabulary's bytes
    (a vocabulary of D distinct lengths holds at least D²/2 characters)."""
    size = len(token)
    if size - 1 <= len(lengths.sorted):
        return range(1, size)
    return [cut for cut in lengths.sorted if cut < size and size - cut in lengths.present]


def _special_ids(tokenizer: Tokenizer, metadata: Mapping[str, Any], tokens: list[str], add_bos: bool) -> None:
    """BOS and EOS where the file asks for them (with special tokens); the padding id."""
    sentencepiece = metadata.get("tokenizer.ggml.model") == "llama"
    n = len(tokens)
    bos = _token_id(metadata, "tokenizer.ggml.bos_token_id", n, default=1 if sentencepiece else None)
    eos = _token_id(metadata, "tokenizer.ggml.eos_token_id", n, default=2 if sentencepiece else None)
    pad = _token_id(metadata, "tokenizer.ggml.padding_token_id", n, default=None)
    add_bos = _flag(metadata, "tokenizer.ggml.add_bos_token", add_bos)
    add_eos = _flag(metadata, "tokenizer.ggml.add_eos_token", False)
    around = []
    for wanted, name, token in ((add_bos, "bos", bos), (add_eos, "eos", eos)):
        if not wanted:
            continue
        if token is None:
            raise ZooError(
                f"GGUF tokenizer.ggml.add_{name}_token is true, but tokenizer.ggml.{name}_token_id is not set"
            )
        around.append((tokens[token], token))
    if around:
        first = [around[0][0]] if add_bos else []
        last = [around[-1][0]] if add_eos else []
        tokenizer.post_processor = processors.TemplateProcessing(
            single=first + ["$A"] + last,
            pair=first + ["$A"] + last + first + ["$B:1"] + last,
            special_tokens=sorted(set(around)),
        )
    if pad is not None:
        tokenizer.enable_padding(pad_id=pad, pad_token=tokens[pad])


def _tokens(metadata: Mapping[str, Any]) -> list[str]:
    tokens = _strings(metadata, "tokenizer.ggml.tokens")
    if not tokens:
        raise ZooError("GGUF file has no tokenizer.ggml.tokens: it carries no tokenizer")
    # llama.cpp names an empty token after its id, so that every token has a text.
    return [token or f"[EMPTY_{index}]" for index, token in enumerate(tokens)]


def _vocabulary(tokens: list[str]) -> dict[str, int]:
    vocabulary: dict[str, int] = {}
    for index, token in enumerate(tokens):
        if vocabulary.setdefault(token, index) != index:
            raise ZooError(f"GGUF vocabulary has {printable(repr(token))} twice (ids {vocabulary[token]} and {index})")
    return vocabulary


def _strings(metadata: Mapping[str, Any], key: str) -> list[str]:
    value = metadata.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ZooError(f"GGUF {key} is not a list of strings")
    return value


def _numbers(metadata: Mapping[str, Any], key: str, count: int, kind: type) -> list:
    """The per-token list ``key`` ([] when absent), at least one entry per token."""
    value = metadata.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, (int, float)) for item in value):
        raise ZooError(f"GGUF {key} is not a list of numbers")
    if value and len(value) < count:
        raise ZooError(f"GGUF {key} has {len(value):,} entries for {count:,} tokens")
    return [kind(item) for item in value[:count]]


def _flag(metadata: Mapping[str, Any], key: str, default: bool) -> bool:
    value = metadata.get(key, default)
    if not isinstance(value, bool):
        raise ZooError(f"GGUF {key} = {printable(repr(value))} is not true or false")
    return value


def _token_id(metadata: Mapping[str, Any], key: str, count: int, default: int | None) -> int | None:
    """The id at ``key``; when absent, llama.cpp's default for the model (if the vocabulary has it)."""
    if key not in metadata:
        return default if default is not None and default < count else None
    value = metadata[key]
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < count:
        raise ZooError(f"GGUF {key} = {printable(repr(value))} is not a token id (0..{count - 1})")
    return value


def _built(make):
    """A `tokenizers` model, or one line naming why the file's vocabulary cannot make one."""
    try:
        return make()
    except Exception as exc:  # tokenizers raises bare Exceptions for a vocabulary it refuses
        raise ZooError(f"GGUF tokenizer cannot be built: {printable(' '.join(str(exc).split()))}") from None
