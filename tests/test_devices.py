"""--device and --dtype: resolution, one-line refusals, bfloat16 sampling and training on the CPU.

The tests marked `cuda` need a CUDA GPU and skip, saying so, without one
(benchmarks/gpu_check.sh runs them on a GPU machine).
"""

from __future__ import annotations

import platform
import tomllib

import pytest
import torch

import zoo_core
from zoo_core.devices import Placement, cpu_flags_digest, resolve_device, resolve_dtype
from zoo_core.errors import ZooError

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none on this machine); run benchmarks/gpu_check.sh on one")


def test_auto_is_the_cpu_on_a_machine_without_accelerators():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: auto picks it")
    assert resolve_device("auto") == resolve_device(None) == torch.device("cpu")
    assert resolve_dtype(None) is torch.float32 and resolve_dtype("bfloat16") is torch.bfloat16


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_asking_for_cuda_without_it_is_one_line(zoo):
    result = zoo("sample", "transformer-6b-sin", "--device", "cuda", "--prompt", "ROMEO:")
    assert result.code == 1
    assert result.err.strip().splitlines() == [
        "zoo: error: --device cuda: CUDA is not available (this torch is built without CUDA); use --device cpu or auto"]
    with pytest.raises(ZooError, match="CUDA is not available"):
        zoo_core.load("transformer-6b-sin", device="cuda:1")


@pytest.mark.parametrize("command", [["sample", "bigram", "--prompt", "x"], ["eval", "bigram"], ["attention", "bigram", "--prompt", "x"],
                                     ["train", "bigram"], ["compare", "bigram", "bigram"], ["experiment", "depth-1-2"]])
def test_a_misspelt_device_is_a_usage_error_on_every_command(zoo, capsys, command):
    with pytest.raises(SystemExit) as stopped:
        zoo(*command, "--device", "gpu")
    assert stopped.value.code == 2
    assert "'gpu' is not a device; use auto, cpu, cuda, cuda:N or mps" in capsys.readouterr().err


def test_bfloat16_sampling_on_the_cpu(zoo):
    result = zoo("sample", "transformer-6b-sin", "--device", "cpu", "--dtype", "bfloat16", "--prompt", "ROMEO:", "--max-new-tokens", "20")
    assert result.code == 0, result.err
    assert result.out.startswith("ROMEO:") and len(result.out) > len("ROMEO:") + 10


def test_load_casts_after_verifying_and_samples_deterministically():
    model = zoo_core.load("transformer-6b-sin", device="cpu", dtype="bfloat16")
    assert {p.dtype for p in model.network.parameters()} == {torch.bfloat16}
    # Buffers (position frequency tables) keep float32: large positions need the precision.
    assert all(b.dtype != torch.bfloat16 for b in model.network.buffers())
    assert model.generate("ROMEO:", 20, seed=3) == model.generate("ROMEO:", 20, seed=3)
    full = zoo_core.load("transformer-6b-sin")
    assert {p.dtype for p in full.network.parameters()} == {torch.float32}
    assert {p.dtype for p in full.to("cpu", "bfloat16").network.parameters()} == {torch.bfloat16}


def test_bfloat16_evaluation_is_close_to_float32(zoo):
    import json

    full = json.loads(zoo("eval", "transformer-1b-learned-ctx8", "--windows", "32", "--json").out)
    half = zoo("eval", "transformer-1b-learned-ctx8", "--windows", "32", "--json", "--dtype", "bfloat16")
    assert half.code == 0, half.err
    half = json.loads(half.out)
    assert half["validation_loss"] == pytest.approx(full["validation_loss"], abs=0.05)
    assert half["validation_loss"] != full["validation_loss"]  # it really computed in bfloat16


def _short_training(placement: Placement, steps: int = 30):
    from zoo_core.corpus.batches import Corpus
    from zoo_core.loading.api import build_network, catalogue, load_tokenizer
    from zoo_core.training.job import TrainingJob
    from zoo_core.training.loop import StandardTrainer, seeded_network

    from .conftest import ROOT

    variant = catalogue().get("transformer-1b-learned-ctx8")
    recipe = variant.card.recipe.model_validate({**variant.card.recipe.model_dump(), "steps": steps, "eval_every": steps, "eval_windows": 32})
    text = (ROOT / "data" / "tinyshakespeare.txt").read_text(encoding="utf-8")[:30_000]
    corpus = Corpus.from_text(text, load_tokenizer(variant), recipe.train_fraction)
    network = seeded_network(lambda: build_network(variant), recipe.seed)
    result = StandardTrainer().run(network, TrainingJob(recipe=recipe, corpus=corpus, context_length=variant.card.context_length, placement=placement))
    return network, result


def test_bfloat16_autocast_training_on_the_cpu_lowers_the_loss_and_keeps_float32_weights():
    network, result = _short_training(Placement(torch.device("cpu"), torch.bfloat16))
    assert result.history[-1]["train"] < result.history[0]["train"] - 0.5
    assert {p.dtype for p in network.parameters()} == {torch.float32}


def test_a_trained_card_records_where_it_was_trained(zoo, tmp_path, monkeypatch):
    monkeypatch.delenv("ZOO_REGISTRY", raising=False)
    from .conftest import ROOT

    data = tmp_path / "small.txt"
    data.write_text((ROOT / "data" / "tinyshakespeare.txt").read_text(encoding="utf-8")[:30_000], encoding="utf-8")
    result = zoo("train", "transformer-1b-learned-ctx8", "--steps", "3", "--data", str(data), "--out", str(tmp_path / "out"),
                 "--quiet", "--device", "cpu", "--dtype", "bfloat16")
    assert result.code == 0, result.err
    text = (tmp_path / "out" / "registry.toml").read_text()
    assert '[transformer-1b-learned-ctx8.trained_with]\ndevice = "cpu"\ndtype = "bfloat16"\nworld_size = 1' in text
    # And what decides float32's last bits besides (docs/determinism.md): this process ran it.
    recorded = tomllib.loads(text)["transformer-1b-learned-ctx8"]["trained_with"]
    assert (recorded["torch_version"], recorded["threads"]) == (torch.__version__, torch.get_num_threads())
    assert (recorded["cpu_capability"], recorded["machine"]) == (torch.backends.cpu.get_cpu_capability(), platform.machine())
    assert recorded["cpu_flags"] == cpu_flags_digest() and len(recorded["cpu_flags"]) == 16


@pytest.mark.cuda
@CUDA
def test_cuda_training_matches_the_cpu_for_a_few_steps():
    cpu, _ = _short_training(Placement(torch.device("cpu"), torch.float32), steps=10)
    gpu, _ = _short_training(Placement(torch.device("cuda"), torch.float32), steps=10)
    for (name, a), b in zip(cpu.state_dict().items(), gpu.state_dict().values()):
        assert (a - b.cpu()).abs().max() < 1e-3, name


@pytest.mark.cuda
@CUDA
def test_bfloat16_training_on_cuda_lowers_the_loss():
    if not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bfloat16")
    _, result = _short_training(Placement(torch.device("cuda"), torch.bfloat16), steps=60)
    assert result.history[-1]["train"] < result.history[0]["train"] - 0.5


@pytest.mark.cuda
@CUDA
def test_float16_training_on_cuda_uses_the_gradient_scaler():
    placement = Placement(torch.device("cuda"), torch.float16)
    assert placement.scaler.is_enabled()
    _, result = _short_training(placement, steps=60)
    assert result.history[-1]["train"] < result.history[0]["train"] - 0.5


@pytest.mark.cuda
@CUDA
def test_kv_cache_equals_uncached_sampling_on_cuda():
    from zoo_core.inference.sampling import sample_tokens

    model = zoo_core.load("transformer-6b-sin", device="cuda")
    ids = torch.tensor([model.encode_prompt("ROMEO:")], device="cuda")
    cached = sample_tokens(model.network, ids, 300, generator=torch.Generator().manual_seed(1), use_cache=True)
    uncached = sample_tokens(model.network, ids, 300, generator=torch.Generator().manual_seed(1), use_cache=False)
    assert torch.equal(cached, uncached)


@pytest.mark.cuda
@CUDA
def test_the_same_seed_samples_the_same_text_on_cuda_and_cpu():
    cpu = zoo_core.load("transformer-6b-sin").generate("ROMEO:", 30, seed=5)
    gpu = zoo_core.load("transformer-6b-sin", device="cuda").generate("ROMEO:", 30, seed=5)
    assert cpu[:20] == gpu[:20]  # the draws are on the CPU generator; only logit rounding can part them later
