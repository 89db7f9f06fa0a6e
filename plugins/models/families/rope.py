"""transformers' ``rope_parameters`` and the zoo's RoPE settings, one way and the other."""

from __future__ import annotations

from typing import Any

from zoo_core.errors import ZooError


def rope_settings(rope: dict[str, Any]) -> dict[str, Any]:
    """The zoo's RoPE settings of transformers' ``rope_parameters``."""
    settings: dict[str, Any] = {"rope_base": float(rope.get("rope_theta", 10000.0))}
    kind = rope.get("rope_type", "default")
    if kind == "linear":
        settings["rope_scaling"] = {"kind": "linear", "factor": float(rope["factor"])}
    elif kind == "llama3":
        settings["rope_scaling"] = {
            "kind": "llama3",
            "factor": float(rope["factor"]),
            "low_freq_factor": float(rope["low_freq_factor"]),
            "high_freq_factor": float(rope["high_freq_factor"]),
            "original_context_length": int(rope["original_max_position_embeddings"]),
        }
    elif kind != "default":
        raise ZooError(f"RoPE scaling '{kind}' has no zoo counterpart (default, linear and llama3 map)")
    if rope.get("partial_rotary_factor", 1.0) != 1.0:
        settings["rotary_fraction"] = float(rope["partial_rotary_factor"])
    return settings


def rope_parameters(config: dict[str, Any]) -> dict[str, Any]:
    """transformers' ``rope_parameters`` of the zoo's RoPE settings."""
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": float(config.get("rope_base", 10000.0))}
    scaling = config.get("rope_scaling")
    if scaling:
        rope["rope_type"] = scaling["kind"]
        rope["factor"] = float(scaling["factor"])
        if scaling["kind"] == "llama3":
            rope.update(
                low_freq_factor=float(scaling["low_freq_factor"]),
                high_freq_factor=float(scaling["high_freq_factor"]),
                original_max_position_embeddings=int(scaling["original_context_length"]),
            )
    if config.get("rotary_fraction", 1.0) != 1.0:
        rope["partial_rotary_factor"] = float(config["rotary_fraction"])
    return rope
