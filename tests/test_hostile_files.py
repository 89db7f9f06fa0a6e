"""Hostile and broken files: each refused in one line naming the file, in bounded time and memory.

A checksum in the registry catches any change to a checkpoint before anything
else looks at it (tests/test_bad_input.py). These tests get past it on purpose:
the registry copy they write records the sha256 *of the hostile file*, as an
attacker who also controls the registry would, so the deeper checks (header
bounds, safetensors structure, names, shapes, dtypes, values, the card in the
header) are the ones that must answer.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import struct
import time
import tracemalloc
import types

import pytest
import torch
from safetensors.torch import load_file, save

import zoo_core
from zoo_core import hookimpl
from zoo_core.catalogue.cards import CheckpointRef
from zoo_core.catalogue.registry import render_registry
from zoo_core.errors import ZooError
from zoo_core.loading.api import catalogue
from zoo_core.plugin_api.manager import PluginInfo, PluginSet, get_plugins
from zoo_core.storage.checkpoints import CARD_KEY, header_card, load_verified
from zoo_plugins.bpe.tokenizer import load_bpe_tokenizer
from zoo_plugins.chars.tokenizer import load_char_tokenizer

from .conftest import ROOT

NAME = "transformer-1b-learned-ctx8"
SHIPPED = ROOT / "checkpoints" / f"{NAME}.safetensors"
BPE = ROOT / "checkpoints" / "bpe-1024.tiktoken"
CHARS = ROOT / "checkpoints" / "char-65.json"


def _one_line_error(result, *fragments):
    assert result.code == 1, result.out
    assert result.err.startswith("zoo: error: ") and result.err.count("\n") == 1, result.err
    for fragment in fragments:
        assert fragment in result.err, result.err


@pytest.fixture
def hostile(tmp_path, monkeypatch):
    """``install(raw)`` makes ``raw`` the checkpoint of a one-variant catalogue laid
    out like the real one (so the shipped header card still matches), its
    registry recording raw's own sha256 unless ``sha256=False``."""
    real = zoo_core.get_variant(NAME).card  # read before the catalogue is switched
    (tmp_path / "checkpoints").mkdir()
    shutil.copyfile(BPE, tmp_path / "checkpoints" / BPE.name)
    registry = tmp_path / "registry.toml"
    checkpoint = tmp_path / real.checkpoint.path
    monkeypatch.setenv("ZOO_BUILTIN_REGISTRY", str(registry))

    def install(raw: bytes, sha256: bool = True, card=None):
        card = card or real
        checkpoint.write_bytes(raw)
        digest = hashlib.sha256(raw).hexdigest() if sha256 else None
        registry.write_text(render_registry([card.model_copy(update={"checkpoint": CheckpointRef(path=real.checkpoint.path, sha256=digest)})]))
        get_plugins(reload=True)
        return checkpoint

    yield install
    monkeypatch.delenv("ZOO_BUILTIN_REGISTRY")
    get_plugins(reload=True)


def _bounded(action, seconds: float = 5.0, megabytes: float = 16.0):
    """Run ``action``; it must finish in ``seconds`` having allocated (in Python)
    less than ``megabytes`` at its peak. Returns what it returned."""
    tracemalloc.start()
    started = time.perf_counter()
    try:
        result = action()
    finally:
        elapsed = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert elapsed < seconds, f"took {elapsed:.1f} s"
    assert peak < megabytes * 2**20, f"allocated {peak / 2**20:.0f} MB"
    return result


def _safetensors(tensors: dict, card: dict | None) -> bytes:
    return save(tensors, metadata={CARD_KEY: json.dumps(card)} if card is not None else None)


def _header_then(header: bytes, data: bytes = b"", claimed: int | None = None) -> bytes:
    return struct.pack("<Q", len(header) if claimed is None else claimed) + header + data


# --- checkpoints -----------------------------------------------------------------

SHIPPED_SIZE = SHIPPED.stat().st_size
HEADER_LENGTH = struct.unpack("<Q", SHIPPED.read_bytes()[:8])[0]
NOT_COVERED = "not a valid safetensors file: Error while deserializing: incomplete metadata, file not fully covered"


@pytest.mark.parametrize(
    "keep, fragment",
    [
        (0, "not a safetensors file (only 0 bytes)"),
        (5, "not a safetensors file (only 5 bytes)"),
        (8, "not a safetensors file (its header length does not fit the file's 8 bytes)"),
        (HEADER_LENGTH // 2, f"not a safetensors file (its header length does not fit the file's {HEADER_LENGTH // 2} bytes)"),
        (SHIPPED_SIZE // 2, NOT_COVERED),
        (SHIPPED_SIZE - 1, NOT_COVERED),
    ],
)
def test_truncated_checkpoint(zoo, hostile, keep, fragment):
    path = hostile(SHIPPED.read_bytes()[:keep])
    _one_line_error(_bounded(lambda: zoo("load", NAME)), f"{path}: {fragment}")


@pytest.mark.parametrize("claimed", [2**60, 2**64 - 1, 100 * 1024 * 1024 + 1])
def test_header_claiming_an_enormous_length_is_refused_before_allocating(zoo, hostile, claimed):
    path = hostile(_header_then(b'{"a": 1}', claimed=claimed))
    result = _bounded(lambda: zoo("load", NAME), seconds=2, megabytes=4)
    _one_line_error(result, f"{path}: not a safetensors file (its header length does not fit the file's 16 bytes)")


def test_an_enormous_file_is_refused_unread(zoo, hostile):
    path = hostile(b"")
    with open(path, "wb") as handle:  # a sparse terabyte: no disk used, and never read
        handle.truncate(2**40)
    get_plugins(reload=True)
    variant = zoo_core.get_variant(NAME)
    network = zoo_core.build_network(variant)
    with pytest.raises(ZooError, match=r"checkpoint is 1,099,511,627,776 bytes, more than the [\d,]+ such a file can need"):
        _bounded(lambda: load_verified(path, "0" * 64, network, None), seconds=2, megabytes=4)


@pytest.mark.parametrize(
    "header, fragment",
    [
        (b"\xff\xfe\x00garbage", "not a safetensors file (header is not JSON)"),
        (b'{"a": ', "not a safetensors file (header is not JSON)"),
        (b"[" * 200_000 + b"]" * 200_000, "not a safetensors file (header is not JSON)"),  # nested past any recursion limit
        (b"[1, 2, 3]", "not a safetensors file (header is not a JSON object)"),
        (b'{"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 999]}}', "not a valid safetensors file"),
        (b'{"x": {"dtype": "F32", "shape": [1099511627776, 1099511627776], "data_offsets": [0, 16]}}', "not a valid safetensors file"),
        (b'{"x": {"dtype": "NOPE", "shape": [4], "data_offsets": [0, 16]}}', "not a valid safetensors file"),
        (b'{"__metadata__": "not a mapping"}', "not a valid safetensors file"),
    ],
)
def test_header_that_is_not_a_safetensors_header(zoo, hostile, header, fragment):
    path = hostile(_header_then(header, b"\x00" * 16))
    _one_line_error(_bounded(lambda: zoo("load", NAME)), f"{path}: {fragment}")


def test_tensor_of_another_dtype(zoo, hostile):
    tensors = load_file(str(SHIPPED))
    tensors["lm_head.weight"] = tensors["lm_head.weight"].to(torch.int64)
    path = hostile(_safetensors(tensors, header_card(SHIPPED)))
    _one_line_error(zoo("load", NAME), f"{path}: tensor lm_head.weight is torch.int64, the model needs torch.float32")


def test_half_precision_storage_is_accepted_and_cast(hostile):
    tensors = {name: tensor.to(torch.float16) for name, tensor in load_file(str(SHIPPED)).items()}
    hostile(_safetensors(tensors, header_card(SHIPPED)))
    model = zoo_core.load(NAME)
    assert model.network.lm_head.weight.dtype == torch.float32
    assert torch.equal(model.network.lm_head.weight, tensors["lm_head.weight"].float())


def test_tensor_of_another_shape(zoo, hostile):
    tensors = load_file(str(SHIPPED))
    tensors["lm_head.weight"] = tensors["lm_head.weight"][:512]
    path = hostile(_safetensors(tensors, header_card(SHIPPED)))
    _one_line_error(zoo("load", NAME), f"{path}: tensors do not match the model: wrong shape lm_head.weight [512, 32] (model needs [1024, 32])")


def test_missing_and_extra_tensors(zoo, hostile):
    tensors = load_file(str(SHIPPED))
    tensors["backdoor"] = tensors.pop("lm_head.bias")
    path = hostile(_safetensors(tensors, header_card(SHIPPED)))
    _one_line_error(zoo("load", NAME), f"{path}: tensors do not match the model: missing lm_head.bias; unexpected backdoor")


def test_tensor_names_that_would_break_the_line(zoo, hostile):
    tensors = load_file(str(SHIPPED))
    tensors["evil\nzoo: ok\x1b[2J"] = tensors.pop("lm_head.bias")
    path = hostile(_safetensors(tensors, header_card(SHIPPED)))
    _one_line_error(zoo("load", NAME), f"{path}: tensors do not match the model: missing lm_head.bias; unexpected evil\\nzoo: ok\\u001b[2J")


def test_not_a_number_in_the_weights(zoo, hostile):
    tensors = load_file(str(SHIPPED))
    tensors["final_norm.weight"][3] = float("nan")
    path = hostile(_safetensors(tensors, header_card(SHIPPED)))
    _one_line_error(zoo("load", NAME), f"{path}: tensor final_norm.weight holds NaN or infinite values")


@pytest.mark.parametrize(
    "edit, fragment",
    [
        # Same tensors, another network: only the card can tell.
        (lambda card: card["config"].update(block="post-norm"),
         "the card in the header disagrees with the registry at 'config.block': file has \"post-norm\", registry has \"pre-norm\""),
        (lambda card: card["recipe"].update(learning_rate=0.5),
         "the card in the header disagrees with the registry at 'recipe.learning_rate': file has 0.5, registry has 0.001"),
        (lambda card: card.update(name="transformer-6b-sin"),
         "the card in the header disagrees with the registry at 'name': file has \"transformer-6b-sin\", registry has \"transformer-1b-learned-ctx8\""),
        (lambda card: card["metrics"].pop("validation_loss"),
         "the card in the header disagrees with the registry at 'metrics.validation_loss': file has (absent), registry has"),
        (lambda card: card.update(surprise=1), "the card in the header is not a valid card: field 'surprise': unknown field"),
    ],
)
def test_card_in_the_header_disagreeing_with_the_registry(zoo, hostile, edit, fragment):
    card = header_card(SHIPPED)
    edit(card)
    path = hostile(_safetensors(load_file(str(SHIPPED)), card))
    _one_line_error(zoo("load", NAME), f"{path}: {fragment}")


def test_card_in_the_header_that_is_not_json(zoo, hostile):
    path = hostile(save(load_file(str(SHIPPED)), metadata={CARD_KEY: "{not json"}))
    _one_line_error(zoo("load", NAME), f"{path}: the card in the header is not JSON")


def test_a_file_without_a_card_loads_on_its_tensors_alone(hostile):
    # Weights converted by another tool carry no card; names, shapes and the
    # checksum still guard them, and `zoo verify` shows that no card was compared.
    hostile(_safetensors(load_file(str(SHIPPED)), None))
    model = zoo_core.load(NAME)
    assert model.verification.card_checked is False and model.verification.checks[0] == "sha256"


def test_pickle_is_never_loaded(zoo, hostile):
    # A torch.save file is a zip of pickles: refused as not safetensors, never unpickled.
    import io

    buffer = io.BytesIO()
    torch.save(load_file(str(SHIPPED)), buffer)
    path = hostile(buffer.getvalue())
    _one_line_error(zoo("load", NAME), f"{path}: not a safetensors file")


# --- registry files --------------------------------------------------------------


def _registry_error(zoo, registry, text, *fragments):
    registry.write_text(text) if isinstance(text, str) else registry.write_bytes(text)
    get_plugins(reload=True)
    _one_line_error(_bounded(lambda: zoo("list")), str(registry), *fragments)


def test_a_table_declared_twice_in_one_file(zoo, private_catalogue):
    text = private_catalogue.read_text()
    start = text.index("[bigram]")
    bigram = text[start : text.index("[transformer-1b-learned-ctx8]")]
    _registry_error(zoo, private_catalogue, text + "\n" + bigram, "not valid TOML", "Cannot declare ('bigram',) twice")


def test_registry_that_is_not_utf8(zoo, private_catalogue):
    _registry_error(zoo, private_catalogue, b'[bigram]\ndescription = "\xff\xfe"\n', "registry is not UTF-8 text (byte 24)")


def test_registry_nested_past_any_recursion_limit(zoo, private_catalogue):
    _registry_error(zoo, private_catalogue, "x = " + "[" * 100_000 + "]" * 100_000, "not valid TOML: nested too deeply")


def test_registry_entry_that_is_not_a_table(zoo, private_catalogue):
    _registry_error(zoo, private_catalogue, 'bigram = "a model"\n', "'bigram' must be a table ([bigram]), not a str")


def test_registry_names_that_would_break_the_line(zoo, private_catalogue):
    _registry_error(zoo, private_catalogue, '"evil\\nzoo: ok" = 3\n', "'evil\\nzoo: ok' must be a table")


def test_enormous_registry_is_refused_unread(zoo, private_catalogue):
    with open(private_catalogue, "wb") as handle:
        handle.truncate(2**40)
    get_plugins(reload=True)
    _one_line_error(_bounded(lambda: zoo("list"), seconds=2, megabytes=4), str(private_catalogue), "registry file is 1,099,511,627,776 bytes")


def _registry_plugin(name: str, path):
    module = types.SimpleNamespace(register_variants=hookimpl(lambda register: register(path)))
    module.__name__ = name
    return module


def _second_registry(tmp_path, names):
    real = {v.name: v.card for v in catalogue(get_plugins())}
    other = tmp_path / "other" / "registry.toml"
    other.parent.mkdir()
    other.write_text(render_registry([real[name] for name in names]))
    return other


def test_a_name_declared_by_two_registry_files_names_both(tmp_path):
    other = _second_registry(tmp_path, ["transformer-6b-sin"])
    plugins = PluginSet()
    for plugin, path in (("catalogue", ROOT / "registry.toml"), ("copycat", other)):
        plugins.add_plugin(_registry_plugin(plugin, path), PluginInfo(plugin, "zoo-lm", "1", builtin=True))
    with pytest.raises(ZooError) as caught:
        catalogue(plugins)
    message = str(caught.value)
    assert message == (f"variant 'transformer-6b-sin' is declared twice: by plugin 'catalogue' ({ROOT / 'registry.toml'}) "
                       f"and by plugin 'copycat' ({other})")


def test_a_third_party_file_with_a_clash_is_skipped_whole(tmp_path):
    other = _second_registry(tmp_path, ["bigram"])
    fresh = zoo_core.get_variant("bigram").card.model_copy(update={"name": "fresh-name"})
    other.write_text(render_registry([fresh]) + "\n" + other.read_text())  # a new variant, then a clashing one
    plugins = PluginSet()
    plugins.add_plugin(_registry_plugin("catalogue", ROOT / "registry.toml"), PluginInfo("catalogue", "zoo-lm", "1", builtin=True))
    plugins.add_plugin(_registry_plugin("copycat", other), PluginInfo("copycat", "zoo-copycat", "1", builtin=False))
    names = catalogue(plugins).names()
    assert "bigram" in names and "fresh-name" not in names  # all of a file's variants, or none
    assert plugins.plugins["copycat"].errors == [
        f"variant 'bigram' is declared twice: by plugin 'catalogue' ({ROOT / 'registry.toml'}) and by plugin 'copycat' ({other})"
    ]


# --- tokenizer files ---------------------------------------------------------------


def _damaged(tmp_path, source, transform):
    path = tmp_path / source.name
    data = source.read_bytes()
    path.write_bytes(transform(data))
    return path


BPE_DAMAGE = [
    (lambda data: b"", "ranks 0..255 must be the 256 single bytes"),
    (lambda data: b"\x89PNG\r\n\x1a\n\x00\x00garbage" + data, "line 1 is not 'base64 rank'"),
    (lambda data: data.replace(b" 700\n", b" 7OO\n"), "is not 'base64 rank'"),
    (lambda data: data.replace(b" 700\n", b" 701\n", 1), "ranks are not 0..1023 without gaps"),
    (lambda data: b"".join(line + b"\n" for line in data.splitlines() if not line.endswith(b" 512")), "ranks are not 0..1022 without gaps"),
    (lambda data: data + data.splitlines()[600] + b"\n", "repeats a token"),
    (lambda data: data[: len(data) // 2], "is not 'base64 rank'"),  # cut mid-line
    (lambda data: b"".join(line + b"\n" for line in data.splitlines()[:1000]), "tokenizer has 1000 tokens but the card says 1024"),
    (lambda data: data.replace(b"QQ== 65\n", b"QQ== 66\n").replace(b"Qg== 66\n", b"Qg== 65\n"), "ranks 0..255 must be the 256 single bytes"),
]


@pytest.mark.parametrize("transform, fragment", BPE_DAMAGE)
def test_damaged_bpe_ranks(tmp_path, transform, fragment):
    path = _damaged(tmp_path, BPE, transform)
    spec = zoo_core.get_variant(NAME).card.tokenizer
    with pytest.raises(ZooError) as caught:
        _bounded(lambda: load_bpe_tokenizer(spec, path))
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and fragment in message and "\n" not in message


CHAR_DAMAGE = [
    (lambda data: data[: len(data) // 2], "damaged tokenizer file (JSONDecodeError)"),
    (lambda data: b"\xff" + data, "damaged tokenizer file (UnicodeDecodeError)"),
    (lambda data: b"[" * 100_000 + b"]" * 100_000, "damaged tokenizer file (RecursionError)"),
    (lambda data: b'["a", "b"]', "damaged tokenizer file (TypeError)"),
    (lambda data: b'{"letters": []}', "damaged tokenizer file (KeyError)"),
    (lambda data: b'{"characters": "abc"}', "'characters' must be a list of single characters"),
    (lambda data: b'{"characters": ["ab", "c"]}', "'characters' must be a list of single characters"),
    (lambda data: b'{"characters": ["a", "a"]}', "a character appears twice"),
    (lambda data: data.replace(b'"z"', b'"\\u00e9"'), None),  # still valid: a different, equally sized vocabulary
    (lambda data: data.replace(b', "z"', b""), "tokenizer has 64 characters but the card says 65"),
]


@pytest.mark.parametrize("transform, fragment", CHAR_DAMAGE)
def test_damaged_character_vocabulary(tmp_path, transform, fragment):
    path = _damaged(tmp_path, CHARS, transform)
    spec = types.SimpleNamespace(vocab_size=65)
    if fragment is None:
        assert load_char_tokenizer(spec, path).vocab_size == 65
        return
    with pytest.raises(ZooError) as caught:
        _bounded(lambda: load_char_tokenizer(spec, path))
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and fragment in message and "\n" not in message


def test_enormous_tokenizer_file_is_refused_unread(tmp_path):
    path = tmp_path / "bpe.tiktoken"
    with open(path, "wb") as handle:
        handle.truncate(2**40)
    with pytest.raises(ZooError, match="tokenizer file is 1,099,511,627,776 bytes"):
        _bounded(lambda: load_bpe_tokenizer(types.SimpleNamespace(vocab_size=1024), path), seconds=2, megabytes=4)


def test_damaged_tokenizer_through_zoo_load(zoo, hostile, tmp_path):
    hostile(SHIPPED.read_bytes())
    ranks = tmp_path / "checkpoints" / BPE.name  # the catalogue's own copy
    ranks.write_bytes(ranks.read_bytes()[:5000])
    _one_line_error(zoo("load", NAME), f"{ranks}: sha256 mismatch: the card has ", "(changed or replaced)")


def _swap_two_tokens(data: bytes, first: bytes, second: bytes) -> bytes:
    """The same ranks file with two tokens' ranks exchanged: same size, still valid."""
    lines = data.splitlines()
    encoded = [base64.b64encode(token) for token in (first, second)]
    index = [next(i for i, line in enumerate(lines) if line.split()[0] == e) for e in encoded]
    ranks = [lines[i].split()[1] for i in index]
    lines[index[0]], lines[index[1]] = encoded[0] + b" " + ranks[1], encoded[1] + b" " + ranks[0]
    return b"".join(line + b"\n" for line in lines)


def test_a_same_size_vocabulary_swap_is_caught_by_load_and_verify(zoo, hostile, tmp_path):
    # ' the' and ' and' exchanged: a valid vocabulary of the same size and length
    # that would load and silently change every sample, were it not for the sha256.
    hostile(SHIPPED.read_bytes())
    ranks = tmp_path / "checkpoints" / BPE.name
    before = ranks.read_bytes()
    swapped = _swap_two_tokens(before, b" the", b" and")
    assert len(swapped) == len(before) and swapped != before
    ranks.write_bytes(swapped)
    load_bpe_tokenizer(types.SimpleNamespace(vocab_size=1024), ranks)  # the parser alone accepts it
    _one_line_error(zoo("load", NAME), f"{ranks}: sha256 mismatch")
    result = zoo("verify", "--json")
    assert result.code == 1 and result.err.count("\n") == 1, result.err
    row = next(row for row in json.loads(result.out) if row["name"] == NAME)
    assert row["status"] == "FAILED" and row["detail"].startswith(f"{ranks}: sha256 mismatch")


def test_an_enormous_tokenizer_file_is_refused_before_hashing(zoo, hostile, tmp_path):
    hostile(SHIPPED.read_bytes())
    ranks = tmp_path / "checkpoints" / BPE.name
    with open(ranks, "wb") as handle:
        handle.truncate(2**40)
    _one_line_error(_bounded(lambda: zoo("load", NAME), seconds=2, megabytes=4), f"{ranks}: tokenizer file is 1,099,511,627,776 bytes")
