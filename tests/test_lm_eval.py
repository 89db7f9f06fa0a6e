"""lm-evaluation-harness reads a variant through `zoo serve` and agrees with `zoo eval`.

The commands are the ones docs/serving.md gives, the `lm_eval` line exactly as
written there (only its port is the test server's)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the web tests need the web extra: pip install 'zoo-lm[web]'")
pytest.importorskip("lm_eval", reason="needs lm-evaluation-harness: pip install 'zoo-lm[eval-harness]'")
pytest.importorskip("transformers", reason="the exported tokenizer needs the hf extra: pip install 'zoo-lm[hf]'")

from tests.web_support import Server  # noqa: E402

from .conftest import ROOT  # noqa: E402

# About two minutes (lm-eval's import, the export, a whole scored text): with the rest
# of the suite, CI would pass its 20-minute budget. Run with `pytest -m slow tests/test_lm_eval.py`.
pytestmark = pytest.mark.slow

SECTION = "## Evaluating through the server with lm-evaluation-harness"


def _blocks() -> list[tuple[str, str]]:
    """(language, code) of every fenced block in the doc's lm-eval section."""
    doc = (ROOT / "docs" / "serving.md").read_text(encoding="utf-8")
    section = doc.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(\w+)\n(.*?)```", section, flags=re.S)


def test_lm_eval_bits_per_byte_agree_with_zoo_eval(tmp_path: Path):
    from zoo_core.evaluation.scoring import evaluate_language_model
    from zoo_core.loading.api import load

    blocks = _blocks()
    (serve,) = [code for language, code in blocks if language == "bash" and "zoo serve" in code]
    (prepare,) = [code for language, code in blocks if language == "bash" and "zoo export" in code]
    (write_text,) = [code for language, code in blocks if language == "python"]
    (task,) = [code for language, code in blocks if language == "yaml"]
    (command,) = [code.strip() for language, code in blocks if language == "bash" and "lm_eval" in code]
    assert serve.strip() == "zoo serve --no-gallery --port 8000"  # what Server starts, on a free port
    environment = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                   "OMP_NUM_THREADS": "1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}

    def run(arguments: list[str]) -> None:
        done = subprocess.run(arguments, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    server = Server()
    try:
        run(["bash", "-euo", "pipefail", "-c", prepare])
        run([sys.executable, "-c", write_text])
        (tmp_path / "zoo-bpb" / "zoo_bpb.yaml").write_text(task, encoding="utf-8")
        run(["bash", "-euo", "pipefail", "-c", command.replace("127.0.0.1:8000", f"127.0.0.1:{server.port}")])
    finally:
        server.stop()
    (results,) = (tmp_path / "zoo-bpb" / "results").rglob("results_*.json")
    harness = json.loads(results.read_text())["results"]["zoo_bpb"]["bits_per_byte,none"]
    # What `zoo eval gpt-char-mini --text-chars 6000` reports (one loss window: the bits do not use them).
    zoo_eval = evaluate_language_model(load("gpt-char-mini"), windows=1, text_chars=6000)["validation_bits_per_byte"]
    assert math.isclose(harness, zoo_eval, rel_tol=0.01), (harness, zoo_eval)
