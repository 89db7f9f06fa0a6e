"""`zoo verify`: every checkpoint checked as `zoo load` checks it; a table, and a non-zero exit on failure."""

from __future__ import annotations

import json
from pathlib import Path

from zoo_core.plugin_api.manager import get_plugins


def _rows(result):
    return {row["name"]: row for row in json.loads(result.out)}


def test_the_shipped_catalogue_verifies(zoo):
    # Read-only: the real registry and checkpoints are only read.
    result = zoo("verify", "--json")
    rows = _rows(result)
    failed = {name: row["detail"] for name, row in rows.items() if row["status"] == "FAILED"}
    assert result.code == 0 and not failed, failed
    assert rows["transformer-6b-sin"]["status"] == "ok"
    assert rows["transformer-6b-sin"]["detail"].endswith("checked sha256, names, shapes, parameters, tokenizer sha256, card")
    assert rows["puzzle-disobeys"]["plugin"] == "catalogue"
    assert rows["gpt-char"]["status"] == "no weights"  # declared, not trained: listed, not a failure


def test_the_table_and_a_pattern(zoo):
    result = zoo("verify", "transformer-1b-*")
    lines = result.out.splitlines()
    assert result.code == 0, result.err
    assert lines[0].split() == ["name", "plugin", "file", "status", "detail"]
    assert sorted(line.split()[0] for line in lines[2:]) == ["transformer-1b-learned-ctx8", "transformer-1b-learned-post-ctx8"]
    assert all(line.split()[3] == "ok" for line in lines[2:])


def test_one_flipped_byte_fails_naming_the_file(zoo, private_catalogue):
    checkpoints = private_catalogue.parent / "checkpoints"
    damaged = checkpoints / "transformer-1b-learned-ctx8.safetensors"
    data = bytearray(damaged.read_bytes())
    data[len(data) // 3] ^= 0x20
    damaged.write_bytes(bytes(data))
    result = zoo("verify", "transformer-1b-*")
    assert result.code == 1
    rows = [line.split(None, 4) for line in result.out.splitlines()[2:]]
    by_name = {row[0]: row for row in rows}
    assert by_name["transformer-1b-learned-ctx8"][2:4] == [str(damaged), "FAILED"]
    assert by_name["transformer-1b-learned-ctx8"][4].startswith("sha256 mismatch: registry has ")
    assert by_name["transformer-1b-learned-post-ctx8"][3] == "ok"  # the others still pass
    assert result.err == f"zoo: error: 1 of 2 failed verification: transformer-1b-learned-ctx8 ({damaged})\n"


def test_a_registry_that_cannot_be_read_is_a_failed_row(zoo, private_catalogue):
    private_catalogue.write_text("[bigram\n")
    get_plugins(reload=True)
    result = zoo("verify", "--json")
    rows = json.loads(result.out)
    assert result.code == 1 and len(rows) == 1
    assert rows[0]["file"] == str(private_catalogue) and rows[0]["status"] == "FAILED"
    assert rows[0]["detail"].startswith("not valid TOML")


def test_no_match_is_an_error(zoo):
    result = zoo("verify", "nothing-like-this-*")
    assert result.code == 1 and result.err == "zoo: error: no variant matches 'nothing-like-this-*'\n"


def test_verify_paths_read_from_any_folder(zoo, tmp_path, monkeypatch):
    root = Path(__file__).resolve().parent.parent
    monkeypatch.chdir(tmp_path)  # outside the project: absolute paths, never ../../ chains
    row = json.loads(zoo("verify", "bigram", "--json").out)[0]
    assert row["file"] == str(root / "checkpoints" / "bigram.safetensors")
    monkeypatch.chdir(root)  # inside it: relative to where the user stands
    assert json.loads(zoo("verify", "bigram", "--json").out)[0]["file"] == "checkpoints/bigram.safetensors"


def test_a_first_load_shows_its_verification_and_a_later_one_does_not(tmp_path, monkeypatch):
    # The first load reads and hashes the whole file (14 s for SmolLM2), then checks
    # every value; on a terminal a bar says so. Later loads map the file: no bar.
    import io

    from zoo_core.loading.api import get_variant, load_variant
    from zoo_core.training.progress import WorkProgress

    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))  # nothing verified yet
    drawn, before = [], []
    for _ in range(2):
        screen = io.StringIO()
        progress = WorkProgress("load gpt-char-mini", stream=screen, interactive=True)
        model = load_variant(get_variant("gpt-char-mini"), progress=progress)
        progress.close()
        drawn.append(screen.getvalue())
        before.append(model.verification.verified_before)
    assert "load gpt-char-mini: verifying gpt-char-mini.safetensors: sha256" in drawn[0]
    assert "load gpt-char-mini: verifying gpt-char-mini.safetensors: values" in drawn[0]
    assert before == [False, True] and drawn[1] == ""
