"""The tests catch fakes: each mutation of tests/mutations.py makes its tests fail."""

from __future__ import annotations

import pytest

from .mutations import MUTATIONS, run


def _assert_caught(name: str) -> None:
    result = run(name)
    assert result.returncode == 1, f"mutation {name!r} survived (pytest exit {result.returncode}):\n{result.stdout[-3000:]}{result.stderr[-2000:]}"
    first = MUTATIONS[name].must_fail[0]
    assert f"FAILED {first}" in result.stdout, result.stdout[-3000:]


@pytest.mark.parametrize("name", [name for name, mutation in MUTATIONS.items() if not mutation.slow])
def test_quick_mutations_are_caught(name):
    _assert_caught(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", [name for name, mutation in MUTATIONS.items() if mutation.slow])
def test_slow_mutations_are_caught(name):
    _assert_caught(name)
