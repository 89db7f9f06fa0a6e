"""OLMo 2 (AI2): Llama's tensors and arithmetic but for where the norms sit, on each
sublayer's output before the residual add (``norm_placement = "after"``: no input
norms), and a query/key RMSNorm over the whole projected width, every head at once
(``qk_norm = "rmsnorm-whole"``), before RoPE. transformers' ``Olmo2ForCausalLM``;
llama.cpp's ``olmo2`` keeps transformers' rotate_half rows (its NeoX-style RoPE).
TransformerLens has the family (``original_architecture = "Olmo2ForCausalLM"``): its
``ln1`` and ``ln2`` are then the norms on the attention's and the feed-forward's
outputs, and its ``q_norm`` and ``k_norm`` span every head."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from . import lens
from .base import Family
from .layout import resolved
from .llama import GGUF_KEYS, LLAMA, TENSORS, choose, fields, gguf_checks, settings
from .tensors import HFTensor

_LAYER = "model.layers.{i}"
# Llama's tensors without the input norms; transformers' post_attention_layernorm is the
# norm on the attention's output here, not the feed-forward's input.
_PRE_NORMS = ("ATTN_NORM", "FFN_NORM")
TENSORS_OLMO2 = (
    *(rule for rule in TENSORS if not set(rule.parts) & set(_PRE_NORMS)),
    HFTensor(f"{_LAYER}.post_attention_layernorm", ("ATTN_POST_NORM",)),
    HFTensor(f"{_LAYER}.post_feedforward_layernorm", ("FFN_POST_NORM",)),
    HFTensor(f"{_LAYER}.self_attn.q_norm", ("ATTN_Q_NORM",)),
    HFTensor(f"{_LAYER}.self_attn.k_norm", ("ATTN_K_NORM",)),
)
OWN = {"norm_placement": "after", "qk_norm": "rmsnorm-whole"}


def choose_olmo2(config: dict[str, Any]) -> tuple[str | None, str]:
    """OLMo 2 is a Llama with OWN's settings and no feed-forward biases."""
    if any(config.get(key) != value for key, value in OWN.items()):
        return None, "OLMo 2 normalises each sublayer's output and its queries and keys across all heads"
    chosen, reason = choose({key: value for key, value in config.items() if key not in OWN})
    if chosen != "llama" or config["layer_bias"]:
        return None, reason or f"OLMo 2's norms on a {chosen or 'Llama'} layout with feed-forward biases"
    return "olmo2", ""


def _gguf_refusal(config: dict[str, Any]) -> str | None:
    if config["attention_bias"] != "none":
        return "sets attention_bias; llama.cpp's olmo2 has no biases"
    if config.get("rope_scaling"):
        return "sets rope_scaling; the GGUF export writes plain RoPE only"
    return None


# The zoo's output norms under the names TransformerLens' OLMo 2 block reads them by.
_LENS_NORMS = {"post_attention_norm": "norm1", "post_feed_forward_norm": "norm2"}


@dataclass(frozen=True)
class Olmo2Family(Family):
    """The record, with TransformerLens' OLMo 2 form of the variant."""

    @staticmethod
    def _pre_norm_card(model):
        """The card without OWN's settings: what the shared TransformerLens mapping reads."""
        config = {key: value for key, value in model.card.config.items() if key not in OWN}
        return model.card.model_copy(update={"config": config})

    def lens_refusal(self, model) -> str | None:
        config = resolved(model)
        chosen, reason = choose_olmo2(config)
        if chosen != "olmo2":
            return f"'{model.name}': {reason}"
        if config["head_size"] * config["n_head"] != config["d_model"]:
            return f"'{model.name}' has a head size of its own; TransformerLens' OLMo 2 query norm spans d_model"
        return lens.refusal(SimpleNamespace(card=self._pre_norm_card(model), network=model.network))

    def to_lens(self, model):
        fields = {**lens.config(model), "original_architecture": "Olmo2ForCausalLM"}
        fields.pop("use_qk_norm", None)  # the whole-width norms come with the architecture
        tensors = model.network.state_dict()
        # TransformerLens' OLMo 2 block applies ln1 and ln2 to the sublayers' outputs: the
        # zoo's output norms go where the shared mapping reads a pre-norm block's input norms.
        renamed = {}
        for name, tensor in tensors.items():
            for ours, theirs in _LENS_NORMS.items():
                name = name.replace(f".{ours}.", f".{theirs}.")
            renamed[name] = tensor
        state = lens.state(SimpleNamespace(state_dict=lambda: renamed), fields)
        for i in range(fields["n_layers"]):
            for which in ("q_norm", "k_norm"):  # over every head's channels, in the zoo's (pairs) order
                state[f"blocks.{i}.attn.{which}.w"] = tensors[f"blocks.{i}.attention.{which}.weight"].float()
        return fields, state


OLMO2 = Olmo2Family(
    **{
        **{field.name: getattr(LLAMA, field.name) for field in dataclasses.fields(LLAMA)},
        "name": "olmo2",
        "title": "OLMo 2",
        "hf_model_types": ("olmo2",),
        "hf_class": "Olmo2ForCausalLM",
        "tensors": TENSORS_OLMO2,
        "settings": lambda hf: {**settings(hf), **OWN},
        "fields": lambda config: {**fields(config), "attention_bias": config["attention_bias"] == "all"},
        "gguf_architecture": "olmo2",
        "gguf_pairs": False,
        "gguf_keys": GGUF_KEYS,
        "gguf_checks": gguf_checks,
        "chooses": choose_olmo2,
        "refuses_gguf": _gguf_refusal,
    }
)
