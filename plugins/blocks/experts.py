"""A mixture of experts: the feed-forward of Mixtral and Qwen2-MoE.

A router (Linear(C, E), no bias) scores every expert for each token; softmax
over all E scores gives probabilities, the k highest choose the token's
experts, and the token's output is their outputs weighted by those
probabilities (rescaled to sum to 1 with ``norm_topk_prob``, as Mixtral always
does and Qwen2-MoE does when its config says so). Each expert is a feed-forward
like blocks.py's `FeedForward` (the block hands over its activation), without
biases; their weights are stacked, one tensor for all experts, as llama.cpp
stores them (``ffn_gate_exps`` and ``ffn_up_exps`` (E, F, C) joined per expert
as ``experts_up.weight``, ``ffn_down_exps`` as ``experts_down.weight``).
Qwen2-MoE adds a shared expert every token takes, scaled by sigmoid(x . g).

Dispatch is by expert: the (token, choice) pairs are sorted by expert, and each
expert that was chosen runs once on its own tokens' rows.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F

from zoo_core.errors import ZooError
from zoo_core.plugin_api.hook_points import HookPoint


class StackedLinear(nn.Module):
    """``count`` Linear(in, out) weights without biases in one tensor, ``weight`` (count, out, in),
    initialised as nn.Linear initialises each: uniform within 1/sqrt(in)."""

    def __init__(self, count: int, in_features: int, out_features: int):
        super().__init__()
        bound = 1 / math.sqrt(in_features)
        self.weight = nn.Parameter(torch.empty(count, out_features, in_features).uniform_(-bound, bound))


class SharedExpert(nn.Module):
    """The feed-forward every token takes beside its experts (Qwen2-MoE's): ``up``
    Linear(C, 2 F) for a gated kind (gate rows, then up rows) and ``down`` Linear(F, C),
    no biases; `Experts` runs it."""

    def __init__(self, d_model: int, d_ff: int, gated: bool):
        super().__init__()
        self.up = nn.Linear(d_model, (2 if gated else 1) * d_ff, bias=False)
        self.down = nn.Linear(d_ff, d_model, bias=False)


class Experts(nn.Module):
    """``experts`` feed-forwards of hidden width ``d_ff``, ``per_token`` of them per token.

    Hook points: ``probabilities`` (B, T, E), the router's softmax over the
    experts; ``chosen`` (B, T, k), the experts each token goes to (integer ids,
    highest probability first; a hook may replace them to re-route); and
    ``output`` (B, T, C)."""

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        experts: int,
        per_token: int,
        activation: Callable[[torch.Tensor], torch.Tensor],
        gated: bool,
        norm_topk_prob: bool = True,
        shared_d_ff: int | None = None,
        dropout: float = 0.0,
    ):
        super().__init__()
        if not 1 <= per_token <= experts:
            raise ValueError(f"{per_token} experts per token out of {experts}")
        self.count, self.per_token, self.norm_topk_prob = experts, per_token, norm_topk_prob
        self.gated, self.activation = gated, activation
        self.router = nn.Linear(d_model, experts, bias=False)
        self.probabilities = HookPoint()
        self.chosen = HookPoint()
        self.experts_up = StackedLinear(experts, d_model, (2 if self.gated else 1) * d_ff)
        self.experts_down = StackedLinear(experts, d_ff, d_model)
        if shared_d_ff:
            self.shared = SharedExpert(d_model, shared_d_ff, gated)
            self.shared_gate = nn.Linear(d_model, 1, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.output = HookPoint()

    def expert(self, rows: torch.Tensor, up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
        """One feed-forward of ``up`` (rows, C) and ``down`` (C, F) on ``rows`` (N, C)."""
        hidden = F.linear(rows, up)
        if self.gated:  # the gate's rows, then the up projection's
            gate, hidden = hidden.chunk(2, dim=-1)
            hidden = self.activation(gate) * hidden
        else:
            hidden = self.activation(hidden)
        return F.linear(hidden, down)

    def route(self, rows: torch.Tensor, shape: torch.Size) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's experts (N, k) and their weights (N, k); ``shape``: the input's, (B, T, C)."""
        probabilities = F.softmax(self.router(rows).float(), dim=-1)
        if self.probabilities.functions:
            probabilities = self.probabilities(probabilities.view(*shape[:-1], -1)).reshape(probabilities.shape)
        weights, chosen = probabilities.topk(self.per_token, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return chosen, weights.to(rows.dtype)

    def forward(self, x):
        shape = x.shape
        rows = x.reshape(-1, shape[-1])
        chosen, weights = self.route(rows, shape)
        if self.chosen.functions:  # hooks see (B, T, k), as every other point is shaped
            chosen = self.chosen(chosen.view(*shape[:-1], -1)).reshape(chosen.shape)
            if chosen.dtype != torch.long or chosen.min() < 0 or chosen.max() >= self.count:
                raise ZooError(f"a hook on 'chosen' must give expert ids 0 to {self.count - 1} (torch.long)")
        out = torch.zeros_like(rows)
        # Sort the (row, choice) pairs by expert: each expert's pairs are then one slice.
        flat = chosen.flatten()
        order = flat.argsort(stable=True)
        counts = torch.bincount(flat, minlength=self.count).tolist()
        start = 0
        for expert, count in enumerate(counts):
            if count == 0:
                continue
            pairs = order[start : start + count]
            start += count
            taken = pairs // self.per_token  # the rows these pairs came from
            output = self.expert(rows[taken], self.experts_up.weight[expert], self.experts_down.weight[expert])
            update = output * weights.flatten()[pairs, None]
            out = out.index_add(0, taken, update)
        if hasattr(self, "shared"):
            shared = self.expert(rows, self.shared.up.weight, self.shared.down.weight)
            out = out + torch.sigmoid(self.shared_gate(rows)) * shared
        x = out.view(shape)
        return self.output(self.dropout(x) if self.training else x)
