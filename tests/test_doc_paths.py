"""Every source file the documentation points a reader at exists: a page that
names a deleted module (docs/benchmarks.md once named plugins/models/decoding.py
after it was folded into the blocks) sends the reader looking for nothing."""

from __future__ import annotations

import re

from .conftest import ROOT

# A repository path in backticks, e.g. `plugins/blocks/attention.py`.
SOURCE_PATH = re.compile(r"`((?:plugins|zoo_core|benchmarks|tests|examples|experiments)/[\w/.\-]+\.(?:py|md|toml|mjs))")


def test_every_source_file_the_docs_name_exists():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    named = {(page.name, path) for page in pages for path in SOURCE_PATH.findall(page.read_text(encoding="utf-8"))}
    assert len(named) > 50  # the pattern still finds the docs' paths
    missing = sorted(f"{page}: {path}" for page, path in named if not (ROOT / path).exists())
    assert missing == []
