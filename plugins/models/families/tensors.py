"""The transformer's tensors keyed on llama.cpp's canonical names, and the
transforms between a family's layouts and the zoo's.

Every conversion goes through one intermediate form, the *canonical state*:
``(canonical name, layer or None, "weight" | "bias") -> tensor``, with the
canonical names of llama.cpp's ``gguf.MODEL_TENSOR`` (``ATTN_Q``, ``FFN_GATE``,
...), each tensor as a torch ``Linear`` holds it (out, in), and each head's
query and key rows in transformers' rotate_half order. A family's record says
only which of its tensors holds which canonical ones (`HFTensor`); the zoo's
side is written once, here:

- The zoo's attention is one ``qkv`` Linear, rows [queries; keys; values]
  (``n_head + 2 n_kv_head`` heads), which is llama.cpp's fused ``ATTN_QKV``
  (GPT-2's, nanoGPT's); the gated feed-forward one ``up`` Linear, rows [gate; up].
- The zoo's RoPE rotates adjacent feature pairs (2i, 2i+1); transformers'
  families rotate feature i with i + D/2 (rotate_half). Reordering each head's
  query and key rows (and a QK-norm's scales) turns one into the other exactly,
  within the rotary part only when it is partial; llama.cpp's converter stores
  ``llama`` files in pairs order the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import torch

from zoo_core.errors import ZooError, printable

Key = tuple[str, "int | None", str]  # (canonical name, layer, "weight" or "bias")

# canonical name -> the zoo transformer's module ("{i}": the layer)
ZOO_MODULES = {
    "TOKEN_EMBD": "token_embedding",
    "POS_EMBD": "positions.table",
    "ATTN_NORM": "blocks.{i}.norm1",
    "ATTN_OUT": "blocks.{i}.attention.proj",
    "ATTN_Q_NORM": "blocks.{i}.attention.q_norm",
    "ATTN_K_NORM": "blocks.{i}.attention.k_norm",
    "FFN_NORM": "blocks.{i}.norm2",
    "FFN_DOWN": "blocks.{i}.feed_forward.down",
    "OUTPUT_NORM": "final_norm",
    "OUTPUT": "lm_head",
    "ATTN_POST_NORM": "blocks.{i}.post_attention_norm",
    "FFN_POST_NORM": "blocks.{i}.post_feed_forward_norm",
}
# zoo modules that hold several canonical tensors' rows, in this order
ZOO_JOINED = {
    "blocks.{i}.attention.qkv": ("ATTN_Q", "ATTN_K", "ATTN_V"),
    "blocks.{i}.feed_forward.up": ("FFN_GATE", "FFN_UP"),  # a plain feed-forward's is FFN_UP alone
}
FUSED_QKV, QKV_MODULE = "ATTN_QKV", "blocks.{i}.attention.qkv"
# rows rotated per head, and how many heads hold them: query heads, key heads, or one scale
ROTATED = {"ATTN_Q": "n_head", "ATTN_K": "n_kv_head", "ATTN_Q_NORM": None, "ATTN_K_NORM": None}
EMBEDDING, HEAD = "TOKEN_EMBD", "OUTPUT"
PER_LAYER: tuple[str, ...] = (
    "ATTN_NORM",
    "ATTN_Q",
    "ATTN_K",
    "ATTN_V",
    "ATTN_OUT",
    "FFN_NORM",
    "FFN_GATE",
    "FFN_UP",
    "FFN_DOWN",
)
PER_LAYER += ("ATTN_POST_NORM", "FFN_POST_NORM", "ATTN_Q_NORM", "ATTN_K_NORM")  # sandwich norms, QK-norm


@dataclass(frozen=True)
class Heads:
    """What the transforms need of the attention's shape."""

    n_head: int
    n_kv_head: int
    head_size: int
    rotary: int  # leading features of each head that rotate (0: none do)

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> "Heads":
        """The heads of a card's config (its defaults as the transformer builds them)."""
        n_head = config["n_head"]
        # An impossible count (0 heads) is the card's to refuse, naming the field: no division here.
        head_size = config.get("head_size") or (config["d_model"] // n_head if n_head > 0 else 0)
        rope = config.get("positions") == "rope"
        rotary = round(config.get("rotary_fraction", 1.0) * head_size) if rope else 0
        return cls(n_head, config.get("n_kv_head") or n_head, head_size, rotary)


def pairs_order(head_size: int, rotary: int) -> torch.Tensor:
    """Feature order taking a head from rotate_half's layout to adjacent pairs:
    new feature 2i is old i, 2i + 1 is old i + rotary/2; the rest stay."""
    half = rotary // 2
    order = torch.arange(head_size)
    order[: 2 * half] = torch.stack([torch.arange(half), torch.arange(half) + half], dim=1).flatten()
    return order


def reorder_heads(rows: torch.Tensor, count: int, heads: Heads, to_pairs: bool) -> torch.Tensor:
    """Each of ``count`` heads' rows (or a per-head scale, ``count`` 1) from
    rotate_half order to adjacent pairs, or back."""
    if heads.rotary == 0:
        return rows
    order = pairs_order(heads.head_size, heads.rotary)
    if not to_pairs:
        order = torch.argsort(order)
    shaped = rows.reshape(count, heads.head_size, *rows.shape[1:])
    return shaped[:, order].reshape(rows.shape)


def rotated(state: dict[Key, torch.Tensor], heads: Heads, to_pairs: bool) -> dict[Key, torch.Tensor]:
    """``state`` with every head's query and key rows (and QK-norm scales) reordered."""
    out = dict(state)
    for key, tensor in state.items():
        if key[0] in ROTATED:
            count = {"n_head": heads.n_head, "n_kv_head": heads.n_kv_head, None: 1}[ROTATED[key[0]]]
            out[key] = reorder_heads(tensor, count, heads, to_pairs)
    return out


# --- the zoo's side ---------------------------------------------------------------


def layer_and_kind(found: re.Match[str]) -> tuple[int | None, str]:
    """The layer (None for a tensor outside the layers) and "weight" or "bias" of a matched name."""
    groups = found.groups()
    return (int(groups[0]) if len(groups) == 2 else None), groups[-1]


def _zoo_pattern(module: str) -> re.Pattern[str]:
    return re.compile(re.escape(module).replace(r"\{i\}", r"(\d+)") + r"\.(weight|bias)")


_ZOO_SINGLE = [(_zoo_pattern(module), canonical) for canonical, module in ZOO_MODULES.items()]
_ZOO_JOINED = [(_zoo_pattern(module), parts) for module, parts in ZOO_JOINED.items()]


def zoo_from_canonical(state: Mapping[Key, torch.Tensor], heads: Heads) -> dict[str, torch.Tensor]:
    """The canonical state under the zoo transformer's names and in its layouts."""
    state = rotated(dict(state), heads, to_pairs=True)
    ours: dict[str, torch.Tensor] = {}
    joined: dict[tuple[str, int | None, str], list[torch.Tensor | None]] = {}
    for (canonical, layer, kind), tensor in state.items():
        if canonical == FUSED_QKV:
            continue
        single = ZOO_MODULES.get(canonical)
        if single is not None:
            ours[f"{single.format(i=layer)}.{kind}"] = tensor
            continue
        module, parts = next((m, p) for m, p in ZOO_JOINED.items() if canonical in p)
        joined.setdefault((module, layer, kind), [None] * len(parts))[parts.index(canonical)] = tensor
    for (canonical, layer, kind), tensor in state.items():
        if canonical == FUSED_QKV:  # already the zoo's rows; rotating them would need the split
            if heads.rotary:
                raise ZooError("fused query/key/value rows with RoPE: the family must name ATTN_Q, ATTN_K and ATTN_V")
            ours[f"{QKV_MODULE.format(i=layer)}.{kind}"] = tensor
    for (module, layer, kind), pieces in joined.items():
        present = [piece for piece in pieces if piece is not None]
        if module.endswith("qkv") and len(present) != 3:
            continue  # incomplete: the shape check names what is missing
        ours[f"{module.format(i=layer)}.{kind}"] = torch.cat(present) if len(present) > 1 else present[0]
    return ours


def canonical_from_zoo(ours: Mapping[str, torch.Tensor], heads: Heads, gated: bool) -> dict[Key, torch.Tensor]:
    """The zoo transformer's tensors in the canonical form (``gated``: its
    feed-forward's ``up`` holds the gate's rows before its own)."""
    split = {"ATTN_Q": heads.n_head, "ATTN_K": heads.n_kv_head, "ATTN_V": heads.n_kv_head}
    state: dict[Key, torch.Tensor] = {}
    for name, tensor in ours.items():
        for pattern, canonical in _ZOO_SINGLE:
            found = pattern.fullmatch(name)
            if found:
                layer, kind = layer_and_kind(found)
                state[(canonical, layer, kind)] = tensor
                break
        else:
            for pattern, parts in _ZOO_JOINED:
                found = pattern.fullmatch(name)
                if found:
                    layer, kind = int(found.group(1)), found.group(2)
                    if parts[0] == "ATTN_Q":
                        pieces = tensor.split([split[p] * heads.head_size for p in parts])
                    elif gated:
                        pieces = tensor.chunk(2)
                    else:
                        parts, pieces = ("FFN_UP",), (tensor,)
                    state.update({(part, layer, kind): piece for part, piece in zip(parts, pieces)})
                    break
            else:
                raise ZooError(f"'{printable(name)}' is not one of the transformer's tensors")
    return rotated(state, heads, to_pairs=False)


# --- a family's side ------------------------------------------------------------------


@dataclass(frozen=True)
class HFTensor:
    """One of a family's tensors (weight and bias alike) and the canonical
    tensors it holds. ``module``: its name, "{i}" for the layer. Several parts
    are joined by ``rows`` (one after another) or by ``heads`` (each head's
    query, key and value rows side by side, GPT-NeoX's fused attention).
    ``transposed``: stored (in, out), as GPT-2's Conv1D does."""

    module: str
    parts: tuple[str, ...]
    join: str = "rows"
    transposed: bool = False

    def pattern(self) -> re.Pattern[str]:
        return _zoo_pattern(self.module)


def split_parts(rule: HFTensor, tensor: torch.Tensor, heads: Heads) -> list[torch.Tensor]:
    """A family's tensor as its canonical parts."""
    if rule.transposed and tensor.dim() == 2:
        tensor = tensor.T
    if len(rule.parts) == 1:
        return [tensor.contiguous() if rule.transposed else tensor]
    if rule.join == "heads":  # (H, 3, D, ...) -> three (H*D, ...)
        rest = tensor.shape[1:]
        if tensor.shape[0] != heads.n_head * len(rule.parts) * heads.head_size:
            raise ValueError(
                f"{rule.module} holds {tensor.shape[0]} rows; the configuration's heads need "
                f"{heads.n_head * len(rule.parts) * heads.head_size}"
            )
        by_head = tensor.reshape(heads.n_head, len(rule.parts), heads.head_size, *rest)
        return [by_head[:, part].reshape(-1, *rest) for part in range(len(rule.parts))]
    heads_of = {"ATTN_Q": heads.n_head, "ATTN_K": heads.n_kv_head, "ATTN_V": heads.n_kv_head}
    sizes = [heads_of[part] * heads.head_size for part in rule.parts]
    if sum(sizes) != tensor.shape[0]:
        raise ValueError(f"{rule.module} holds {tensor.shape[0]} rows; the configuration's heads need {sum(sizes)}")
    return [p.contiguous() for p in tensor.split(sizes)]


def join_parts(rule: HFTensor, parts: list[torch.Tensor], heads: Heads) -> torch.Tensor:
    """The canonical parts as the family's one tensor."""
    if len(parts) == 1:
        joined = parts[0]
    elif rule.join == "heads":
        rest = parts[0].shape[1:]
        shaped = [t.reshape(heads.n_head, 1, heads.head_size, *rest) for t in parts]
        joined = torch.cat(shaped, dim=1).reshape(-1, *rest)
    else:
        joined = torch.cat(parts)
    return joined.T.contiguous() if rule.transposed and joined.dim() == 2 else joined


def canonical_from_family(
    tensors: Mapping[str, torch.Tensor], rules: Iterable[HFTensor], heads: Heads, n_layer: int | None, refuse
) -> dict[Key, torch.Tensor]:
    """A family's tensors in the canonical form. Layers are read off the names
    (never enumerated from a claimed count); a name outside the rules, or a
    layer past ``n_layer`` (None: the shape check counts them later), is handed to ``refuse(name)``, and a tensor the
    configuration's heads do not divide to ``refuse(name, reason)``; it raises."""
    compiled = [(rule, rule.pattern()) for rule in rules]
    state: dict[Key, torch.Tensor] = {}
    for name, tensor in tensors.items():
        for rule, pattern in compiled:
            found = pattern.fullmatch(name)
            if found:
                layer, kind = layer_and_kind(found)
                if layer is not None and n_layer is not None and layer >= n_layer:
                    refuse(name)
                try:
                    parts = split_parts(rule, tensor, heads)
                except ValueError as exc:
                    refuse(name, f"tensor {printable(name)!r}: {exc}")
                state.update({(part, layer, kind): t for part, t in zip(rule.parts, parts)})
                break
        else:
            refuse(name)
    return state


def family_from_canonical(
    state: Mapping[Key, torch.Tensor], rules: Iterable[HFTensor], heads: Heads
) -> dict[str, torch.Tensor]:
    """The canonical state under a family's names; a canonical tensor no rule holds is refused."""
    theirs: dict[str, torch.Tensor] = {}
    placed: set[Key] = set()
    by_part = {part: rule for rule in rules for part in rule.parts}
    if FUSED_QKV in by_part:  # the family keeps the zoo's joined rows
        state = _fused(state)
    for canonical, layer, kind in state:
        rule = by_part.get(canonical)
        if rule is None:
            raise ZooError(f"the layout has no place for the transformer's {canonical} tensor")
        if (canonical, layer, kind) in placed:
            continue
        keys = [(part, layer, kind) for part in rule.parts]
        if not all(key in state for key in keys):
            raise ZooError(f"the layout joins {', '.join(rule.parts)}, and the transformer lacks one of them")
        theirs[f"{rule.module.format(i=layer)}.{kind}"] = join_parts(rule, [state[key] for key in keys], heads)
        placed.update(keys)
    return {name: tensor.contiguous() for name, tensor in theirs.items()}


def _fused(state: Mapping[Key, torch.Tensor]) -> dict[Key, torch.Tensor]:
    """``state`` with each layer's query, key and value rows joined as ``ATTN_QKV``."""
    parts = ("ATTN_Q", "ATTN_K", "ATTN_V")
    out = {key: tensor for key, tensor in state.items() if key[0] not in parts}
    for canonical, layer, kind in state:
        if canonical == "ATTN_Q":
            out[(FUSED_QKV, layer, kind)] = torch.cat([state[(part, layer, kind)] for part in parts])
    return out


def layer_count(names: Iterable[str], pattern: str = r"blocks\.(\d+)\.") -> int:
    """How many layers a set of tensor names holds (the highest index + 1, 0 for none)."""
    layers = {int(found.group(1)) for name in names if (found := re.match(pattern, name))}
    return max(layers) + 1 if layers else 0
