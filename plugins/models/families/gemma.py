"""Gemma's family: Gemma, Gemma 2 and Gemma 3 (text), each a record written as its
difference from Llama's.

What all three share: RMSNorm whose stored weight w scales by 1 + w (the card's
``rmsnorm-unit-offset``), a feed-forward gated with GELU's tanh form
(``gelu_pytorch_tanh``: ``geglu-tanh``), token embeddings multiplied by
sqrt(d_model) rounded to the model's dtype (transformers keeps it as a tensor of
the weights' dtype: float32 here) and a head tied to the embedding.
Gemma 2 adds a norm after each sublayer too (``norm_placement = "both"``:
``post_attention_layernorm`` is that output norm, ``pre_feedforward_layernorm``
the feed-forward's input norm), soft-caps on the attention scores and the logits,
``query_pre_attn_scalar`` and layers alternating between a sliding window and
full attention (``layer_types``); Gemma 3 drops the soft-caps and adds a
unit-offset RMSNorm on each head's queries and keys and a RoPE base per kind of
layer (``rope_parameters`` per layer type: 10000 local, 1e6 global).
The layer kinds become the card's ``layers`` groups: the shortest pattern that
repeats over ``layer_types``, each run of one kind one group.

GGUF (llama.cpp's ``gemma``, ``gemma2``, ``gemma3``): llama.cpp's converter
stores every norm weight with the 1 added (convert_hf_to_gguf.py, Gemma's
``modify_tensors``; transformers' GGUF loader subtracts it again,
``Gemma2TensorProcessor``); it rotates NeoX-style (rotate_half order kept);
its graphs put the sliding layers where transformers' defaults do (Gemma 2:
even layers, Gemma 3: five of every six) with the local RoPE base fixed at
10000 unless ``rope.freq_base_swa`` says otherwise, and scale the scores by
head_dim^-0.5 (d_model / n_head for the 27B models: 46-layer Gemma 2 and
62-layer Gemma 3), none of which the file records (llama.cpp's src/llama-model.cpp).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from zoo_core.errors import ZooError, printable

from ..settings import TransformerConfig
from . import lens
from .base import Family
from .layout import resolved
from .llama import GGUF_KEYS, TENSORS
from .llama import gguf_checks as llama_gguf_checks
from .rope import rope_parameters, rope_settings
from .tensors import HFTensor

_LAYER = "model.layers.{i}"
# Gemma 2 and 3: post_attention_layernorm is the attention's output norm, not the feed-forward's input norm.
SANDWICH_TENSORS = (
    HFTensor("model.embed_tokens", ("TOKEN_EMBD",)),
    HFTensor(f"{_LAYER}.input_layernorm", ("ATTN_NORM",)),
    HFTensor(f"{_LAYER}.self_attn.q_proj", ("ATTN_Q",)),
    HFTensor(f"{_LAYER}.self_attn.k_proj", ("ATTN_K",)),
    HFTensor(f"{_LAYER}.self_attn.v_proj", ("ATTN_V",)),
    HFTensor(f"{_LAYER}.self_attn.o_proj", ("ATTN_OUT",)),
    HFTensor(f"{_LAYER}.post_attention_layernorm", ("ATTN_POST_NORM",)),
    HFTensor(f"{_LAYER}.pre_feedforward_layernorm", ("FFN_NORM",)),
    HFTensor(f"{_LAYER}.mlp.gate_proj", ("FFN_GATE",)),
    HFTensor(f"{_LAYER}.mlp.up_proj", ("FFN_UP",)),
    HFTensor(f"{_LAYER}.mlp.down_proj", ("FFN_DOWN",)),
    HFTensor(f"{_LAYER}.post_feedforward_layernorm", ("FFN_POST_NORM",)),
    HFTensor("model.norm", ("OUTPUT_NORM",)),
    HFTensor("lm_head", ("OUTPUT",)),
)
QK_NORM_TENSORS = (
    HFTensor(f"{_LAYER}.self_attn.q_norm", ("ATTN_Q_NORM",)),
    HFTensor(f"{_LAYER}.self_attn.k_norm", ("ATTN_K_NORM",)),
)
SLIDING, FULL = "sliding_attention", "full_attention"
LOCAL_ROPE_BASE = 10000.0  # llama.cpp's Gemma 3 local layers' base when the file names none


def embedding_scale(d_model: int) -> float:
    """sqrt(d_model) as float32 holds it: what transformers' Gemmas multiply by."""
    return float(np.float32(math.sqrt(d_model)))


def _activation(hf) -> str:
    # Gemma's config says hidden_act, Gemma 2 and 3 hidden_activation; transformers reads
    # Gemma's legacy "gelu" as the tanh form too.
    act = getattr(hf, "hidden_activation", None) or getattr(hf, "hidden_act", None)
    if act not in ("gelu_pytorch_tanh", "gelu_new", "gelu"):
        raise ZooError(f"hidden_activation '{act}': Gemma's family gates with gelu_pytorch_tanh only")
    return "geglu-tanh"


def _common(hf) -> dict[str, Any]:
    """The settings all three Gemmas share."""
    if getattr(hf, "use_bidirectional_attention", False):
        raise ZooError("use_bidirectional_attention: the zoo's attention is causal")
    head_size = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
    config: dict[str, Any] = {
        "d_model": hf.hidden_size,
        "n_layer": hf.num_hidden_layers,
        "n_head": hf.num_attention_heads,
        "n_kv_head": hf.num_key_value_heads or hf.num_attention_heads,
        "d_ff": hf.intermediate_size,
        "dropout": 0.0,
        "positions": "rope",
        "norm": "rmsnorm-unit-offset",
        "norm_eps": float(hf.rms_norm_eps),
        "mlp": _activation(hf),
        "layer_bias": False,
        "attention_bias": "all" if getattr(hf, "attention_bias", False) else "none",
        "bias": False,
        "tie_embeddings": bool(getattr(hf, "tie_word_embeddings", True)),
        "embedding_scale": embedding_scale(hf.hidden_size),
    }
    if head_size != hf.hidden_size // hf.num_attention_heads:
        config["head_size"] = head_size
    return config


def _period(kinds: list[Any]) -> list[Any]:
    """The shortest pattern that, repeated, gives ``kinds``."""
    for length in range(1, len(kinds) + 1):
        if all(kind == kinds[i % length] for i, kind in enumerate(kinds)):
            return kinds[:length]
    return kinds


def _groups(kinds: list[Any], group_of) -> list[dict[str, Any]]:
    """The card's ``layers`` for per-layer ``kinds``: each run of one kind in the
    shortest repeating pattern one group (``group_of(kind)``: its settings)."""
    groups: list[dict[str, Any]] = []
    previous = object()
    for kind in _period(kinds):
        if kind == previous:
            groups[-1]["repeat"] = groups[-1].get("repeat", 1) + 1
        else:
            groups.append(dict(group_of(kind)))
        previous = kind
    return groups


def _layer_types(hf) -> list[str]:
    types = list(getattr(hf, "layer_types", None) or [])
    if len(types) != hf.num_hidden_layers or not set(types) <= {SLIDING, FULL}:
        raise ZooError(
            f"layer_types {printable(repr(types))[:80]}: {hf.num_hidden_layers} of 'sliding_attention' "
            "and 'full_attention' read"
        )
    if SLIDING in types and not getattr(hf, "sliding_window", None):
        raise ZooError("sliding_attention layers without a sliding_window")
    return types


def _softcaps(hf) -> dict[str, Any]:
    config = {}
    if getattr(hf, "attn_logit_softcapping", None):
        config["attention_softcap"] = float(hf.attn_logit_softcapping)
    if getattr(hf, "final_logit_softcapping", None):
        config["logit_softcap"] = float(hf.final_logit_softcapping)
    return config


def _query_scale(hf, head_size: int) -> dict[str, Any]:
    scalar = getattr(hf, "query_pre_attn_scalar", None) or head_size
    return {} if scalar == head_size else {"query_scale": float(scalar) ** -0.5}


def gemma_settings(hf) -> dict[str, Any]:
    return {**_common(hf), **rope_settings(hf.rope_parameters)}


def gemma2_settings(hf) -> dict[str, Any]:
    config = {**_common(hf), "norm_placement": "both", **rope_settings(hf.rope_parameters), **_softcaps(hf)}
    config.update(_query_scale(hf, config.get("head_size") or hf.hidden_size // hf.num_attention_heads))
    window = int(hf.sliding_window) if getattr(hf, "sliding_window", None) else None
    types = _layer_types(hf)
    if SLIDING in types:
        config["layers"] = _groups(types, lambda kind: {"sliding_window": window} if kind == SLIDING else {})
    return config


def gemma3_settings(hf) -> dict[str, Any]:
    config = {**_common(hf), "norm_placement": "both", "qk_norm": "rmsnorm-unit-offset", **_softcaps(hf)}
    config.update(_query_scale(hf, config.get("head_size") or hf.hidden_size // hf.num_attention_heads))
    window = int(hf.sliding_window) if getattr(hf, "sliding_window", None) else None
    types = _layer_types(hf)
    rope = hf.rope_parameters
    per_kind = {kind: rope_settings(rope.get(kind) or {}) for kind in set(types)}
    if len(set(types)) == 1:  # one kind of layer: its settings model-wide
        config.update(per_kind[types[0]])
        if types[0] == SLIDING:
            config["sliding_window"] = window
        return config

    def group_of(kind: str) -> dict[str, Any]:
        return {**({"sliding_window": window} if kind == SLIDING else {}), **per_kind[kind]}

    config["layers"] = _groups(types, group_of)
    return config


# -- export -------------------------------------------------------------------------


def _layer_kinds(config: dict[str, Any]) -> tuple[list[str], int | None, dict[str, dict[str, Any]]]:
    """Each layer's kind, the one window of the sliding layers and each kind's RoPE
    settings, from the card's config; refused where the layers differ in another way."""
    specs = TransformerConfig.read(config, "transformer").layer_specs()
    windows = {spec.sliding_window for spec in specs if spec.sliding_window is not None}
    if len(windows) > 1:
        raise ZooError(f"sliding windows of {sorted(windows)}; Gemma's sliding layers share one")
    kinds = [SLIDING if spec.sliding_window else FULL for spec in specs]
    rotary: dict[str, dict[str, Any]] = {}
    for kind, spec in zip(kinds, specs):
        settings = spec.rotary.encoding_settings() if spec.rotary else {}
        if rotary.setdefault(kind, settings) != settings:
            raise ZooError(f"{kind} layers with different RoPE settings; Gemma's layers of a kind share them")
    fixed = ("norm", "norm_eps", "norm_placement", "residual", "mlp", "qk_norm", "layer_bias", "attention_bias")
    for name in (*fixed, "attention_softcap", "query_scale"):
        if len({getattr(spec, name) for spec in specs}) > 1:
            raise ZooError(f"layers with different {name}; Gemma's layers differ in their window and RoPE only")
    return kinds, (windows.pop() if windows else None), rotary


def _query_pre_attn_scalar(config: dict[str, Any]) -> int:
    scale = config.get("query_scale")
    if scale is None:
        return config["head_size"]
    scalar = round(scale**-2)
    if scalar < 1 or not math.isclose(scalar**-0.5, scale, rel_tol=1e-12):
        raise ZooError(f"query_scale {scale} is not 1/sqrt of a whole query_pre_attn_scalar")
    return scalar


def _common_fields(config: dict[str, Any]) -> dict[str, Any]:
    return {
        "hidden_size": config["d_model"],
        "num_hidden_layers": config["n_layer"],
        "num_attention_heads": config["n_head"],
        "num_key_value_heads": config["n_kv_head"],
        "head_dim": config["head_size"],
        "intermediate_size": config["d_ff"],
        "rms_norm_eps": config["norm_eps"],
        "tie_word_embeddings": config["tie_embeddings"],
        "attention_bias": config["attention_bias"] == "all",
    }


def gemma_fields(config: dict[str, Any]) -> dict[str, Any]:
    return {**_common_fields(config), "hidden_act": "gelu_pytorch_tanh", "rope_parameters": rope_parameters(config)}


def _sandwich_fields(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]], list[str]]:
    kinds, window, rotary = _layer_kinds(config)
    fields = {
        **_common_fields(config),
        "hidden_activation": "gelu_pytorch_tanh",
        "query_pre_attn_scalar": _query_pre_attn_scalar(config),
        "sliding_window": window,
        "layer_types": kinds,
        "attn_logit_softcapping": config.get("attention_softcap"),
        "final_logit_softcapping": config.get("logit_softcap"),
    }
    return fields, rotary, kinds


def gemma2_fields(config: dict[str, Any]) -> dict[str, Any]:
    fields, rotary, kinds = _sandwich_fields(config)
    if len({tuple(sorted(settings.items())) for settings in rotary.values()}) > 1:
        raise ZooError("sliding and full layers with different RoPE settings; Gemma 2 has one RoPE")
    return {**fields, "rope_parameters": rope_parameters(config | rotary[kinds[0]])}


def gemma3_fields(config: dict[str, Any]) -> dict[str, Any]:
    fields, rotary, _ = _sandwich_fields(config)
    return {
        **fields,
        "rope_parameters": {kind: rope_parameters(config | rotary.get(kind, {})) for kind in (SLIDING, FULL)},
    }


# -- choosing ----------------------------------------------------------------------


def choose(config: dict[str, Any]) -> tuple[str | None, str]:
    """The Gemma a RoPE variant's config (its defaults filled in) is written as, or None and why."""
    if config["block"] != "pre-norm" or config["residual"] != "sequential":
        return None, "Gemma's family has pre-norm blocks with a sequential residual"
    if config["norm"] != "rmsnorm-unit-offset" or config["mlp"] != "geglu-tanh":
        return None, "Gemma's family has unit-offset RMSNorm (rmsnorm-unit-offset) and a geglu-tanh feed-forward"
    if config["bias"] or config["layer_bias"] or config["attention_bias"] == "qkv":
        return None, "biases on its head, feed-forward or query/key/value alone, which Gemma's family has not"
    if config.get("embedding_scale") != embedding_scale(config["d_model"]):
        return (
            None,
            f"an embedding scale other than sqrt(d_model) = {embedding_scale(config['d_model'])}, as Gemma's is",
        )
    if config.get("logit_scale") not in (None, 1, 1.0) or config.get("rope_scaling") and config.get("layers"):
        return None, "a logit scale or RoPE scaling model-wide with layer groups, which Gemma's family has not"
    if config.get("rotary_fraction", 1.0) != 1.0:
        return None, "partial rotary, which Gemma's family has not"
    placement, qk_norm = config.get("norm_placement", "before"), config.get("qk_norm", False)
    if placement == "both" and qk_norm == "rmsnorm-unit-offset":
        return "gemma3", ""
    if placement == "both" and not qk_norm:
        return "gemma2", ""
    if placement == "before" and not qk_norm:
        extra = [
            k
            for k in ("layers", "sliding_window", "attention_softcap", "logit_softcap", "query_scale")
            if config.get(k)
        ]
        if not extra:
            return "gemma", ""
        return None, f"Gemma's blocks with {extra[0]}, which only Gemma 2 and 3 (norm_placement both) have"
    return None, f"norm_placement {placement} with qk_norm {qk_norm}; Gemma 2 and 3 normalise both sides"


# -- GGUF --------------------------------------------------------------------------


def _optional_number(path: Path, metadata: Mapping[str, Any], key: str) -> float | None:
    value = metadata.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ZooError(f"{path}: {key} is {printable(repr(value))}, not a finite number above 0")
    return float(np.format_float_scientific(np.float32(value), unique=True))


def _llama_cpp_kinds(pattern: int, layers: int) -> list[str]:
    """The layer kinds llama.cpp's graph gives ``layers`` layers: every ``pattern``-th global, 0: all."""
    return [FULL if not pattern or (i + 1) % pattern == 0 else SLIDING for i in range(layers)]


def _gguf_checks(pattern: int, big_model_layers: int):
    """What a ``gemma2``/``gemma3`` file's keys say, and what llama.cpp's graph
    assumes (``pattern``: every pattern-th layer is global, 0 none; the scores
    scaled by d_model / n_head in the ``big_model_layers``-layer model)."""

    def checks(hf, metadata: Mapping[str, Any], path: Path, key) -> None:
        llama_gguf_checks(hf, metadata, path, key)  # head counts, head widths, RoPE scaling
        hf.hidden_activation = "gelu_pytorch_tanh"
        hf.tie_word_embeddings = False  # decided by whether the file has output.weight
        layers = hf.num_hidden_layers
        big = layers == big_model_layers
        hf.query_pre_attn_scalar = hf.hidden_size // hf.num_attention_heads if big else hf.head_dim
        hf.attn_logit_softcapping = _optional_number(path, metadata, key("LLM.ATTN_LOGIT_SOFTCAPPING"))
        hf.final_logit_softcapping = _optional_number(path, metadata, key("LLM.FINAL_LOGIT_SOFTCAPPING"))
        window = metadata.get(key("Attention.SLIDING_WINDOW"))
        if pattern and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
            raise ZooError(
                f"{path}: {key('Attention.SLIDING_WINDOW')} is {printable(repr(window))}, not a whole number above 0"
            )
        hf.sliding_window = window
        hf.layer_types = _llama_cpp_kinds(pattern, layers)
        if pattern == 6:  # Gemma 3: the file's base is the global layers'
            local = _optional_number(path, metadata, key("Rope.FREQ_BASE_SWA")) or LOCAL_ROPE_BASE
            hf.rope_parameters = {FULL: hf.rope_parameters, SLIDING: {"rope_theta": local}}

    return checks


def _gguf_refusal(pattern: int, big_model_layers: int):
    def refusal(config: dict[str, Any]) -> str | None:
        if not config["tie_embeddings"] and pattern != 6:
            return "has a head of its own; llama.cpp's gemma and gemma2 graphs read the embedding as the head"
        try:
            kinds, _, rotary = _layer_kinds(config)
        except ZooError as exc:
            return f"cannot be written for llama.cpp: {exc}"
        wanted = _llama_cpp_kinds(pattern, len(kinds))
        if kinds != wanted:
            return f"has layers {'/'.join(k[0] for k in kinds)} (s: sliding, f: full); llama.cpp's graph fixes them as {'/'.join(k[0] for k in wanted)}"
        head = config["d_model"] // config["n_head"] if config["n_layer"] == big_model_layers else config["head_size"]
        if _query_pre_attn_scalar(config) != head:
            return f"scales its scores by query_scale; llama.cpp's graph scales them by {head}^-0.5 at this size"
        for kind, settings in rotary.items():
            if "rope_scaling" in settings and (kind == SLIDING or settings["rope_scaling"]["kind"] != "linear"):
                return "sets rope_scaling; llama.cpp's Gemma graphs scale the global layers' RoPE linearly only"
        return None

    return refusal


class GemmaFamily(Family):
    """A Gemma record: the HF/GGUF conversions of `Family`, with llama.cpp's norm
    weights (1 + w) undone on import and redone on export, and the metadata
    llama.cpp's Gemma graphs read written beside Llama's; TransformerLens' Gemma
    options (its own Gemma conversion stores 1 + w and the embeddings scaled)."""

    def lens_refusal(self, model) -> str | None:
        config = resolved(model)
        chosen, reason = choose(config)
        if chosen is None:
            return f"'{model.name}': {reason}"
        try:
            kinds, _, rotary = _layer_kinds(config)
        except ZooError as exc:
            return f"'{model.name}': {exc}"
        if any("rope_scaling" in settings for settings in rotary.values()):
            return f"'{model.name}' sets rope_scaling; HookedTransformer's Gemma has plain RoPE"
        if SLIDING in kinds and FULL in kinds and rotary[SLIDING] != rotary[FULL] and chosen != "gemma3":
            return f"'{model.name}': local and global layers with different RoPE bases, which only Gemma 3 has"
        return None

    def to_lens(self, model):
        config = resolved(model)
        kinds, window, rotary = _layer_kinds(config)
        fields = lens.config(model)
        fields["normalization_type"] = "RMS"
        if config.get("norm_placement") == "both":
            fields["use_normalization_before_and_after"] = True
        if config.get("attention_softcap"):
            fields["attn_scores_soft_cap"] = float(config["attention_softcap"])
        fields["attn_scale"] = float(_query_pre_attn_scalar(config)) ** 0.5  # TransformerLens divides by it
        if window is not None:
            fields.update(
                use_local_attn=True,
                window_size=window,
                attn_types=[{SLIDING: "local", FULL: "global"}[kind] for kind in kinds],
            )
        if FULL in rotary:
            fields["rotary_base"] = rotary[FULL].get("rope_base", config.get("rope_base", 10000.0))
        if SLIDING in rotary and FULL in rotary and rotary[SLIDING] != rotary[FULL]:
            fields["rotary_base_local"] = rotary[SLIDING].get("rope_base", 10000.0)
        state = lens.state(model.network, fields)
        ours = model.network.state_dict()
        for i in range(config["n_layer"]):
            if fields.get("use_normalization_before_and_after"):
                state[f"blocks.{i}.ln1_post.w"] = ours[f"blocks.{i}.post_attention_norm.weight"].float()
                state[f"blocks.{i}.ln2_post.w"] = ours[f"blocks.{i}.post_feed_forward_norm.weight"].float()
        for name in state:  # unit-offset norms: TransformerLens' RMSNorm multiplies by the weight itself
            if name.endswith((".ln1.w", ".ln2.w", ".ln1_post.w", ".ln2_post.w", "ln_final.w", "_norm.w")):
                state[name] = 1 + state[name]
        state["embed.W_E"] = state["embed.W_E"] * config["embedding_scale"]
        return fields, state

    def tensors_from_gguf(self, config, tensors, dequantize, path: Path):
        def unshifted(tensor):
            values = dequantize(tensor)
            return values - 1 if tensor.name.endswith("norm.weight") else values

        return super().tensors_from_gguf(config, tensors, unshifted, path)

    def to_gguf(self, model):
        config = resolved(model)
        kinds, window, rotary = _layer_kinds(config)
        base = rotary.get(FULL, rotary.get(SLIDING, {})).get("rope_base", config.get("rope_base", 10000.0))
        flat = dataclasses.replace(self, fields=lambda c: {**gemma_fields(c), "rope_parameters": {"rope_theta": base}})
        exported = Family.to_gguf(flat, model)
        arch = exported.architecture
        metadata = list(exported.metadata)
        if window is not None:
            metadata.append((f"{arch}.attention.sliding_window", window, "UINT32"))
        for key, name in (
            ("attn_logit_softcapping", "attention_softcap"),
            ("final_logit_softcapping", "logit_softcap"),
        ):
            if config.get(name) is not None:
                metadata.append((f"{arch}.{key}", config[name], "FLOAT32"))
        local = rotary.get(SLIDING, {}).get("rope_base")
        if arch == "gemma3" and local is not None and local != LOCAL_ROPE_BASE:
            metadata.append((f"{arch}.rope.freq_base_swa", local, "FLOAT32"))
        tensors = {
            name: tensor + 1 if name.endswith("norm.weight") else tensor for name, tensor in exported.tensors.items()
        }
        return dataclasses.replace(exported, metadata=metadata, tensors=tensors)


GEMMA = GemmaFamily(
    name="gemma",
    title="Gemma",
    hf_model_types=("gemma",),
    hf_class="GemmaForCausalLM",
    tensors=TENSORS,
    settings=gemma_settings,
    fields=gemma_fields,
    gguf_architecture="gemma",
    gguf_keys=GGUF_KEYS,
    gguf_checks=_gguf_checks(pattern=0, big_model_layers=0),
    chooses=choose,
    refuses_gguf=_gguf_refusal(pattern=0, big_model_layers=0),
)
GEMMA2 = dataclasses.replace(
    GEMMA,
    name="gemma2",
    title="Gemma 2",
    hf_model_types=("gemma2",),
    hf_class="Gemma2ForCausalLM",
    tensors=SANDWICH_TENSORS,
    settings=gemma2_settings,
    fields=gemma2_fields,
    gguf_architecture="gemma2",
    gguf_checks=_gguf_checks(pattern=2, big_model_layers=46),
    refuses_gguf=_gguf_refusal(pattern=2, big_model_layers=46),
)
GEMMA3 = dataclasses.replace(
    GEMMA,
    name="gemma3",
    title="Gemma 3",
    hf_model_types=("gemma3_text",),
    hf_class="Gemma3ForCausalLM",
    tensors=(*SANDWICH_TENSORS, *QK_NORM_TENSORS),
    settings=gemma3_settings,
    fields=gemma3_fields,
    gguf_architecture="gemma3",
    gguf_checks=_gguf_checks(pattern=6, big_model_layers=62),
    refuses_gguf=_gguf_refusal(pattern=6, big_model_layers=62),
)
