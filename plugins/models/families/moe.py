"""Mixtral and Qwen2-MoE: Llama's family with a mixture of experts for a feed-forward
(plugins/blocks/experts.py).

Their checkpoints keep one tensor per expert (``experts.{e}.w1`` for Mixtral,
``experts.{e}.gate_proj`` for Qwen2-MoE: transformers 5 stacks them when it loads
and splits them again when it saves); llama.cpp stacks them, ``ffn_gate_exps``
(E, F, C), as the zoo does. So a record here stacks a checkpoint's experts before
the shared conversion and splits them after it. Mixtral files are llama.cpp's
``llama`` with expert tensors and ``llama.expert_count``; Qwen2-MoE's are
``qwen2moe``, whose shared expert's gate llama.cpp keeps as a vector.

Sources: transformers' ``MixtralSparseMoeBlock``/``Qwen2MoeSparseMoeBlock`` (softmax,
top-k, Mixtral always rescaling the k weights to sum to 1, Qwen2-MoE when
``norm_topk_prob``; the shared expert times sigmoid of ``shared_expert_gate``),
``Qwen2MoeDecoderLayer`` (a layer has experts unless in ``mlp_only_layers`` or off
the ``decoder_sparse_step``), and llama.cpp's qwen2moe graph, which does not
rescale and has experts in every layer.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch

from zoo_core.errors import ZooError, printable
from zoo_core.plugin_api.families import GGUFExport, HFExport

from . import llama
from .base import Family, GGUFKey
from .layout import expert_layers
from .tensors import EXPERT_PARTS, SHARED_EXPERT_PARTS, HFTensor

_LAYER = "model.layers.{i}"
DENSE_PARTS = ("FFN_GATE", "FFN_UP", "FFN_DOWN")
SHARED_GATE = "ffn_gate_inp_shexp"  # llama.cpp's (C,) for transformers' (1, C)


def _pattern(module: str, suffix: str = r"\.(weight|bias)") -> re.Pattern[str]:
    """A module template's names: "{i}" (layer) and "{e}" (expert) matched as numbers."""
    return re.compile(re.escape(module).replace(r"\{i\}", r"(\d+)").replace(r"\{e\}", r"(\d+)") + suffix)


def _stacked(template: str) -> str:
    """The module a per-expert template's stack goes under (the record's rule): no "{e}"."""
    return template.replace(".{e}", "")


@dataclass(frozen=True)
class ExpertFamily(Family):
    """A Llama-like record whose checkpoints keep one tensor per expert.
    ``experts``: canonical name -> the checkpoint's module ("{i}": layer, "{e}": expert)."""

    experts: Mapping[str, str] = dataclasses.field(default_factory=dict)
    moe_module: tuple[str, str] = ("", "")  # the experts' module in the files, and in transformers' memory
    # transformers' GGUF loader reads neither (Mixtral's llama files with experts; qwen2moe's expert
    # widths): the GGUF export checks its file through this record's own GGUF import instead
    transformers_reads_gguf: bool = False

    def tensors_from_hf(self, config, tensors, path: Path):
        stacks: dict[str, dict[int, torch.Tensor]] = {}
        others = {}
        patterns = [(_pattern(template), _stacked(template)) for template in self.experts.values()]
        for name, tensor in tensors.items():
            for pattern, stacked in patterns:
                found = pattern.fullmatch(name)
                if found:
                    layer, expert, kind = found.groups()
                    stacks.setdefault(f"{stacked.format(i=layer)}.{kind}", {})[int(expert)] = tensor
                    break
            else:
                others[name] = tensor
        for name, by_expert in stacks.items():
            if sorted(by_expert) != list(range(len(by_expert))):
                raise ZooError(f"{path}: {printable(name)}: the experts are not numbered 0 to {len(by_expert) - 1}")
            if len({tuple(t.shape) for t in by_expert.values()}) > 1:
                raise ZooError(f"{path}: {printable(name)}: the experts' tensors differ in shape")
            others[name] = torch.stack([by_expert[e] for e in range(len(by_expert))])
        return super().tensors_from_hf(config, others, path)

    def to_hf(self, model) -> HFExport:
        """transformers' in-memory layout, which its save_pretrained splits into the files' one
        tensor per expert: ``{moe}.gate``, ``{moe}.experts.gate_up_proj`` (E, 2F, C: each expert's
        gate rows, then its up rows, as the zoo's ``experts_up``) and ``{moe}.experts.down_proj``."""
        exported = super().to_hf(model)
        stacked = {canonical: _pattern(_stacked(template), r"\.weight") for canonical, template in self.experts.items()}
        moe_file = _pattern(self.moe_module[0], r"\.")
        state: dict[str, torch.Tensor] = {}
        layers: dict[int, dict[str, torch.Tensor]] = {}
        for name, tensor in exported.state.items():
            for canonical, pattern in stacked.items():
                found = pattern.fullmatch(name)
                if found:
                    layers.setdefault(int(found.group(1)), {})[canonical] = tensor
                    break
            else:
                renamed = moe_file.match(name)
                if renamed:  # Mixtral's block_sparse_moe is transformers' mlp
                    name = self.moe_module[1].format(i=renamed.group(1)) + "." + name[renamed.end() :]
                state[name] = tensor
        for layer, parts in layers.items():
            prefix = self.moe_module[1].format(i=layer)
            state[f"{prefix}.experts.gate_up_proj"] = torch.cat([parts["FFN_GATE_EXP"], parts["FFN_UP_EXP"]], dim=1)
            state[f"{prefix}.experts.down_proj"] = parts["FFN_DOWN_EXP"]
        return dataclasses.replace(exported, state=state)

    def expects(self, config: Mapping[str, Any], canonical: str, layer: int | None) -> bool:
        if layer is None or canonical not in (*DENSE_PARTS, *EXPERT_PARTS, *SHARED_EXPERT_PARTS):
            return True
        if not expert_layers(config)[layer]:
            return canonical in DENSE_PARTS
        return canonical in EXPERT_PARTS or (
            canonical in SHARED_EXPERT_PARTS and bool(config.get("shared_expert_d_ff"))
        )

    def tensors_from_gguf(self, config, tensors, dequantize, path: Path):
        def shaped(tensor):
            values = dequantize(tensor)
            return values.reshape(1, -1) if tensor.name.endswith(f"{SHARED_GATE}.weight") else values

        return super().tensors_from_gguf(config, tensors, shaped, path)

    def to_gguf(self, model) -> GGUFExport:
        exported = super().to_gguf(model)
        tensors = {
            name: tensor.reshape(-1) if name.endswith(f"{SHARED_GATE}.weight") else tensor
            for name, tensor in exported.tensors.items()
        }
        return dataclasses.replace(exported, tensors=tensors)


# --- Mixtral ---------------------------------------------------------------------------

_MOE = f"{_LAYER}.block_sparse_moe"
MIXTRAL_EXPERTS = {
    "FFN_GATE_EXP": f"{_MOE}.experts.{{e}}.w1",
    "FFN_UP_EXP": f"{_MOE}.experts.{{e}}.w3",
    "FFN_DOWN_EXP": f"{_MOE}.experts.{{e}}.w2",
}
_ATTENTION = tuple(rule for rule in llama.TENSORS if not set(rule.parts) & set(DENSE_PARTS))


def _stacked_rules(experts: Mapping[str, str]) -> tuple[HFTensor, ...]:
    return tuple(HFTensor(_stacked(template), (canonical,)) for canonical, template in experts.items())


def mixtral_settings(hf) -> dict[str, Any]:
    return {
        **llama.settings(hf),
        "experts": int(hf.num_local_experts),
        "experts_per_token": int(hf.num_experts_per_tok),
    }


def mixtral_fields(config: dict[str, Any]) -> dict[str, Any]:
    return {
        **llama.fields(config),
        "intermediate_size": config.get("expert_d_ff") or config["d_ff"],
        "num_local_experts": config["experts"],
        "num_experts_per_tok": config["experts_per_token"],
        "sliding_window": config.get("sliding_window"),
    }


def _mixtral_gguf_refusal(config: dict[str, Any]) -> str | None:
    return llama._llama_gguf_refusal(config)


MIXTRAL = ExpertFamily(
    name="mixtral",
    title="Mixtral",
    hf_model_types=("mixtral",),
    hf_class="MixtralForCausalLM",
    tensors=(*_ATTENTION, HFTensor(f"{_MOE}.gate", ("FFN_GATE_INP",)), *_stacked_rules(MIXTRAL_EXPERTS)),
    settings=mixtral_settings,
    fields=mixtral_fields,
    gguf_architecture="llama",
    gguf_pairs=True,
    gguf_keys=(
        *llama.GGUF_KEYS,
        GGUFKey("num_local_experts", "LLM.EXPERT_COUNT"),
        GGUFKey("num_experts_per_tok", "LLM.EXPERT_USED_COUNT"),
    ),
    gguf_checks=llama.gguf_checks,
    # llama.cpp's llama files with experts: llama.expert_count says so before any tensor is read.
    gguf_claims=lambda metadata: bool(metadata.get("llama.expert_count")),
    chooses=llama.choose,
    refuses_gguf=_mixtral_gguf_refusal,
    experts=MIXTRAL_EXPERTS,
    moe_module=(_MOE, f"{_LAYER}.mlp"),
)


# --- Qwen2-MoE -------------------------------------------------------------------------

_MLP = f"{_LAYER}.mlp"
QWEN2_MOE_EXPERTS = {
    "FFN_GATE_EXP": f"{_MLP}.experts.{{e}}.gate_proj",
    "FFN_UP_EXP": f"{_MLP}.experts.{{e}}.up_proj",
    "FFN_DOWN_EXP": f"{_MLP}.experts.{{e}}.down_proj",
}


def _layer_groups(sparse: list[bool]) -> list[dict[str, Any]] | None:
    """Runs of layers with and without experts as the card's layer groups (None: all have them)."""
    if all(sparse):
        return None
    groups: list[dict[str, Any]] = []
    for has in sparse:
        if groups and groups[-1].get("experts", True) == has:
            groups[-1]["repeat"] = groups[-1].get("repeat", 1) + 1
        else:
            groups.append({} if has else {"experts": False})
    return groups


def qwen2_moe_settings(hf) -> dict[str, Any]:
    if not hf.num_experts:
        raise ZooError("num_experts 0: no layer has experts (a dense Qwen2 is model_type qwen2)")
    if not getattr(hf, "shared_expert_intermediate_size", 0):
        raise ZooError("shared_expert_intermediate_size 0; Qwen2-MoE's layers always have a shared expert")
    only = set(hf.mlp_only_layers or [])
    step = int(hf.decoder_sparse_step or 1)
    sparse = [i not in only and (i + 1) % step == 0 for i in range(hf.num_hidden_layers)]
    config = {
        **llama.settings(hf, attention_bias="qkv" if getattr(hf, "qkv_bias", True) else "none"),
        "experts": int(hf.num_experts),
        "experts_per_token": int(hf.num_experts_per_tok),
        "expert_d_ff": int(hf.moe_intermediate_size),
        "norm_topk_prob": bool(hf.norm_topk_prob),
        "shared_expert_d_ff": int(hf.shared_expert_intermediate_size),
    }
    groups = _layer_groups(sparse)
    if groups is not None:
        config["layers"] = groups
    return config


def qwen2_moe_fields(config: dict[str, Any]) -> dict[str, Any]:
    return {
        **llama.fields(config),
        "num_experts": config["experts"],
        "num_experts_per_tok": config["experts_per_token"],
        "moe_intermediate_size": config.get("expert_d_ff") or config["d_ff"],
        "shared_expert_intermediate_size": config["shared_expert_d_ff"],
        "norm_topk_prob": config.get("norm_topk_prob") is not False,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [i for i, has in enumerate(expert_layers(config)) if not has],
        "qkv_bias": config["attention_bias"] == "qkv",
        "use_sliding_window": False,
    }


def qwen2_moe_gguf_checks(hf, metadata: Mapping[str, Any], path: Path, key) -> None:
    """llama.cpp's qwen2moe: experts and a shared expert in every layer, query/key/value
    biases, the k weights used as they are."""
    llama.gguf_checks(hf, metadata, path, key)
    hf.qkv_bias, hf.norm_topk_prob, hf.mlp_only_layers, hf.decoder_sparse_step = True, False, [], 1


def _qwen2_moe_gguf_refusal(config: dict[str, Any]) -> str | None:
    reason = llama._gguf_refusal(config)
    if reason is None and config.get("norm_topk_prob") is not False:
        return "rescales its experts' weights (norm_topk_prob); llama.cpp's qwen2moe uses them as they are"
    if reason is None and not all(expert_layers(config)):
        return "has layers without experts; llama.cpp's qwen2moe has experts in every layer"
    if reason is None and config["attention_bias"] != "qkv":
        return "has no query/key/value biases; llama.cpp's qwen2moe has them"
    return reason


QWEN2_MOE = ExpertFamily(
    name="qwen2_moe",
    title="Qwen2-MoE",
    hf_model_types=("qwen2_moe",),
    hf_class="Qwen2MoeForCausalLM",
    tensors=(
        *llama.TENSORS,  # the dense feed-forward of layers without experts
        HFTensor(f"{_MLP}.gate", ("FFN_GATE_INP",)),
        *_stacked_rules(QWEN2_MOE_EXPERTS),
        HFTensor(f"{_MLP}.shared_expert.gate_proj", ("FFN_GATE_SHEXP",)),
        HFTensor(f"{_MLP}.shared_expert.up_proj", ("FFN_UP_SHEXP",)),
        HFTensor(f"{_MLP}.shared_expert.down_proj", ("FFN_DOWN_SHEXP",)),
        HFTensor(f"{_MLP}.shared_expert_gate", ("FFN_GATE_INP_SHEXP",)),
    ),
    settings=qwen2_moe_settings,
    fields=qwen2_moe_fields,
    gguf_architecture="qwen2moe",
    gguf_pairs=False,
    gguf_keys=(
        *llama.GGUF_KEYS,
        GGUFKey("num_experts", "LLM.EXPERT_COUNT"),
        GGUFKey("num_experts_per_tok", "LLM.EXPERT_USED_COUNT"),
        GGUFKey("moe_intermediate_size", "LLM.EXPERT_FEED_FORWARD_LENGTH"),
        GGUFKey("shared_expert_intermediate_size", "LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH"),
    ),
    gguf_checks=qwen2_moe_gguf_checks,
    chooses=llama.choose,
    refuses_gguf=_qwen2_moe_gguf_refusal,
    experts=QWEN2_MOE_EXPERTS,
    moe_module=(_MLP, _MLP),
)
