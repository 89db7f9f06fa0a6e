"""ONNX: the variant's network as a graph onnxruntime runs, logits checked.

The graph takes ``input_ids`` (batch, tokens: int64, at most the context window)
and returns ``logits`` (batch, tokens, vocabulary); batch and length are
dynamic. It is exported by torch.onnx from the same module the zoo runs, so
every architecture whose operations ONNX has can be exported; the KV cache is
not part of the graph (each call sees the whole window).
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import torch

from ..errors import ZooError
from ..plugin_api.protocols import TaskModel, implements
from .hf import logit_difference, verification_ids


def _logits_only(network: torch.nn.Module) -> torch.nn.Module:
    """``network`` wrapped as forward(input_ids) -> logits, the signature an ONNX graph should have."""

    class LogitsOnly(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids):
            return self.inner(input_ids)[0]

    return LogitsOnly(network).eval()


def export_onnx(model, out: Path) -> tuple[list[Path], dict]:
    try:
        import onnx  # noqa: F401
        import onnxruntime
    except ImportError:
        raise ZooError("ONNX export needs onnx and onnxruntime: pip install 'zoo-lm[onnx]'") from None
    if implements(model.network, TaskModel):
        raise ZooError(f"cannot export to ONNX: '{model.name}' answers questions; it has no logits over text to export")

    ids, _ = verification_ids(model)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "model.onnx"
    wrapper = _logits_only(model.network)
    example = torch.tensor([ids[: max(2, len(ids) // 2)]])
    tokens = torch.export.Dim("tokens", min=1, max=model.card.context_length)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # torch.onnx reports its steps on stdout
            torch.onnx.export(
                wrapper,
                (example,),
                str(path),
                input_names=["input_ids"],
                output_names=["logits"],
                dynamic_shapes={"input_ids": {0: torch.export.Dim("batch"), 1: tokens}},
                dynamo=True,
                verbose=False,
                external_data=False,
            )
    except Exception as exc:  # torch.onnx raises many kinds; the user needs one line
        raise ZooError(f"cannot export '{model.name}' to ONNX: {' '.join(str(exc).split())[:300]}") from None
    batch = torch.tensor([ids, ids[::-1]])  # two rows: a dynamic batch, a length other than the example's
    try:
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        (theirs,) = session.run(["logits"], {"input_ids": batch.numpy()})
    except Exception as exc:  # a plugin's operation onnxruntime cannot run: its own error types, one line here
        raise ZooError(
            f"cannot export '{model.name}' to ONNX: onnxruntime cannot run it: {' '.join(str(exc).split())[:300]}"
        ) from None
    with torch.no_grad():
        ours = wrapper(batch)
    difference, tolerance = logit_difference(torch.from_numpy(theirs), ours)
    if difference > tolerance:
        raise ZooError(f"onnxruntime's logits differ from the zoo's by {difference:.2e} (> {tolerance:.1e})")
    return [path], {"max_logit_difference": difference, "logit_tokens": len(ids)}
