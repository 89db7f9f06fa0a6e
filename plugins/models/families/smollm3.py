"""SmolLM3 (Hugging Face): Llama with some layers that do not rotate at all
(``no_rope_layers``: 1 rotates, 0 does not; by default every fourth layer is a
NoPE layer) and, optionally, sliding-window layers (``layer_types``). Each layer's
difference is a `layers` group of the card: ``rope = false``, ``sliding_window``.
llama.cpp's ``smollm3`` stores Llama's pair-order rows and has no key for which
layers skip RoPE: it skips every fourth, the only pattern its GGUF export writes."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from zoo_core.errors import ZooError

from ..settings import TransformerConfig
from .granite import llama_layout_gguf_refusal
from .llama import LLAMA, choose, fields, settings

# llama.cpp's smollm3 graph: layer i rotates unless (i + 1) is a multiple of 4 (n_no_rope_layer_step).
LLAMA_CPP_NOPE_STEP = 4


def default_pattern(n_layer: int, interval: int = LLAMA_CPP_NOPE_STEP) -> list[int]:
    """transformers' default no_rope_layers: 1 (rotates) but for every ``interval``-th layer."""
    return [int((i + 1) % interval != 0) for i in range(n_layer)]


def _groups(layers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-layer settings as `layers` groups, runs of equal layers joined by ``repeat``."""
    groups: list[dict[str, Any]] = []
    for layer in layers:
        if groups and {k: v for k, v in groups[-1].items() if k != "repeat"} == layer:
            groups[-1]["repeat"] = groups[-1].get("repeat", 1) + 1
        else:
            groups.append(dict(layer))
    return groups


def smollm3_settings(hf) -> dict[str, Any]:
    n_layer = hf.num_hidden_layers
    rotates = list(getattr(hf, "no_rope_layers", None) or default_pattern(n_layer))
    types = list(getattr(hf, "layer_types", None) or ["full_attention"] * n_layer)
    window = getattr(hf, "sliding_window", None)
    if len(rotates) != n_layer or len(types) != n_layer:
        raise ZooError(f"no_rope_layers and layer_types need one entry per layer ({n_layer})")
    sliding = [kind == "sliding_attention" and bool(getattr(hf, "use_sliding_window", False)) for kind in types]
    if any(sliding) and not window:
        raise ZooError("sliding-attention layers without a sliding_window")
    plain = copy.copy(hf)
    plain.layer_types, plain.sliding_window = None, None  # the windows are per layer here
    config = settings(plain)
    layers = [
        {**({} if rotate else {"rope": False}), **({"sliding_window": window} if slides else {})}
        for rotate, slides in zip(rotates, sliding)
    ]
    if any(layers):
        config["layers"] = _groups(layers)
    return config


def _layer_specs(config: dict[str, Any]) -> list[tuple[bool, int | None]]:
    """(rotates, window) of each layer, as the transformer builds them."""
    specs = TransformerConfig.read(config, "transformer").layer_specs()
    return [(spec.rotary is None or spec.rotary.rotates, spec.sliding_window) for spec in specs]


def smollm3_fields(config: dict[str, Any]) -> dict[str, Any]:
    specs = _layer_specs(config)
    windows = {window for _, window in specs if window is not None}
    return {
        **fields(config),
        "attention_bias": config["attention_bias"] == "all",
        "mlp_bias": config["layer_bias"],
        "no_rope_layers": [int(rotates) for rotates, _ in specs],
        "use_sliding_window": bool(windows),
        "sliding_window": next(iter(windows), None),
        "layer_types": ["sliding_attention" if window else "full_attention" for _, window in specs],
    }


def choose_smollm3(config: dict[str, Any]) -> tuple[str | None, str]:
    """SmolLM3 is a Llama whose layers may skip RoPE or slide, one window for all that slide."""
    groups = config.get("layers") or []
    if any(set(group) - {"repeat", "rope", "sliding_window"} for group in groups):
        return None, "SmolLM3's layers differ only in RoPE and sliding windows"
    specs = _layer_specs(config)
    if len({window for _, window in specs} - {None}) > 1:
        return None, "sliding windows of several widths; SmolLM3 has one"
    rest = {key: value for key, value in config.items() if key not in ("layers", "rope", "sliding_window")}
    chosen, reason = choose(rest)
    if chosen != "llama":
        return None, reason or f"SmolLM3's layers on a {chosen} layout"
    return "smollm3", ""


def _gguf_refusal(config: dict[str, Any]) -> str | None:
    specs = _layer_specs(config)
    if any(window is not None for _, window in specs):
        return "has sliding-window layers; llama.cpp's smollm3 has no key for a window"
    if [int(rotates) for rotates, _ in specs] != default_pattern(len(specs)):
        return f"skips RoPE in layers other than every {LLAMA_CPP_NOPE_STEP}th; llama.cpp's smollm3 skips exactly those"
    return llama_layout_gguf_refusal(config, "smollm3")


SMOLLM3 = dataclasses.replace(
    LLAMA,
    name="smollm3",
    title="SmolLM3",
    hf_model_types=("smollm3",),
    hf_class="SmolLM3ForCausalLM",
    settings=smollm3_settings,  # a GGUF file's metadata has no no_rope_layers: the default pattern
    fields=smollm3_fields,
    gguf_architecture="smollm3",
    chooses=choose_smollm3,
    refuses_gguf=_gguf_refusal,
)
