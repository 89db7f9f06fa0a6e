"""Properties that must hold for every input, checked on inputs hypothesis generates.

Example counts are kept small enough for the default suite; a failure prints
the smallest input that breaks the property, and `pytest --hypothesis-seed=N`
repeats a run.
"""

from __future__ import annotations

import hashlib
import shutil

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import load

import zoo_core
from zoo_core.errors import ZooError
from zoo_core.inference.sampling import sample_tokens
from zoo_core.storage.checkpoints import load_verified
from zoo_plugins.bpe.tokenizer import BPETokenizer
from zoo_plugins.chars.tokenizer import CharTokenizer

from .conftest import ROOT

FAST = settings(max_examples=200, deadline=None)
SLOWER = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def bpe():
    return BPETokenizer.from_file(ROOT / "checkpoints" / "bpe-1024.tiktoken")


@pytest.fixture(scope="module")
def chars():
    return CharTokenizer.from_file(ROOT / "checkpoints" / "char-65.json")


@FAST
@given(text=st.text())
def test_any_unicode_string_round_trips_through_bpe(bpe, text):
    ids = bpe.encode(text)
    assert all(0 <= i < bpe.vocab_size for i in ids)
    assert bpe.decode(ids) == text


@FAST
@given(text=st.text(alphabet=st.characters(codec="utf-8"), max_size=200))
def test_every_character_is_known_or_named(chars, text):
    unknown = sorted({c for c in text if c not in chars.index})
    if not unknown:
        assert chars.decode(chars.encode(text)) == text
        return
    with pytest.raises(ZooError) as caught:
        chars.encode(text)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{len(unknown)} character(s) not in the vocabulary")
    assert all(repr(c) in message for c in unknown[:10])  # the first ten are named
    replaced = chars.decode(chars.encode(text, errors="replace"))
    assert replaced == "".join(c if c in chars.index else "?" for c in text)


# --- checkpoints -------------------------------------------------------------------

NAME = "transformer-1b-learned-ctx8"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A private copy of a small checkpoint, its sha256, and a network to load it into."""
    variant = zoo_core.get_variant(NAME)
    copy = tmp_path_factory.mktemp("checkpoint") / "weights.safetensors"
    shutil.copyfile(variant.checkpoint_path, copy)
    original = copy.read_bytes()
    return copy, original, hashlib.sha256(original).hexdigest(), zoo_core.build_network(variant), variant.card


def _corrupt(original: bytes, flips: list[tuple[int, int]]) -> bytes:
    data = bytearray(original)
    for position, mask in flips:
        data[position % len(data)] ^= mask
    return bytes(data)


flips = st.lists(st.tuples(st.integers(min_value=0), st.integers(min_value=1, max_value=255)), min_size=1, max_size=4)


@SLOWER
@given(flips=flips)
def test_any_corruption_of_a_checkpoint_is_caught(checkpoint, flips):
    path, original, sha256, network, card = checkpoint
    damaged = _corrupt(original, flips)
    if damaged == original:  # two flips of one byte can cancel out
        return
    path.write_bytes(damaged)
    with pytest.raises(ZooError) as caught:
        load_verified(path, sha256, network, card.parameters, card=card)
    assert str(caught.value).startswith(f"{path}: ") and "\n" not in str(caught.value)


@SLOWER
@given(flips=flips, truncate=st.booleans())
def test_without_a_checksum_header_damage_never_silently_changes_the_weights(checkpoint, flips, truncate):
    # No sha256 to lean on: the header's bounds, the safetensors structure, the
    # names, shapes and the card must catch damage to it, or the weights loaded
    # must be exactly the original ones.
    path, original, _, network, card = checkpoint
    header_end = 8 + int.from_bytes(original[:8], "little")
    damaged = _corrupt(original, [(position % header_end, mask) for position, mask in flips])
    if truncate:
        damaged = damaged[: len(damaged) - 1 - flips[0][0] % 100]
    path.write_bytes(damaged)
    try:
        load_verified(path, None, network, card.parameters, card=card)
    except ZooError as error:
        assert str(error).startswith(f"{path}: ") and "\n" not in str(error)
        return
    expected = load(original)
    assert all(torch.equal(expected[name], tensor) for name, tensor in network.state_dict().items())


# --- sampling ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model():
    return zoo_core.load(NAME)


@SLOWER
@given(
    temperature=st.floats(min_value=0, max_value=1e6, exclude_min=True, allow_subnormal=True),
    top_k=st.none() | st.integers(min_value=1, max_value=5000),
    seed=st.integers(min_value=0, max_value=2**63 - 1),
    prompt=st.lists(st.integers(min_value=0, max_value=1023), min_size=1, max_size=12),
    new_tokens=st.integers(min_value=1, max_value=6),
)
def test_sampling_stays_in_the_vocabulary(model, temperature, top_k, seed, prompt, new_tokens):
    ids = torch.tensor([prompt])
    out = sample_tokens(model.network, ids, new_tokens, torch.Generator().manual_seed(seed), temperature=temperature, top_k=top_k)
    assert out.shape == (1, len(prompt) + new_tokens)
    assert torch.equal(out[0, : len(prompt)], ids[0])
    assert 0 <= int(out.min()) and int(out.max()) < model.tokenizer.vocab_size
    if top_k == 1:  # greedy: the most likely token, whatever the temperature
        logits, _ = model.network(ids[:, -model.card.context_length :])
        assert out[0, len(prompt)].item() == logits[0, -1].argmax().item()


@pytest.mark.parametrize("temperature", [-1.0, float("nan"), float("inf")])
def test_temperatures_that_mean_nothing_are_refused(model, temperature):
    # Named as the API knows it: this is Python, not the command line.
    with pytest.raises(ZooError, match=r"^temperature must be 0 \(greedy\) or greater"):
        sample_tokens(model.network, torch.tensor([[1]]), 1, temperature=temperature)
