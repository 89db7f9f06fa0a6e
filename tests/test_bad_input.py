"""Every user-caused error: one clear line, non-zero exit, nothing written."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from zoo_core.plugin_api.manager import get_plugins

from .conftest import ROOT


def _one_line_error(result, *fragments):
    assert result.code == 1, result.out
    assert result.err.startswith("zoo: error: ") and result.err.count("\n") == 1, result.err
    for fragment in fragments:
        assert fragment in result.err, result.err


def test_unknown_variant_suggests_close_names(zoo):
    _one_line_error(zoo("load", "transformer-6b-sinn"), "unknown variant 'transformer-6b-sinn'", "did you mean", "'transformer-6b-sin'")


def test_flipped_byte_fails_sha256_naming_the_file(zoo, private_catalogue):
    checkpoint = private_catalogue.parent / "checkpoints" / "transformer-6b-sin.safetensors"
    data = bytearray(checkpoint.read_bytes())
    data[len(data) // 2] ^= 0x01
    checkpoint.write_bytes(bytes(data))
    _one_line_error(zoo("load", "transformer-6b-sin"), str(checkpoint), "sha256 mismatch")


def test_missing_checkpoint(zoo, private_catalogue):
    (private_catalogue.parent / "checkpoints" / "bigram.safetensors").unlink()
    _one_line_error(zoo("load", "bigram"), "bigram.safetensors", "not found")


def _edit_registry(registry, old, new):
    text = registry.read_text()
    assert old in text
    registry.write_text(text.replace(old, new, 1))
    get_plugins(reload=True)


def test_tensor_names_and_shapes_are_reported(zoo, private_catalogue):
    # A card that asks for two blocks cannot take a one-block checkpoint, even when
    # the checksum is consistent: the report says exactly which tensors differ.
    text = private_catalogue.read_text()
    section = text[text.index("[transformer-1b-learned-ctx8.config]"):]
    _edit_registry(private_catalogue, section[: section.index("n_layer = 1")] + "n_layer = 1",
                   section[: section.index("n_layer = 1")] + "n_layer = 2")
    result = zoo("load", "transformer-1b-learned-ctx8")
    _one_line_error(result, "transformer-1b-learned-ctx8.safetensors", "tensors do not match", "missing blocks.1.")


def test_wrong_shape_is_reported(zoo, private_catalogue):
    text = private_catalogue.read_text()
    start = text.index("[bigram.config]")
    _edit_registry(private_catalogue, text[start:start + 40], text[start:start + 40].replace("d_model = 32", "d_model = 16"))
    result = zoo("load", "bigram")
    _one_line_error(result, "wrong shape", "token_embedding.weight [1024, 32] (model needs [1024, 16])")


def test_registry_that_is_not_toml(zoo, private_catalogue):
    private_catalogue.write_text("[bigram\nname = ")
    get_plugins(reload=True)
    _one_line_error(zoo("list"), str(private_catalogue), "not valid TOML")


def test_registry_unknown_field_names_variant_and_field(zoo, private_catalogue):
    _edit_registry(private_catalogue, "[bigram.recipe]\n", "[bigram.recipe]\nlearning_rat = 0.1\n")
    _one_line_error(zoo("list"), "variant 'bigram'", "field 'recipe.learning_rat': unknown field")


def test_registry_wrong_type_names_the_field(zoo, private_catalogue):
    _edit_registry(private_catalogue, "steps = 10000", 'steps = "many"')
    _one_line_error(zoo("show", "bigram"), "variant 'bigram'", "field 'recipe.steps'")


def test_damaged_tokenizer_file(zoo, private_catalogue):
    ranks = private_catalogue.parent / "checkpoints" / "bpe-1024.tiktoken"
    ranks.write_text(ranks.read_text().replace(" 300\n", " x\n"))
    _one_line_error(zoo("load", "bigram"), "bpe-1024.tiktoken", "sha256 mismatch")  # the card's checksum first
    # A card without a tokenizer checksum still meets the parser's own checks.
    text = private_catalogue.read_text()
    private_catalogue.write_text(re.sub(r'(file = "checkpoints/bpe-1024.tiktoken")\nsha256 = "[0-9a-f]+"', r"\1", text))
    get_plugins(reload=True)
    _one_line_error(zoo("load", "bigram"), "bpe-1024.tiktoken", "damaged tokenizer file")


def test_debug_shows_the_traceback():
    result = subprocess.run([sys.executable, "-m", "zoo_core.cli", "--debug", "load", "no-such-model"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode != 0 and "Traceback" in result.stderr and "UnknownName" in result.stderr


def test_console_script_exit_code():
    zoo = shutil.which("zoo", path=str(ROOT / ".venv" / "bin")) or shutil.which("zoo")
    if zoo is None:
        pytest.fail("the zoo console script is not installed")
    result = subprocess.run([zoo, "show", "nope"], capture_output=True, text=True)
    assert result.returncode == 1 and result.stderr.startswith("zoo: error: unknown variant 'nope'")


TINY = "transformer-1b-learned-ctx8"


@pytest.mark.parametrize(
    "args, message",
    [
        (("train", TINY, "--steps", "-5"), "--steps must be at least 1, not -5"),
        (("train", TINY, "--steps", "0"), "--steps must be at least 1, not 0"),
        (("train", TINY, "--log-every", "0"), "--log-every must be at least 1, not 0"),
        (("train", TINY, "--log-every", "-1"), "--log-every must be at least 1, not -1"),
        (("train", TINY, "--checkpoint-every", "-3"), "--checkpoint-every must be a number of steps"),
        (("train", TINY, "--grad-accum", "0"), "--grad-accum must be at least 1, not 0"),
        (("train", TINY, "--interim-eval-windows", "0"), "--interim-eval-windows must be at least 1"),
        (("train", TINY, "--learning-rate", "-1"), "'learning_rate': Input should be greater than 0"),
        (("train", TINY, "--patience", "0"), "'patience': Input should be greater than 0"),
        (("eval", TINY, "--windows", "-1"), "--windows must be at least 1, not -1"),
        (("eval", TINY, "--windows", "0"), "--windows must be at least 1, not 0"),
        (("eval", TINY, "--text-chars", "0"), "--text-chars must be at least 1, not 0"),
        (("compare", TINY, "bigram", "--windows", "0"), "must be at least 1, not 0"),
        (("compare", TINY, "bigram", "--text-chars", "0"), "--text-chars must be at least 1, not 0"),
        (("compare", TINY, "bigram", "--max-new-tokens", "-1"), "--max-new-tokens must be at least 1"),
        (("sample", TINY, "--prompt", "A", "--max-new-tokens", "-1"), "--max-new-tokens must be at least 1"),
        (("sample", TINY, "--prompt", "A", "--top-k", "0"), "--top-k must be at least 1"),
        (("sample", TINY, "--prompt", "A", "--num-samples", "0"), "--num-samples must be at least 1"),
        (("sample", TINY, "--prompt", "A", "--threads", "0"), "--threads must be at least 1"),
        (("sample", TINY, "--prompt", "A", "--temperature", "-1"), "--temperature must be 0 (greedy) or greater"),
        (("experiment", "depth-1-2", "--steps", "0"), "--steps, --eval-every and --eval-targets must be at least 1"),
        (("experiment", "depth-1-2", "--steps", "1", "--milestones", "-5"), "--milestones must be steps of at least 1, not -5"),
        (("serve", "--port", "-1"), "--port must be at least 0, not -1"),
        (("serve", "--port", "99999"), "--port must be at most 65,535, not 99,999"),
        (("train-tokenizer", "--train-fraction", "2", "--out", "never.tiktoken"), "--train-fraction must lie between 0 and 1"),
    ],
)
def test_a_number_out_of_range_is_one_line_naming_the_flag(zoo, tmp_path, args, message):
    _one_line_error(zoo(*args, *(("--out", str(tmp_path / "run")) if args[0] == "train" else ())), message)
    assert not (tmp_path / "run").exists()
