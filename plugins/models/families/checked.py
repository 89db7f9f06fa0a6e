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

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from zoo_core.errors import ZooError, printable
from zoo_core.plugin_api.families import GGUFExport

from .base import Family, GGUFKey, _attribute, _gguf, _zoo_name
from .layout import HF_ACTIVATIONS, card_layout, gated, resolved
from .tensors import HEAD, Heads, Key, canonical_from_zoo, layer_and_kind, rotated, zoo_from_canonical

# The file's tensors every variant has (the head may be the embedding; norms, biases and the gate vary).
REQUIRED: tuple[str, ...] = ("TOKEN_EMBD", "OUTPUT_NORM", "ATTN_NORM", "ATTN_QKV", "ATTN_Q", "ATTN_K", "ATTN_V")
REQUIRED += ("ATTN_OUT", "FFN_GATE", "FFN_UP", "FFN_DOWN")

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


def rotary_refusal(head_size: int, fraction: float) -> str | None:
    """Why transformers' partial rotary (``int(fraction * head_size)`` channels) differs
    from the zoo's (``round``), or cannot pair its channels."""
    theirs = int(fraction * head_size)
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
    config cannot hold exactly (found by the round trip above).

    Its GGUF files are in llama.cpp's layout for ``gguf_architecture``, whose rows
    are transformers' (these architectures rotate NeoX-style, or, Cohere's, in the
    pairs its transformers rows already have): ``gguf_joined`` names the file's
    tensors that hold several canonical ones, in row order (Phi-3's ``ATTN_QKV``,
    its ``FFN_UP`` holding the gate's rows first) or one under another name
    (Falcon's ``ATTN_NORM_2``); ``gguf_settings`` completes the config from which
    tensors the file has (biases, a second norm), what no metadata key says."""

    gguf_joined: tuple[tuple[str, tuple[str, ...]], ...] = ()
    gguf_settings: Callable[[dict[str, Any], set[str]], dict[str, Any]] | None = None
    gguf_metadata: Callable[[dict[str, Any]], list[tuple[str, Any, str]]] | None = None

    def hf_refusal(self, model) -> str | None:
        if card_layout(model.card)["positions"] != "rope":
            return f"'{model.name}' has positions '{card_layout(model.card)['positions']}'; {self.title} has RoPE"
        config = held(model)
        if config["mlp"] not in HF_ACTIVATIONS:
            return f"'{model.name}' has mlp '{config['mlp']}', which {self.title}'s config has no name for"
        try:
            fields = {**self.fields(config), "vocab_size": 8, "max_position_embeddings": model.card.context_length}
            theirs_config = _transformers_config(self.hf_model_types[0], fields)
            if theirs_config is None:
                return None
            back = self.settings(theirs_config)
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

    # -- GGUF in llama.cpp's layout ---------------------------------------------------

    def _file_names(self) -> dict[str, tuple[str, tuple[str, ...]]]:
        """The file's canonical names -> (llama.cpp's name template, the canonical tensors it holds)."""
        gguf = _gguf()
        joined = dict(self.gguf_joined)
        inside = {part for parts in joined.values() for part in parts}
        names: dict[str, tuple[str, tuple[str, ...]]] = {}
        for rule in self.tensors:
            for part in rule.parts:
                if part not in inside:
                    names[part] = (gguf.TENSOR_NAMES[gguf.MODEL_TENSOR[part]], (part,))
        for name, parts in joined.items():
            names[name] = (gguf.TENSOR_NAMES[gguf.MODEL_TENSOR[name]], parts)
        return names

    def tensors_from_gguf(self, config, tensors, dequantize, path: Path):
        n_layer = config["n_layer"]
        names = self._file_names()
        patterns = [
            (re.compile(re.escape(template).replace(r"\{bid\}", r"(\d+)") + r"\.(weight|bias)"), name)
            for name, (template, _) in names.items()
        ]
        found: dict[Key, Any] = {}
        for name, tensor in tensors.items():  # every name is placed before any tensor is read
            match = next(((m, canonical) for p, canonical in patterns if (m := p.fullmatch(name))), None)
            if match is None:
                raise ZooError(f"{path}: tensor '{printable(name)}' is not in {self.gguf_architecture}'s layout")
            layer, kind = layer_and_kind(match[0])
            if layer is not None and layer >= n_layer:
                raise ZooError(f"{path}: tensor '{printable(name)}' is past the file's {n_layer} layers")
            found[(match[1], layer, kind)] = tensor
        present = {f"{canonical}.{kind}" for canonical, _, kind in found}
        if self.gguf_settings is not None:
            config = self.gguf_settings(config, present)
        heads = Heads.of(config)
        for canonical, (template, _) in names.items():  # the weights every file has, named before any is read
            if canonical not in REQUIRED or (canonical == "FFN_GATE" and not gated(config)):
                continue
            for layer in [None] if canonical in ("TOKEN_EMBD", "OUTPUT_NORM") else range(n_layer):
                if (canonical, layer, "weight") not in found:
                    shown = template.format(bid=layer)
                    raise ZooError(f"{path}: no tensor '{shown}.weight'; {self.gguf_architecture}'s layout has one")
        state: dict[Key, torch.Tensor] = {}
        for (canonical, layer, kind), tensor in found.items():
            parts = names[canonical][1]
            state.update(
                {
                    (part, layer, kind): piece
                    for part, piece in zip(parts, _split(dequantize(tensor), parts, heads, path, canonical))
                }
            )
        if self.hf_pairs:  # the file's rows are already in the zoo's pairs: the canonical form is rotate_half's
            state = rotated(state, heads, to_pairs=False)
        return self._tied(config, zoo_from_canonical(state, heads))

    def to_gguf(self, model) -> GGUFExport:
        gguf = _gguf()
        config = held(model)
        heads = Heads.of(config)
        fields = {**self.fields(config), "max_position_embeddings": model.card.context_length}
        fields.setdefault("rope_theta", fields.get("rope_parameters", {}).get("rope_theta", 10000.0))
        arch = self.gguf_architecture
        metadata = []
        for spec in self.gguf_keys:
            value = fields.get(spec.field)
            if value is None:
                continue  # optional: the file leaves it out
            key = _attribute(gguf.Keys, spec.key).format(arch=arch)
            metadata.append((key, value, "UINT32" if spec.kind == "whole" else "FLOAT32"))
        if heads.rotary != heads.head_size or any(spec.key == "Rope.DIMENSION_COUNT" for spec in self.gguf_keys):
            metadata.append((gguf.Keys.Rope.DIMENSION_COUNT.format(arch=arch), heads.rotary, "UINT32"))
        metadata.append((gguf.Keys.LLM.VOCAB_SIZE.format(arch=arch), model.network.lm_head.weight.shape[0], "UINT32"))
        metadata.extend(self.gguf_metadata(config) if self.gguf_metadata else [])
        ours = {name: tensor.detach().to(torch.float32) for name, tensor in model.network.state_dict().items()}
        if config["tie_embeddings"]:
            del ours[f"{_zoo_name(HEAD)}.weight"]  # llama.cpp reads the embedding when output.weight is absent
        state = canonical_from_zoo(ours, heads, gated(config))
        if self.hf_pairs:
            state = rotated(state, heads, to_pairs=True)
        written = {}
        for canonical, (template, parts) in self._file_names().items():
            for layer, kind in sorted({(layer, kind) for (c, layer, kind) in state if c == parts[0]}, key=str):
                pieces = [state.pop((part, layer, kind)) for part in parts]
                written[f"{template.format(bid=layer)}.{kind}"] = torch.cat(pieces).contiguous()
        if state:
            raise ZooError(f"GGUF has no name for the {next(iter(state))[0]} tensor in llama.cpp's {arch}")
        return GGUFExport(arch or "", metadata, written)


def _split(tensor: torch.Tensor, parts: tuple[str, ...], heads: Heads, path: Path, name: str) -> list[torch.Tensor]:
    """A file's tensor holding several canonical ones, row by row, as its parts."""
    if len(parts) == 1:
        return [tensor]
    if parts == ("FFN_GATE", "FFN_UP"):
        sizes = [tensor.shape[0] // 2] * 2
    else:
        count = {"ATTN_Q": heads.n_head, "ATTN_K": heads.n_kv_head, "ATTN_V": heads.n_kv_head}
        sizes = [count[part] * heads.head_size for part in parts]
    if sum(sizes) != tensor.shape[0]:
        raise ZooError(f"{path}: a {name} tensor has {tensor.shape[0]} rows; the metadata's heads need {sum(sizes)}")
    return [piece.contiguous() for piece in tensor.split(sizes)]


def _transformers_config(model_type: str, fields: dict[str, Any]):
    """transformers' config of the family from ``fields``; None without transformers (a GGUF
    export with the gguf extra alone, whose reading back checks the layout instead)."""
    try:
        from transformers import AutoConfig
    except ImportError:
        return None
    return AutoConfig.for_model(model_type, **fields)


# -- what llama.cpp's files of these architectures say, as transformers' config fields --


def gguf_keys(*specs: tuple[str, str] | tuple[str, str, str] | tuple[str, str, str, Any]):
    """`GGUFKey`s from (field, key[, kind[, default]]) rows."""
    return tuple(GGUFKey(*spec) for spec in specs)


def metadata_whole(path: Path, metadata: Mapping[str, Any], key: str, default: Any) -> Any:
    """An optional whole-number key: ``default`` when absent, else a whole number above 0."""
    value = metadata.get(key, default)
    if value is not default and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ZooError(f"{path}: {key} is {printable(repr(value))}, not a whole number above 0")
    return value


def rope_from_metadata(hf, metadata: Mapping[str, Any], path: Path, key, head_size: int) -> None:
    """``hf.rope_parameters`` of the file's base and the channels it rotates (``rope.dimension_count``)."""
    rotary = metadata_whole(path, metadata, key("Rope.DIMENSION_COUNT"), head_size)
    if rotary > head_size:
        raise ZooError(f"{path}: {key('Rope.DIMENSION_COUNT')} is {rotary}, more than a head's {head_size} channels")
    hf.rope_parameters = {"rope_type": "default", "rope_theta": hf.rope_theta}
    if rotary != head_size:
        hf.rope_parameters["partial_rotary_factor"] = rotary / head_size


def refusing(*checks: tuple[Callable[[dict[str, Any]], bool], str]):
    """A ``refuses_gguf`` from (does the config have it, why the file cannot hold it) rows."""

    def refuse(config: dict[str, Any]) -> str | None:
        return next((reason for test, reason in checks if test(config)), None)

    return refuse


CHECKED_BY_TRANSFORMERS = "transformers' GGUF loader, which checks every export,"
