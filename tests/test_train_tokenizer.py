"""`zoo train-tokenizer` reaches the tokenizers through the plugin manager (`train=` beside the factory)."""

from __future__ import annotations

import ast
import json

from zoo_plugins.bpe.tokenizer import read_ranks

from .conftest import ROOT


def test_bpe_trains_from_the_training_split_only(zoo, tmp_path):
    text = tmp_path / "text.txt"
    shakespeare = (ROOT / "data" / "tinyshakespeare.txt").read_text(encoding="utf-8")[:5000]
    text.write_text(shakespeare + "ZQXJ " * 30, encoding="utf-8")  # the last 10%: validation
    out = tmp_path / "bpe.tiktoken"
    done = zoo("train-tokenizer", "--kind", "bpe", "--data", str(text), "--vocab-size", "270", "--out", str(out))
    assert done.code == 0, done.err
    assert done.out.startswith("270 tokens trained on ") and done.out.rstrip().endswith(f"-> {out}")
    ranks = read_ranks(out)
    assert len(ranks) == 270 and b" the" in ranks
    assert not any(b"ZQ" in token for token in ranks)  # BPE never sees validation text


def test_char_collects_every_character_of_the_corpus(zoo, tmp_path):
    text = tmp_path / "text.txt"
    corpus = "abba\ncab! " * 200
    text.write_text(corpus, encoding="utf-8")
    out = tmp_path / "chars.json"
    done = zoo("train-tokenizer", "--kind", "char", "--data", str(text), "--out", str(out))
    assert done.code == 0, done.err
    assert done.out == f"6 characters from 2,000 characters -> {out}\n"
    assert json.loads(out.read_text(encoding="utf-8"))["characters"] == sorted(set(corpus))


def test_a_tokenizer_without_a_trainer_is_one_line(zoo):
    done = zoo("train-tokenizer", "--kind", "puzzle-words", "--data", str(ROOT / "data" / "tinyshakespeare.txt"))
    assert done.code == 1
    assert done.err == "zoo: error: tokenizer 'puzzle-words' cannot be trained here (trainable: bpe, char)\n"


def test_the_core_imports_no_built_in_plugin_by_name():
    # Import statements only (the scaffold's templates mention plugins in text they write).
    offenders = []
    for path in (ROOT / "zoo_core").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path.name}:{node.lineno}: {name}" for name in names if name.split(".")[0] == "plugins"]
    assert offenders == []
