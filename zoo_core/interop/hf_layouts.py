"""The Hugging Face layouts of the transformer families, as data.

Each family is one `Layout`: which transformers class it is, how its config
fields become the zoo's ``transformer`` card settings and back, and which of
its tensors is which zoo tensor. The few real transforms are shared by all:

- The zoo's attention is one ``qkv`` Linear, rows [queries; keys; values]
  (``n_head + 2 * n_kv_head`` heads); Llama's family keeps three, GPT-NeoX one
  with each head's query, key and value rows side by side.
- The zoo's gated feed-forward is one ``up`` Linear, rows [gate; up].
- The zoo's RoPE rotates adjacent feature pairs (2i, 2i+1); transformers'
  Llama and NeoX rotate feature i with i + D/2 ("rotate_half"). Reordering each
  head's query and key rows (and a QK-norm's scales) turns one into the other
  exactly, within the rotary part only when it is partial; llama.cpp's
  converter does the same.

A family's config fields are read through transformers' own config class
(`AutoConfig`), which also reads the older spellings (``rope_theta``,
``rope_scaling``, ``rotary_pct``) into today's ``rope_parameters``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..errors import ZooError

# transformers' hidden_act and the zoo's feed-forward for the same function.
GATED = {"silu": "swiglu", "gelu": "geglu"}
PLAIN = {"gelu": "gelu", "relu": "relu", "gelu_new": "gelu-tanh", "gelu_pytorch_tanh": "gelu-tanh"}
# Buffers some older checkpoints saved beside the weights; they are recomputed, never read.
BUFFERS = (".rotary_emb.inv_freq", ".attention.bias", ".attention.masked_bias")


@dataclass(frozen=True)
class Heads:
    """What the transforms need of the attention's shape."""

    n_head: int
    n_kv_head: int
    head_size: int
    rotary: int  # leading features of each head that rotate


def pairs_order(head_size: int, rotary: int) -> torch.Tensor:
    """Feature order taking a head from rotate_half's layout to adjacent pairs:
    new feature 2i is old i, 2i + 1 is old i + rotary/2; the rest stay."""
    half = rotary // 2
    order = torch.arange(head_size)
    order[:rotary] = torch.stack([torch.arange(half), torch.arange(half) + half], dim=1).flatten()
    return order


def reorder_heads(rows: torch.Tensor, count: int, shape: Heads, to_pairs: bool) -> torch.Tensor:
    """Each of ``count`` heads' rows (or a per-head scale, ``count`` 1) from
    rotate_half order to adjacent pairs, or back."""
    order = pairs_order(shape.head_size, shape.rotary)
    if not to_pairs:
        order = torch.argsort(order)
    shaped = rows.reshape(count, shape.head_size, *rows.shape[1:])
    return shaped[:, order].reshape(rows.shape)


@dataclass(frozen=True)
class Layout:
    """One family. ``modules``: zoo module -> transformers module, weight and
    bias alike ("{i}" is the layer). ``attention``: the query, key and value
    modules, or one module holding them head by head. ``gate_up``: the gated
    feed-forward's gate and up modules. ``qk_norms``: the per-head query and key
    scales. ``settings``/``fields``: the config, one way and the other.
    ``file_names``: older name prefixes a checkpoint file may use, and today's."""

    model_type: str
    architecture: str
    modules: dict[str, str]
    attention: tuple[str, ...]
    settings: Callable[[Any], dict[str, Any]]
    fields: Callable[[dict[str, Any]], dict[str, Any]]
    gate_up: tuple[str, str] | None = None
    qk_norms: tuple[str, str] | None = None
    file_names: dict[str, str] = dataclasses.field(default_factory=dict)

    def from_file(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Tensors under the names transformers gives them in memory: a file may
        hold older ones (GPT-NeoX's head is ``embed_out`` in every checkpoint and
        ``lm_head`` in transformers 5), which transformers renames as it loads."""
        renamed = {}
        for name, tensor in tensors.items():
            for old, new in self.file_names.items():
                if name.startswith(old):
                    name = new + name[len(old) :]
            renamed[name] = tensor
        return renamed

    def to_zoo(self, theirs: dict[str, torch.Tensor], n_layer: int, heads: Heads) -> dict[str, torch.Tensor]:
        """The family's tensors under the zoo's names and in its layouts."""
        ours: dict[str, torch.Tensor] = {}
        for zoo_name, hf_name in self._module_pairs(n_layer):
            for kind in ("weight", "bias"):
                if f"{hf_name}.{kind}" in theirs:
                    ours[f"{zoo_name}.{kind}"] = theirs[f"{hf_name}.{kind}"]
        for i in range(n_layer):
            block = f"blocks.{i}"
            for kind in ("weight", "bias"):
                parts = self._split_attention(theirs, i, kind, heads)
                if parts is not None:
                    q, k, v = parts
                    q = reorder_heads(q, heads.n_head, heads, to_pairs=True)
                    k = reorder_heads(k, heads.n_kv_head, heads, to_pairs=True)
                    ours[f"{block}.attention.qkv.{kind}"] = torch.cat([q, k, v])
                if self.gate_up is not None:
                    gate, up = (theirs.get(f"{m.format(i=i)}.{kind}") for m in self.gate_up)
                    if gate is not None and up is not None:
                        ours[f"{block}.feed_forward.up.{kind}"] = torch.cat([gate, up])
            if self.qk_norms is not None:
                for which, module in zip(("q_norm", "k_norm"), self.qk_norms):
                    scale = theirs[f"{module.format(i=i)}.weight"]
                    ours[f"{block}.attention.{which}.weight"] = reorder_heads(scale, 1, heads, to_pairs=True)
        return ours

    def from_zoo(self, ours: dict[str, torch.Tensor], n_layer: int, heads: Heads) -> dict[str, torch.Tensor]:
        """The zoo's tensors under the family's names and in its layouts."""
        theirs: dict[str, torch.Tensor] = {}
        for zoo_name, hf_name in self._module_pairs(n_layer):
            for kind in ("weight", "bias"):
                if f"{zoo_name}.{kind}" in ours:
                    theirs[f"{hf_name}.{kind}"] = ours[f"{zoo_name}.{kind}"]
        q_rows, kv_rows = heads.n_head * heads.head_size, heads.n_kv_head * heads.head_size
        for i in range(n_layer):
            block = f"blocks.{i}"
            for kind in ("weight", "bias"):
                qkv = ours.get(f"{block}.attention.qkv.{kind}")
                if qkv is not None:
                    q, k, v = qkv.split([q_rows, kv_rows, kv_rows])
                    q = reorder_heads(q, heads.n_head, heads, to_pairs=False)
                    k = reorder_heads(k, heads.n_kv_head, heads, to_pairs=False)
                    theirs.update(self._joined_attention(q, k, v, i, kind, heads))
                up = ours.get(f"{block}.feed_forward.up.{kind}")
                if self.gate_up is not None and up is not None:
                    for module, part in zip(self.gate_up, up.chunk(2)):
                        theirs[f"{module.format(i=i)}.{kind}"] = part
            if self.qk_norms is not None:
                for which, module in zip(("q_norm", "k_norm"), self.qk_norms):
                    scale = ours[f"{block}.attention.{which}.weight"]
                    theirs[f"{module.format(i=i)}.weight"] = reorder_heads(scale, 1, heads, to_pairs=False)
        return {name: tensor.contiguous() for name, tensor in theirs.items()}

    def known_names(self, n_layer: int) -> set[str]:
        """Every tensor name the family may hold (weights and biases)."""
        modules = [hf for _, hf in self._module_pairs(n_layer)]
        for i in range(n_layer):
            per_layer = [*self.attention, *(self.gate_up or ()), *(self.qk_norms or ())]
            modules += [m.format(i=i) for m in per_layer]
        return {f"{m}.{kind}" for m in modules for kind in ("weight", "bias")}

    def _module_pairs(self, n_layer: int):
        for zoo_name, hf_name in self.modules.items():
            if "{i}" in zoo_name:
                yield from ((zoo_name.format(i=i), hf_name.format(i=i)) for i in range(n_layer))
            else:
                yield zoo_name, hf_name

    def _split_attention(self, theirs, i: int, kind: str, heads: Heads):
        names = [f"{m.format(i=i)}.{kind}" for m in self.attention]
        if not all(name in theirs for name in names):
            return None
        if len(names) == 3:
            return [theirs[name] for name in names]
        # One module, head by head: (H, 3, D, ...) -> three (H*D, ...).
        fused = theirs[names[0]]
        rest = fused.shape[1:]
        by_head = fused.reshape(heads.n_head, 3, heads.head_size, *rest)
        return [by_head[:, part].reshape(-1, *rest) for part in range(3)]

    def _joined_attention(self, q, k, v, i: int, kind: str, heads: Heads) -> dict[str, torch.Tensor]:
        names = [f"{m.format(i=i)}.{kind}" for m in self.attention]
        if len(names) == 3:
            return dict(zip(names, (q, k, v)))
        rest = q.shape[1:]
        parts = [t.reshape(heads.n_head, 1, heads.head_size, *rest) for t in (q, k, v)]
        return {names[0]: torch.cat(parts, dim=1).reshape(-1, *rest)}


# --- config, one way and the other ---------------------------------------------


def _rope_settings(rope: dict[str, Any]) -> dict[str, Any]:
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


def _rope_parameters(config: dict[str, Any]) -> dict[str, Any]:
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


def _sliding_window(hf) -> int | None:
    """The window every layer uses, None for full attention; a mix is refused."""
    types = set(getattr(hf, "layer_types", None) or [])
    if types == {"sliding_attention"} or (not types and getattr(hf, "sliding_window", None)):
        return int(hf.sliding_window)
    if len(types) > 1:
        raise ZooError("some layers attend within a sliding window and others fully; the zoo's layers are alike")
    return None


def _llama_settings(hf, attention_bias: str | None = None) -> dict[str, Any]:
    """Llama, Mistral, Qwen2 and Qwen3: RMSNorm, gated feed-forward, RoPE, no head bias."""
    if hf.hidden_act not in GATED:
        raise ZooError(f"hidden_act '{hf.hidden_act}' has no zoo counterpart (silu and gelu map)")
    head_size = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
    settings: dict[str, Any] = {
        "d_model": hf.hidden_size,
        "n_layer": hf.num_hidden_layers,
        "n_head": hf.num_attention_heads,
        "n_kv_head": hf.num_key_value_heads or hf.num_attention_heads,
        "d_ff": hf.intermediate_size,
        "dropout": 0.0,
        "positions": "rope",
        "norm": "rmsnorm",
        "norm_eps": float(hf.rms_norm_eps),
        "mlp": GATED[hf.hidden_act],
        "layer_bias": bool(getattr(hf, "mlp_bias", False)),
        "attention_bias": attention_bias or ("all" if getattr(hf, "attention_bias", False) else "none"),
        "bias": False,
        "tie_embeddings": bool(hf.tie_word_embeddings),
        **_rope_settings(hf.rope_parameters),
    }
    if head_size != hf.hidden_size // hf.num_attention_heads:
        settings["head_size"] = head_size
    window = _sliding_window(hf)
    if window is not None:
        settings["sliding_window"] = window
    return settings


def _llama_fields(config: dict[str, Any]) -> dict[str, Any]:
    fields = {
        "hidden_size": config["d_model"],
        "num_hidden_layers": config["n_layer"],
        "num_attention_heads": config["n_head"],
        "num_key_value_heads": config["n_kv_head"],
        "head_dim": config["head_size"],
        "intermediate_size": config["d_ff"],
        "rms_norm_eps": config["norm_eps"],
        "hidden_act": {v: k for k, v in GATED.items()}[config["mlp"]],
        "tie_word_embeddings": config["tie_embeddings"],
        "rope_parameters": _rope_parameters(config),
    }
    return fields


def _qwen3_settings(hf) -> dict[str, Any]:
    return {**_llama_settings(hf), "qk_norm": "rmsnorm"}


def _neox_settings(hf) -> dict[str, Any]:
    if hf.hidden_act not in PLAIN:
        raise ZooError(f"hidden_act '{hf.hidden_act}' has no zoo counterpart ({', '.join(PLAIN)} map)")
    return {
        "d_model": hf.hidden_size,
        "n_layer": hf.num_hidden_layers,
        "n_head": hf.num_attention_heads,
        "d_ff": hf.intermediate_size,
        "dropout": 0.0,
        "positions": "rope",
        "norm": "layernorm",
        "norm_eps": float(hf.layer_norm_eps),
        "mlp": PLAIN[hf.hidden_act],
        "residual": "parallel" if hf.use_parallel_residual else "sequential",
        "layer_bias": True,
        "attention_bias": "all" if hf.attention_bias else "none",
        "bias": False,
        "tie_embeddings": bool(hf.tie_word_embeddings),
        **_rope_settings(hf.rope_parameters),
    }


def _neox_fields(config: dict[str, Any]) -> dict[str, Any]:
    return {
        "hidden_size": config["d_model"],
        "num_hidden_layers": config["n_layer"],
        "num_attention_heads": config["n_head"],
        "intermediate_size": config["d_ff"],
        "layer_norm_eps": config["norm_eps"],
        "hidden_act": {"gelu": "gelu", "relu": "relu", "gelu-tanh": "gelu_new"}[config["mlp"]],
        "use_parallel_residual": config["residual"] == "parallel",
        "attention_bias": config["attention_bias"] == "all",
        "tie_word_embeddings": config["tie_embeddings"],
        "rope_parameters": _rope_parameters(config),
    }


_LAYER = "model.layers.{i}"
LLAMA = Layout(
    model_type="llama",
    architecture="LlamaForCausalLM",
    modules={
        "token_embedding": "model.embed_tokens",
        "blocks.{i}.norm1": f"{_LAYER}.input_layernorm",
        "blocks.{i}.attention.proj": f"{_LAYER}.self_attn.o_proj",
        "blocks.{i}.norm2": f"{_LAYER}.post_attention_layernorm",
        "blocks.{i}.feed_forward.down": f"{_LAYER}.mlp.down_proj",
        "final_norm": "model.norm",
        "lm_head": "lm_head",
    },
    attention=tuple(f"{_LAYER}.self_attn.{p}_proj" for p in "qkv"),
    gate_up=(f"{_LAYER}.mlp.gate_proj", f"{_LAYER}.mlp.up_proj"),
    settings=_llama_settings,
    fields=lambda config: {
        **_llama_fields(config),
        "attention_bias": config["attention_bias"] == "all",
        "mlp_bias": config["layer_bias"],
    },
)
MISTRAL = dataclasses.replace(
    LLAMA,
    model_type="mistral",
    architecture="MistralForCausalLM",
    fields=lambda config: {**_llama_fields(config), "sliding_window": config.get("sliding_window")},
)
QWEN2 = dataclasses.replace(
    LLAMA,
    model_type="qwen2",
    architecture="Qwen2ForCausalLM",
    settings=lambda hf: _llama_settings(hf, attention_bias="qkv"),  # Qwen2's q, k, v always have biases
    fields=_llama_fields,
)
QWEN3 = dataclasses.replace(
    LLAMA,
    model_type="qwen3",
    architecture="Qwen3ForCausalLM",
    qk_norms=(f"{_LAYER}.self_attn.q_norm", f"{_LAYER}.self_attn.k_norm"),
    settings=_qwen3_settings,
    fields=lambda config: {**_llama_fields(config), "attention_bias": config["attention_bias"] == "all"},
)
_NEOX_LAYER = "gpt_neox.layers.{i}"
GPT_NEOX = Layout(
    model_type="gpt_neox",
    architecture="GPTNeoXForCausalLM",
    modules={
        "token_embedding": "gpt_neox.embed_in",
        "blocks.{i}.norm1": f"{_NEOX_LAYER}.input_layernorm",
        "blocks.{i}.attention.proj": f"{_NEOX_LAYER}.attention.dense",
        "blocks.{i}.norm2": f"{_NEOX_LAYER}.post_attention_layernorm",
        "blocks.{i}.feed_forward.up": f"{_NEOX_LAYER}.mlp.dense_h_to_4h",
        "blocks.{i}.feed_forward.down": f"{_NEOX_LAYER}.mlp.dense_4h_to_h",
        "final_norm": "gpt_neox.final_layer_norm",
        "lm_head": "lm_head",
    },
    attention=(f"{_NEOX_LAYER}.attention.query_key_value",),
    file_names={"embed_out.": "lm_head."},
    settings=_neox_settings,
    fields=_neox_fields,
)
LAYOUTS = {layout.model_type: layout for layout in (LLAMA, MISTRAL, QWEN2, QWEN3, GPT_NEOX)}


def layout_for(config: dict[str, Any]) -> tuple[Layout | None, str]:
    """The family a RoPE variant's config (its defaults filled in) is written
    as, or None and why none fits."""
    if config["block"] != "pre-norm":
        return None, f"{config['block']} blocks; every RoPE family in transformers normalises before each sublayer"
    if config.get("bias", True):
        return None, "Llama's layout has RoPE and RMSNorm, but no bias on its vocabulary head, which this variant has"
    if config.get("embedding_scale") not in (None, 1, 1.0) or config.get("logit_softcap") is not None:
        return None, "an embedding scale or logit soft-cap, which none of Llama, Mistral, Qwen and GPT-NeoX has"
    if config["norm"] == "layernorm" and config["mlp"] not in GATED.values():
        if config["mlp"] not in PLAIN.values():
            return None, f"a {config['mlp']} feed-forward, which GPT-NeoX's hidden_act has no name for"
        if config["residual"] not in ("sequential", "parallel"):
            return None, f"a {config['residual']} residual; GPT-NeoX's parallel residual has two LayerNorms"
        if config["n_kv_head"] != config["n_head"] or config["head_size"] * config["n_head"] != config["d_model"]:
            return None, "grouped key/value heads or a head size of its own, which GPT-NeoX's attention has not"
        if config.get("qk_norm") or config.get("sliding_window") or config["attention_bias"] == "qkv":
            return None, "QK-norm, a sliding window or query/key/value-only biases, which GPT-NeoX has not"
        return GPT_NEOX, ""
    if config["residual"] != "sequential":
        return (
            None,
            f"a {config['residual']} residual with {config['norm']}; GPT-NeoX's has LayerNorm and a plain feed-forward",
        )
    if config["norm"] != "rmsnorm" or config["mlp"] not in GATED.values():
        return None, f"{config['norm']} and a {config['mlp']} feed-forward; Llama's family has RMSNorm and a gated one"
    if config.get("rotary_fraction", 1.0) != 1.0:
        return None, "partial rotary, which Llama's family does not have"
    if config.get("qk_norm"):
        if config["qk_norm"] != "rmsnorm" or config.get("sliding_window") or config["attention_bias"] == "qkv":
            return None, "QK-norm without learned scales, or with a window or query/key/value biases; Qwen3 has neither"
        return QWEN3, ""
    if config["attention_bias"] == "qkv":
        if config.get("sliding_window") or config["layer_bias"]:
            return None, "query/key/value biases with a window or feed-forward biases; Qwen2 has neither"
        return QWEN2, ""
    if config.get("sliding_window"):
        if config["attention_bias"] != "none" or config["layer_bias"]:
            return None, "a sliding window with biases; Mistral has none"
        return MISTRAL, ""
    return LLAMA, ""
