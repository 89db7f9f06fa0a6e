"""Bounded before built: hostile sizes are refused in one line, before anything is allocated."""

from __future__ import annotations

import time
import tracemalloc

import pytest

import zoo_core.inference.model  # noqa: F401
import zoo_core.loading.api
import zoo_plugins.models.transformer  # noqa: F401  imported before tracemalloc starts: it measures the check only
from zoo_core.catalogue.limits import (
    DEFAULT_MAX_MEMORY,
    DEFAULT_MAX_PARAMETERS,
    RUN_TOKENS,
    check_budget,
    estimate_cost,
    parse_size,
)
from zoo_core.errors import ZooError
from zoo_plugins.models.settings import TransformerConfig

from .hostile_cards import hostile_variant


def _one_line_error(result, *fragments):
    assert result.code == 1, result.out
    assert result.err.startswith("zoo: error: ") and result.err.count("\n") == 1, result.err
    for fragment in fragments:
        assert fragment in result.err, result.err


# Sizes that would allocate terabytes (or loop for ever) if the network were built first.
TOO_BIG = [
    ({"config__n_layer": 10**9}, "parameters, more than the limit of 1,000,000,000"),
    ({"config__d_model": 10**6, "config__d_ff": 4 * 10**6}, "parameters, more than the limit"),
    ({"context_length": 10**12}, "parameters, more than the limit"),  # learned positions: a table of 10**12 rows
    ({"context_length": 10**12, "config__positions": "sinusoidal"}, "(context_length 1000000000000), more than the limit of 16.0 GiB"),
    # A prompt of the whole context is fed 2,048 positions at a time, each chunk's scores
    # against every cached key: 2,048 × 10**7 per head (10**6 fits, in 15.3 GiB).
    ({"context_length": 10**7, "config__positions": "none"}, "more than the limit of 16.0 GiB"),
    ({"tokenizer__vocab_size": 10**11}, "parameters, more than the limit"),
]


@pytest.mark.parametrize(
    "changes, message, command",
    [(*case, "load") for case in TOO_BIG] + [(*TOO_BIG[0], "verify"), (*TOO_BIG[3], "verify")],
    ids=lambda v: str(v)[:40],
)
def test_too_big_to_build_is_refused_before_allocating(zoo, tmp_path, use_registry, changes, message, command):
    use_registry(hostile_variant(tmp_path, "huge", **changes))
    tracemalloc.start()
    started = time.perf_counter()
    result = zoo(command, "huge")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert time.perf_counter() - started < 10
    assert peak < 50 * 1024**2, f"{peak:,} bytes allocated"
    if command == "load":
        _one_line_error(result, "variant 'huge': ", message)
    else:
        assert result.code == 1 and message in result.out and "FAILED" in result.out


IMPOSSIBLE = [
    ({"config__n_head": 0}, "field 'config.n_head': must be at least 1, not 0"),
    ({"config__n_head": 3}, "field 'config.n_head': the width d_model = 32 is not divisible by 3 heads"),
    ({"config__n_layer": 0}, "field 'config.n_layer': must be at least 1, not 0"),
    ({"config__d_model": -32}, "field 'config.d_model': must be at least 1, not -32"),
    ({"config__d_model": 32.5}, "field 'config.d_model': must be a whole number, not 32.5"),
    ({"config__d_model": 32.0}, "field 'config.d_model': must be a whole number, not 32.0"),
    ({"config__n_head": "2"}, "field 'config.n_head': must be a whole number, not '2'"),
    ({"config__n_layer": True}, "field 'config.n_layer': must be a whole number, not True"),
    ({"config__d_ff": 0}, "field 'config.d_ff': must be at least 1, not 0"),
    ({"config__dropout": 1.5}, "field 'config.dropout': must be a number from 0 up to (not including) 1, not 1.5"),
    ({"context_length": 0}, "field 'context_length': Input should be greater than 0"),
    ({"context_length": 8.5}, "field 'context_length': Input should be a valid integer"),
    ({"tokenizer__vocab_size": 1024.0}, "field 'tokenizer.vocab_size': Input should be a valid integer"),
    ({"recipe__seed": 2**64}, "field 'recipe.seed': Input should be less than 18446744073709551616"),
]


@pytest.mark.parametrize(
    "changes, message, command",
    [(*case, "load") for case in IMPOSSIBLE] + [(*IMPOSSIBLE[i], command) for i in (0, 4) for command in ("show", "list")],
    ids=lambda v: str(v)[:40],
)
def test_impossible_shapes_are_refused_naming_the_field(zoo, tmp_path, use_registry, changes, message, command):
    registry = hostile_variant(tmp_path, "impossible", **changes)
    use_registry(registry)
    result = zoo(command, "impossible")
    _one_line_error(result, f"{registry}: variant 'impossible': {message}")


def test_impossible_shape_in_zoo_verify_is_a_failed_row(zoo, tmp_path, use_registry):
    use_registry(hostile_variant(tmp_path, "impossible", config__n_head=0))
    result = zoo("verify")
    assert result.code == 1 and "FAILED" in result.out and "field 'config.n_head': must be at least 1, not 0" in result.out
    assert "Traceback" not in result.err


def test_a_puzzle_card_with_an_enormous_window_is_refused(zoo, tmp_path, use_registry):
    # Not transformer-shaped: bounded by its largest size instead (the plugin
    # would otherwise build a list of 10**12 slot names before checking them).
    from .hostile_cards import card_data, write_catalogue

    data = card_data("puzzle-disobeys")
    data["config"]["max_tokens"] = 10**12
    use_registry(write_catalogue(tmp_path, {"puzzle-huge": data}))
    _one_line_error(zoo("load", "puzzle-huge"), "variant 'puzzle-huge': about", "more than the limit")


def test_the_limit_is_a_flag_and_an_environment_variable(zoo, tmp_path, monkeypatch):
    _one_line_error(zoo("--max-parameters", "1000", "load", "bigram"), "variant 'bigram': about 66,", "more than the limit of 1,000 ")
    monkeypatch.setenv("ZOO_MAX_PARAMETERS", "1000")
    _one_line_error(zoo("load", "bigram"), "more than the limit of 1,000 ")
    assert zoo("--max-parameters", "2M", "load", "bigram").code == 0  # the flag wins over the environment
    monkeypatch.delenv("ZOO_MAX_PARAMETERS")
    _one_line_error(zoo("--max-memory", "1K", "load", "bigram"), "more than the limit of 1.0 KiB")
    _one_line_error(zoo("--max-parameters", "lots", "load", "bigram"), "--max-parameters must be a positive number")


def test_shipped_variants_fit_the_default_limits_and_the_estimate_is_an_upper_bound():
    for variant in zoo_core.loading.api.catalogue():
        estimate = check_budget(variant.name, variant.card.architecture_config())
        if variant.card.parameters is not None and variant.card.architecture in ("transformer", "gpt", "bigram"):
            assert variant.card.parameters <= estimate.parameters <= 1.3 * variant.card.parameters + 10_000, variant.name


def test_estimate_and_sizes():
    assert estimate_cost({"d_model": 4, "n_layer": 1, "n_head": 1, "vocab_size": 2, "context_length": 3}).parameters > 0
    assert parse_size("16G", "x") == 16 * 1024**3 and parse_size("1000", "x") == 1000 and parse_size("1.5k", "x") == 1536
    for bad in ("", "-1", "0", "1e9", "nan", "G"):
        with pytest.raises(ZooError):
            parse_size(bad, "x")
    assert DEFAULT_MAX_PARAMETERS == 1_000_000_000


def test_an_architecture_plugin_may_give_its_own_count():
    """``estimate_parameters`` attached to a model factory replaces the generic estimate."""
    config = {"d_model": 4, "n_layer": 1, "n_head": 1, "vocab_size": 2, "context_length": 3}
    with pytest.raises(ZooError, match="variant 'x': about 1,000,000,000,000 parameters"):
        check_budget("x", config, lambda config: 10**12)
    with pytest.raises(ZooError, match="variant 'x': cannot estimate its size: ZeroDivisionError"):
        check_budget("x", config, lambda config: 1 // 0)
    assert check_budget("x", config, lambda config: 7).parameters == 7


def test_a_gru_is_counted_exactly_whatever_its_config_keys_suggest():
    """Sizes known without guessing: the architecture is built with nothing large
    allocated and its parameters counted, so a GRU needs no hand-written estimate."""
    from zoo_core.catalogue.limits import COUNTED
    from zoo_core.loading.sizing import measure_on_meta

    from .recurrent_models import TinyGRU, tiny_gru_parameters

    config = {"vocab_size": 65, "context_length": 64, "d_model": 48, "hidden": 128, "n_layer": 2}
    estimate = check_budget("gru", config, measure=lambda: measure_on_meta(lambda: TinyGRU(**config)))
    built = sum(p.numel() for p in TinyGRU(**config).parameters())
    assert estimate.parameters == built == tiny_gru_parameters(65, 48, 128, 2) == 178_929
    assert estimate.method == COUNTED
    assert estimate.memory_bytes >= 4 * built  # float32 weights, plus the window's activations


def test_a_huge_gru_is_refused_before_anything_is_allocated():
    from zoo_core.loading.sizing import measure_on_meta

    from .recurrent_models import TinyGRU

    config = {"vocab_size": 256, "context_length": 64, "d_model": 8, "hidden": 100_000, "n_layer": 1}
    assert estimate_cost(config).parameters == 5_752  # what the transformer-shaped guess from d_model says
    tracemalloc.start()
    started = time.perf_counter()
    with pytest.raises(ZooError) as refused:
        check_budget("gru-huge", config, measure=lambda: measure_on_meta(lambda: TinyGRU(**config)))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert time.perf_counter() - started < 10 and peak < 50 * 1024**2, f"{peak:,} bytes allocated"
    assert str(refused.value) == (
        "variant 'gru-huge': about 30,028,602,304 parameters, more than the limit of 1,000,000,000 "
        "(raise it with --max-parameters or ZOO_MAX_PARAMETERS if you mean it)"
    )


def test_a_factory_that_cannot_be_counted_falls_back_to_the_estimate_and_says_so():
    from zoo_core.loading.sizing import MAX_MODULES, measure_on_meta

    config = {"vocab_size": 2, "context_length": 3, "width": 40_000}  # not transformer-shaped: the largest size squared

    def reads_its_weights():
        import torch

        return torch.nn.Linear(2000, 1000).weight.sum().item()  # 2,000,000 elements: on meta, no value to read

    with pytest.raises(ZooError) as refused:
        check_budget("opaque", config, measure=lambda: measure_on_meta(reads_its_weights))
    assert str(refused.value).startswith("variant 'opaque': about 1,600,000,000 parameters, more than the limit")
    assert "; estimated from the config's sizes: cannot be built on the meta device: " in str(refused.value)

    def endless():
        import torch

        return torch.nn.Sequential(*(torch.nn.Identity() for _ in range(MAX_MODULES + 5)))

    small = {"vocab_size": 2, "context_length": 3, "width": 4}
    estimate = check_budget("endless", small, measure=lambda: measure_on_meta(endless))
    assert estimate.method == f"estimated from the config's sizes: not built on the meta device: it makes more than {MAX_MODULES:,} modules"


# Gemma 3 270M's sizes (docs/gemma3.md): a full window's logits alone are 32,768 × 262,144 floats.
GEMMA3_SHAPED = {
    "d_model": 640, "n_layer": 18, "n_head": 4, "n_kv_head": 1, "head_size": 256, "d_ff": 2048, "mlp": "geglu-tanh",
    "positions": "rope", "context_length": 32768, "vocab_size": 262144,
}


def test_a_long_context_model_fits_what_a_run_reads_not_a_full_window():
    estimate = estimate_cost(GEMMA3_SHAPED)
    assert estimate.memory_bytes < DEFAULT_MAX_MEMORY  # weights, a full KV cache, 2,048 positions at once: 8.1 GiB
    whole_window = TransformerConfig.estimate_sizes(GEMMA3_SHAPED)[1] * 4  # the rule before: 34 GB of logits alone
    assert whole_window > 2 * DEFAULT_MAX_MEMORY
    assert TransformerConfig.estimate_sizes(GEMMA3_SHAPED, tokens=RUN_TOKENS)[1] * 4 < whole_window / 8


def test_a_long_prompt_is_fed_in_chunks_and_draws_what_uncached_sampling_draws(monkeypatch):
    from zoo_core.inference import sampling
    from zoo_core.loading.api import load

    model = load("transformer-4b-learned")  # a window of 32
    read = []
    model.network.register_forward_pre_hook(lambda module, args, kwargs: read.append(args[0].shape[1]), with_kwargs=True)
    monkeypatch.setattr(sampling, "RUN_TOKENS", 5)
    prompt = "ROMEO: What light through yonder window breaks? It is the east"  # past the window: it slides too
    cached = model.generate(prompt, max_new_tokens=12, temperature=0)
    assert max(read) == 5 and read[:3] == [5, 5, 5]
    read.clear()
    assert model.generate(prompt, max_new_tokens=12, temperature=0, use_cache=False) == cached
    assert max(read) == 32  # uncached: the whole window every token (limits.py says so)
