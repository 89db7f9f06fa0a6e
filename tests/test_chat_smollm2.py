"""Chat with the real model (the smollm2 lane): SmolLM2-135M-Instruct's own
template renders as transformers renders it, and the chat commands of
docs/serving.md and the README run as written and answer that Paris is the
capital of France.

The model is the one `zoo import gguf` made of its GGUF file (the shared
`smollm2_home`).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess

import pytest

from .conftest import ROOT
from .references import reference
from .test_chat import CONVERSATIONS
from .web_support import ZOO, Server

transformers = pytest.importorskip(
    "transformers", reason="the interop extra is not installed: pip install -e '.[interop]'"
)
pytest.importorskip("gguf", reason="the gguf extra is not installed: pip install 'zoo-lm[gguf]'")

pytestmark = [pytest.mark.slow, pytest.mark.smollm2]

NAME = "smollm2-135m-instruct"
SECTION = (ROOT / "docs" / "serving.md").read_text(encoding="utf-8").split("## Chat: ")[1].split("\n## ")[0]
QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def smollm2(smollm2_home):
    """transformers' tokenizer for the GGUF file, and an environment whose catalogue
    holds the model `zoo import gguf` made of it (the shared, read-only home)."""
    gguf_file = reference("SmolLM2-135M-Instruct.Q4_1.gguf")
    tokenizer = transformers.AutoTokenizer.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
    return tokenizer, {**os.environ, "ZOO_HOME": str(smollm2_home), "OMP_NUM_THREADS": "2"}


def test_smollm2s_template_renders_as_transformers_renders_it(smollm2, monkeypatch):
    import zoo_core
    from zoo_core.inference.chat import render_chat

    tokenizer, environment = smollm2
    monkeypatch.setenv("ZOO_HOME", environment["ZOO_HOME"])
    spec = zoo_core.get_variant(NAME).card.chat
    assert spec is not None and spec.eos_token == "<|im_end|>"
    for messages in CONVERSATIONS:
        for add_generation_prompt in (True, False):
            theirs = tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=add_generation_prompt
            )
            assert render_chat(spec, messages, add_generation_prompt) == theirs


def test_the_documented_zoo_chat_answers_paris(smollm2):
    _, environment = smollm2
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    readme_command = f"zoo chat {NAME} --temperature 0"
    assert f"\n{readme_command}  " in readme
    (documented,) = re.findall(r"^\$ (zoo chat .*)$", SECTION, flags=re.MULTILINE)
    typed = [line.removeprefix(">>> ") for line in SECTION.split(documented)[1].split("```")[0].splitlines()]
    assert typed[1:] == [QUESTION, "The capital of France is Paris.", "/exit"]
    for command, shown in ((documented, typed[2]), (readme_command, "Paris")):
        done = subprocess.run(
            [*ZOO, *shlex.split(command)[1:]],
            input=f"{QUESTION}\n/exit\n",
            capture_output=True,
            text=True,
            env=environment,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr
        assert shown in done.stdout.split(">>> ")[1], done.stdout


def test_the_documented_openai_call_answers_paris(smollm2):
    pytest.importorskip("openai", reason="these tests need the web-test extra: pip install 'zoo-lm[web-test]'")
    _, environment = smollm2
    (snippet,) = re.findall(r"```python\n(.*?)```", SECTION, flags=re.DOTALL)
    server = Server(environment={"ZOO_HOME": environment["ZOO_HOME"]})
    try:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(snippet.replace("http://127.0.0.1:8000", server.url), "docs/serving.md", "exec"), {})
    finally:
        server.stop()
    assert "Paris" in printed.getvalue()
