"""The training loss: mean cross-entropy whose backward makes one pass over the logits.

`torch.nn.functional.cross_entropy` backpropagates through two operators: the
negative log-likelihood's backward writes a dense (N, V) gradient that is zero
but for one entry per row, then log-softmax's backward reads it and the saved
log-probabilities and writes a third (N, V) tensor. The gradient is known in
closed form, softmax(logits) - one_hot(targets), so the backward here turns the
saved log-probabilities into it in place: one pass instead of three, and no
zero-filled tensor. At transformer-6b-sin's shape (1,024 rows by a 1,024-token
vocabulary) those passes were about a tenth of a training step on the CPU
(`benchmarks/bench_training.py`).

The forward is torch's (log-softmax, then the negative log-likelihood), so the
loss is the same bit for bit; the gradient is the same expression, equal to
float rounding. Without gradients (evaluation) torch's own function runs.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        log_probs = torch.log_softmax(logits, dim=-1)
        ctx.save_for_backward(log_probs, targets)
        return F.nll_loss(log_probs, targets)  # torch's own forward: the same loss, bit for bit

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        log_probs, targets = ctx.saved_tensors
        # Nothing else holds the log-probabilities: they become the gradient in
        # place. A second backward through the same graph would find them changed;
        # autograd refuses that (the graph is freed) unless retain_graph is asked.
        gradient = log_probs.exp_()
        gradient[torch.arange(len(targets), device=targets.device), targets] -= 1
        return gradient.mul_(grad / len(targets)), None


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of (N, V) logits against (N,) target ids.

    Half-precision logits (autocast) are scored in float32, as torch does for
    `F.cross_entropy` under autocast."""
    if not (torch.is_grad_enabled() and logits.requires_grad):
        return F.cross_entropy(logits, targets)
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    return _CrossEntropy.apply(logits, targets)
