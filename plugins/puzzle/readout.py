"""How the puzzle network's answer and heads are named: what the report and the
head roles print. Apart from model.py, which calls the report and the roles for
its tasks (``ask``, ``evaluate``, ...), so that they need not import the model back."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .slots import ATTRIBUTES_TO_WORD

if TYPE_CHECKING:
    import torch

HEAD_TITLES = {
    "object": "layer 1: object head",
    "previous_word": "layer 1: previous-word head",
    "flight": "layer 2: flight head",
    "speech": "layer 2: speech head",
}


def read_answer(output: torch.Tensor) -> str:
    """The seed's readout: round (flies, speaks) and name it with the middle attribute 0."""
    # Clamped so that a nonsense sentence still reads as one of the four words.
    flies, speaks = (min(max(int(round(float(v))), 0), 1) for v in output)
    return ATTRIBUTES_TO_WORD[(flies, 0, speaks)]
