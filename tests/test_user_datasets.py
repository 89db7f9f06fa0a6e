"""Datasets of your own: `zoo datasets add NAME PATH` for a file, a folder or a
glob, listed beside the built-in and plugin datasets, trained and scored on by
name, refused once their files change, and removed without touching the files.

Every test runs with its own ZOO_HOME (conftest's autouse fixture), on real
files under tmp_path.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tomllib

import pytest

from zoo_core.corpus.datasets import USER, resolve_named_or_path
from zoo_core.errors import ZooError
from zoo_core.plugin_api.manager import get_plugins

from .conftest import ROOT

SHAKESPEARE = (ROOT / "data" / "tinyshakespeare.txt").read_text(encoding="utf-8")


def _one_line_error(result, *fragments):
    assert result.code == 1, result.out
    assert result.err.startswith("zoo: error: ") and result.err.count("\n") == 1, result.err
    for fragment in fragments:
        assert fragment in result.err, result.err


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def notes(tmp_path):
    """A folder of three text files, created out of their sorted order, with
    hidden files and a hidden folder that the dataset skips."""
    folder = tmp_path / "notes"
    _write(folder / "b.txt", SHAKESPEARE[2000:3000])
    _write(folder / "a" / "z.txt", SHAKESPEARE[1000:2000] + "\n")
    _write(folder / "a.txt", SHAKESPEARE[:1000].rstrip("\n"))  # no newline at its end: one is added after it
    _write(folder / ".hidden.txt", "never read")
    _write(folder / ".git" / "config", "never read")
    return folder


def _listed(zoo):
    result = zoo("datasets", "--json")
    assert result.code == 0, result.err
    return {row["name"]: row for row in json.loads(result.out)}


def test_a_folder_is_its_files_in_relative_path_order_hidden_ones_skipped(zoo, notes, private_home):
    result = zoo("datasets", "add", "notes", str(notes), "--description", "three scenes")
    assert result.code == 0, result.err
    # Sorted by relative POSIX path, not the order os.walk or the disk gives: 'a.txt' < 'a/z.txt' < 'b.txt'.
    combined = (
        (notes / "a.txt").read_bytes() + b"\n" + (notes / "a" / "z.txt").read_bytes() + (notes / "b.txt").read_bytes()
    )
    sha = hashlib.sha256(combined).hexdigest()
    assert result.out == f"added dataset 'notes': 3 files, {len(combined):,} bytes, sha256 {sha[:16]}…\n"

    row = _listed(zoo)["notes"]
    assert row["source"] == USER and row["plugin"] == USER and row["kind"] == "folder"
    assert row["file"] == str(notes) and row["size"] == len(combined) and row["sha256"] == sha
    assert row["train_fraction"] == 0.9 and row["description"] == "three scenes" and row["shadowed_by"] is None
    assert _listed(zoo)["tinyshakespeare"]["source"] == "built-in"

    # The catalogue file records the folder, never its list of files.
    recorded = tomllib.loads((private_home / "datasets.toml").read_text())
    assert recorded["notes"]["source"] == str(notes) and recorded["notes"]["sha256"] == sha
    assert set(recorded["notes"]) == {"kind", "source", "size", "sha256", "train_fraction", "description", "added"}

    dataset = get_plugins().datasets.get("notes")
    assert dataset.plugin == USER
    assert resolve_named_or_path("notes", get_plugins().datasets).text == combined.decode()

    table = zoo("datasets")
    assert table.code == 0 and table.out.split("\n")[0].split() == ["name", "source", "size", "split", "sha256", "files"]
    (line,) = [line for line in table.out.splitlines() if line.startswith("notes ")]
    assert line.split()[1:3] == ["user", f"{len(combined):,}"] and line.endswith(f"{notes}/")
    assert zoo("datasets", "list").out == table.out


def test_a_file_keeps_its_own_sha256_and_a_glob_its_sorted_matches(zoo, notes, tmp_path, monkeypatch):
    single = notes / "b.txt"
    assert zoo("datasets", "add", "scene", str(single), "--train-fraction", "0.8").code == 0
    row = _listed(zoo)["scene"]
    assert row["kind"] == "file" and row["sha256"] == hashlib.sha256(single.read_bytes()).hexdigest()
    assert row["train_fraction"] == 0.8

    _write(notes / "deeper" / "c.md", SHAKESPEARE[3000:3500])
    _write(notes / "a.md", SHAKESPEARE[3500:4000])
    monkeypatch.chdir(tmp_path)  # a relative pattern is recorded made absolute
    result = zoo("datasets", "add", "md", "notes/**/*.md")
    assert result.code == 0, result.err
    assert result.out.startswith("added dataset 'md': 2 files, ")
    row = _listed(zoo)["md"]
    assert row["kind"] == "glob" and row["file"] == str(tmp_path / "notes" / "**" / "*.md")
    expected = (notes / "a.md").read_bytes() + b"\n" + (notes / "deeper" / "c.md").read_bytes()
    assert row["sha256"] == hashlib.sha256(expected).hexdigest()


def test_train_eval_and_a_recipe_read_a_user_dataset_by_name(zoo, notes, tmp_path, monkeypatch):
    assert zoo("datasets", "add", "notes", str(notes)).code == 0
    sha = _listed(zoo)["notes"]["sha256"]
    monkeypatch.chdir(tmp_path)  # where ./notes is the folder itself: --data notes still means the dataset
    out = tmp_path / "run"
    trained = zoo("train", "gpt-char-mini", "--data", "notes", "--steps", "2", "--quiet", "--out", str(out), "--name", "my-mini")
    assert trained.code == 0, trained.err
    recipe = tomllib.loads((out / "registry.toml").read_text())["my-mini"]["recipe"]
    assert recipe["data"] == "notes" and recipe["data_sha256"] == sha

    scored = zoo("eval", "gpt-char-mini", "--data", "notes", "--windows", "2", "--json")
    assert scored.code == 0, scored.err
    assert json.loads(scored.out)["validation_loss"] > 0
    # The trained card's recipe says data = "notes": scoring it reads the dataset by name.
    by_recipe = zoo("eval", "my-mini", "--registry", str(out / "registry.toml"), "--windows", "2", "--json")
    assert by_recipe.code == 0, by_recipe.err


def test_a_changed_added_or_removed_file_is_refused_until_replaced(zoo, notes):
    assert zoo("datasets", "add", "notes", str(notes), "--train-fraction", "0.75", "--description", "kept").code == 0
    expected = _listed(zoo)["notes"]["sha256"]
    original = (notes / "b.txt").read_bytes()
    (notes / "b.txt").write_bytes(original[:100] + b"X" + original[101:])  # one byte
    found = hashlib.sha256(
        (notes / "a.txt").read_bytes() + b"\n" + (notes / "a" / "z.txt").read_bytes() + (notes / "b.txt").read_bytes()
    ).hexdigest()
    refused = zoo("eval", "gpt-char-mini", "--data", "notes", "--windows", "1")
    _one_line_error(
        refused,
        "dataset 'notes' changed since it was added",
        f"expected sha256 {expected[:16]}",
        f"found {found[:16]}",
        f"zoo datasets add notes {notes} --replace",
    )
    (notes / "b.txt").write_bytes(original)
    assert resolve_named_or_path("notes", get_plugins().datasets).sha256 == expected

    for change, undo in (
        (lambda: _write(notes / "a" / "new.txt", "one more file"), lambda: (notes / "a" / "new.txt").unlink()),
        (lambda: (notes / "a.txt").rename(notes / ".a.txt"), lambda: (notes / ".a.txt").rename(notes / "a.txt")),
    ):
        change()
        with pytest.raises(ZooError, match="dataset 'notes' changed since it was added"):
            resolve_named_or_path("notes", get_plugins().datasets)
        undo()

    _write(notes / "a" / "new.txt", SHAKESPEARE[5000:5200])
    replaced = zoo("datasets", "add", "notes", str(notes), "--replace")
    assert replaced.code == 0 and replaced.out.startswith("replaced dataset 'notes': 4 files, ")
    row = _listed(zoo)["notes"]
    assert row["sha256"] != expected and row["train_fraction"] == 0.75 and row["description"] == "kept"
    assert resolve_named_or_path("notes", get_plugins().datasets).sha256 == row["sha256"]


def test_remove_forgets_the_entry_and_keeps_the_files(zoo, notes):
    assert zoo("datasets", "add", "notes", str(notes)).code == 0
    assert zoo("datasets", "add", "scene", str(notes / "b.txt")).code == 0
    removed = zoo("datasets", "remove", "notes")
    assert removed.code == 0 and "removed dataset 'notes'" in removed.out and "untouched" in removed.out
    assert sorted(_listed(zoo)) == ["scene", "tinyshakespeare"]
    assert (notes / "b.txt").exists() and (notes / "a" / "z.txt").exists()
    _one_line_error(zoo("datasets", "remove", "notes"), "no dataset of yours is named 'notes'", "yours: scene")
    _one_line_error(
        zoo("datasets", "remove", "tinyshakespeare"),
        "dataset 'tinyshakespeare' belongs to the built-in plugin 'catalogue'",
        "only your own datasets",
    )
    _one_line_error(zoo("eval", "gpt-char-mini", "--data", "notes"), "no dataset named 'notes' is registered")


def test_user_errors_are_one_line(zoo, notes, tmp_path):
    assert zoo("datasets", "add", "notes", str(notes)).code == 0
    (tmp_path / "empty" / ".only-hidden").mkdir(parents=True)
    binary = tmp_path / "binary"
    _write(binary / "fine.txt", SHAKESPEARE[:500])
    (binary / "latin1.txt").write_bytes(b"caf\xe9 " * 40)
    cases = [
        (["notes", str(notes)], ["dataset 'notes' is already one of yours", "--replace"]),
        (["tinyshakespeare", str(notes)], ["dataset 'tinyshakespeare' is already registered by the built-in plugin 'catalogue'"]),
        (["Notes", str(notes)], ["dataset name 'Notes'", "lower-case letters, digits"]),
        (["a/b", str(notes)], ["dataset name 'a/b'"]),
        (["other", str(tmp_path / "missing.txt")], ["missing.txt: no such file or folder"]),
        (["other", str(tmp_path / "empty")], ["empty: the folder holds no files"]),
        (["other", str(tmp_path / "nothing" / "*.md")], ["*.md: the pattern matches no files"]),
        (["other", str(binary)], [f"{binary / 'latin1.txt'}: a file of dataset 'other' is not UTF-8 text (byte 3)"]),
        (["other", str(notes), "--train-fraction", "1.5"], ["--train-fraction 1.5: it must lie between 0 and 1"]),
    ]
    for arguments, fragments in cases:
        _one_line_error(zoo("datasets", "add", *arguments), *fragments)
    assert sorted(_listed(zoo)) == ["notes", "tinyshakespeare"]  # nothing was written by a refusal


@pytest.mark.parametrize(
    "damage, problem",
    [
        ('["notes"]\nkind = [', "damaged datasets file: "),
        ('["notes"]\nkind = "folder"\n', "damaged datasets file: dataset 'notes': no 'added'"),
        ("notes = 3\n", "damaged datasets file: dataset 'notes': not a table"),
    ],
)
def test_a_damaged_datasets_file_is_one_line_and_only_where_datasets_are_read(zoo, private_home, damage, problem):
    private_home.mkdir(parents=True)
    damaged = private_home / "datasets.toml"
    damaged.write_text(damage)
    assert zoo("list").code == 0
    assert zoo("plugins").code == 0
    _one_line_error(zoo("datasets"), f"{damaged}: {problem}")
    _one_line_error(zoo("datasets", "remove", "notes"), f"{damaged}: {problem}")
    _one_line_error(zoo("eval", "gpt-char-mini", "--data", "notes", "--windows", "1"), f"{damaged}: {problem}")


def test_a_plugin_dataset_shadows_a_user_dataset_of_the_same_name(zoo, notes, private_home):
    # As if the user had added 'tinyshakespeare' before a plugin registered that name.
    assert zoo("datasets", "add", "mine", str(notes)).code == 0
    datasets_file = private_home / "datasets.toml"
    datasets_file.write_text(datasets_file.read_text().replace('["mine"]', '["tinyshakespeare"]'))
    rows = json.loads(zoo("datasets", "--json").out)
    assert [(r["name"], r["source"], r["shadowed_by"]) for r in rows] == [
        ("tinyshakespeare", "built-in", None),
        ("tinyshakespeare", "user", ["catalogue"]),
    ]
    table = zoo("datasets").out
    assert "user (shadowed)" in table and "your dataset 'tinyshakespeare' is unused: plugin 'catalogue'" in table
    assert get_plugins().datasets.get("tinyshakespeare").plugin == "catalogue"


def test_reading_user_datasets_imports_neither_torch_nor_pydantic(zoo, notes):
    assert zoo("datasets", "add", "notes", str(notes)).code == 0
    assert zoo("list").code == 0  # warms the card cache, as the cold-start tests do
    code = (
        "import contextlib, io, sys\nfrom zoo_core.cli import main\n"
        "for command in (['datasets', '--json'], ['list', '--json']):\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        "        assert main(command) == 0, command\n"
        "print(','.join(m for m in ('torch', 'pydantic') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
