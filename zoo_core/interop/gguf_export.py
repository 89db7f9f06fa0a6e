"""GGUF: `zoo export --format gguf`, a file llama.cpp (and Ollama, LM Studio) runs.

Written with llama.cpp's own Python writer (the `gguf` package), in the
architecture of the variant's family (its record, ``zoo_core.plugin_api.families``,
gives the architecture's metadata keys and the tensors under llama.cpp's names
and in its row orders). Vectors (norm scales, biases) stay F32 as llama.cpp's
converter keeps them; in Q8_0 a matrix whose rows are not whole 32-value blocks
goes out F16, as the converter does. A tied vocabulary head is written once (no
``output.weight``: llama.cpp then reads the embedding).

The tokenizer goes in as llama.cpp's byte-level BPE ("gpt2" model), with the
same ids: an 'hf' tokenizer.json's vocabulary, merges and special tokens; the
zoo's characters as single-character tokens with no merges, each spelled in
GPT-2's byte alphabet, so llama.cpp reads the same text as the same ids.
What llama.cpp has no key or graph for is refused, naming the setting.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
import json
import re
from pathlib import Path

import gguf
import numpy as np
import torch

from ..catalogue.cards import first_difference
from ..errors import ZooError
from ..plugin_api import families
from .gguf_import import read_back
from .gguf_tokenizer import SPACE
from .hf import _require_transformers, logit_difference, quiet_transformers, verification_ids
from .hf_tokenizers import backend_tokenizer_for, bytes_to_unicode

# --gguf-type: what the matrices are written as.
GGUF_TYPES = ("f32", "f16", "q8_0")
# The pre-tokenizers of a tokenizer.json that llama.cpp has a name for.
BYTE_LEVEL = {"type": "ByteLevel", "use_regex": True}
# How far the logits of the file (read by transformers' GGUF loader) may be from
# the zoo's: F32 is the same arithmetic (`logit_difference`); F16 and Q8_0 round every
# weight, so theirs is a fraction of the largest logit (measured: 0.2% for F16
# and 2.7% for Q8_0 on SmolLM2-135M); a misplaced tensor or row order is far outside.
RELATIVE_TOLERANCE = {"f16": 0.02, "q8_0": 0.1}


def gguf_family(model) -> families.FamilyRecord:
    """The family the variant is written in, or a one-line refusal naming what llama.cpp cannot take."""
    writers = tuple(dict.fromkeys(r.gguf_architecture for r in families.records() if r.gguf_architecture))
    try:
        record = families.for_variant(model, "GGUF")
        reason = record.gguf_refusal(model, writers)
    except (KeyError, AttributeError) as exc:  # a plugin's block with other tensor names
        raise ZooError(
            f"cannot export to GGUF: '{model.name}' is not laid out like the zoo's transformer (no {exc})"
        ) from None
    except ZooError as exc:
        raise ZooError(f"cannot export to GGUF: {exc}") from None
    if reason is None and record.gguf_architecture is None:
        reason = f"'{model.name}' is in {record.hf_class}'s layout; the GGUF export writes {', '.join(writers)}"
    if reason is not None:
        raise ZooError(f"cannot export to GGUF: {reason}")
    return record


def export_gguf(model, out: Path, tensor_type: str = "f16") -> tuple[list[Path], dict]:
    """Write ``out/NAME.gguf``; check it against the zoo (transformers' GGUF
    loader reads it back, its logits within the type's tolerance of the zoo's) before
    returning."""
    if tensor_type not in GGUF_TYPES:
        raise ZooError(f"--gguf-type {tensor_type!r}; choose one of {', '.join(GGUF_TYPES)}")
    record = gguf_family(model)
    exported = record.to_gguf(model)
    path = out / f"{model.name}.gguf"
    writer = _writer(path, exported.architecture)
    writer.add_name(model.name)
    if model.card.license and model.card.license != "unspecified":
        writer.add_license(model.card.license)
    for key, value, kind in exported.metadata:
        writer.add_key_value(key, value, gguf.GGUFValueType[kind])
    _tokenizer(writer, model, model.network.lm_head.weight.shape[0])
    file_type = {"f32": "ALL_F32", "f16": "MOSTLY_F16", "q8_0": "MOSTLY_Q8_0"}[tensor_type]
    writer.add_file_type(gguf.LlamaFileType[file_type])
    if tensor_type == "q8_0":
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for name, tensor in exported.tensors.items():
        data, kind = _typed(tensor.numpy(), tensor_type)
        writer.add_tensor(name, data, raw_dtype=kind)
    out.mkdir(parents=True, exist_ok=True)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    checks = _check_logits(model, path, tensor_type, exported.architecture, record)
    return [path], checks


def _writer(path: Path, architecture: str):
    """The package's writer, but for an empty array: GGUF has them, and llama.cpp
    needs the merges key even when a vocabulary has no merges, but the writer
    reads an array's element type off its first element and refuses an empty one."""

    class Writer(gguf.GGUFWriter):
        def _pack_val(self, val, vtype, add_vtype, sub_type=None):
            if vtype == gguf.GGUFValueType.ARRAY and sub_type is not None and len(val) == 0:
                prefix = self._pack("I", vtype) if add_vtype else b""
                return prefix + self._pack("I", sub_type) + self._pack("Q", 0)
            return super()._pack_val(val, vtype, add_vtype, sub_type)

    return Writer(path, architecture)


def _typed(array: np.ndarray, tensor_type: str):
    """The array as written (F32, F16 or Q8_0 blocks) and its GGML type."""
    kinds = gguf.GGMLQuantizationType
    if array.ndim == 1 or tensor_type == "f32":
        return array.astype(np.float32), kinds.F32
    block = gguf.GGML_QUANT_SIZES[kinds.Q8_0][0]
    if tensor_type == "q8_0" and array.shape[-1] % block == 0:
        return gguf.quants.quantize(array, kinds.Q8_0), kinds.Q8_0
    return array.astype(np.float16), kinds.F16


# --- tokenizer -------------------------------------------------------------------


def _tokenizer(writer, model, vocab_size: int) -> None:
    """llama.cpp's byte-level BPE with the zoo tokenizer's ids, and the card's chat template."""
    backend = backend_tokenizer_for(model.tokenizer)
    described = json.loads(backend.to_str())
    kind = described["model"]["type"]
    token_type = gguf.TokenType
    if kind == "BPE" and _sentencepiece_style(described):
        _sentencepiece(writer, model, described, vocab_size)
        return
    if kind == "WordLevel" and hasattr(model.tokenizer, "characters"):
        alphabet = bytes_to_unicode()
        tokens = ["".join(alphabet[b] for b in c.encode("utf-8")) for c in model.tokenizer.characters]
        merges: list[str] = []
        types = [token_type.NORMAL] * len(tokens)
        # Characters: with no merges, every piece of any split is its characters; GPT-2's
        # split, which llama.cpp and the zoo's own GGUF import both read.
        pre = "gpt-2"
    elif kind == "BPE" and hasattr(model.tokenizer, "backend"):
        pre = _pre_tokenizer(described.get("pre_tokenizer"), model.name)
        vocabulary = described["model"]["vocab"]
        tokens = [""] * len(vocabulary)
        for token, i in vocabulary.items():
            tokens[i] = token
        types = [token_type.NORMAL] * len(tokens)
        for added in described.get("added_tokens", []):
            i = added["id"]
            if i >= len(tokens):
                tokens += [""] * (i + 1 - len(tokens))
                types += [token_type.UNUSED] * (i + 1 - len(types))
            tokens[i] = added["content"]
            types[i] = token_type.CONTROL if added["special"] else token_type.USER_DEFINED
        merges = [" ".join(pair) if isinstance(pair, list) else pair for pair in described["model"]["merges"]]
    else:
        raise ZooError(
            f"cannot export to GGUF: '{model.name}': its {model.card.tokenizer.kind} tokenizer has no "
            "llama.cpp form here (characters and byte-level BPE tokenizer.json go)"
        )
    if len(tokens) > vocab_size:
        raise ZooError(f"cannot export to GGUF: '{model.name}': {len(tokens)} tokens for a {vocab_size}-row head")
    # A vocabulary padded past the tokenizer's: ids no text encodes to, as llama.cpp's converter names them.
    for i in range(len(tokens), vocab_size):
        tokens.append(f"[PAD{i}]")
        types.append(token_type.UNUSED)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    # An empty list is still written: llama.cpp refuses a BPE vocabulary without the key.
    writer.add_key_value(gguf.Keys.Tokenizer.MERGES, merges, gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.STRING)
    # The card's BOS (an HF Llama 3's <|begin_of_text|>): llama.cpp, and the GGUF import,
    # put it before a text as the zoo does (zoo_core.inference.bos); without one, nothing is added.
    bos_id = model.card.tokenizer.bos_id
    writer.add_add_bos_token(bos_id is not None)
    if bos_id is not None:
        writer.add_bos_token_id(bos_id)
    chat = model.card.chat
    if chat is not None:
        writer.add_chat_template(chat.template)
        ids = {token: i for i, token in enumerate(tokens)}
        named = [(chat.eos_token, writer.add_eos_token_id)]
        if bos_id is None:  # else written above: a key goes in once
            named.append((chat.bos_token, writer.add_bos_token_id))
        for text, add in named:
            if text is not None and text in ids:
                add(ids[text])


def _sentencepiece_style(described: dict) -> bool:
    """A tokenizer.json the way the GGUF import writes a SentencePiece vocabulary: BPE
    with byte fallback over text whose spaces become ▁, no pre-tokenizer."""
    normalizer = described.get("normalizer") or {}
    steps = normalizer.get("normalizers", [normalizer]) if normalizer.get("type") == "Sequence" else [normalizer]
    replaces_spaces = any(
        step.get("type") == "Replace" and step.get("pattern") == {"String": " "} and step.get("content") == SPACE
        for step in steps
    )
    return bool(described["model"].get("byte_fallback")) and replaces_spaces and described.get("pre_tokenizer") is None


def _sentencepiece(writer, model, described: dict, vocab_size: int) -> None:
    """llama.cpp's SentencePiece vocabulary ("llama"): each token's score ranks the merge
    that makes it (llama.cpp merges the best-scored pair first, as the BPE model's merge
    order does); bytes, the unknown token and special tokens typed as llama.cpp types them."""
    token_type = gguf.TokenType
    vocabulary = described["model"]["vocab"]
    tokens = [""] * max(vocab_size, len(vocabulary))
    for token, i in vocabulary.items():
        tokens[i] = token
    types = [token_type.NORMAL if token else token_type.UNUSED for token in tokens]
    for i, token in enumerate(tokens):
        if re.fullmatch(r"<0x[0-9A-F]{2}>", token):
            types[i] = token_type.BYTE
    scores = [0.0] * len(tokens)
    ranked: set[str] = set()
    for rank, pair in enumerate(described["model"]["merges"]):
        merged = "".join(pair) if isinstance(pair, list) else pair.replace(" ", "", 1)
        if merged not in ranked and merged in vocabulary:
            ranked.add(merged)
            scores[vocabulary[merged]] = -float(rank + 1)
    for added in described.get("added_tokens", []):
        tokens[added["id"]] = added["content"]
        types[added["id"]] = token_type.CONTROL if added["special"] else token_type.USER_DEFINED
    unknown = described["model"].get("unk_token")
    if unknown in vocabulary:
        types[vocabulary[unknown]] = token_type.UNKNOWN
        writer.add_unk_token_id(vocabulary[unknown])
    for i in range(len(vocabulary), len(tokens)):
        tokens[i] = tokens[i] or f"[PAD{i}]"
    if len(tokens) > vocab_size:
        raise ZooError(f"cannot export to GGUF: '{model.name}': {len(tokens)} tokens for a {vocab_size}-row head")
    normalizer = described.get("normalizer") or {}
    steps = normalizer.get("normalizers", [normalizer]) if normalizer.get("type") == "Sequence" else [normalizer]
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_add_space_prefix(any(step.get("type") == "Prepend" for step in steps))
    # What the tokenizer.json puts first when asked for its special tokens (Gemma: <bos>).
    template = (described.get("post_processor") or {}).get("single") or []
    first = template[0].get("SpecialToken", {}).get("id") if template else None
    writer.add_add_bos_token(first in vocabulary)
    if first in vocabulary:
        writer.add_bos_token_id(vocabulary[first])
    chat = model.card.chat
    if chat is not None:
        writer.add_chat_template(chat.template)
        if chat.eos_token in vocabulary:
            writer.add_eos_token_id(vocabulary[chat.eos_token])


def _pre_tokenizer(pre: dict | None, name: str) -> str:
    """llama.cpp's name for a tokenizer.json's pre-tokenizer: GPT-2's byte-level
    split ("gpt-2"), or each digit split off first ("smollm", SmolLM's)."""
    if pre is None:
        steps: list[dict] = []
    elif pre.get("type") == "Sequence":
        steps = pre.get("pretokenizers") or []
    else:
        steps = [pre]
    if steps and all(steps[-1].get(key) == value for key, value in BYTE_LEVEL.items()):
        if len(steps) == 1:
            return "gpt-2"
        if len(steps) == 2 and _single_digits(steps[0]):
            return "smollm"
    shown = json.dumps(pre)[:80] if pre is not None else "none"
    raise ZooError(
        f"cannot export to GGUF: '{name}': pre-tokenizer {shown} has no llama.cpp name here "
        "(GPT-2's byte-level split, alone or after single digits, goes)"
    )


def _single_digits(step: dict) -> bool:
    """Each digit on its own: tokenizers' Digits, or an isolated split on \\p{N} (as the GGUF import writes it)."""
    if step.get("type") == "Digits":
        return bool(step.get("individual_digits"))
    return (
        step.get("type") == "Split"
        and step.get("pattern") == {"Regex": r"\p{N}"}
        and step.get("behavior") == "Isolated"
    )


# --- the check -----------------------------------------------------------------


def _check_logits(model, path: Path, tensor_type: str, architecture: str, record) -> dict:
    """The file read back with the gguf package alone (what `[gguf]` installs), as
    `zoo import gguf` reads it: its configuration must be the card's and its
    weights, in a copy of the network, must give the zoo's logits within the
    type's tolerance. With transformers and accelerate installed, transformers'
    own GGUF loader (its own dequantising, its own undoing of the Q/K permutation)
    checks the file too: an error made the same way both ways cancels out in the
    zoo's round trip, and not in another reader. That loader does not read every
    architecture (olmo2, granite, smollm3) and reads some wrong (Mixtral's llama with
    experts, whose experts it does not build; qwen2moe, whose expert widths it leaves
    at their defaults: records with ``transformers_reads_gguf = False``); the tests run
    those files in llama.cpp itself."""
    ids, _ = verification_ids(model)
    settings, context_length, tensors = read_back(path)
    expected = {key: value for key, value in model.card.config.items() if key in settings}
    difference_in = first_difference({key: settings[key] for key in expected}, expected)
    if difference_in is not None or context_length != model.card.context_length:
        where = difference_in[0] if difference_in else "context_length"
        raise ZooError(
            f"the GGUF file's metadata reads back with another {where} than the card's; nothing usable was written"
        )
    network = copy.deepcopy(model.network)
    network.load_state_dict(tensors)
    checks = {"logit_tokens": len(ids), "max_logit_difference": _difference(model, network.eval(), ids, tensor_type)}
    if _transformers_reads(architecture, record):
        transformers = _require_transformers()
        quiet_transformers()
        # Its GGUF loader draws a tqdm bar of its own, which transformers' progress-bar switch does not reach.
        with contextlib.redirect_stderr(io.StringIO()):
            loaded = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name).eval()
        checks["transformers_max_logit_difference"] = _difference(
            model, lambda x: (loaded(x).logits, None), ids, tensor_type
        )
        checks["max_logit_difference"] = max(
            checks["max_logit_difference"], checks["transformers_max_logit_difference"]
        )
    return checks


def _transformers_reads(architecture: str, record) -> bool:
    """Whether transformers' GGUF loader is installed and reads ``architecture`` as the record writes it."""
    if not all(importlib.util.find_spec(name) is not None for name in ("transformers", "accelerate")):
        return False
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    return architecture in GGUF_SUPPORTED_ARCHITECTURES and getattr(record, "transformers_reads_gguf", True)


def _difference(model, network, ids: list[int], tensor_type: str) -> float:
    """The largest logit difference from the zoo's, refused above the type's tolerance."""
    with torch.no_grad():
        theirs, _ = network(torch.tensor([ids]))
        ours, _ = model.network(torch.tensor([ids]))
    return _compared(theirs, ours, tensor_type, ids)


def _compared(theirs: torch.Tensor, ours: torch.Tensor, tensor_type: str, ids: list[int]) -> float:
    difference, tolerance = logit_difference(theirs, ours)
    largest = float(ours.abs().max())
    if tensor_type != "f32":
        tolerance = RELATIVE_TOLERANCE[tensor_type] * largest
    if difference > tolerance:
        raise ZooError(
            f"the GGUF file's logits differ from the zoo's by {difference:.2e} (> {tolerance:.2e} for "
            f"{tensor_type}, the largest logit {largest:.2f}); nothing usable was written"
        )
    return difference
