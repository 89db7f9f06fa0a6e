"""`Family`: one family's facts as data, and the conversions every family shares.

A record is an instance: its Hugging Face and GGUF names, its tensors (as
`HFTensor` rules over llama.cpp's canonical names), its config both ways and
its refusals. The methods here are the `zoo_core.plugin_api.families.FamilyRecord`
protocol, written once for all; a family whose arithmetic or files differ
(GPT-2's Conv1D export with the head's bias carried in extra channels)
overrides the method that differs, nothing else.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Mapping

import numpy as np
import torch

from zoo_core.errors import ZooError, printable
from zoo_core.plugin_api.families import GGUFExport, HFExport

from . import lens
from .layout import card_layout, gated, resolved
from .tensors import (
    EMBEDDING,
    HEAD,
    PER_LAYER,
    PER_LAYER_NORMS,
    ZOO_MODULES,
    Heads,
    HFTensor,
    Key,
    canonical_from_family,
    canonical_from_zoo,
    family_from_canonical,
    layer_and_kind,
    layer_count,
    reorder_heads,
    rotated,
    zoo_from_canonical,
)

# Buffers some older checkpoints saved beside the weights; they are recomputed, never read.
BUFFERS = (".rotary_emb.inv_freq", ".attention.bias", ".attention.masked_bias")


@dataclass(frozen=True)
class GGUFKey:
    """One of the architecture's metadata keys and the transformers config field it
    holds. ``key``: the attribute path in ``gguf.Keys`` ("LLM.EMBEDDING_LENGTH").
    ``kind``: "whole" (a whole number above 0) or "positive" (a finite float above 0).
    ``default``: what the file may leave out, given the fields read before it."""

    field: str
    key: str
    kind: str = "whole"
    default: Callable[[dict[str, Any]], Any] | float | None = None


def _gguf():
    import gguf  # the gguf extra: imported only by the GGUF conversions

    return gguf


@dataclass(frozen=True)
class Family:
    name: str
    title: str
    hf_model_types: tuple[str, ...]
    hf_class: str
    tensors: tuple[HFTensor, ...]
    settings: Callable[[Any], dict[str, Any]]  # transformers config -> the card's config
    fields: Callable[[dict[str, Any]], dict[str, Any]]  # the card's config (defaults filled in) -> config fields
    architectures: tuple[str, ...] = ("transformer", "gpt")
    gguf_architecture: str | None = None
    gguf_pairs: bool = False  # llama.cpp stores query/key rows in adjacent pairs (its "normal" RoPE)
    gguf_keys: tuple[GGUFKey, ...] = ()
    # refusals the fields cannot say: (config so far, metadata, the file, key("Rope.DIMENSION_COUNT") -> its key)
    gguf_checks: Callable[[Any, Mapping[str, Any], Path, Callable[[str], str]], None] | None = None
    file_names: dict[str, str] = field(default_factory=dict)  # older name prefixes a checkpoint may use -> today's
    chooses: Callable[[dict[str, Any]], tuple[str | None, str]] | None = None  # which family a RoPE config is
    refuses_gguf: Callable[[dict[str, Any]], str | None] | None = None
    # a GGUF file of an architecture several records share is this family's (Mixtral's llama with experts)
    gguf_claims: Callable[[Mapping[str, Any]], bool] | None = None
    hf_pairs: bool = False  # its Hugging Face query/key rows rotate in adjacent pairs, as the zoo's (Cohere)

    # -- choosing ----------------------------------------------------------------------

    def claims(self, model) -> bool:
        return card_layout(model.card)["positions"] == "rope"

    def hf_refusal(self, model) -> str | None:
        config = resolved(model)
        chosen, reason = self.chooses(config) if self.chooses else (self.name, "")
        if chosen is None:
            return f"'{model.name}': {reason}"
        return None if chosen == self.name else f"'{model.name}' is laid out as {chosen}"

    # -- Hugging Face ------------------------------------------------------------------

    def config_from_hf(self, raw, path: Path, transformers_config) -> tuple[dict[str, Any], int]:
        hf = transformers_config()
        return self.settings(hf), int(hf.max_position_embeddings)

    def _refuser(self, path: Path, n_layer: int):
        def refuse(name: str, reason: str | None = None):
            if reason is not None:
                raise ZooError(f"{path}: {reason}")
            raise ZooError(f"{path}: tensor {printable(name)!r} is not in {self.hf_class}'s {n_layer}-layer layout")

        return refuse

    def tensors_from_hf(self, config, tensors, path: Path):
        renamed = {}
        for name, tensor in tensors.items():
            for old, new in self.file_names.items():  # GPT-NeoX's head is embed_out in every checkpoint
                if name.startswith(old):
                    name = new + name[len(old) :]
            if not name.endswith(BUFFERS):
                # bfloat16 or float16 weights widen exactly; the zoo computes in float32.
                renamed[name] = tensor.float() if tensor.is_floating_point() else tensor
        heads = Heads.of(config)
        state = canonical_from_family(
            renamed, self.tensors, heads, config["n_layer"], self._refuser(path, config["n_layer"])
        )
        if self.hf_pairs:  # the canonical form is rotate_half's
            state = rotated(state, heads, to_pairs=False)
        return self._tied(config, zoo_from_canonical(state, heads))

    @staticmethod
    def _tied(config: dict[str, Any], ours: dict[str, torch.Tensor]):
        """A head the file leaves out is the embedding (llama.cpp and transformers both write none then)."""
        head, embedding = f"{_zoo_name(HEAD)}.weight", f"{_zoo_name(EMBEDDING)}.weight"
        if config.get("tie_embeddings") or head not in ours:
            config = {**config, "tie_embeddings": True}
            ours[head] = ours[embedding]
        return config, ours

    def to_hf(self, model) -> HFExport:
        config = resolved(model)
        network = model.network
        fields = {
            **self.fields(config),
            "vocab_size": network.lm_head.weight.shape[0],
            "max_position_embeddings": model.card.context_length,
            "architectures": [self.hf_class],
            "bos_token_id": None,
            "eos_token_id": None,
            "pad_token_id": None,
        }
        ours = {name: tensor.detach().to(torch.float32) for name, tensor in network.state_dict().items()}
        if config["tie_embeddings"]:
            del ours[f"{_zoo_name(HEAD)}.weight"]
        canonical = canonical_from_zoo(ours, Heads.of(config), gated(config))
        if self.hf_pairs:
            canonical = rotated(canonical, Heads.of(config), to_pairs=True)
        state = family_from_canonical(canonical, self.tensors, Heads.of(config))
        return HFExport(self.hf_model_types[0], fields, state, config["tie_embeddings"])

    # -- GGUF --------------------------------------------------------------------------

    def config_from_gguf(self, metadata, path: Path) -> tuple[dict[str, Any], int]:
        if not self.gguf_keys:
            raise ZooError(f"{path}: the {self.title} family reads no GGUF metadata")
        keys = _gguf().Keys
        arch = self.gguf_architecture
        values: dict[str, Any] = {}
        for spec in self.gguf_keys:
            key = _attribute(keys, spec.key).format(arch=arch)
            default = spec.default(values) if callable(spec.default) else spec.default
            read = _whole if spec.kind == "whole" else _positive
            values[spec.field] = read(path, metadata, key, default)
        hf = SimpleNamespace(**values)
        if self.gguf_checks is not None:
            self.gguf_checks(hf, metadata, path, lambda name: _attribute(keys, name).format(arch=arch))
        return self.settings(hf), int(hf.max_position_embeddings)

    def _gguf_names(self) -> dict[str, str]:
        """canonical name -> llama.cpp's tensor name template ("blk.{bid}.attn_q")."""
        gguf = _gguf()
        return {part: gguf.TENSOR_NAMES[gguf.MODEL_TENSOR[part]] for rule in self.tensors for part in rule.parts}

    def tensors_from_gguf(self, config, tensors, dequantize, path: Path):
        n_layer = config["n_layer"]
        heads = Heads.of(config)
        file_heads = Heads(heads.n_head, heads.n_kv_head, heads.head_size, heads.head_size)  # llama.cpp rotates all
        names = self._gguf_names()
        patterns = [
            (re.compile(re.escape(template).replace(r"\{bid\}", r"(\d+)") + r"\.(weight|bias)"), canonical)
            for canonical, template in names.items()
        ]
        found: dict[Key, Any] = {}
        for name, tensor in tensors.items():
            for pattern, canonical in patterns:
                match = pattern.fullmatch(name)
                if match:
                    layer, kind = layer_and_kind(match)
                    if layer is not None and layer >= n_layer:
                        continue
                    found[(canonical, layer, kind)] = tensor
                    break
            else:
                raise ZooError(
                    f"{path}: tensor '{printable(name)}' is not in {self.gguf_architecture}'s {n_layer}-layer layout"
                )
        for canonical in names:
            wanted = (
                range(n_layer) if canonical in (*PER_LAYER, *PER_LAYER_NORMS) or "{bid}" in names[canonical] else [None]
            )
            if canonical == HEAD or not any(canonical in rule.parts for rule in self.tensors):
                continue
            for layer in wanted:
                if (canonical, layer, "weight") not in found and self.expects(config, canonical, layer):
                    shown = names[canonical].format(bid=layer)
                    raise ZooError(
                        f"{path}: no tensor '{shown}.weight'; {self.gguf_architecture}'s {n_layer}-layer layout has one"
                    )
        state: dict[Key, torch.Tensor] = {}
        for key, tensor in found.items():
            weight = dequantize(tensor)
            if self.gguf_pairs and key[0] in ("ATTN_Q", "ATTN_K"):
                count = heads.n_head if key[0] == "ATTN_Q" else heads.n_kv_head
                if weight.shape[0] != count * heads.head_size:
                    raise ZooError(
                        f"{path}: tensor '{printable(names[key[0]].format(bid=key[1]))}.{key[2]}' has {weight.shape[0]} rows; "
                        f"{count} heads of {heads.head_size} need {count * heads.head_size}"
                    )
                weight = reorder_heads(weight, count, file_heads, to_pairs=False)
            state[key] = weight
        return self._tied(config, zoo_from_canonical(state, heads))

    def expects(self, config: Mapping[str, Any], canonical: str, layer: int | None) -> bool:
        """Whether the config's layer (None: outside the layers) has the canonical tensor."""
        return True

    def gguf_refusal(self, model, writers: tuple[str, ...]) -> str | None:
        if self.refuses_gguf is None:
            return None
        reason = self.refuses_gguf(resolved(model))
        return f"'{model.name}' {reason}" if reason else None

    def to_gguf(self, model) -> GGUFExport:
        gguf = _gguf()
        config = resolved(model)
        heads = Heads.of(config)
        fields = {**self.fields(config), "max_position_embeddings": model.card.context_length}
        fields.setdefault("rope_theta", fields.get("rope_parameters", {}).get("rope_theta", 10000.0))
        arch = self.gguf_architecture
        metadata = []
        for spec in self.gguf_keys:
            if spec.field == "head_dim" and heads.head_size * heads.n_head == config["d_model"]:
                continue  # written only when a head is not a slice of the width
            value = fields[spec.field]
            key = _attribute(gguf.Keys, spec.key).format(arch=arch)
            metadata.append((key, value, "UINT32" if spec.kind == "whole" else "FLOAT32"))
            if spec.field == "head_dim":
                metadata.append((gguf.Keys.Attention.VALUE_LENGTH.format(arch=arch), value, "UINT32"))
        metadata.append((gguf.Keys.Rope.DIMENSION_COUNT.format(arch=arch), heads.head_size, "UINT32"))
        metadata.append((gguf.Keys.LLM.VOCAB_SIZE.format(arch=arch), model.network.lm_head.weight.shape[0], "UINT32"))
        ours = {name: tensor.detach().to(torch.float32) for name, tensor in model.network.state_dict().items()}
        if config["tie_embeddings"]:
            del ours[f"{_zoo_name(HEAD)}.weight"]  # llama.cpp reads the embedding when output.weight is absent
        state = canonical_from_zoo(ours, heads, gated(config))
        file_heads = Heads(heads.n_head, heads.n_kv_head, heads.head_size, heads.head_size)
        names = self._gguf_names()
        written = {}
        for (canonical, layer, kind), tensor in state.items():
            if canonical not in names:
                raise ZooError(f"GGUF has no name for the {canonical} tensor in llama.cpp's {arch}")
            if self.gguf_pairs and canonical in ("ATTN_Q", "ATTN_K") and kind == "weight":
                count = heads.n_head if canonical == "ATTN_Q" else heads.n_kv_head
                tensor = reorder_heads(tensor, count, file_heads, to_pairs=True)
            written[f"{names[canonical].format(bid=layer)}.{kind}"] = tensor.contiguous()
        return GGUFExport(arch or "", metadata, written)

    # -- checks and TransformerLens --------------------------------------------------

    def vocab_size(self, tensors) -> int:
        embedding = tensors.get(f"{_zoo_name(EMBEDDING)}.weight")
        if embedding is None or embedding.dim() != 2:
            raise ZooError("no token embedding table among the tensors")
        return int(embedding.shape[0])

    def size_problem(self, config, context_length, tensors) -> str | None:
        return size_problem(config, context_length, tensors)

    def lens_refusal(self, model) -> str | None:
        return lens.refusal(model)

    def to_lens(self, model):
        fields = lens.config(model)
        return fields, lens.state(model.network, fields)


def size_problem(config: Mapping[str, Any], context_length: int, tensors: Mapping[str, Any]) -> str | None:
    """The layer count, width and window the config claims against what the tensors hold,
    counted from their names and shapes before anything is built."""
    embedding = tensors.get(f"{_zoo_name(EMBEDDING)}.weight")
    positions = tensors.get(f"{_zoo_name('POS_EMBD')}.weight")
    for key, claimed, held in (
        ("n_layer", config.get("n_layer"), layer_count(tensors)),
        ("d_model", config.get("d_model"), embedding.shape[-1] if embedding is not None else None),
        ("context length", context_length, positions.shape[0] if positions is not None else None),
    ):
        if held is not None and claimed != held:
            return f"the configuration says {key} {claimed}, the tensors hold {held}"
    return None


def _zoo_name(canonical: str) -> str:
    return ZOO_MODULES[canonical]


def _attribute(root: Any, path: str) -> Any:
    for part in path.split("."):
        root = getattr(root, part)
    return root


def _whole(path: Path, metadata: Mapping[str, Any], key: str, default: Any = None) -> int:
    value = metadata.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ZooError(f"{path}: {key} is {printable(repr(value))}, not a whole number above 0")
    return value


def _positive(path: Path, metadata: Mapping[str, Any], key: str, default: Any = None) -> float:
    value = metadata.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ZooError(f"{path}: {key} is {printable(repr(value))}, not a finite number above 0")
    if float(np.float32(value)) == value:
        # GGUF keeps these in float32: 1e-5 reads 9.99999974e-06. The shortest decimal that is the
        # same float32 (what the model computes with) is what the card and transformers' config say.
        return float(np.format_float_scientific(np.float32(value), unique=True))
    return float(value)
