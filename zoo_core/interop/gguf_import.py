"""`zoo import gguf`: a llama.cpp GGUF file (Llama's family: llama, qwen2) as a zoo variant.

The file is first walked by gguf_files (every count, length and offset
bounded), then read by llama.cpp's own Python reader (`gguf.GGUFReader`).
Its metadata becomes a transformers-style configuration and its tensors,
dequantised to float32 by the package's own `gguf.quants.dequantize`, get
transformers' names (the package's own name map), so the card and the zoo
tensors come from the very `Layout` that `zoo import hf` uses (hf_layouts).

llama.cpp's converter (convert_hf_to_gguf.py, ``LlamaModel.permute``)
reorders each head's query and key rows for ``llama`` files: the rows of
transformers' rotate_half layout, seen as (2, D/2), are stored transposed,
(D/2, 2), so row 2i holds transformers' row i and row 2i + 1 its row i + D/2
(transformers' GGUF loader undoes it the same way, ``_reverse_permute_weights``).
That is exactly the zoo's own adjacent-pairs order; the import undoes it into
transformers' order and lets the Layout make the zoo's. ``qwen2`` files are
stored unpermuted (llama.cpp runs them with NeoX-style RoPE).
"""

from __future__ import annotations

import math
import re
import tempfile
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Mapping

import gguf
import numpy as np
import torch
from tokenizers import Tokenizer

from ..catalogue.cards import ChatSpec, ModelCard, Recipe
from ..errors import ZooError, printable
from ..evaluation.bits import summed_nll
from ..storage.checkpoints import sha256_file
from .gguf_files import GGUFHeader, check_gguf_header
from .gguf_tokenizer import tokenizer_from_gguf
from .hf_layouts import LLAMA, QWEN2, Heads, Layout, reorder_heads
from .imports import (
    BUILTIN_CORPUS,
    check_card_fits_tensors,
    check_name_is_free,
    check_tokenizer,
    imported_card,
    publish_import,
    tokenizer_for_vocabulary,
)

# general.architecture -> the family's layout, and whether its Q/K rows were permuted.
FAMILIES: dict[str, tuple[Layout, bool]] = {"llama": (LLAMA, True), "qwen2": (QWEN2, False)}

# The fixed text whose perplexity the import records (metrics.paragraph_*):
# plain English prose, written for the zoo, that any English model should read well.
REFERENCE_PARAGRAPH = (
    "The library stood at the corner of two quiet streets, and every morning the same old man "
    "unlocked its heavy wooden door. He swept the steps, opened the windows to let in the air, and "
    "set out the newspapers on a long table near the entrance. Children came in the afternoon to "
    "borrow books about animals, ships and distant countries, while their parents read in the soft "
    "chairs by the fire. When the evening came, he turned off the lamps one by one, listened to the "
    "silence for a moment, and walked home along the river."
)


def import_gguf(source: Path, name: str | None = None, license: str | None = None, replace: bool = False):
    """Convert a GGUF file of Llama's family into a variant in the user's
    catalogue (over the user's own variant of that name only with ``replace``):
    float32 weights, its tokenizer as tokenizer.json ('hf'), its chat template,
    licence, name and sha256 in the card, and its perplexity on `REFERENCE_PARAGRAPH`."""
    header = check_gguf_header(source)
    reader = _reader(source)
    metadata = _metadata(source, reader)
    architecture = _text(source, metadata, gguf.Keys.General.ARCHITECTURE)
    if architecture not in FAMILIES:
        raise ZooError(
            f"{source}: architecture '{printable(architecture)}'; the GGUF architectures that import are "
            f"{', '.join(FAMILIES)} (other files: convert with transformers and use zoo import hf)"
        )
    layout, permuted = FAMILIES[architecture]
    name = name if name is not None else _variant_name(source, metadata)
    check_name_is_free(name, replace)
    hf_config = _hf_config(source, metadata, architecture)
    settings = layout.settings(hf_config)
    heads = Heads(hf_config.num_attention_heads, hf_config.num_key_value_heads, hf_config.head_dim, hf_config.head_dim)
    tensors = _hf_tensors(source, reader, architecture, settings["n_layer"], heads if permuted else None)
    renamed = layout.to_zoo(tensors, settings["n_layer"], heads)
    if "lm_head.weight" not in renamed:  # llama.cpp writes no output.weight for tied embeddings
        settings["tie_embeddings"] = True
    if settings["tie_embeddings"]:
        renamed["lm_head.weight"] = renamed["token_embedding.weight"]
    vocab = renamed["token_embedding.weight"].shape[0]
    with tempfile.TemporaryDirectory() as scratch:
        tokenizer_file = Path(scratch) / "tokenizer.json"
        tokenizer = _tokenizer(source, metadata)
        tokenizer_file.write_text(tokenizer.to_str(), encoding="utf-8")
        spec, tokenizer_path = tokenizer_for_vocabulary(vocab, tokenizer_file)
        check_tokenizer(spec, tokenizer_path)
        tied = settings["tie_embeddings"]
        card = imported_card(
            name,
            settings,
            hf_config.max_position_embeddings,
            spec,
            sum(t.numel() for key, t in renamed.items() if not (tied and key == "lm_head.weight")),
            source,
            sha256_file(source, "GGUF file"),
            f"GGUF {architecture}",
            Recipe(data=str(BUILTIN_CORPUS), notes=f"trained elsewhere; imported from a GGUF file ({_types(header)})"),
            license=license or _optional_text(metadata, gguf.Keys.General.LICENSE) or "unspecified",
            architecture="transformer",
        )
        card = card.model_copy(update={"chat": _chat(source, metadata), "tags": [*card.tags, _main_type(header)]})
        network = check_card_fits_tensors(source, card, renamed)
        network.load_state_dict(renamed)
        card = _with_paragraph_metrics(card, network, tokenizer)
        registry = publish_import(card, renamed, tokenizer_path)
    return card, registry


def _reader(source: Path) -> gguf.GGUFReader:
    try:
        return gguf.GGUFReader(source)
    except (ValueError, KeyError, IndexError, OverflowError, UnicodeDecodeError) as exc:
        raise ZooError(f"{source}: gguf cannot read it: {printable(' '.join(str(exc).split()))}") from None


def _metadata(source: Path, reader: gguf.GGUFReader) -> dict[str, Any]:
    """Every key as plain Python values (what tokenizer_from_gguf takes)."""
    try:
        return {field.name: field.contents() for field in reader.fields.values()}
    except UnicodeDecodeError:
        raise ZooError(f"{source}: a metadata string is not UTF-8") from None


def _optional_text(metadata: Mapping[str, Any], key: str) -> str | None:
    value = metadata.get(key)
    return value if isinstance(value, str) and value.strip() else None


def _text(source: Path, metadata: Mapping[str, Any], key: str) -> str:
    value = _optional_text(metadata, key)
    if value is None:
        raise ZooError(f"{source}: no {key} in the file's metadata")
    return value


def _whole(source: Path, metadata: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = metadata.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ZooError(f"{source}: {key} is {printable(repr(value))}, not a whole number above 0")
    return value


def _positive(source: Path, metadata: Mapping[str, Any], key: str, default: float | None = None) -> float:
    value = metadata.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ZooError(f"{source}: {key} is {printable(repr(value))}, not a finite number above 0")
    if float(np.float32(value)) == value:
        # GGUF keeps these in float32: 1e-5 reads 9.99999974e-06. The shortest decimal that is the
        # same float32 (what the model computes with) is what the card and transformers' config say.
        return float(np.format_float_scientific(np.float32(value), unique=True))
    return float(value)


def _variant_name(source: Path, metadata: Mapping[str, Any]) -> str:
    """general.name as a variant name: lower case, runs of anything else one '-'."""
    title = _optional_text(metadata, gguf.Keys.General.NAME)
    name = re.sub(r"[^a-z0-9.]+", "-", (title or "").lower()).strip("-.")
    if not name:
        raise ZooError(f"{source}: the file has no general.name; give the variant's name with --name NAME")
    return name


def _hf_config(source: Path, metadata: Mapping[str, Any], architecture: str) -> SimpleNamespace:
    """The file's hyper-parameters as the transformers config fields the Layout reads."""

    def key(template: str) -> str:
        return template.format(arch=architecture)

    width = _whole(source, metadata, key(gguf.Keys.LLM.EMBEDDING_LENGTH))
    n_head = _whole(source, metadata, key(gguf.Keys.Attention.HEAD_COUNT))
    n_kv_head = _whole(source, metadata, key(gguf.Keys.Attention.HEAD_COUNT_KV), n_head)
    head_size = _whole(source, metadata, key(gguf.Keys.Attention.KEY_LENGTH), width // n_head or 1)
    if n_head % n_kv_head:
        raise ZooError(f"{source}: {n_head} query heads do not share {n_kv_head} key/value heads evenly")
    if _whole(source, metadata, key(gguf.Keys.Attention.VALUE_LENGTH), head_size) != head_size:
        raise ZooError(f"{source}: keys and values of different widths; the zoo's heads have one head size")
    if _whole(source, metadata, key(gguf.Keys.Rope.DIMENSION_COUNT), head_size) != head_size:
        raise ZooError(f"{source}: RoPE rotates part of each head; Llama's family rotates all of it")
    rope: dict[str, Any] = {"rope_theta": _positive(source, metadata, key(gguf.Keys.Rope.FREQ_BASE), 10000.0)}
    scaling = metadata.get(key(gguf.Keys.Rope.SCALING_TYPE), "none")
    if scaling == "linear":
        rope.update(rope_type="linear", factor=_positive(source, metadata, key(gguf.Keys.Rope.SCALING_FACTOR)))
    elif scaling != "none":
        raise ZooError(f"{source}: RoPE scaling '{printable(str(scaling))}' (none and linear import)")
    return SimpleNamespace(
        hidden_size=width,
        num_hidden_layers=_whole(source, metadata, key(gguf.Keys.LLM.BLOCK_COUNT)),
        num_attention_heads=n_head,
        num_key_value_heads=n_kv_head,
        head_dim=head_size,
        intermediate_size=_whole(source, metadata, key(gguf.Keys.LLM.FEED_FORWARD_LENGTH)),
        rms_norm_eps=_positive(source, metadata, key(gguf.Keys.Attention.LAYERNORM_RMS_EPS)),
        hidden_act="silu",
        tie_word_embeddings=False,  # decided by whether the file has output.weight
        rope_parameters=rope,
        max_position_embeddings=_whole(source, metadata, key(gguf.Keys.LLM.CONTEXT_LENGTH)),
    )


def _hf_tensors(
    source: Path, reader: gguf.GGUFReader, architecture: str, n_layer: int, permuted: Heads | None
) -> dict[str, torch.Tensor]:
    """The file's tensors in float32 under transformers' names, query and key
    rows back in transformers' order when llama.cpp permuted them."""
    arch = next(a for a, text in gguf.MODEL_ARCH_NAMES.items() if text == architecture)
    names = gguf.get_tensor_name_map(arch, n_layer)
    hf_names = {}
    for known in FAMILIES[architecture][0].known_names(n_layer):
        gguf_name = names.get_name(known, try_suffixes=(".weight", ".bias"))
        if gguf_name is not None:
            hf_names[gguf_name] = known
    tensors = {}
    for tensor in reader.tensors:
        hf_name = hf_names.get(tensor.name, "")
        if not hf_name:
            raise ZooError(
                f"{source}: tensor '{printable(tensor.name)}' is not in {architecture}'s {n_layer}-layer layout"
            )
        shape = tuple(int(d) for d in reversed(tensor.shape))  # ggml lists the row length first
        if len(shape) > 2:
            raise ZooError(f"{source}: tensor '{printable(tensor.name)}' has {len(shape)} dimensions (at most 2)")
        # A copy: the reader's arrays are read-only views of the memory-mapped file.
        values = np.array(gguf.quants.dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)
        weight = torch.from_numpy(values.reshape(shape))
        if permuted is not None and re.search(r"\.self_attn\.[qk]_proj\.", hf_name):
            count = permuted.n_head if ".q_proj." in hf_name else permuted.n_kv_head
            if shape[0] != count * permuted.head_size:
                raise ZooError(
                    f"{source}: tensor '{printable(tensor.name)}' has {shape[0]} rows; "
                    f"{count} heads of {permuted.head_size} need {count * permuted.head_size}"
                )
            weight = reorder_heads(weight, count, permuted, to_pairs=False)
        tensors[hf_name] = weight
    # Every weight but the head, which llama.cpp leaves out when it is the embedding.
    for hf_name, gguf_name in sorted((hf, name) for name, hf in hf_names.items()):
        if hf_name.endswith(".weight") and hf_name != "lm_head.weight" and hf_name not in tensors:
            raise ZooError(f"{source}: no tensor '{gguf_name}'; {architecture}'s {n_layer}-layer layout has one")
    return tensors


def _tokenizer(source: Path, metadata: Mapping[str, Any]) -> Tokenizer:
    try:
        return tokenizer_from_gguf(metadata)
    except ZooError as exc:
        raise ZooError(f"{source}: {exc}") from None


def _token_text(source: Path, metadata: Mapping[str, Any], key: str) -> str | None:
    index = metadata.get(key)
    if index is None:
        return None
    tokens = metadata.get(gguf.Keys.Tokenizer.LIST) or []
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(tokens):
        raise ZooError(f"{source}: {key} is {printable(repr(index))}, not a token of the vocabulary")
    return tokens[index]


def _chat(source: Path, metadata: Mapping[str, Any]) -> ChatSpec | None:
    """The chat template with its special tokens' texts; the end-of-sequence
    and end-of-turn tokens both end the assistant's turn."""
    template = _optional_text(metadata, gguf.Keys.Tokenizer.CHAT_TEMPLATE)
    if template is None:
        return None
    eos = _token_text(source, metadata, gguf.Keys.Tokenizer.EOS_ID)
    ends = [_token_text(source, metadata, key) for key in (gguf.Keys.Tokenizer.EOS_ID, gguf.Keys.Tokenizer.EOT_ID)]
    return ChatSpec(
        template=template,
        bos_token=_token_text(source, metadata, gguf.Keys.Tokenizer.BOS_ID),
        eos_token=eos,
        stop=list(dict.fromkeys(text for text in ends if text)),
    )


def _types(header: GGUFHeader) -> str:
    """The tensor types, most used first: what was quantised how."""
    counts = Counter(tensor.type.name for tensor in header.tensors)
    return ", ".join(f"{count} {kind}" for kind, count in counts.most_common()) + " tensors, dequantised to float32"


def _main_type(header: GGUFHeader) -> str:
    """The type holding most of the weights, as a tag: 'gguf-q4_1'."""
    values: Counter[str] = Counter()
    for tensor in header.tensors:
        values[tensor.type.name] += math.prod(tensor.dims)
    return f"gguf-{values.most_common(1)[0][0].lower()}" if values else "gguf"


def _with_paragraph_metrics(card: ModelCard, network: torch.nn.Module, tokenizer: Tokenizer) -> ModelCard:
    """The card with the perplexity and bits per byte of `REFERENCE_PARAGRAPH`,
    read as llama.cpp reads a text: after the special tokens the file says to
    put first (`tokenizer.ggml.add_bos_token`), each token predicted from
    those before it; without such a token, the first is only history."""
    text = tokenizer.encode(REFERENCE_PARAGRAPH, add_special_tokens=False).ids
    framed = tokenizer.encode(REFERENCE_PARAGRAPH).ids
    first = framed.index(text[0]) if text[0] in framed else 0
    ids, scored = framed[:first] + text, REFERENCE_PARAGRAPH  # an end-of-sequence token after it is not scored
    if first == 0:
        first, scored = 1, REFERENCE_PARAGRAPH[len(tokenizer.decode(text[:1])) :]
    nats = summed_nll(network, ids, first, card.context_length)
    metrics = card.metrics.model_copy(
        update={
            "paragraph_perplexity": round(math.exp(nats / (len(ids) - first)), 3),
            "paragraph_bits_per_byte": round(nats / math.log(2) / len(scored.encode("utf-8")), 4),
        }
    )
    return card.model_copy(update={"metrics": metrics})
