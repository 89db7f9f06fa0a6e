"""Models that are not windows: a model declares its context ``bounded`` (a
window, the default) or ``unbounded`` (a state carried by ``step``); sampling,
scoring and the authors' kit treat each on its own terms."""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn import functional as F

from zoo_core.errors import ZooError
from zoo_core.evaluation.bits import summed_nll
from zoo_core.inference.carried import carried_nll, context_description, feed
from zoo_core.inference.sampling import sample_tokens, stream_tokens
from zoo_core.inference.settings import SamplingSettings
from zoo_core.kit import testing
from zoo_core.plugin_api.manager import PluginInfo, PluginSet
from zoo_core.plugin_api.protocols import conformance_problem, context_kind

from .recurrent_models import ForgetfulGRU, GrowingMemory, TinyGRU


def _gru(seed: int = 0, **sizes) -> TinyGRU:
    torch.manual_seed(seed)
    return TinyGRU(**sizes).eval()


def test_a_model_says_nothing_and_is_bounded_or_declares_unbounded():
    transformer = testing.tiny_transformer_builder()()
    assert context_kind(transformer) == "bounded" and conformance_problem("models", transformer) is None
    assert context_kind(_gru()) == "unbounded" and conformance_problem("models", _gru()) is None


def test_an_unknown_kind_or_an_unbounded_model_without_step_is_refused_in_one_line():
    class Infinite(TinyGRU):
        context_kind = "infinite"

    class NoStep(TinyGRU):
        step = None

    assert conformance_problem("models", Infinite()) == (
        "a Infinite, whose context_kind 'infinite' is neither 'bounded' nor 'unbounded' "
        "(zoo_core.plugin_api.protocols.LanguageModel)"
    )
    assert conformance_problem("models", NoStep()) == (
        "a NoStep, whose context_kind is 'unbounded' but which lacks step(idx, state) -> (logits, state) "
        "(zoo_core.plugin_api.protocols.LanguageModel)"
    )
    # Through a plugin, as `zoo load` meets it: one line naming the plugin and the architecture.
    from zoo_core import hookimpl

    class Plugin:
        @hookimpl
        def register_models(register):
            register("no-step", lambda config, components: NoStep())

    plugins = PluginSet()
    plugins.add_plugin(Plugin, PluginInfo("stateful", "zoo-stateful", "1", False))
    with pytest.raises(ZooError) as refused:
        plugins.components["models"].create("no-step", {}, plugins.components)
    assert str(refused.value).startswith("plugin 'stateful': model 'no-step': the factory returned a NoStep, whose")
    assert "\n" not in str(refused.value)


def test_sampling_2000_tokens_past_the_window_feeds_each_position_once_and_the_state_stays_one_size():
    model = _gru()
    counted: list[int] = []
    sizes: set[int] = set()
    original = model.step

    def step(idx, state=None):
        counted.append(idx.shape[1])
        logits, state = original(idx, state)
        sizes.add(state.numel())
        return logits, state

    model.step = step
    prompt = torch.randint(0, 48, (1, 5), generator=torch.Generator().manual_seed(1))
    tokens = sample_tokens(model, prompt, SamplingSettings(max_new_tokens=2000), torch.Generator().manual_seed(2))
    assert tokens.shape == (1, 2005) and model.context_length == 8
    # The prompt once, then each drawn token but the last, alone: O(1) work per token.
    assert counted == [5] + [1] * 1999 and sum(counted) == 5 + 2000 - 1
    assert sizes == {24}  # (n_layer 1, batch 1, hidden 24), after 5 positions as after 2004


def test_a_long_prompt_is_fed_in_chunks_of_the_training_window():
    model = _gru()
    counted: list[int] = []
    original = model.step
    model.step = lambda idx, state=None: counted.append(idx.shape[1]) or original(idx, state)
    prompt = torch.randint(0, 48, (1, 21), generator=torch.Generator().manual_seed(1))
    list(stream_tokens(model, prompt, SamplingSettings(max_new_tokens=3)))
    assert counted == [8, 8, 5, 1, 1]


def test_carried_sampling_draws_what_recomputing_the_whole_text_each_step_would():
    model = _gru()
    prompt = torch.randint(0, 48, (2, 4), generator=torch.Generator().manual_seed(3))
    settings = SamplingSettings(max_new_tokens=40, top_k=10)
    generators = [torch.Generator().manual_seed(s) for s in (7, 8)]
    carried = sample_tokens(model, prompt, settings, generators)
    # The reference: every step reads the whole text from no state (no window, no carried state).
    from zoo_core.inference.sampling import draw_tokens

    generators = [torch.Generator().manual_seed(s) for s in (7, 8)]
    ids = prompt
    with torch.no_grad():
        for _ in range(40):
            logits, _ = model(ids)
            ids = torch.cat((ids, torch.tensor(draw_tokens(logits[:, -1], settings, generators))[:, None]), dim=1)
    assert torch.equal(carried, ids)


def test_bounded_models_sample_as_before_through_their_window():
    # A transformer has no step(): the sampler never looks for one.
    model = testing.tiny_transformer_builder()().eval()
    assert not hasattr(model, "step")
    out = sample_tokens(model, torch.zeros(1, 1, dtype=torch.long), 20, generator=torch.Generator().manual_seed(0))
    assert out.shape == (1, 21)


def test_scoring_an_unbounded_model_predicts_each_token_from_all_the_text_before_it():
    model = _gru()
    ids = torch.randint(0, 48, (70,), generator=torch.Generator().manual_seed(4)).tolist()
    with torch.no_grad():
        logits, _ = model(torch.tensor([ids[:-1]]))
    log_probs = F.log_softmax(logits[0].double(), dim=-1)
    first = 9
    expected = -sum(log_probs[p - 1, ids[p]].item() for p in range(first, len(ids)))
    assert math.isclose(carried_nll(model, ids, first, chunk=8), expected, rel_tol=1e-5)
    # bits per byte's summed_nll takes the carried path by the model's kind; a window would score differently.
    assert math.isclose(summed_nll(model, ids, first, context=8), expected, rel_tol=1e-5)
    assert context_description(model, 8) == "unbounded, state carried across the whole text (read in chunks of 8 tokens)"
    transformer = testing.tiny_transformer_builder()()
    assert context_description(transformer, 8) == "window of 8 tokens, sliding by 4"


def test_feed_returns_the_last_logits_and_the_state():
    model = _gru()
    ids = torch.randint(0, 48, (1, 19), generator=torch.Generator().manual_seed(5))
    last, state = feed(model, ids, 8)
    with torch.no_grad():
        whole, _ = model(ids)
    assert (last - whole[:, -1]).abs().max().item() <= testing.CARRIED_TOLERANCE and state.shape == (1, 1, 24)


def test_the_kit_checks_an_unbounded_model_on_its_own_terms():
    results = testing.check_network("tiny GRU", lambda: TinyGRU())
    assert [(r.check, r.status) for r in results] == [
        ("builds and satisfies the protocol", "ok"),
        ("causality", "ok"),
        ("step() in chunks, state carried, equals one call", "ok"),
        ("the state does not grow with the text", "ok"),
        ("samples past its training window, one token per step", "ok"),
        ("checkpoint round trip", "ok"),
        ("determinism", "ok"),
    ]
    # A bounded model keeps its KV-cache check.
    bounded = testing.check_network("transformer", testing.tiny_transformer_builder())
    assert ("KV cache equals uncached past the window, and is used", "ok") in [(r.check, r.status) for r in bounded]


def test_the_kit_catches_a_model_that_forgets_its_state_or_whose_state_grows():
    with pytest.raises(AssertionError, match="in pieces .* with the state carried gives logits"):
        testing.assert_chunked_step_matches_whole(ForgetfulGRU().eval())
    with pytest.raises(AssertionError, match="the state grew from 32 elements after 8 tokens to 104 after 80"):
        testing.assert_state_does_not_grow(GrowingMemory().eval())
    failed = {r.check: r.detail for r in testing.check_network("forgetful", lambda: ForgetfulGRU()) if not r.passed}
    assert list(failed) == ["step() in chunks, state carried, equals one call"]


def test_the_kit_catches_a_sampler_path_that_recomputes_the_window():
    class WindowedGRU(TinyGRU):
        """Honest step(), but declared bounded: sampled through its window, so its work grows."""

        context_kind = "bounded"

    model = WindowedGRU().eval()
    # Each step reads the whole window again (through forward, which calls step from no state).
    with pytest.raises(AssertionError, match=r"fed 270 positions through step\(\) \(and called the model 35 times\), not the 38"):
        testing.assert_samples_past_window_in_constant_work(model)



def test_the_servers_batcher_carries_each_rows_state_one_token_per_step():
    import asyncio
    import threading
    import types

    from zoo_core.inference.sampling import SampleStream
    from zoo_core.web.batching import Batcher, Finished, Row

    network = _gru()
    tokenizer = types.SimpleNamespace(decode=lambda ids: "".join(chr(65 + i) for i in ids), vocab_size=48)
    model = types.SimpleNamespace(network=network, tokenizer=tokenizer, name="tiny-gru")
    fed: list[int] = []
    original = network.step
    network.step = lambda idx, state=None: fed.append(idx.shape[1]) or original(idx, state)
    settings = SamplingSettings(max_new_tokens=200, seed=5)
    prompt = [1, 2, 3, 4, 5]

    async def serve() -> Finished:
        finished: asyncio.Future = asyncio.get_running_loop().create_future()

        def deliver(item):
            if isinstance(item, Finished) and not finished.done():
                finished.set_result(item)

        Batcher(model, 2).submit([Row(prompt, settings, deliver, asyncio.get_running_loop(), threading.Event())])
        return await asyncio.wait_for(finished, 120)

    served = asyncio.run(serve())
    network.step = original
    assert sum(fed) == len(prompt) + 200 - 1 and fed[1:] == [1] * 199  # the prompt once, then one token per step
    (expected,) = SampleStream(network, tokenizer, [prompt], [5], settings=settings).run()
    assert served.tokens == expected.tokens  # what `zoo sample` draws, 25 windows past the prompt


def test_echoed_log_probabilities_of_an_unbounded_model_come_from_all_the_text_before():
    import types

    from zoo_core.web.scoring import prompt_logprobs

    network = _gru()
    model = types.SimpleNamespace(network=network, tokenizer=types.SimpleNamespace(decode=lambda ids: "x" * len(ids)))
    ids = torch.randint(0, 48, (30,), generator=torch.Generator().manual_seed(6)).tolist()
    with torch.no_grad():
        expected = F.log_softmax(network(torch.tensor([ids[:-1]]))[0][0], dim=-1)
    scored = prompt_logprobs(model, ids, top=0)["token_logprobs"]
    assert scored[0] is None and len(scored) == 30
    gaps = [abs(scored[p] - expected[p - 1, ids[p]].item()) for p in range(1, 30)]
    assert max(gaps) <= 1e-4  # 30 tokens: past three windows of 8, every one from the whole text before it
