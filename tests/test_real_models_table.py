"""results/real-models.csv, the results table of the real models (issue 53): the shipped
table has one row per real model with its columns, the gallery shows it as written, and
the command that regenerates it (`python -m benchmarks.real_models`, docs/benchmarks.md)
runs, here bounded to SmolLM2 and a few tokens, and agrees with the shipped row on every
figure that does not depend on the machine's speed."""

from __future__ import annotations

import csv
import datetime
import os
import subprocess
import sys

import pytest

from benchmarks.real_models import COLUMNS, REAL_MODELS, main, markdown_table
from zoo_core.web.gallery import _results_tables

from .conftest import ROOT, SMOLLM2_NAME

TABLE = ROOT / "results" / "real-models.csv"
# what the model and the file fix: the same on any machine, in any run
EXACT = (
    "model",
    "file",
    "file_type",
    "parameters",
    "file_mb",
    "catalogue_mb_packed",
    "catalogue_mb_float32",
)
# measured in float32 by kernels that may differ from one CPU to another in the last bits
BITS = ("bits_per_byte_packed", "bits_per_byte_float32")


def rows_of(path):
    with path.open(encoding="utf-8", newline="") as file:
        reader = csv.DictReader(file)
        return reader.fieldnames, list(reader)


def test_the_shipped_table_has_one_row_per_real_model_with_its_figures():
    header, rows = rows_of(TABLE)
    assert header == COLUMNS
    assert [row["model"] for row in rows] == [real.model for real in REAL_MODELS]
    for real, row in zip(REAL_MODELS, rows):
        assert row["file"] == real.file
        assert row["file_type"].startswith("Q"), row
        assert int(row["parameters"]) > 100_000_000, row
        file_mb, packed_mb, float_mb = (
            float(row[key]) for key in ("file_mb", "catalogue_mb_packed", "catalogue_mb_float32")
        )
        # the packed catalogue keeps the file's blocks; float32 holds at least 4 bytes a parameter
        assert packed_mb < float_mb and float_mb >= 4 * int(row["parameters"]) / 1e6 * 0.99, row
        assert 0.5 < packed_mb / file_mb < 2, row
        # the same paragraph, the same weights: packed and float32 differ by float rounding only
        bits = float(row["bits_per_byte_packed"]), float(row["bits_per_byte_float32"])
        assert 0.2 < bits[1] < 8 and abs(bits[0] - bits[1]) < 0.01, row
        for side in ("packed", "float32"):
            rate = [float(row[f"tokens_per_cpu_second_{side}{end}"]) for end in ("_min", "", "_max")]
            assert 0 < rate[0] <= rate[1] <= rate[2], row
            assert float(row[f"peak_rss_mb_{side}"]) > 50, row
        assert int(row["decode_tokens"]) >= 1 and int(row["rounds"]) >= 1 and row["threads"] == "1"
        datetime.datetime.strptime(row["measured"], "%Y-%m-%d %H:%M UTC")
        assert row["torch"] and row["machine"] and len(row["load_average"].split(" / ")) == 3


def test_the_gallery_shows_the_table_as_written():
    _, rows = rows_of(TABLE)
    tables = {table["file"]: table for table in _results_tables(ROOT / "results", set())}
    table = tables["real-models.csv"]
    assert [column["name"] for column in table["columns"]] == COLUMNS
    assert [row["cells"] for row in table["rows"]] == [[row[column] for column in COLUMNS] for row in rows]
    numeric = {column["name"] for column in table["columns"] if column["numeric"]}
    assert {"parameters", "bits_per_byte_float32", "tokens_per_cpu_second_packed", "peak_rss_mb_float32"} <= numeric


def test_docs_benchmarks_shows_the_shipped_figures():
    """docs/benchmarks.md's table is the command's own rendering of the shipped CSV."""
    _, rows = rows_of(TABLE)
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert markdown_table(rows) in page
    for row in rows:
        assert f"Measured {row['measured']}" in page and row["load_average"] in page


def test_the_command_regenerates_a_row_that_agrees_with_the_shipped_one(smollm2_home, tmp_path):
    """The float32 import comes from the shared `smollm2_home` (the command measures a
    variant already in the catalogue as it is); the packed one is imported here."""
    assert REAL_MODELS[0].name == SMOLLM2_NAME
    out = tmp_path / "real-models.csv"
    env = {**os.environ, "ZOO_REGISTRY": str(smollm2_home / "registry.toml")}
    command = [sys.executable, "-m", "benchmarks.real_models", "--models", "smollm2", "--tokens", "8", "--rounds", "1"]
    done = subprocess.run(
        [*command, "--out", str(out), "--work", str(tmp_path / "work")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    header, rows = rows_of(out)
    assert header == COLUMNS and len(rows) == 1
    row = rows[0]
    assert (row["decode_tokens"], row["rounds"]) == ("8", "1")
    assert row["tokens_per_cpu_second_packed_min"] == row["tokens_per_cpu_second_packed"]
    shipped = {shipped["model"]: shipped for shipped in rows_of(TABLE)[1]}[row["model"]]
    assert {key: row[key] for key in EXACT} == {key: shipped[key] for key in EXACT}
    for key in BITS:
        assert abs(float(row[key]) - float(shipped[key])) < 1e-3, (key, row[key], shipped[key])


def test_an_unknown_model_is_refused_in_one_line(capsys, tmp_path):
    with pytest.raises(SystemExit) as refused:
        main(["--models", "smollm2,llama-70b", "--out", str(tmp_path / "t.csv")])
    assert refused.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "llama-70b" in error and "smollm2, gemma3" in error
    assert not (tmp_path / "t.csv").exists()
