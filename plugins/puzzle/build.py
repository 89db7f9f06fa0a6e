"""Write the puzzle's cards (first time) and checkpoints outside `zoo train`.

Once the cards are in the registry, `zoo train puzzle-disobeys --publish` (the
trainer `hand-built`, plugins/puzzle/trainer.py) rebuilds each checkpoint byte
for byte through the path every variant takes; this script remains for
writing the cards themselves.

    python -m zoo_plugins.puzzle.build

writes checkpoints/puzzle-disobeys.safetensors and
checkpoints/puzzle-disobeys-nopos.safetensors (hand-set weights, the card in
the header), measures each network with `evaluate`, and writes their cards into
the top-level registry.toml (under its lock, other variants untouched).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from zoo_core.catalogue.cards import CheckpointRef, Metrics, ModelCard, Recipe, TokenizerSpec
from zoo_core.catalogue.registry import render_registry, upsert_registry_entry
from zoo_core.storage.checkpoints import save_checkpoint
from zoo_core.storage.files import exclusive_lock

from ..catalogue import builtin_registry_path
from .model import PuzzleTransformer, hand_set_state_dict
from .report import evaluate_network
from .slots import VOCABULARY, slot_names
from .tokenizer import PuzzleTokenizer

MAX_TOKENS = 6
LICENSE = "TechAarvam workshop material: free to use and build on, crediting TechAarvam"
LINEAGE = (
    "seed 003_6bff11e00caeffbd: TechAarvam 'Puzzle Solution Revealed - Transformer: Need for Position Embedding' "
    "(hand-built 2-layer transformer over a 22-slot residual stream)"
)
RECIPE_NOTES = (
    "weights set by hand from named residual slots (plugins/puzzle/model.py: hand_set_state_dict); no training"
)


@dataclass(frozen=True)
class PuzzleVariant:
    name: str
    positions: bool
    description: str
    tags: tuple[str, ...]


VARIANTS = (
    PuzzleVariant(
        "puzzle-disobeys",
        positions=True,
        description="Hand-built 2-layer transformer answering the 'disobeys' puzzle "
        "('Crow disobeys keep-flight swap-speech he-is?' -> Human): one-hot positions let a "
        "previous-word head tell which action 'disobeys' modifies.",
        tags=("seed-003", "hand-built", "puzzle"),
    ),
    PuzzleVariant(
        "puzzle-disobeys-nopos",
        positions=False,
        description="puzzle-disobeys without position slots and previous-word head: attention sees a "
        "bag of words, so both orders of a sentence get one answer (the seed's case for positions).",
        tags=("seed-003", "hand-built", "puzzle", "nopos"),
    ),
)


def _relative(path: Path, registry_dir: Path) -> str:
    return Path(os.path.relpath(path.resolve(), registry_dir.resolve())).as_posix()


def build_variant(variant: PuzzleVariant, checkpoint_dir: Path, registry_dir: Path) -> ModelCard:
    """Write one checkpoint and return its complete card (sha256 included)."""
    weights = hand_set_state_dict(variant.positions, MAX_TOKENS)
    network = PuzzleTransformer(positions=variant.positions, max_tokens=MAX_TOKENS)
    network.load_state_dict(weights, strict=True)
    network.eval()
    report = evaluate_network(network, PuzzleTokenizer())
    checkpoint_path = checkpoint_dir / f"{variant.name}.safetensors"
    card = ModelCard(
        name=variant.name,
        description=variant.description,
        architecture="puzzle",
        config={
            "positions": variant.positions,
            "max_tokens": MAX_TOKENS,
            "slots": slot_names(variant.positions, MAX_TOKENS),
        },
        tokenizer=TokenizerSpec(kind="puzzle-words", vocab_size=len(VOCABULARY)),
        context_length=MAX_TOKENS,
        recipe=Recipe(kind="hand-built", notes=RECIPE_NOTES),
        checkpoint=CheckpointRef(path=_relative(checkpoint_path, registry_dir)),
        parameters=sum(p.numel() for p in network.parameters()),
        metrics=Metrics(accuracy=report["accuracy"]),
        lineage=LINEAGE,
        license=LICENSE,
        tags=list(variant.tags),
    )
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    card.checkpoint.sha256 = save_checkpoint(checkpoint_path, weights, card.header_json())
    return card


def build_all(checkpoint_dir: Path, registry_dir: Path) -> list[ModelCard]:
    return [build_variant(variant, checkpoint_dir, registry_dir) for variant in VARIANTS]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zoo_plugins.puzzle.build", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--registry",
        type=Path,
        default=builtin_registry_path(),
        help="registry file to update (checkpoint paths are relative to it)",
    )
    parser.add_argument("--checkpoint-dir", type=Path, help="default: checkpoints/ beside the registry")
    args = parser.parse_args(argv)
    registry = args.registry.resolve()
    with exclusive_lock(registry):
        cards = build_all(args.checkpoint_dir or registry.parent / "checkpoints", registry.parent)
        for card in cards:
            upsert_registry_entry(registry, card)
    print(render_registry(cards), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
