"""Mutation check: deliberately broken implementations that the tests must catch.

A test that passes against a fake proves nothing. Each mutation below replaces
one piece of the zoo with a plausible but wrong version (still producing the
same tokens or weights, which is what makes it a fake worth catching) and names
the tests that must fail against it. Run them all:

    python -m tests.mutations            # every mutation, its tests; exit 1 if any survives
    python -m tests.mutations NAME ...   # just these

Each mutation runs in a pytest process of its own with ``ZOO_MUTATION=NAME``;
tests/conftest.py applies the mutation before any test module is imported.
`tests/test_mutations.py` runs the quick ones as part of the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent


def _sample_without_cache() -> None:
    """Sampling that never uses the KV cache: the same tokens, only slower."""
    import zoo_core.inference.sampling
    from zoo_core.inference.settings import resolve_settings

    real = zoo_core.inference.sampling.sample_tokens

    def sample_tokens(model, ids, settings=None, generator=None, **options):
        return real(model, ids, resolve_settings(settings, **options).replace(use_cache=False), generator)

    zoo_core.inference.sampling.sample_tokens = sample_tokens


def _resume_from_step_1() -> None:
    """A --resume that ignores the saved state and retrains from step 1: training
    is deterministic, so it ends with exactly the uninterrupted weights."""
    import zoo_core.training.loop

    real = zoo_core.training.loop.StandardTrainer.train

    def train(self, model, recipe, corpus, context_length, progress=None, *, resume=None, **kwargs):
        return real(self, model, recipe, corpus, context_length, progress, resume=None, **kwargs)

    zoo_core.training.loop.StandardTrainer.train = train


def _weights_not_loaded() -> None:
    """Loading that checks the checkpoint but leaves the freshly initialised
    weights in place: every check passes, the model is untrained."""
    import zoo_core.storage.checkpoints

    real = zoo_core.storage.checkpoints.load_verified

    def load_verified(path, expected_sha256, model, expected_parameters, card=None):
        import copy

        before = copy.deepcopy(model.state_dict())
        verification = real(path, expected_sha256, model, expected_parameters, card=card)
        model.load_state_dict(before)
        return verification

    zoo_core.storage.checkpoints.load_verified = load_verified


def _no_containment() -> None:
    """resolve_inside that joins paths without checking where they lead."""
    import zoo_core.catalogue.paths

    def resolve_inside(base_dir, relative, *, what="path", allow_outside=False):
        return Path(os.path.realpath(Path(base_dir) / relative))

    zoo_core.catalogue.paths.resolve_inside = resolve_inside


@dataclass(frozen=True)
class Mutation:
    apply: Callable[[], None]
    must_fail: tuple[str, ...]  # pytest node ids
    slow: bool = False


MUTATIONS: dict[str, Mutation] = {
    "sample-without-cache": Mutation(
        _sample_without_cache,
        ("tests/test_sampling.py::test_kv_cache_gives_the_uncached_tokens_and_is_really_used",),
    ),
    "resume-from-step-1": Mutation(
        _resume_from_step_1,
        ("tests/test_resume.py::test_the_interrupted_state_resumes_in_process",
         "tests/test_resume.py::test_kill_9_then_resume_gives_the_uninterrupted_weights"),
        slow=True,
    ),
    "weights-not-loaded": Mutation(
        _weights_not_loaded,
        ("tests/test_card_metrics.py::test_a_fresh_evaluation_matches_the_card",),
        slow=True,
    ),
    "no-containment": Mutation(
        _no_containment,
        ("tests/test_containment.py::test_resolve_inside",
         "tests/test_containment.py::test_paths_leading_out_are_refused_by_load_and_verify"),
    ),
}


def apply(name: str) -> None:
    try:
        MUTATIONS[name].apply()
    except KeyError:
        raise SystemExit(f"unknown mutation {name!r}; known: {', '.join(MUTATIONS)}") from None


def run(name: str, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """pytest on the mutation's tests with the mutation applied (slow ones included)."""
    mutation = MUTATIONS[name]
    environment = {**os.environ, "ZOO_MUTATION": name, "OMP_NUM_THREADS": "1"}
    environment.pop("ZOO_REGISTRY", None)
    environment.pop("ZOO_BUILTIN_REGISTRY", None)
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", "slow or not slow",
               *mutation.must_fail, *extra]
    return subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True)


def main(names: list[str]) -> int:
    survivors = []
    for name in names or list(MUTATIONS):
        result = run(name)
        caught = result.returncode == 1  # 1: tests failed (anything else: pytest itself went wrong)
        print(f"{name:24} {'caught' if caught else 'SURVIVED'} (pytest exit {result.returncode})")
        if not caught:
            survivors.append(name)
            print(result.stdout[-2000:])
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
