"""Sampling options like the anchors': greedy, top-p, several samples (each
reproducible alone), prompts of different lengths, stop strings, streaming,
JSON, and errors named as the caller knows the argument."""

from __future__ import annotations

import json

import pytest
import torch

import zoo_core
from zoo_core.errors import ZooError
from zoo_core.inference.sampling import SampleStream, filter_logits, sample_seeds, stream_text
from zoo_core.inference.settings import SamplingSettings

NAME = "gpt-char-mini"


@pytest.fixture(scope="module")
def model():
    return zoo_core.load(NAME)


def test_greedy_ignores_the_seed_and_takes_the_argmax(model):
    texts = {model.generate("ROMEO:", 30, temperature=0, seed=seed) for seed in (0, 1, 12345)}
    assert len(texts) == 1
    ids = model.tokenizer.encode("ROMEO:")
    logits, _ = model.network(torch.tensor([ids]))
    first = texts.pop()[len("ROMEO:")]
    assert model.tokenizer.encode(first) == [int(logits[0, -1].argmax())]


def test_each_of_several_samples_is_the_sample_drawn_alone_with_its_seed(model):
    batch = model.generate("ROMEO:", 40, seed=7, num_samples=3, top_p=0.9)
    alone = [model.generate("ROMEO:", 40, seed=seed, top_p=0.9) for seed in sample_seeds(7, 3)]
    assert batch == alone
    assert len(set(batch)) == 3  # distinct seeds, distinct samples
    assert sample_seeds(7, 3) == [7, 8, 9]
    assert sample_seeds(2**64 - 1, 2) == [2**64 - 1, -(2**63)]  # wraps within the seeds zoo_core.seeding accepts


def test_prompts_of_different_lengths_each_equal_sampling_alone(model):
    prompts = ["ROMEO:", "JULIET: O Romeo, Romeo!", "K"]
    together = model.generate(prompts, 25, seed=3, top_k=20)
    assert together == [model.generate(p, 25, seed=3 + i, top_k=20) for i, p in enumerate(prompts)]
    assert [text[: len(p)] for text, p in zip(together, prompts)] == prompts


def test_batched_rows_match_rows_alone_token_for_token(model):
    # The layer below generate: rows of one length in one forward pass, one generator each.
    prompts = [model.tokenizer.encode("ROMEO:"), model.tokenizer.encode("JULIET")]
    both = SampleStream(model.network, model.tokenizer, prompts, [5, 6], max_new_tokens=80).run()
    for ids, seed, sample in zip(prompts, [5, 6], both):
        alone = SampleStream(model.network, model.tokenizer, [ids], [seed], max_new_tokens=80).run()[0]
        assert alone.tokens == sample.tokens


def test_top_p_keeps_the_smallest_set_reaching_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = torch.isfinite(filter_logits(logits, SamplingSettings(top_p=0.8)))
    assert kept.tolist() == [[True, True, False, False]]
    kept = torch.isfinite(filter_logits(logits, SamplingSettings(top_p=0.81)))
    assert kept.tolist() == [[True, True, True, False]]
    assert torch.isfinite(filter_logits(logits, SamplingSettings(top_p=0.01))).sum() == 1  # the best token always stays


def test_min_p_keeps_the_tokens_at_least_min_p_times_as_likely_as_the_best():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))

    def kept(**options):
        return torch.isfinite(filter_logits(logits, SamplingSettings(**options))).tolist()

    assert kept(min_p=0.5) == [[True, True, False, False]]  # at least 0.25
    assert kept(min_p=0.29) == [[True, True, True, False]]  # at least 0.145
    assert kept(min_p=0.09) == [[True, True, True, True]]  # at least 0.045
    assert kept(min_p=1.0) == [[True, False, False, False]]  # only the best
    assert kept(min_p=0.0) == kept() == [[True, True, True, True]]  # 0 is off
    # Measured after temperature: at 2 the ratios are the square roots (0.77, 0.55, 0.32).
    assert kept(min_p=0.5, temperature=2.0) == [[True, True, True, False]]
    # With top-k and top-p a token must pass every filter.
    assert kept(min_p=0.29, top_k=2) == [[True, True, False, False]]
    assert kept(min_p=0.5, top_p=0.95) == [[True, True, False, False]]
    # Many rows of random logits: exactly the tokens with p >= min_p * p_best stay.
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 50, generator=generator) * 3
    for min_p in (0.01, 0.1, 0.37, 0.8):
        ratio = torch.softmax(logits.double(), dim=-1)
        ratio = ratio / ratio.amax(dim=-1, keepdim=True)
        clear = (ratio - min_p).abs() > 1e-6  # leave out ties with the threshold itself
        got = torch.isfinite(filter_logits(logits, SamplingSettings(min_p=min_p)))
        assert torch.equal(got[clear], (ratio >= min_p)[clear])


def test_min_p_one_is_greedy_and_min_p_changes_the_draws(model):
    greedy = model.generate("ROMEO:", 40, temperature=0)
    assert model.generate("ROMEO:", 40, min_p=1.0, seed=3) == greedy
    assert model.generate("ROMEO:", 40, min_p=1.0, seed=4, temperature=5.0) == greedy
    plain = model.generate("ROMEO:", 40, seed=3)
    assert model.generate("ROMEO:", 40, min_p=0.0, seed=3) == plain  # 0 is off
    assert model.generate("ROMEO:", 40, min_p=0.2, seed=3) not in (plain, greedy)


def test_tiny_top_p_is_greedy(model):
    assert model.generate("ROMEO:", 20, top_p=1e-6, seed=1) == model.generate("ROMEO:", 20, temperature=0)


def test_stop_string_ends_the_text_before_it(model):
    full = model.sample("ROMEO:", 60, seed=4)[0]
    stop = full.text[10:12]
    cut = model.sample("ROMEO:", 60, seed=4, stop=stop)[0]
    assert cut.finish_reason == "stop" and stop not in cut.text
    assert full.text.startswith(cut.text) and full.text[len(cut.text):].startswith(stop)
    assert full.finish_reason == "length" and len(full.tokens) == 60


def test_streamed_pieces_add_up_to_the_sample(model):
    pieces = list(model.stream("ROMEO:", 50, seed=9, stop="the"))
    sample = model.sample("ROMEO:", 50, seed=9, stop="the")[0]
    assert "".join(pieces) == sample.text
    assert len(pieces) > 5  # text arrives as drawn, not at the end
    ids = model.tokenizer.encode("ROMEO:")
    assert "".join(stream_text(model.network, model.tokenizer, ids, seed=9, max_new_tokens=50, stop=["the"])) == sample.text


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(temperature=-1), "temperature must be 0 (greedy) or greater"),
        (dict(top_p=1.5), "top_p must be greater than 0 and at most 1"),
        (dict(min_p=1.5), "min_p must be from 0 to 1"),
        (dict(min_p=-0.1), "min_p must be from 0 to 1"),
        (dict(top_k=0), "top_k must be at least 1"),
        (dict(max_new_tokens=0), "max_new_tokens must be at least 1"),
        (dict(num_samples=0), "num_samples must be at least 1"),
    ],
)
def test_api_errors_name_the_api_arguments(model, kwargs, message):
    with pytest.raises(ZooError) as caught:
        model.generate("ROMEO:", **kwargs)
    assert str(caught.value).startswith(message) and "--" not in str(caught.value)


def test_api_rejects_a_prompt_that_is_not_text(model):
    with pytest.raises(ZooError, match="prompt must be a string"):
        model.generate([1, 2, 3])
    with pytest.raises(ZooError, match="empty list"):
        model.generate([])


# -- the command line -------------------------------------------------------------------------


def test_cli_greedy_is_the_same_whatever_the_seed(zoo):
    outputs = {zoo("sample", NAME, "--prompt", "ROMEO:", "--temperature", "0", "--max-new-tokens", "50", "--seed", s).out
               for s in ("1", "2", "99")}
    outputs.add(zoo("sample", NAME, "--prompt", "ROMEO:", "--greedy", "--max-new-tokens", "50").out)
    assert len(outputs) == 1 and outputs.pop().startswith("ROMEO:")


def test_cli_json_samples_are_each_the_sample_alone(zoo):
    result = zoo("sample", NAME, "--prompt", "ROMEO:", "--num-samples", "3", "--json", "--max-new-tokens", "30", "--seed", "11")
    assert result.code == 0
    report = json.loads(result.out)
    samples = report["samples"]
    assert [s["seed"] for s in samples] == [11, 12, 13]
    assert len({s["text"] for s in samples}) == 3
    assert report["settings"]["num_samples"] == 3 and report["settings"]["temperature"] == 1.0
    for sample in samples:
        alone = json.loads(zoo("sample", NAME, "--prompt", "ROMEO:", "--json", "--max-new-tokens", "30",
                               "--seed", str(sample["seed"])).out)["samples"][0]
        assert alone == sample
        assert len(sample["tokens"]) == 30 and sample["prompt"] == "ROMEO:"


def test_cli_top_p_and_stop_run(zoo):
    result = zoo("sample", NAME, "--prompt", "ROMEO:", "--top-p", "0.9", "--stop", "\n\n", "--max-new-tokens", "200")
    assert result.code == 0 and result.out.startswith("ROMEO:") and "\n\n" not in result.out.rstrip("\n")


def test_puzzle_says_which_options_do_not_apply(zoo):
    result = zoo("sample", "puzzle-disobeys", "--prompt", "Human disobeys keep-flight he-is?", "--temperature", "0.5",
                 "--max-new-tokens", "7")
    assert result.code == 0 and result.out.strip()
    assert "--max-new-tokens, --temperature do not apply" in result.err
    quiet = zoo("sample", "puzzle-disobeys", "--prompt", "Human disobeys keep-flight he-is?")
    assert quiet.err == "" and quiet.out == result.out


def test_cli_stop_reads_backslash_n_as_a_newline(zoo):
    # Greedy gpt-char-mini answers "ROMEO:" with a newline first: `--stop '\n'` ends it there.
    assert zoo("sample", NAME, "--prompt", "ROMEO:", "--greedy", "--max-new-tokens", "5").out.startswith("ROMEO:\n")
    result = zoo("sample", NAME, "--prompt", "ROMEO:", "--greedy", "--max-new-tokens", "5", "--stop", "\\n")
    assert result.code == 0 and result.out == "ROMEO:\n"
