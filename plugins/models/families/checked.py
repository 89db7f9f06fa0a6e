"""`CheckedFamily`: a family whose refusals come from a round trip through its own config.

A family that transformers writes with fewer switches than the zoo has (Phi-2's
block is always parallel, StableLM's linears never have biases) could list
every setting it cannot hold, and would forget one. Instead the variant's
settings are written as the family's config fields, read back as an import
reads them, and compared, setting by setting, as the network computes them: a
setting that does not survive the trip is what the family cannot hold, and the
refusal names it. Arithmetic a config field cannot show (how many channels a
partial rotary turns) is the record's ``settings`` to refuse when it reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zoo_core.errors import ZooError

from .base import Family
from .layout import HF_ACTIVATIONS, card_layout, resolved

# Each setting that changes what the network computes, and what leaving it out means.
ARITHMETIC: dict[str, Any] = {
    "block": "pre-norm",
    "positions": "learned",
    "norm": "layernorm",
    "norm_eps": 1e-5,
    "mlp": "relu",
    "residual": "sequential",
    "layer_bias": False,
    "attention_bias": "none",
    "bias": False,
    "tie_embeddings": False,
    "rope_base": 10000.0,
    "rope_scaling": None,
    "rotary_fraction": 1.0,
    "sliding_window": None,
    "qk_norm": False,
    "embedding_scale": 1.0,
    "logit_scale": 1.0,
    "logit_softcap": None,
    "layers": None,
    "norm_placement": "before",
    "attention_softcap": None,
    "query_scale": None,
}


def arithmetic(config: dict[str, Any]) -> dict[str, Any]:
    """``config``'s settings as the network computes them, every default spelled out."""
    given = {key: value for key, value in config.items() if value is not None and value is not False}
    out = {key: given.get(key, default) for key, default in ARITHMETIC.items()}
    out["layer_bias"] = bool(config.get("layer_bias"))
    out["bias"], out["tie_embeddings"] = bool(config.get("bias")), bool(config.get("tie_embeddings"))
    out["qk_norm"] = config.get("qk_norm") or False
    for key in ("rope_base", "rotary_fraction", "embedding_scale", "logit_scale", "norm_eps"):
        out[key] = float(out[key])
    n_head = config["n_head"]
    out.update(
        d_model=config["d_model"],
        n_layer=config["n_layer"],
        n_head=n_head,
        n_kv_head=config.get("n_kv_head") or n_head,
        head_size=config.get("head_size") or config["d_model"] // n_head,
        d_ff=config.get("d_ff") or 4 * config["d_model"],
    )
    # A LayerNorm's bias follows layer_bias unless set on its own; an RMSNorm has none.
    norm_bias = config.get("layernorm_bias")
    out["layernorm_bias"] = (
        (out["layer_bias"] if norm_bias is None else norm_bias) if out["norm"] == "layernorm" else None
    )
    return out


def held(model) -> dict[str, Any]:
    """The loaded variant's settings (`resolved`), with whether its LayerNorms have biases read off its tensors."""
    config = resolved(model)
    state = model.network.state_dict()
    config["layernorm_bias"] = "final_norm.bias" in state
    return config


def rotary_refusal(head_size: int, fraction: float, truncates: bool = True) -> str | None:
    """Why transformers' partial rotary (``int(fraction * head_size)`` channels where
    ``truncates``) differs from the zoo's (``round``), or cannot pair its channels."""
    theirs = int(fraction * head_size) if truncates else round(fraction * head_size)
    if theirs != round(fraction * head_size):
        return (
            f"partial_rotary_factor {fraction} of a {head_size}-channel head rotates {theirs} channels in "
            f"transformers and {round(fraction * head_size)} in the zoo"
        )
    if theirs % 2:
        return f"partial_rotary_factor {fraction} of a {head_size}-channel head rotates {theirs} channels, which do not pair"
    return None


@dataclass(frozen=True)
class CheckedFamily(Family):
    """A `Family` that refuses, for Hugging Face and GGUF alike, every variant its
    config cannot hold exactly (found by the round trip above)."""

    def hf_refusal(self, model) -> str | None:
        if card_layout(model.card)["positions"] != "rope":
            return f"'{model.name}' has positions '{card_layout(model.card)['positions']}'; {self.title} has RoPE"
        config = held(model)
        if config["mlp"] not in HF_ACTIVATIONS:
            return f"'{model.name}' has mlp '{config['mlp']}', which {self.title}'s config has no name for"
        try:
            fields = {**self.fields(config), "vocab_size": 8, "max_position_embeddings": model.card.context_length}
            back = self.settings(_transformers_config(self.hf_model_types[0], fields))
        except ZooError as exc:
            return f"'{model.name}': {exc}"
        except (KeyError, TypeError, ValueError) as exc:  # a setting the family's fields have no place for
            return f"'{model.name}' does not fit {self.title}'s config ({type(exc).__name__}: {exc})"
        ours, theirs = arithmetic(config), arithmetic(back)
        for key, value in ours.items():
            if theirs[key] != value:
                return f"'{model.name}' has {key} {value!r}; {self.title}'s layout holds {theirs[key]!r} there"
        return None

    def to_hf(self, model):
        reason = self.hf_refusal(model)  # a card may record the family and still have been edited since
        if reason is not None:
            raise ZooError(reason)
        return super().to_hf(model)

    def gguf_refusal(self, model, writers: tuple[str, ...]) -> str | None:
        return self.hf_refusal(model) or super().gguf_refusal(model, writers)


def _transformers_config(model_type: str, fields: dict[str, Any]):
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type, **fields)
