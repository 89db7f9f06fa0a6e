"""Unbounded work from a typo: every number a command line gives is bounded by
what the variant allows (zoo_core/cli/bounds.py, ablation.check_heads), and a
dataset's glob never follows a symlinked folder and is bounded in files and
time (zoo_core/corpus/user_datasets.py). Each refusal is one line, exit 1, with
$ZOO_HOME as it was."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from zoo_core.corpus import user_datasets

from .conftest import ROOT

TINY = "transformer-2b-learned-ctx8"  # 2 layers of 2 heads, 8 tokens of context, 65 tokens
WIDE = "transformer-4b-learned-ctx256"
SHAKESPEARE = (ROOT / "data" / "tinyshakespeare.txt").read_text(encoding="utf-8")


def _snapshot(home: Path) -> dict[str, bytes]:
    return {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file()} if home.exists() else {}


def _refused(zoo, home, args, *fragments, seconds=30.0):
    before = _snapshot(home)
    started = time.monotonic()
    result = zoo(*args)
    assert result.code == 1, result.out
    assert result.err.startswith("zoo: error: ") and result.err.count("\n") == 1, result.err
    for fragment in fragments:
        assert fragment in result.err, result.err
    assert time.monotonic() - started < seconds
    assert _snapshot(home) == before
    return result


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("inspect", TINY, "--ablate", "0.0", "--windows", "1000000000"), "--windows must be at most 65,536, not 1,000,000,000"),
        (("eval", TINY, "--windows", "1000000000"), "--windows must be at most 65,536"),
        (("compare", TINY, "bigram", "--windows", "100000"), "--windows must be at most 65,536"),
        (("eval", TINY, "--text-chars", "99999999999"), "--text-chars must be at most 1,073,741,824"),
        (("sample", TINY, "--prompt", "A", "--max-new-tokens", "1000000000"), "--max-new-tokens must be at most 1,048,576"),
        (("compare", TINY, "bigram", "--max-new-tokens", "1000000000"), "--max-new-tokens must be at most 1,048,576"),
        (("sample", TINY, "--prompt", "A", "--num-samples", "100000"), "--num-samples must be at most 1,024"),
        (("sample", TINY, "--prompt", "A", "--threads", "1000000"), "--threads must be at most 4,096"),
        (("serve", "--max-tokens-limit", "100000000"), "--max-tokens-limit must be at most 1,048,576"),
        (("serve", "--max-concurrent", "0"), "--max-concurrent must be at least 1, not 0"),
        (("serve", "--max-queue", "-1"), "--max-queue must be at least 0, not -1"),
        (("serve", "--max-connections", "100000000"), "--max-connections must be at most 1,048,576"),
        (("serve", "--header-timeout", "0"), "--header-timeout must be more than 0, not 0"),
        (("serve", "--body-timeout", "nan"), "--body-timeout must be more than 0, not nan"),
        (("pull", "team/x", "--deadline", "0"), "--deadline must be more than 0, not 0"),
        (("install", "http://127.0.0.1:9/x.zoo", "--min-rate", "-5"), "--min-rate must be at least 0, not -5"),
    ],
)
def test_a_number_no_variant_could_use_is_one_line_naming_the_bound(zoo, private_home, args, message):
    _refused(zoo, private_home, args, message, seconds=10)


def test_numbers_past_what_the_variant_allows_are_refused_before_loading(zoo, private_home):
    _refused(zoo, private_home, ("inspect", WIDE, "--ablate", "0.0", "--windows", "20000"),
             f"--windows 20,000: '{WIDE}' reads windows of 256 tokens, so at most 16,384 windows")
    _refused(zoo, private_home, ("eval", WIDE, "--windows", "65536"), "so at most 16,384 windows")
    _refused(zoo, private_home, ("sample", TINY, "--prompt", "A", "--top-k", "5000"),
             f"--top-k 5,000: '{TINY}' has 1,024 tokens, so at most 1,024")


def test_an_ablation_of_20000_heads_is_one_line_naming_the_heads_there_are(zoo, private_home):
    heads = ",".join(f"{layer}.{head}" for layer in range(100) for head in range(200))
    _refused(zoo, private_home, ("inspect", TINY, "--ablate", heads),
             f"--ablate names 20,000 heads; '{TINY}' has 4 (2 layers of 2 heads)")
    _refused(zoo, private_home, ("inspect", TINY, "--ablate", "0.1,1.0,0.1"), "--ablate names head 0.1 twice")
    _refused(zoo, private_home, ("inspect", TINY, "--ablate", "9" * 5000 + ".0"), "--ablate takes LAYER.HEAD", "…")


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def looped(tmp_path):
    """A folder whose subfolders link back to it twice: following links, a
    '**' walk branches without end (2 ** depth paths)."""
    folder = tmp_path / "looped"
    _write(folder / "a.txt", SHAKESPEARE[:3000])
    _write(folder / "deep" / "b.txt", SHAKESPEARE[3000:6000])
    (folder / "deep" / "back").symlink_to(folder, target_is_directory=True)
    (folder / "deep" / "again").symlink_to(folder, target_is_directory=True)
    (folder / "self").symlink_to(".", target_is_directory=True)
    return folder


@pytest.mark.parametrize("pattern", ["**/*.txt", "**"])
def test_a_glob_over_symlink_loops_ends_and_follows_no_linked_folder(zoo, looped, pattern):
    started = time.monotonic()
    added = zoo("datasets", "add", "looped", str(looped / pattern))
    assert added.code == 0, added.err
    assert time.monotonic() - started < 20
    files = user_datasets.source_files("glob", str(looped / pattern))
    assert [str(f.relative_to(looped)) for f in files] == ["a.txt", "deep/b.txt"]


def test_files_reachable_only_through_a_linked_folder_are_not_matched(zoo, looped, private_home):
    # looped/self/deep/b.txt exists only through the link 'self'
    _refused(zoo, private_home, ("datasets", "add", "looped", str(looped / "*" / "*" / "*.txt")),
             "the pattern matches no files")


def test_a_folder_over_symlink_loops_reads_each_file_once(zoo, looped):
    assert zoo("datasets", "add", "looped", str(looped)).code == 0
    row = json.loads(zoo("datasets", "--json").out)
    assert any(entry["name"] == "looped" for entry in row)
    assert [f.name for f in user_datasets.source_files("folder", str(looped))] == ["a.txt", "b.txt"]


def test_a_glob_past_the_file_or_time_bound_is_one_line(zoo, tmp_path, private_home, monkeypatch):
    for number in range(6):
        _write(tmp_path / "many" / f"{number}.txt", SHAKESPEARE[number * 1000 : (number + 1) * 1000])
    monkeypatch.setattr(user_datasets, "MAX_SOURCE_FILES", 5)  # the real bound is 100,000 files
    _refused(zoo, private_home, ("datasets", "add", "many", str(tmp_path / "many" / "*.txt")), "more than 5 files")
    _refused(zoo, private_home, ("datasets", "add", "many", str(tmp_path / "many")), "more than 5 files")
    monkeypatch.setattr(user_datasets, "MAX_SOURCE_FILES", 100)
    monkeypatch.setattr(user_datasets, "MAX_WALK_SECONDS", 0.0)  # the real bound is 60 s
    _refused(zoo, private_home, ("datasets", "add", "many", str(tmp_path / "many" / "**" / "*.txt")),
             "finding its files took more than 0 s")
