"""Hugging Face transformers: `zoo export --format hf` and `zoo import hf`.

What maps (see docs/interop.md): RoPE variants go to and come from the family
their settings describe (Llama, Mistral, Qwen2, Qwen3, GPT-NeoX: one `Layout`
each in hf_layouts). The rest is GPT-2: a ``transformer`` or ``gpt`` variant
with pre-norm LayerNorm blocks and a position encoding that adds to the
residual stream (learned, sinusoidal — its table is written out as GPT-2's
learned one — or none, a table of zeros), ReLU or GELU. Everything else is
refused with the reason: post-norm blocks, RMSNorm without RoPE, a head bias
with RoPE (no RoPE family has one), ALiBi-like score biases, bigram, the puzzle.
A folder may also be named by its Hub repository id, read from the Hugging
Face cache offline (hf_cache).

The zoo's vocabulary head has a bias; GPT-2's has none. The export carries it
exactly with one extra attention head's worth of residual channels that always
hold the mean of the real channels: LayerNorm then sees the same mean and (with
the epsilon and weights rescaled) the same normalised values, and the final
LayerNorm's bias turns one extra channel into a constant 1, whose head weights
are the zoo's bias. The extra head's queries, keys and values are zero, so it
adds nothing. Variants without a head bias (nanoGPT's layout) map one to one.
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import torch

from ..catalogue.cards import Recipe
from ..catalogue.limits import limits
from ..corpus.batches import encodable_text, split_text
from ..errors import ZooError, printable
from ..loading.texts import variant_text
from ..plugin_api.components import PositionEncodingBase
from ..plugin_api.manager import get_plugins
from ..storage.checkpoints import MAX_HEADER_BYTES, sha256_file
from ..storage.files import describe_os_error, open_regular, read_limited
from .hf_cache import cached_snapshot, looks_like_repo_id
from .hf_card import card_fields_from_hub, read_hub_card, write_hub_card
from .hf_chat import folder_chat
from .hf_layouts import BUFFERS, LAYOUTS, Heads, Layout, layout_for
from .hf_shards import read_tensors, weight_files, weights_in
from .hf_tokenizers import bytes_to_unicode, hf_tokenizer_for
from .imports import (
    BUILTIN_CORPUS,
    check_card_fits_tensors,
    check_name_is_free,
    check_tokenizer,
    imported_card,
    publish_import,
    tokenizer_for_vocabulary,
)

LOGIT_TOLERANCE = 1e-4
# The zoo's activation names and transformers' for the same function.
HF_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu-tanh": "gelu_new"}
ZOO_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu-tanh", "gelu_pytorch_tanh": "gelu-tanh"}
# Transformer layout settings (docs/cards.md) the GPT-2 and TransformerLens mappings do not carry.
UNMAPPED_LAYOUT = (
    "n_kv_head",
    "head_size",
    "attention_bias",
    "residual",
    "sliding_window",
    "embedding_scale",
    "rope_base",
    "rope_scaling",
    "rotary_fraction",
)


def unmapped_layout(config: dict) -> str | None:
    """The first layout setting ``config`` sets that no exporter maps yet, or None."""
    return next((key for key in UNMAPPED_LAYOUT if key in config), None)


def transformer_layout(card) -> dict:
    """The card's config with what a transformer card may leave unset filled in as
    the transformer builds it (pre-norm blocks, LayerNorm, learned positions):
    what the exporters check and map."""
    return {"block": "pre-norm", "norm": "layernorm", "positions": "learned", **card.config}


def family_layout(model) -> dict:
    """`transformer_layout` with what the built network shows filled in: the
    head counts, widths and epsilon, and which linear layers carry biases."""
    network = model.network
    config = transformer_layout(model.card)
    attention = network.blocks[0].attention
    state = network.state_dict()
    head_size = attention.proj.weight.shape[1] // config["n_head"]
    has_bias = {name for name in state if name.startswith("blocks.0.") and name.endswith(".bias")}
    qkv_bias = "blocks.0.attention.qkv.bias" in has_bias
    eps = network.final_norm.eps
    return {
        "residual": "sequential",
        **config,
        "d_model": network.token_embedding.weight.shape[1],
        "n_layer": len(network.blocks),
        "head_size": head_size,
        "n_kv_head": (attention.qkv.weight.shape[0] // head_size - config["n_head"]) // 2,
        "d_ff": network.blocks[0].feed_forward.down.weight.shape[1],
        "norm_eps": float(torch.finfo(torch.float32).eps if eps is None else eps),
        "mlp": config.get("mlp", "relu"),
        "layer_bias": "blocks.0.feed_forward.down.bias" in has_bias,
        "attention_bias": ("all" if "blocks.0.attention.proj.bias" in has_bias else "qkv") if qkv_bias else "none",
        "bias": network.lm_head.bias is not None,
        "tie_embeddings": network.lm_head.weight is network.token_embedding.weight,
    }


def _require_transformers():
    """The transformers module, or one line saying how to install it."""
    try:
        import transformers
    except ImportError:
        raise ZooError("Hugging Face export and import need transformers: pip install 'zoo-lm[interop]'") from None
    return transformers


def gpt2_refusal(model) -> str | None:
    """Why the variant has no exact GPT-2 form, or None when it has one."""
    card, network = model.card, model.network
    config = transformer_layout(card)
    name = card.name
    if card.architecture not in ("transformer", "gpt"):
        return f"'{name}' is a {card.architecture} model; only transformer and gpt variants map onto GPT-2"
    if config["block"] != "pre-norm":
        return f"'{name}' has {config['block']} blocks; GPT-2 normalises before each sublayer, and the post-norm decoders in transformers (XLM, BERT) add an embedding LayerNorm the zoo lacks"
    if config["norm"] != "layernorm":
        return (
            f"'{name}' uses {config['norm']} without RoPE; GPT-2's layout has LayerNorm, Llama's has RMSNorm with RoPE"
        )
    encoding = type(network.positions)
    if encoding.rotate is not PositionEncodingBase.rotate or encoding.bias is not PositionEncodingBase.bias:
        return f"'{name}': position encoding '{config['positions']}' acts inside attention; GPT-2 only adds positions to the input"
    if config.get("mlp", "relu") not in HF_ACTIVATIONS:
        return f"'{name}': mlp '{config['mlp']}' has no GPT-2 counterpart"
    if config.get("qk_norm"):
        return f"'{name}' normalises each head's queries and keys (qk_norm); GPT-2's attention has no such step"
    if unmapped_layout(config):
        return f"'{name}' sets {unmapped_layout(config)}, which the GPT-2 layout has no place for"
    if config.get("logit_softcap") is not None:
        return f"'{name}' soft-caps its logits (logit_softcap); GPT-2's head has no such step"
    return None


def gpt2_state(network, context_length: int, activation: str):
    """GPT-2 tensors and config fields computing the zoo network's logits."""
    zoo = {name: tensor.detach().to(torch.float64) for name, tensor in network.state_dict().items()}
    d_model = zoo["token_embedding.weight"].shape[1]
    n_layer = len(network.blocks)
    n_head = network.blocks[0].attention.n_head
    head = d_model // n_head
    head_bias = zoo.get("lm_head.bias")
    tied = network.lm_head.weight is network.token_embedding.weight
    extra = head if head_bias is not None else 0  # the mean channels, one head wide
    width = d_model + extra
    eps = network.final_norm.eps

    def widen(rows):  # (..., C) residual vectors -> (..., C + extra), extras holding the mean
        return torch.cat([rows, rows.mean(-1, keepdim=True).expand(*rows.shape[:-1], extra)], -1)

    def norm(prefix, module_name, constant_channel=False):
        weight = zoo[f"{module_name}.weight"] * math.sqrt(d_model / width)
        bias = zoo.get(f"{module_name}.bias", torch.zeros(d_model))
        out_weight = torch.cat([weight, torch.zeros(extra, dtype=weight.dtype)])
        out_bias = torch.cat([bias, torch.zeros(extra, dtype=bias.dtype)])
        if constant_channel and extra:
            out_bias[d_model] = 1.0
        return {f"{prefix}.weight": out_weight, f"{prefix}.bias": out_bias}

    def into_residual(weight_in_out, bias):  # Conv1D (in, C) writing to the stream -> (in, C + extra)
        return widen(weight_in_out), widen(bias)

    with torch.no_grad():
        positions = network.positions.embed(torch.zeros(1, context_length, d_model), torch.arange(context_length))[0]
    state = {
        "transformer.wte.weight": widen(zoo["token_embedding.weight"]),
        "transformer.wpe.weight": widen(positions.to(torch.float64)),
    }
    for i in range(n_layer):
        ours, theirs = f"blocks.{i}", f"transformer.h.{i}"
        state.update(norm(f"{theirs}.ln_1", f"{ours}.norm1"))
        state.update(norm(f"{theirs}.ln_2", f"{ours}.norm2"))
        qkv = zoo[f"{ours}.attention.qkv.weight"]  # (3C, C): queries, keys, values, heads side by side
        qkv_bias = zoo.get(f"{ours}.attention.qkv.bias", torch.zeros(3 * d_model))
        c_attn = torch.zeros(width, 3 * width, dtype=torch.float64)
        c_attn_bias = torch.zeros(3 * width, dtype=torch.float64)
        for part in range(3):  # the extra head's queries, keys and values stay zero
            c_attn[:d_model, part * width : part * width + d_model] = qkv[part * d_model : (part + 1) * d_model].T
            c_attn_bias[part * width : part * width + d_model] = qkv_bias[part * d_model : (part + 1) * d_model]
        state[f"{theirs}.attn.c_attn.weight"], state[f"{theirs}.attn.c_attn.bias"] = c_attn, c_attn_bias
        proj = torch.zeros(width, d_model, dtype=torch.float64)
        proj[:d_model] = zoo[f"{ours}.attention.proj.weight"].T
        state[f"{theirs}.attn.c_proj.weight"], state[f"{theirs}.attn.c_proj.bias"] = into_residual(
            proj, zoo.get(f"{ours}.attention.proj.bias", torch.zeros(d_model))
        )
        up = zoo[f"{ours}.feed_forward.up.weight"]  # (d_ff, C)
        d_ff = up.shape[0]
        state[f"{theirs}.mlp.c_fc.weight"] = torch.cat([up.T, torch.zeros(extra, d_ff, dtype=up.dtype)])
        state[f"{theirs}.mlp.c_fc.bias"] = zoo.get(f"{ours}.feed_forward.up.bias", torch.zeros(d_ff))
        state[f"{theirs}.mlp.c_proj.weight"], state[f"{theirs}.mlp.c_proj.bias"] = into_residual(
            zoo[f"{ours}.feed_forward.down.weight"].T, zoo.get(f"{ours}.feed_forward.down.bias", torch.zeros(d_model))
        )
    state.update(norm("transformer.ln_f", "final_norm", constant_channel=True))
    head_weight = torch.zeros(zoo["lm_head.weight"].shape[0], width, dtype=torch.float64)
    head_weight[:, :d_model] = zoo["lm_head.weight"]
    if head_bias is not None:
        head_weight[:, d_model] = head_bias
    state["lm_head.weight"] = head_weight
    fields = dict(
        vocab_size=head_weight.shape[0],
        n_positions=context_length,
        n_embd=width,
        n_layer=n_layer,
        n_head=n_head + (1 if extra else 0),
        n_inner=d_ff,
        activation_function=HF_ACTIVATIONS[activation],
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        layer_norm_epsilon=eps * d_model / width,
        tie_word_embeddings=tied and not extra,
        bos_token_id=None,
        eos_token_id=None,
    )
    return {name: tensor.to(torch.float32) for name, tensor in state.items()}, fields


def verification_ids(model, count: int = 64) -> tuple[list[int], str]:
    """The first ``count`` tokens of the validation split (cut to the context), and
    that split's text, as the card trained on it: without the characters its
    vocabulary lacks when the recipe dropped them (``skip_unknown``)."""
    recipe = model.card.recipe
    text = variant_text(model.variant).text
    if recipe.skip_unknown:
        text = encodable_text(text, model.tokenizer)
    validation = split_text(text, recipe.train_fraction)[1]
    return checked_encoding(model, validation[: 4 * count])[: min(count, model.card.context_length)], validation


def checked_encoding(model, text: str) -> list[int]:
    """The zoo's ids of the text an export checks itself on; a character the
    vocabulary lacks is refused with what the card says about it."""
    try:
        return model.tokenizer.encode(text)
    except ZooError as exc:
        raise ZooError(
            f"{exc}; the export checks itself on the validation text of '{model.name}' ({model.card.recipe.data}), "
            f"which its card says was trained on every character (recipe.skip_unknown is not set): "
            f"retrain it with --skip-unknown, or check that its recipe names the text it was trained on"
        ) from None


# The id generate pads a batch of prompts of unequal length with: any id does,
# since the attention mask hides padded positions, and the zoo's vocabularies
# have no padding token of their own. 0 is what the TransformerLens export pads with too.
PAD_TOKEN_ID = 0


def generation_config(context_length: int):
    """generation_config.json: ``generate`` stops at the context window (max_length:
    GPT-2's learned positions end there, and one token more is an IndexError). No
    eos_token_id: the zoo's vocabularies (characters, byte-level BPE) have no
    end-of-text token, their models were trained on one running text, and naming an
    ordinary token (a newline) as the end would cut every sample at its first line."""
    from transformers import GenerationConfig

    return GenerationConfig(max_length=context_length, pad_token_id=PAD_TOKEN_ID)


def quiet_transformers() -> None:
    """No download-style progress bars for files on this disk."""
    from transformers.utils import logging

    logging.disable_progress_bar()
    logging.set_verbosity_error()


def _not_laid_out(model, exc) -> ZooError:
    return ZooError(
        f"cannot export to Hugging Face: '{model.name}' is not laid out like the zoo's transformer (no {exc})"
    )


def gpt2_model(model):
    """The `GPT2LMHeadModel` computing the variant's logits, or a one-line refusal."""
    from transformers import GPT2Config, GPT2LMHeadModel

    refusal = gpt2_refusal(model)
    if refusal:
        raise ZooError(f"cannot export to Hugging Face: {refusal}")
    try:
        state, fields = gpt2_state(model.network, model.card.context_length, model.card.config.get("mlp", "relu"))
    except (KeyError, AttributeError) as exc:  # a plugin's block with other tensor names
        raise _not_laid_out(model, exc) from None
    hf_model = GPT2LMHeadModel(GPT2Config(**fields))
    missing, unexpected = hf_model.load_state_dict(state, strict=False)
    if [m for m in missing if not (fields["tie_word_embeddings"] and m == "lm_head.weight")] or unexpected:
        raise ZooError(f"GPT-2 layout mismatch: missing {missing}, unexpected {unexpected}")
    return hf_model


def family_model(model):
    """The Llama, Mistral, Qwen2, Qwen3 or GPT-NeoX model (see hf_layouts)
    computing a RoPE variant's logits, or a one-line refusal."""
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = family_layout(model)
    except (KeyError, AttributeError) as exc:
        raise _not_laid_out(model, exc) from None
    layout, reason = layout_for(config)
    if layout is None:
        raise ZooError(f"cannot export to Hugging Face: '{model.name}': {reason}")
    fields = {
        **layout.fields(config),
        "vocab_size": model.network.lm_head.weight.shape[0],
        "max_position_embeddings": model.card.context_length,
        "architectures": [layout.architecture],
        "bos_token_id": None,
        "eos_token_id": None,
        "pad_token_id": None,
    }
    hf_model = AutoModelForCausalLM.from_config(AutoConfig.for_model(layout.model_type, **fields))
    ours = {name: tensor.detach().to(torch.float32) for name, tensor in model.network.state_dict().items()}
    state = layout.from_zoo(ours, config["n_layer"], _heads(config))
    # Biases the family always has and the variant has not (NeoX's feed-forward, a bias-free LayerNorm) are zeros.
    for name, tensor in hf_model.state_dict().items():
        if name.endswith(".bias") and name not in state:
            state[name] = torch.zeros_like(tensor)
    missing, unexpected = hf_model.load_state_dict(state, strict=False)
    if [m for m in missing if not (config["tie_embeddings"] and m == "lm_head.weight")] or unexpected:
        raise ZooError(f"{layout.architecture} layout mismatch: missing {missing}, unexpected {unexpected}")
    return hf_model


def _heads(config: dict) -> Heads:
    head_size = config.get("head_size") or config["d_model"] // config["n_head"]
    rotary = round(config.get("rotary_fraction", 1.0) * head_size)
    return Heads(config["n_head"], config.get("n_kv_head") or config["n_head"], head_size, rotary)


def export_hf(model, out: Path) -> tuple[list[Path], dict]:
    """Write ``out`` for `AutoModelForCausalLM` and `AutoTokenizer`; check both
    against the zoo (logits to 1e-4, ids on the whole validation text) before
    returning. RoPE variants go out in the family their settings describe
    (hf_layouts), the rest as GPT-2."""
    _require_transformers()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quiet_transformers()
    rope = model.card.architecture in ("transformer", "gpt") and transformer_layout(model.card)["positions"] == "rope"
    hf_model = family_model(model) if rope else gpt2_model(model)
    hf_model.generation_config = generation_config(model.card.context_length)
    out.mkdir(parents=True, exist_ok=True)
    hf_model.save_pretrained(out)  # config.json, model.safetensors, generation_config.json
    tokenizer = hf_tokenizer_for(model.tokenizer, model.card.context_length)
    tokenizer.save_pretrained(out)
    (out / "zoo_card.json").write_text(
        json.dumps(model.card.model_dump(mode="json", exclude_none=True), indent=2) + "\n"
    )

    ids, validation = verification_ids(model)
    loaded = AutoModelForCausalLM.from_pretrained(out).eval()
    with torch.no_grad():
        theirs = loaded(torch.tensor([ids])).logits
        ours, _ = model.network(torch.tensor([ids]))
    difference = float((theirs - ours).abs().max())
    if difference > LOGIT_TOLERANCE:
        raise ZooError(
            f"exported logits differ from the zoo's by {difference:.2e} (> {LOGIT_TOLERANCE}); nothing usable was written"
        )
    loaded_tokenizer = AutoTokenizer.from_pretrained(out)
    expected = checked_encoding(model, validation)
    if loaded_tokenizer(validation, add_special_tokens=False, verbose=False)["input_ids"] != expected:
        raise ZooError("the exported tokenizer's ids differ from the zoo's on the validation text")

    write_hub_card(model.card, out)  # last: a README describes only a folder that passed the checks
    checks = {"max_logit_difference": difference, "logit_tokens": len(ids), "tokenizer_ids_checked": len(expected)}
    return sorted(path for path in out.iterdir() if path.is_file()), checks


# --- import -------------------------------------------------------------------


def with_hub_card(card, folder: Path, license_given: bool):
    """``card`` with what the folder's README.md front matter says (see
    `zoo_core.interop.hf_card.card_fields_from_hub`): its license unless one was
    given, its tags beside the import's, its description, its dataset when that
    is registered here (what `zoo eval` then scores on), and notes for the rest.
    Metrics a README reports go to the notes, never to ``metrics``: the zoo
    records only what it measured."""
    found = read_hub_card(folder)
    if found is None:
        return card
    fields = card_fields_from_hub(*found)
    update: dict = {}
    if "license" in fields and not license_given:
        update["license"] = fields["license"]
    if "tags" in fields:
        update["tags"] = list(dict.fromkeys([*card.tags, *fields["tags"]]))
    if "description" in fields:
        update["description"] = fields["description"]
    recipe_update: dict = {}
    notes = list(fields.get("notes", []))
    for dataset in fields.get("datasets", []):
        if dataset in get_plugins().datasets:
            recipe_update["data"] = dataset
            break
    else:
        if fields.get("datasets"):
            notes.append(f"trained on {', '.join(fields['datasets'])} (not registered here)")
    if notes:
        recipe_update["notes"] = "; ".join([card.recipe.notes, *notes])
    if recipe_update:
        update["recipe"] = card.recipe.model_copy(update=recipe_update)
    if "base_model" in fields:
        update["lineage"] = f"{card.lineage}; fine-tuned from {', '.join(fields['base_model'])} (Hugging Face Hub)"
    return type(card).model_validate({**card.model_dump(), **update}) if update else card


MAX_CONFIG_BYTES = 1024 * 1024


def _folder_config(folder: Path) -> dict:
    """config.json, of a model type that imports."""
    path = folder / "config.json"
    try:
        config = json.loads(read_limited(path, MAX_CONFIG_BYTES, "config"))
    except FileNotFoundError:
        raise ZooError(f"{folder}: no config.json; not a transformers model folder") from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise ZooError(f"{path}: not JSON") from None
    kind = config.get("model_type") if isinstance(config, dict) else None
    if kind != "gpt2" and kind not in LAYOUTS:
        raise ZooError(f"{path}: model_type {kind!r}; the layouts that import are gpt2, {', '.join(LAYOUTS)}")
    return config


def _check_gpt2_config(path: Path, config: dict) -> None:
    problems = []
    if not config.get("scale_attn_weights", True) or config.get("scale_attn_by_inverse_layer_idx", False):
        problems.append("attention scores not scaled by 1/sqrt(head size)")
    if config.get("activation_function", "gelu_new") not in ZOO_ACTIVATIONS:
        problems.append(f"activation {config['activation_function']!r}")
    if config.get("add_cross_attention"):
        problems.append("cross-attention")
    if problems:
        raise ZooError(f"{path}: cannot import: {'; '.join(problems)}")


def _folder_tokenizer(folder: Path, vocab_size: int, scratch: Path) -> Path | None:
    """The folder's tokenizer.json in the zoo's form, when it has one: single
    characters (word level), or byte-level BPE whose first 256 ids are the bytes
    in order (what `zoo export` writes); otherwise the tokenizer.json itself,
    which the 'hf' tokenizer runs. None when the folder has no tokenizer."""
    path = folder / "tokenizer.json"
    if not path.exists():
        return None
    try:
        model = json.loads(read_limited(path, 64 * 1024 * 1024, "tokenizer"))["model"]
        vocabulary = model["vocab"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, RecursionError):
        raise ZooError(f"{path}: not a tokenizers JSON file") from None
    by_id = sorted(vocabulary.items(), key=lambda item: item[1]) if isinstance(vocabulary, dict) else []
    if [i for _, i in by_id] != list(range(len(by_id))) or len(by_id) != vocab_size:
        return path
    if model.get("type") == "WordLevel" and all(len(token) == 1 for token, _ in by_id):
        target = scratch / "characters.json"
        target.write_text(
            json.dumps({"characters": [token for token, _ in by_id]}, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        return target
    if model.get("type") == "BPE":
        to_byte = {c: b for b, c in bytes_to_unicode().items()}
        try:
            tokens = [bytes(to_byte[c] for c in token) for token, _ in by_id]
        except KeyError:
            tokens = []
        if tokens[:256] == [bytes([b]) for b in range(256)]:  # tiktoken's ranks format: rank = id
            target = scratch / "ranks.tiktoken"
            target.write_text(
                "".join(f"{base64.b64encode(t).decode('ascii')} {i}\n" for i, t in enumerate(tokens)), encoding="ascii"
            )
            return target
    return path


def _check_weights_file(weights: Path) -> None:
    """Regular files (a FIFO is refused without waiting on it), the file or its
    shards together no larger than the parameter limit allows (8 bytes a value,
    and the largest header): they are refused before any of them is read."""
    size = 0
    for path in weight_files(weights):
        try:
            with open_regular(path, "weights file") as handle:
                size += os.fstat(handle.fileno()).st_size
        except OSError as exc:
            raise ZooError(f"{path}: cannot read: {describe_os_error(exc)}") from None
    largest = 8 * limits()[0] + 8 + MAX_HEADER_BYTES
    if size > largest:
        raise ZooError(
            f"{weights}: {size:,} bytes, more than weights within the parameter limit can take ({largest:,})"
        )


def import_hf(
    source: Path, name: str, tokenizer_file: Path | None = None, license: str | None = None, replace: bool = False
):
    """Convert a transformers folder (config.json + model.safetensors or its shards; GPT-2 or
    a family of hf_layouts) to a zoo variant in the user's catalogue (over the
    user's own variant of that name only with ``replace``). ``source`` is the
    folder, or a repository id (ORG/NAME) found in the Hugging Face cache
    offline (hf_cache). The folder's README.md (a Hub model card), when it has
    one, gives the license (unless ``license`` is given), tags, description and
    dataset (`hub_card_fields`)."""
    folder = cached_snapshot(str(source)) if looks_like_repo_id(str(source)) else source
    if not folder.is_dir():
        raise ZooError(f"{folder}: not a folder (zoo import hf reads a transformers model folder or ORG/NAME)")
    check_name_is_free(name, replace)
    config = _folder_config(folder)
    weights = weights_in(folder)
    if weights is None:
        raise ZooError(
            f"{folder}: no model.safetensors nor model.safetensors.index.json "
            "(pickled pytorch_model.bin is not read: it could run code)"
        )
    _check_weights_file(weights)
    if config["model_type"] == "gpt2":
        architecture, origin, (zoo_config, context_length, renamed) = (
            "gpt",
            "GPT-2",
            _gpt2_import(folder, config, weights),
        )
    else:
        layout = LAYOUTS[config["model_type"]]
        architecture, origin = "transformer", layout.architecture.removesuffix("ForCausalLM")
        zoo_config, context_length, renamed = _family_import(folder, layout, weights)
    tied = zoo_config["tie_embeddings"]
    vocab = renamed["token_embedding.weight"].shape[0]
    with tempfile.TemporaryDirectory() as scratch:
        if tokenizer_file is None:
            tokenizer_file = _folder_tokenizer(folder, vocab, Path(scratch))
        spec, tokenizer_path = tokenizer_for_vocabulary(vocab, tokenizer_file)
        check_tokenizer(spec, tokenizer_path)
        parameters = sum(t.numel() for key, t in renamed.items() if not (tied and key == "lm_head.weight"))
        card = imported_card(
            name,
            zoo_config,
            context_length,
            spec,
            parameters,
            weights,
            sha256_file(weights, "weights file"),
            f"transformers {origin}",
            Recipe(data=str(BUILTIN_CORPUS), notes="trained elsewhere; imported from a transformers folder"),
            license=license or "unspecified",
            architecture=architecture,
        )
        card = with_hub_card(card, folder, license_given=license is not None)
        card = card.model_copy(update={"chat": folder_chat(folder)})
        check_card_fits_tensors(weights, card, renamed)
        registry = publish_import(card, renamed, tokenizer_path)
    return card, registry


def _gpt2_import(folder: Path, config: dict, weights: Path) -> tuple[dict, int, dict]:
    """A GPT-2 folder's zoo ``gpt`` config, context length and tensors."""
    _check_gpt2_config(folder / "config.json", config)
    sizes = _gpt2_sizes(folder, config)
    tensors = _gpt2_tensors(weights, sizes["n_layer"])
    tied = bool(config.get("tie_word_embeddings", True)) or "lm_head.weight" not in tensors
    renamed = _renamed_gpt2_tensors(weights, tensors, sizes["n_layer"], tied)
    return _zoo_gpt_config(folder, config, sizes, tied), sizes["n_positions"], renamed


def _family_import(folder: Path, layout: Layout, weights: Path) -> tuple[dict, int, dict]:
    """A family's zoo ``transformer`` config (read through transformers' own
    config class, which knows the older field names), context length and tensors."""
    _require_transformers()
    from transformers import AutoConfig

    quiet_transformers()
    try:
        hf_config = AutoConfig.from_pretrained(folder, local_files_only=True)
    except (ValueError, TypeError, KeyError, OSError) as exc:
        raise ZooError(
            f"{folder / 'config.json'}: transformers cannot read it: {' '.join(str(exc).split())[:200]}"
        ) from None
    settings = layout.settings(hf_config)
    n_layer = settings["n_layer"]
    tensors = {
        key: value for key, value in layout.from_file(read_tensors(weights)).items() if not key.endswith(BUFFERS)
    }
    unknown = sorted(set(tensors) - layout.known_names(n_layer))
    if unknown:
        raise ZooError(
            f"{weights}: tensor {printable(unknown[0])!r} is not in {layout.architecture}'s {n_layer}-layer layout"
        )
    # bfloat16 or float16 weights widen exactly; the zoo computes in float32.
    tensors = {key: value.float() if value.is_floating_point() else value for key, value in tensors.items()}
    renamed = layout.to_zoo(tensors, n_layer, _heads(settings))
    if settings["tie_embeddings"] or "lm_head.weight" not in renamed:
        settings["tie_embeddings"] = True
        renamed["lm_head.weight"] = renamed["token_embedding.weight"]
    return settings, int(hf_config.max_position_embeddings), renamed


def _gpt2_sizes(folder: Path, config: dict[str, Any]) -> dict[str, int]:
    """config.json's sizes, each a whole number."""
    sizes = {}
    for key in ("n_embd", "n_layer", "n_head", "n_positions"):
        value = config.get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ZooError(f"{folder / 'config.json'}: {key} is {printable(repr(value))[:60]}, not a whole number")
        sizes[key] = value
    return sizes


def _gpt2_tensors(weights: Path, n_layer: int) -> dict[str, Any]:
    """The file's tensors (without transformers' ``transformer.`` prefix), holding
    the layers config.json says and GPT-2's embeddings."""

    tensors = {key.removeprefix("transformer."): value for key, value in read_tensors(weights).items()}
    layers = {int(found.group(1)) for key in tensors if (found := re.match(r"h\.(\d+)\.", key))}
    if len(layers) != n_layer or layers != set(range(len(layers))):  # counted, never a range of n_layer
        raise ZooError(f"{weights}: config.json says n_layer {n_layer}, the file holds {len(layers)} layers")
    if "wte.weight" not in tensors or "wpe.weight" not in tensors:
        raise ZooError(f"{weights}: missing tensor 'wte.weight' or 'wpe.weight'; not GPT-2's layout")
    return tensors


def _renamed_gpt2_tensors(weights: Path, tensors: dict[str, Any], n_layer: int, tied: bool) -> dict[str, Any]:
    """GPT-2's tensors under the zoo's ``gpt`` names."""
    renamed = {
        "token_embedding.weight": tensors["wte.weight"],
        "positions.table.weight": tensors["wpe.weight"],
        "final_norm.weight": tensors["ln_f.weight"],
        "final_norm.bias": tensors["ln_f.bias"],
    }
    for i in range(n_layer):
        h, b = f"h.{i}", f"blocks.{i}"
        for theirs, ours, transpose in [
            ("ln_1", "norm1", False),
            ("ln_2", "norm2", False),
            ("attn.c_attn", "attention.qkv", True),
            ("attn.c_proj", "attention.proj", True),
            ("mlp.c_fc", "feed_forward.up", True),
            ("mlp.c_proj", "feed_forward.down", True),
        ]:
            try:
                weight = tensors[f"{h}.{theirs}.weight"]
                # Conv1D stores (in, out).
                renamed[f"{b}.{ours}.weight"] = weight.T.contiguous() if transpose else weight
                renamed[f"{b}.{ours}.bias"] = tensors[f"{h}.{theirs}.bias"]
            except KeyError as exc:
                raise ZooError(f"{weights}: missing tensor {exc}; not GPT-2's layout") from None
    renamed["lm_head.weight"] = renamed["token_embedding.weight"] if tied else tensors["lm_head.weight"]
    return renamed


def _zoo_gpt_config(folder: Path, config: dict[str, Any], sizes: dict[str, int], tied: bool) -> dict[str, Any]:
    """The zoo ``gpt`` config of a GPT-2 config.json."""
    n_embd = sizes["n_embd"]
    zoo_config = {
        "d_model": n_embd,
        "n_layer": sizes["n_layer"],
        "n_head": sizes["n_head"],
        "d_ff": int(config.get("n_inner") or 4 * n_embd),
        "dropout": 0.0,
        "positions": "learned",
        "block": "pre-norm",
        "norm": "layernorm",
        "mlp": ZOO_ACTIVATIONS[config.get("activation_function", "gelu_new")],
        "layer_bias": True,
        "tie_embeddings": tied,
        "bias": False,
    }
    eps = config.get("layer_norm_epsilon", 1e-5)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps <= 0:
        raise ZooError(f"{folder / 'config.json'}: layer_norm_epsilon is {eps!r}, not a finite number above 0")
    eps = float(eps)
    if eps != 1e-5:
        zoo_config["norm_eps"] = eps
    return zoo_config
