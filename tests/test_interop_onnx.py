"""`zoo export --format onnx`: onnxruntime runs the graph with the zoo's logits.

Needs the `interop` extra (onnx, onnxscript, onnxruntime); without it the module
is skipped with that reason, and CI installs it.
"""

from __future__ import annotations

import pytest
import torch

onnxruntime = pytest.importorskip("onnxruntime", reason="the interop extra is not installed: pip install -e '.[interop]'")
pytest.importorskip("onnxscript", reason="the interop extra is not installed: pip install -e '.[interop]'")

import zoo_core  # noqa: E402
from zoo_core.corpus.batches import split_text  # noqa: E402
from zoo_core.corpus.datasets import read_text_file  # noqa: E402

from .conftest import ROOT  # noqa: E402

VALIDATION = split_text(read_text_file(ROOT / "data" / "tinyshakespeare.txt").text, 0.9)[1]


@pytest.mark.slow  # torch.onnx export takes 30-80 s on a loaded 2-core machine
def test_onnxruntime_gives_the_zoos_logits(tmp_path, zoo):
    result = zoo("export", "gpt-char-mini", "--format", "onnx", "--out", str(tmp_path))
    assert result.code == 0, result.err
    model = zoo_core.load("gpt-char-mini")
    session = onnxruntime.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    for text in (VALIDATION[:64], VALIDATION[1000:1017]):  # the full window and a shorter one: length is dynamic
        ids = torch.tensor([model.tokenizer.encode(text)])
        (theirs,) = session.run(["logits"], {"input_ids": ids.numpy()})
        with torch.no_grad():
            ours, _ = model.network(ids)
        assert theirs.shape == tuple(ours.shape)
        assert float((torch.from_numpy(theirs) - ours).abs().max()) <= 1e-4


def test_task_models_are_refused(tmp_path, zoo):
    result = zoo("export", "puzzle-disobeys", "--format", "onnx", "--out", str(tmp_path / "o"))
    assert result.code == 1 and "answers questions" in result.err and len(result.err.strip().splitlines()) == 1
