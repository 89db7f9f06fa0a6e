"""GPT-2 (and nanoGPT, which writes GPT-2's tensors under the same names).

What maps: pre-norm LayerNorm blocks with a position encoding that adds to the
residual stream (learned; sinusoidal, written as GPT-2's learned table; none, a
table of zeros), ReLU or GELU. GPT-2 stores its linear layers as Conv1D, (in,
out); nanoGPT as torch's Linear, (out, in).

The zoo's vocabulary head may have a bias; GPT-2's has none. The export carries
it exactly with one extra attention head's worth of residual channels that
always hold the mean of the real channels: LayerNorm then sees the same mean
and (with the epsilon and weights rescaled) the same normalised values, and the
final LayerNorm's bias turns one extra channel into a constant 1, whose head
weights are the zoo's bias. The extra head's queries, keys and values are zero,
so it adds nothing. Variants without a head bias (nanoGPT's layout) map one to one.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch

from zoo_core.errors import ZooError, printable
from zoo_core.plugin_api.components import PositionEncodingBase
from zoo_core.plugin_api.families import HFExport

from .base import Family
from .layout import GATED_KINDS, HF_ACTIVATIONS, UNMAPPED_SETTINGS, card_layout, hf_activation, zoo_activation
from .tensors import Heads, HFTensor, canonical_from_family, zoo_from_canonical

_LAYER = "transformer.h.{i}"
TENSORS = (
    HFTensor("transformer.wte", ("TOKEN_EMBD",)),
    HFTensor("transformer.wpe", ("POS_EMBD",)),
    HFTensor(f"{_LAYER}.ln_1", ("ATTN_NORM",)),
    HFTensor(f"{_LAYER}.attn.c_attn", ("ATTN_QKV",), transposed=True),
    HFTensor(f"{_LAYER}.attn.c_proj", ("ATTN_OUT",), transposed=True),
    HFTensor(f"{_LAYER}.ln_2", ("FFN_NORM",)),
    HFTensor(f"{_LAYER}.mlp.c_fc", ("FFN_UP",), transposed=True),
    HFTensor(f"{_LAYER}.mlp.c_proj", ("FFN_DOWN",), transposed=True),
    HFTensor("transformer.ln_f", ("OUTPUT_NORM",)),
    HFTensor("lm_head", ("OUTPUT",)),
)
_MODULES = {part: rule.module for rule in TENSORS for part in rule.parts}  # canonical -> GPT-2's module
NANOGPT_TENSORS = tuple(dataclasses.replace(rule, transposed=False) for rule in TENSORS)
# The causal masks older GPT-2 files and nanoGPT (without flash attention) saved as buffers.
_MASKS = re.compile(r"(transformer\.)?h\.\d+\.attn\.(masked_)?bias")
# Transformer settings the GPT-2 layout (and TransformerLens' standard layout) has no place for.
UNMAPPED = (
    "n_kv_head",
    "head_size",
    "attention_bias",
    "residual",
    "sliding_window",
    "embedding_scale",
    "logit_scale",
    "rope_base",
    "rope_scaling",
    "rotary_fraction",
    *UNMAPPED_SETTINGS,
)
PLAIN = tuple(kind for kind in HF_ACTIVATIONS if kind not in GATED_KINDS)  # what activation_function names


def _refusal(model) -> str | None:
    """Why the variant has no exact GPT-2 form, or None when it has one."""
    card, network = model.card, model.network
    config = card_layout(card)
    name = card.name
    if config["block"] != "pre-norm":
        return f"'{name}' has {config['block']} blocks; GPT-2 normalises before each sublayer, and the post-norm decoders in transformers (XLM, BERT) add an embedding LayerNorm the zoo lacks"
    if config["norm"] != "layernorm":
        return (
            f"'{name}' uses {config['norm']} without RoPE; GPT-2's layout has LayerNorm, Llama's has RMSNorm with RoPE"
        )
    encoding = type(network.positions)
    if encoding.rotate is not PositionEncodingBase.rotate or encoding.bias is not PositionEncodingBase.bias:
        return f"'{name}': position encoding '{config['positions']}' acts inside attention; GPT-2 only adds positions to the input"
    if config.get("mlp", "relu") not in PLAIN:
        return f"'{name}': mlp '{config['mlp']}' has no GPT-2 counterpart"
    if config.get("qk_norm"):
        return f"'{name}' normalises each head's queries and keys (qk_norm); GPT-2's attention has no such step"
    unmapped = next((key for key in UNMAPPED if key in config), None)
    if unmapped:
        return f"'{name}' sets {unmapped}, which the GPT-2 layout has no place for"
    if config.get("logit_softcap") is not None:
        return f"'{name}' soft-caps its logits (logit_softcap); GPT-2's head has no such step"
    return None


def _state(network, context_length: int, activation: str):
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

    def named(canonical: str, layer: int | None = None) -> str:  # GPT-2's module holding it
        return _MODULES[canonical].format(i=layer)

    state = {
        f"{named('TOKEN_EMBD')}.weight": widen(zoo["token_embedding.weight"]),
        f"{named('POS_EMBD')}.weight": widen(positions.to(torch.float64)),
    }
    for i in range(n_layer):
        ours = f"blocks.{i}"
        state.update(norm(named("ATTN_NORM", i), f"{ours}.norm1"))
        state.update(norm(named("FFN_NORM", i), f"{ours}.norm2"))
        qkv = zoo[f"{ours}.attention.qkv.weight"]  # (3C, C): queries, keys, values, heads side by side
        qkv_bias = zoo.get(f"{ours}.attention.qkv.bias", torch.zeros(3 * d_model))
        c_attn = torch.zeros(width, 3 * width, dtype=torch.float64)
        c_attn_bias = torch.zeros(3 * width, dtype=torch.float64)
        for part in range(3):  # the extra head's queries, keys and values stay zero
            c_attn[:d_model, part * width : part * width + d_model] = qkv[part * d_model : (part + 1) * d_model].T
            c_attn_bias[part * width : part * width + d_model] = qkv_bias[part * d_model : (part + 1) * d_model]
        state[f"{named('ATTN_QKV', i)}.weight"], state[f"{named('ATTN_QKV', i)}.bias"] = c_attn, c_attn_bias
        proj = torch.zeros(width, d_model, dtype=torch.float64)
        proj[:d_model] = zoo[f"{ours}.attention.proj.weight"].T
        state[f"{named('ATTN_OUT', i)}.weight"], state[f"{named('ATTN_OUT', i)}.bias"] = into_residual(
            proj, zoo.get(f"{ours}.attention.proj.bias", torch.zeros(d_model))
        )
        up = zoo[f"{ours}.feed_forward.up.weight"]  # (d_ff, C)
        d_ff = up.shape[0]
        state[f"{named('FFN_UP', i)}.weight"] = torch.cat([up.T, torch.zeros(extra, d_ff, dtype=up.dtype)])
        state[f"{named('FFN_UP', i)}.bias"] = zoo.get(f"{ours}.feed_forward.up.bias", torch.zeros(d_ff))
        state[f"{named('FFN_DOWN', i)}.weight"], state[f"{named('FFN_DOWN', i)}.bias"] = into_residual(
            zoo[f"{ours}.feed_forward.down.weight"].T, zoo.get(f"{ours}.feed_forward.down.bias", torch.zeros(d_model))
        )
    state.update(norm(named("OUTPUT_NORM"), "final_norm", constant_channel=True))
    head_weight = torch.zeros(zoo["lm_head.weight"].shape[0], width, dtype=torch.float64)
    head_weight[:, :d_model] = zoo["lm_head.weight"]
    if head_bias is not None:
        head_weight[:, d_model] = head_bias
    state[f"{named('OUTPUT')}.weight"] = head_weight
    fields = dict(
        vocab_size=head_weight.shape[0],
        n_positions=context_length,
        n_embd=width,
        n_layer=n_layer,
        n_head=n_head + (1 if extra else 0),
        n_inner=d_ff,
        activation_function=hf_activation(activation),
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        layer_norm_epsilon=eps * d_model / width,
        tie_word_embeddings=tied and not extra,
        bos_token_id=None,
        eos_token_id=None,
    )
    return {name: tensor.to(torch.float32) for name, tensor in state.items()}, fields


def _whole_sizes(where: str, config: Mapping[str, Any], keys: tuple[str, ...], what: str = "") -> dict[str, int]:
    """The sizes ``keys``, each a whole number, or one line naming the first that is not."""
    sizes = {}
    for key in keys:
        value = config.get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ZooError(f"{where}{key} is {printable(repr(value))[:60]}, not a whole number{what}")
        sizes[key] = value
    return sizes


def _config(n_embd: int, n_layer: int, n_head: int, d_ff: int, mlp: str, layer_bias: bool, tied: bool) -> dict:
    return {
        "d_model": n_embd,
        "n_layer": n_layer,
        "n_head": n_head,
        "d_ff": d_ff,
        "dropout": 0.0,
        "positions": "learned",
        "block": "pre-norm",
        "norm": "layernorm",
        "mlp": mlp,
        "layer_bias": layer_bias,
        "tie_embeddings": tied,
        "bias": False,
    }


@dataclass(frozen=True)
class GPT2Family(Family):
    """GPT-2's record: its config is read from config.json itself (no transformers
    needed), and its export carries a head bias in extra channels."""

    def claims(self, model) -> bool:
        return card_layout(model.card)["positions"] != "rope"

    def hf_refusal(self, model) -> str | None:
        return _refusal(model)

    def config_from_hf(self, raw, path: Path, transformers_config):
        problems = []
        if not raw.get("scale_attn_weights", True) or raw.get("scale_attn_by_inverse_layer_idx", False):
            problems.append("attention scores not scaled by 1/sqrt(head size)")
        mlp = zoo_activation(raw.get("activation_function", "gelu_new"), gated=False)
        if mlp is None:
            problems.append(f"activation {raw['activation_function']!r}")
        if raw.get("add_cross_attention"):
            problems.append("cross-attention")
        if problems:
            raise ZooError(f"{path}: cannot import: {'; '.join(problems)}")
        sizes = _whole_sizes(f"{path}: ", raw, ("n_embd", "n_layer", "n_head", "n_positions"))
        n_embd = sizes["n_embd"]
        assert mlp is not None  # refused above
        tied = bool(raw.get("tie_word_embeddings", True))
        config = _config(
            n_embd, sizes["n_layer"], sizes["n_head"], int(raw.get("n_inner") or 4 * n_embd), mlp, True, tied
        )
        eps = raw.get("layer_norm_epsilon", 1e-5)
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps <= 0:
            raise ZooError(f"{path}: layer_norm_epsilon is {eps!r}, not a finite number above 0")
        if float(eps) != 1e-5:
            config["norm_eps"] = float(eps)
        return config, sizes["n_positions"]

    def tensors_from_hf(self, config, tensors, path: Path):
        named = {}
        for name, tensor in tensors.items():
            if _MASKS.fullmatch(name):
                continue
            named[name if name.startswith(("transformer.", "lm_head.")) else f"transformer.{name}"] = tensor
        n_layer = config["n_layer"]
        layers = {int(found.group(1)) for key in named if (found := re.match(r"transformer\.h\.(\d+)\.", key))}
        if len(layers) != n_layer or layers != set(range(len(layers))):  # counted, never a range of n_layer
            raise ZooError(f"{path}: config.json says n_layer {n_layer}, the file holds {len(layers)} layers")
        if any(f"{_MODULES[part]}.weight" not in named for part in ("TOKEN_EMBD", "POS_EMBD")):
            raise ZooError(f"{path}: missing tensor 'wte.weight' or 'wpe.weight'; not GPT-2's layout")
        heads = Heads.of(config)
        state = canonical_from_family(named, self.tensors, heads, n_layer, self._refuser(path, n_layer))
        return self._tied(config, zoo_from_canonical(state, heads))

    def to_hf(self, model) -> HFExport:
        state, fields = _state(model.network, model.card.context_length, model.card.config.get("mlp", "relu"))
        return HFExport("gpt2", fields, state, fields["tie_word_embeddings"])

    def gguf_refusal(self, model, writers: tuple[str, ...]) -> str | None:
        positions = card_layout(model.card)["positions"]
        return (
            f"'{model.name}' has positions '{positions}'; the GGUF export writes RoPE families ({', '.join(writers)})"
        )

    # -- nanoGPT -------------------------------------------------------------------

    def config_from_nanogpt(self, model_args: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
        sizes = _whole_sizes(
            "model_args ", model_args, ("n_embd", "n_layer", "n_head", "block_size"), "; not a nanoGPT checkpoint"
        )
        n_embd = sizes["n_embd"]
        bias = bool(model_args.get("bias", False))
        config = _config(n_embd, sizes["n_layer"], sizes["n_head"], 4 * n_embd, "gelu", bias, True)
        return config, sizes["block_size"]

    def tensors_from_nanogpt(self, config, state: Mapping[str, torch.Tensor], path: Path) -> dict[str, torch.Tensor]:
        named = {}
        for name, tensor in state.items():
            name = name.removeprefix("_orig_mod.")  # saved from a torch.compile'd model
            if not _MASKS.fullmatch(name):
                named[name] = tensor

        def refuse(name: str, reason: str | None = None):
            if reason is not None:
                raise ZooError(f"{path}: {reason}")
            raise ZooError(f"tensor '{name}' is not part of nanoGPT's GPT; the checkpoint has another layout")

        heads = Heads.of(config)
        ours = zoo_from_canonical(canonical_from_family(named, NANOGPT_TENSORS, heads, None, refuse), heads)
        embedding = ours.get("token_embedding.weight")
        if embedding is None or embedding.dim() != 2:
            raise ZooError(f"{path}: the checkpoint has no token embedding table (transformer.wte.weight)")
        ours.setdefault("lm_head.weight", embedding)
        if not torch.equal(ours["lm_head.weight"], embedding):
            raise ZooError(f"{path}: lm_head and wte differ; nanoGPT ties them, so this is another layout")
        return ours


GPT2 = GPT2Family(
    name="gpt2",
    title="GPT-2",
    hf_model_types=("gpt2",),
    hf_class="GPT2LMHeadModel",
    architectures=("gpt", "transformer"),  # imports build seed 004's gpt, as nanoGPT's layout is
    tensors=TENSORS,
    settings=lambda hf: {},  # read from config.json itself: config_from_hf
    fields=lambda config: {},  # written by to_hf
)
